"""Hugging Face models as :class:`~dni_lab.backend.extraction.models.Model`: tokens are the symbols.

``HFModel(module, tokenizer)`` tokenizes records itself and reads every hidden
state through the attention mask: symbol ``t`` of a record is its ``t``-th
non-special, non-padding token, whatever the padding side, so left- and
right-padded batches give the same behaviors. Special tokens (``[CLS]``,
``[SEP]``, BOS) still run through the model but are not symbols. Each symbol
carries the character span it came from (:meth:`HFModel.offsets`), which is
how character- and word-level hypotheses reach tokens (:mod:`.align`). A record may
also be token ids, fed as they are, whose hypotheses read its decoded tokens
(:mod:`.token_records`).

The class is split along what it holds: this module encodes and runs batches and maps
captured tokens back to symbols; its bases count symbols (:mod:`.symbols`: offsets,
token-id records, long records) and name and read layers (:mod:`.layers`: addresses,
virtual taps, heads, the capture). A vision transformer, whose symbols are patches, is
:mod:`.vision`'s ``VisionModel`` (``Model.from_hf(module)`` without a tokenizer).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import DNIError, RecordError
from ..extraction.models import to_device
from . import attention, capture, encoding, hooks, names, seq2seq
from . import token_records as ids_
from .align import DEFAULT_POOL, POOLS
from .encoding import RECORD_POOLS
from .symbols import HFSymbols

_LAYOUT = "__dni_symbol_layout__"  # an extra batch key, removed before the module sees it
_DECODER = "__dni_decoder_layout__"  # the decoder's symbols (decoder_input=)


class HFModel(HFSymbols):
    """A Hugging Face transformer and its (fast) tokenizer, ready for inspection.

    Parameters
    ----------
    module : nn.Module
        A ``transformers`` model (GPT-2, BERT, LLaMA, ...), trained or not; it is
        never moved if it is placed (``device_map``) or already on an accelerator.
    tokenizer : PreTrainedTokenizerFast
        Its tokenizer; must be a *fast* tokenizer (character offsets). Its
        ``padding_side`` is respected.
    name : str, optional
        The model id in score frames.
    pool : dict or {"cls", "last", "mean"}, optional
        A dict: how a character- or word-level hypothesis becomes one value per token,
        per kind: ``{"binary": "any", "continuous": "mean", "categorical": "first"}`` by
        default; each value one of ``"first"``, ``"last"``, ``"mean"``, ``"any"``.
        A string: *record-level units*, one symbol per record: the first attended token
        (``"cls"``: ``[CLS]`` on BERT), the last attended token (``"last"``), or the
        mean over attended tokens (``"mean"``). Hypotheses then give one value per
        record (character- and word-level ones are pooled over the whole record).
    max_length : int, optional
        Longest tokenized record the model reads in one row; defaults to the model's
        positions.
    truncate : bool
        Read the first ``max_length`` tokens of a longer record (its other tokens are
        no symbols) instead of raising.
    skip_long : bool
        Skip a longer record instead of raising: it has no symbols, no unit reads it,
        and ``dl.provenance(frame)["skipped_records"]`` counts it per model.
    stride : int, optional
        Read a longer record as windows of ``max_length`` tokens, consecutive windows
        sharing ``stride`` tokens (0: none); each token is read once, from the first
        window that gives it ``stride`` tokens of left context (:mod:`.encoding`).
    meta : mapping, optional
        Catalog metadata.
    decoder_input : {"same"} or callable, optional
        Encoder-decoder models (T5, BART): how the decoder's inputs follow from a
        record. Without it only the encoder runs, and decoder units raise. ``"same"``:
        the record itself, shifted right (teacher forcing); decoder symbol ``t`` is
        token ``t`` of the record. A function ``fn(record)`` → the decoder's text or
        token ids, one token per symbol of the record: decoder symbol ``t`` is its
        token ``t`` (:mod:`.seq2seq`).

    Notes
    -----
    The last block's output (``blocks.{n-1}.hook_resid_post``) is the residual stream
    *before* the final layer norm, as in TransformerLens; Hugging Face's
    ``output_hidden_states[-1]`` is after it (and its weight): read the final norm's
    output, ``ln_final.hook_out`` (``ln_final.hook_normalized`` is before its weight, as
    in TransformerLens).
    """

    #: captured outputs come back per symbol (tokens gathered through the mask)
    reads_layouts = False

    def __init__(
        self,
        module: nn.Module,
        tokenizer: Any,
        name: str | None = None,
        pool: Mapping[str, str] | str | None = None,
        max_length: int | None = None,
        meta: Mapping[str, Any] | None = None,
        truncate: bool = False,
        stride: int | None = None,
        skip_long: bool = False,
        decoder_input: str | Callable[[str], Any] | None = None,
    ) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(
                f"HFModel needs a fast tokenizer (character offsets); got "
                f"{type(tokenizer).__name__}. Load it with AutoTokenizer(..., use_fast=True)."
            )
        if tokenizer.pad_token is None:
            raise ValueError(
                f"tokenizer {type(tokenizer).__name__} has no pad token, so batches cannot be "
                "padded; set tokenizer.pad_token = tokenizer.eos_token (or add one)."
            )
        config = getattr(module, "config", None)
        seq2seq.check_rule(module, decoder_input, stride, pool if isinstance(pool, str) else None)
        self.decoder_input = decoder_input
        self.tokenizer = tokenizer
        self.record_pool = pool if isinstance(pool, str) else None
        if self.record_pool is not None and self.record_pool not in RECORD_POOLS:
            raise DNIError(
                f"unknown pool {pool!r}: a string asks for record-level units, one of "
                f"{RECORD_POOLS}; a dict pools hypotheses per kind."
            )
        self.pool = {**DEFAULT_POOL, **dict(pool if isinstance(pool, Mapping) else {})}
        bad = {k: v for k, v in self.pool.items() if v not in POOLS}
        if bad:
            raise ValueError(f"unknown pooling {bad}; use one of {POOLS} per hypothesis kind.")
        self.max_length = max_length or getattr(config, "max_position_embeddings", None)
        self.truncate, self.stride, self.skip_long = bool(truncate), stride, bool(skip_long)
        self._check_long_options()
        arch = getattr(config, "model_type", type(module).__name__)
        super().__init__(module, encode=self._encode, name=name, symbols=self._n_symbols, meta=meta)
        self.meta.setdefault("architecture", arch)
        self._blocks, self._n_blocks = names.find_blocks(module)  # the encoder's, if two
        self._decoder = seq2seq.decoder_prefix(module)
        self._decoder_blocks = self._decoder and seq2seq.decoder_blocks(module, self._decoder)
        self._dec_layout: encoding.Layout | None = None
        self._n_dec_tokens: int | None = None
        self._tokenizer_hash = tokenizer_hash(tokenizer)
        self._positions = encoding.positions_from_arange(module)
        self._heads = names.head_shape(config)
        self._taps = hooks.taps(module, self._blocks, self._n_blocks)
        emb = module.get_input_embeddings() if hasattr(module, "get_input_embeddings") else None
        self._vocab = getattr(emb, "num_embeddings", None)
        self._specials = frozenset(int(i) for i in tokenizer.all_special_ids)  # never symbols
        self._pairs: dict[str, attention.Pair] = {}  # attention_to's pair hypotheses
        self._attn: dict[str, tuple[str, str]] = {}  # address -> (attention module, pair name)
        self.stop_early = True  # capture() ends the forward pass once its hooks fired
        self._repeated: set[str] = set()  # modules called more than once per forward pass
        self._memo: dict[str, list[tuple[int, int]]] = {}
        self._too_long: set[str] = set()  # records skipped under skip_long
        self._layout: encoding.Layout | None = None
        self._n_tokens: int | None = None

    @property
    def symbol_space(self) -> str:
        """Models with equal spaces see the same symbols: one hypothesis block serves them."""
        pooled = f":{self.record_pool}" if self.record_pool else ""
        # how a long record is read changes its symbols: truncated, windowed or skipped
        mode = "truncate" if self.truncate else "skip" if self.skip_long else "stride"
        if self.truncate or self.skip_long or self.stride is not None:
            pooled += f":{mode}{self.max_length}"
        return f"hf:{self._tokenizer_hash}:{sorted(self.pool.items())}{pooled}"

    def align(self, families: list) -> list:
        """The hypothesis families as they read this model's tokens."""
        from .align import AlignedFamily

        return [AlignedFamily(f, self) for f in families]

    # -- running --------------------------------------------------------------
    def _encode(self, records: list[Any]) -> dict[str, torch.Tensor]:
        ids = [ids_.record_ids(r, self.name) for r in records]
        if any(i is not None for i in ids):
            return self._encode_ids(records, ids)
        for r in records:  # validates types and lengths, fills the offsets memo
            self.offsets(r)
        given = list(records)
        if self.skip_long:  # a skipped record runs as padding alone: it holds no symbol
            records = [self.tokenizer.pad_token if self.skips(r) else r for r in records]
        enc, layout = encoding.encode(
            self.tokenizer, list(records), self.max_length, self.truncate, self.stride,
            self.record_pool,
        )
        ids = enc["input_ids"]
        if self._vocab is not None and ids.numel() and int(ids.max()) >= self._vocab:
            raise DNIError(
                f"tokenizer {type(self.tokenizer).__name__} gives token id {int(ids.max())}, "
                f"but model {self.name!r} embeds {self._vocab} ids (0..{self._vocab - 1}); use "
                "the tokenizer the model was trained with, or call "
                "module.resize_token_embeddings(len(tokenizer)) after adding tokens."
            )
        batch = self._placed(dict(enc), layout, given)
        if self.decoder_input is not None:
            dec, keep = seq2seq.encode_decoder(
                self.tokenizer, seq2seq.decoder_records(self, given, list(records)),
                seq2seq.start_token(self.module), self.max_length, self.truncate,
            )
            if callable(self.decoder_input):
                seq2seq.check_counts(self, given, keep)
            batch.update(dec)
            batch[_DECODER] = encoding.token_layout(keep)
        return batch

    def _encode_ids(self, records: list[Any], ids: list[Any]) -> dict[str, torch.Tensor]:
        """A block of token-id records: the ids fed as they are (:mod:`.token_records`)."""
        if any(i is None for i in ids):
            raise RecordError(
                f"model {self.name!r} got a block that mixes text and token-id records; pass "
                "one kind (tokenizer.batch_decode(ids) turns ids into text)."
            )
        if self.decoder_input is not None:
            raise DNIError(
                f"model {self.name!r} has decoder_input=, which reads text records; pass the "
                "texts (tokenizer.batch_decode(ids)), or leave decoder_input out."
            )
        # a skipped record runs as one pad token: it holds no symbol
        rows = [self._fed_ids(i) or (self.tokenizer.pad_token_id,) for i in ids]
        batch, layout = ids_.encode_ids(self.tokenizer, rows, self._specials, self.record_pool)
        return self._placed(batch, layout, list(records))

    def _placed(self, batch: dict[str, Any], layout: encoding.Layout, given: list[Any]) -> dict:
        """``batch`` with its position ids (left padding), pair targets and symbol layout."""
        if self._positions and self.tokenizer.padding_side == "left":
            # left padding shifts tokens right; positions must count real tokens only,
            # or a left-padded record reads other position embeddings than a right-padded one
            batch["position_ids"] = (batch["attention_mask"].cumsum(1) - 1).clamp(min=0)
        if self._pairs and layout.per_token:
            layout.targets = {n: attention.target_grid(self, p, n, given, layout.index.shape[1])
                              for n, p in self._pairs.items()}  # fmt: skip
        batch[_LAYOUT] = layout
        return batch

    def forward(self, batch: Any) -> Any:
        """Run the module on an encoded batch; remembers where each symbol sits."""
        batch = dict(batch)
        layout = batch.pop(_LAYOUT, None)
        dec = batch.pop(_DECODER, None)
        ids = batch.get("input_ids")
        # behaviors come back where the caller put the batch (the extraction device)
        self._layout = layout.to(ids.device) if layout is not None and ids is not None else layout
        self._n_tokens = ids.shape[1] if ids is not None else None
        self._dec_layout = dec.to(ids.device) if dec is not None and ids is not None else dec
        dec_ids = batch.get("decoder_input_ids")
        self._n_dec_tokens = dec_ids.shape[1] if dec_ids is not None else None
        module = self.module
        if self._decoder is not None and self.decoder_input is None:
            module = module.get_encoder()  # no decoder inputs: the encoder stack alone
            batch = seq2seq.encoder_inputs(module, batch)
        if _takes_use_cache(type(module)) and "use_cache" not in batch:
            batch["use_cache"] = False  # a key/value cache costs copies no reading needs
        try:
            return module(**to_device(batch, _input_device(self.module)))
        except capture.StopForward:  # every captured address fired: the rest was not needed
            return None

    @property
    def movable(self) -> bool:
        """False on an accelerator: inputs go to the model, behaviors come back, weights stay."""
        return _input_device(self.module).type in ("cpu", "meta")

    def gather_symbols(self, t: torch.Tensor) -> torch.Tensor:
        """``(rows, T_tokens, D)`` → ``(R, T_symbols, D)`` for the batch last run, on its device.

        A per-token, per-head map (``(R, T_tokens, heads, head_dim)``: Qwen3's and
        Gemma3's ``q_norm`` / ``k_norm``, or ``(R, heads, T_tokens, head_dim)``) is read
        head-major as ``heads × head_dim`` units, as ``hook_z`` is; other maps
        (attention weights) are left as they are. Windows of a long record and
        record-level pooling are undone here (:func:`.encoding.gather`).
        """
        if self._dec_layout is not None and t.dim() == 3 and t.shape[1] == self._n_dec_tokens:
            return encoding.gather(t, self._dec_layout, self._n_dec_tokens, self._heads)
        if self._layout is None:
            return names.token_major(t, self._n_tokens, *self._heads) if t.dim() == 4 else t
        return encoding.gather(t, self._layout, self._n_tokens, self._heads)

    def symbol_slots(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Where the symbols of the batch last run sit in ``t`` (``(R, T_tokens, ...)``).

        Returns ``(index, real)``, both ``(R, T_symbols)`` on ``t``'s device: the token
        position of each symbol slot and whether the slot holds a symbol (a shorter
        record's tail slots do not). ``None`` when ``t`` is not one row per token, or
        the batch holds windows of long records or record-level units.
        """
        lay, n_tokens = self._layout, self._n_tokens
        if self._dec_layout is not None and t.dim() == 3 and t.shape[1] == self._n_dec_tokens:
            lay, n_tokens = self._dec_layout, self._n_dec_tokens  # a decoder tensor
        if lay is None or not lay.per_token or t.dim() != 3 or t.shape[1] != n_tokens:
            return None
        idx = lay.index.to(t.device)
        n = lay.count.to(t.device)
        real = torch.arange(idx.shape[1], device=t.device)[None, :] < n[:, None]
        return idx, real


def tokenizer_hash(tokenizer: Any) -> str:
    """A stable hash of a fast tokenizer's definition (vocabulary, merges, rules)."""
    # the Rust side serializes its vocabulary in hash order: sort before hashing
    spec = json.dumps(json.loads(tokenizer.backend_tokenizer.to_str()), sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


@functools.cache
def _takes_use_cache(cls: type) -> bool:
    try:
        return "use_cache" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):  # a forward without a signature
        return False


def _input_device(module: nn.Module) -> torch.device:
    emb = module.get_input_embeddings() if hasattr(module, "get_input_embeddings") else None
    for p in (emb or module).parameters():
        return p.device
    return torch.device("cpu")


def _register_vision() -> None:
    # Model.from_hf(module) without a tokenizer: a vision transformer (hf/__init__.py
    # installs ADAPTERS["hf"]; the vision adapter is installed with this module)
    from ..extraction.models import ADAPTERS
    from .vision import VisionModel

    ADAPTERS.setdefault("hf_vision", VisionModel)


_register_vision()
