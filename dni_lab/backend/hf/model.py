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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import DNIError, LayerError, RecordError, did_you_mean
from ..extraction.models import Model, to_device
from . import attention, capture, computed, encoding, hooks, names, patterns, seq2seq
from . import token_records as ids_
from .align import DEFAULT_POOL, POOLS
from .encoding import RECORD_POOLS

_LAYOUT = "__dni_symbol_layout__"  # an extra batch key, removed before the module sees it
_DECODER = "__dni_decoder_layout__"  # the decoder's symbols (decoder_input=)
_MEMO = 65536


class HFModel(Model):
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

    def _check_long_options(self) -> None:
        if self.truncate and self.skip_long:
            raise DNIError("HFModel: truncate=True reads a long record, skip_long=True skips it; "
                           "pass one of them.")  # fmt: skip
        if self.stride is None:
            return
        n_special = self.tokenizer.num_special_tokens_to_add()
        window = (self.max_length or 0) - n_special
        if self.truncate or self.skip_long or self.record_pool is not None:
            raise DNIError(
                "HFModel: stride= reads long records as windows; "
                "it does not combine with truncate=True, skip_long=True or a record-level pool."
            )
        if not isinstance(self.stride, int) or isinstance(self.stride, bool) or not (
            0 <= self.stride < window
        ):
            raise DNIError(
                f"stride must be a whole number of tokens from 0 to {window - 1} (windows of "
                f"{window} tokens besides {n_special} special ones), got {self.stride!r}."
            )

    # -- symbols --------------------------------------------------------------
    def offsets(self, record: str) -> list[tuple[int, int]]:
        """Character span ``(start, end)`` of each symbol (token) of ``record``.

        With record-level units (``pool="cls"|"last"|"mean"``) one span, the record.
        """
        if not isinstance(record, str):  # before the memo: a list is not hashable
            ids_.record_ids(record, self.name)  # raises for what is neither text nor ids
            raise DNIError(
                f"a token-id record has no character offsets on model {self.name!r}: its "
                "symbols are its tokens; read them with model.token_record(record)."
            )
        spans = self._memo.get(record)
        if spans is None:
            if len(self._memo) >= _MEMO:
                self._memo.clear()
                self._too_long.clear()
            enc = self.tokenizer(
                record, return_offsets_mapping=True, return_special_tokens_mask=True
            )
            special = enc["special_tokens_mask"]
            spans = [tuple(o) for o, s in zip(enc["offset_mapping"], special, strict=True) if not s]
            n = len(enc["input_ids"])
            if self.max_length is not None and n > self.max_length and self.stride is None:
                if self.skip_long:
                    spans = []
                    self._too_long.add(record)
                elif not self.truncate:
                    raise DNIError(
                        f"a record tokenizes to {n} tokens, more than model {self.name!r} reads "
                        f"({self.max_length}): {record[:40]!r}...; pass HFModel(..., "
                        "truncate=True) to read its first tokens, stride=N to read it as "
                        "overlapping windows, or skip_long=True to skip it (counted in the "
                        "frame's provenance)."
                    )
                else:
                    spans = spans[: self.max_length - self.tokenizer.num_special_tokens_to_add()]
            if self.record_pool is not None and spans:
                spans = [(0, len(record))]
            self._memo[record] = spans
        return spans

    def _n_symbols(self, record: Any) -> int:
        ids = ids_.record_ids(record, self.name)
        if ids is None:
            return len(self.offsets(record))
        n = len(ids_.symbol_ids(self._fed_ids(ids), self._specials))
        return min(n, 1) if self.record_pool is not None else n

    def skips(self, record: Any) -> bool:
        """Whether ``record`` is skipped (``skip_long=True`` and longer than ``max_length``)."""
        if not self.skip_long:
            return False
        ids = ids_.record_ids(record, self.name)
        if ids is not None:
            return self.max_length is not None and len(ids) > self.max_length
        return not self.offsets(record) and record in self._too_long

    def check_records(self, records: Sequence[Any]) -> None:
        """Check token-id records before a run reads any: readable, ids in the vocabulary.

        Text records are left to the tokenizer. Raises a ``TokenIdsError`` naming the
        record's position in ``records``.
        """
        for k, r in enumerate(records):
            if not isinstance(r, str):
                ids = ids_.record_ids(r, self.name)
                ids_.check_vocab(ids or (), self._vocab, self.name, f" (record {k:,} of the data)")

    def token_record(self, record: Any) -> ids_.TokenRecord:
        """What a hypothesis reads of a token-id record: its symbols' tokens and ids.

        Parameters
        ----------
        record : list of int or 1-D integer tensor
            A token-id record.

        Returns
        -------
        TokenRecord
            The decoded tokens, one per symbol (special tokens left out), their ids and
            the text they decode to (:class:`.token_records.TokenRecord`).
        """
        ids = ids_.record_ids(record, self.name)
        if ids is None:
            raise DNIError(f"{record[:40]!r} is text, not token ids; model {self.name!r} "
                           "reads its tokens through model.offsets(record).")  # fmt: skip
        fed = ids_.symbol_ids(self._fed_ids(ids), self._specials)
        return ids_.token_record(self.tokenizer, fed)

    def _fed_ids(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The ids the model runs for a token-id record: checked, cut or skipped if long."""
        ids_.check_vocab(ids, self._vocab, self.name)
        if self.max_length is None or len(ids) <= self.max_length:
            return ids
        if self.skip_long:
            return ()
        if self.truncate:
            return ids[: self.max_length]
        how = "" if self.stride is None else " (stride= windows text records only)"
        raise DNIError(
            f"a token-id record holds {len(ids)} ids, more than model {self.name!r} reads "
            f"({self.max_length}){how}: {list(ids[:8])}...; pass HFModel(..., truncate=True) "
            "to read its first ids or skip_long=True to skip it, or pass the text."
        )

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

    @property
    def addresses(self) -> list[str]:
        """Module addresses plus each block's virtual ones (``{block}.attn.hook_z``, ...).

        See :mod:`.hooks`: per-head outputs, gated MLP neurons, the mid residual stream
        and GPT-2's fused q/k/v are not a module's output and get an address of their own.
        """
        return super().addresses + list(self._taps) + list(self._attn)

    def hook_names(self) -> list[str]:
        """The TransformerLens hook names this model translates (``blocks.0.attn.hook_z``, ...).

        What ``dl.activations(names=...)``' globs and callables choose among, before
        :attr:`addresses`; some may still not resolve (see :func:`.hooks.tl_names`).
        """
        return hooks.tl_names(self.module, self._blocks, self._n_blocks, self._taps)

    def positional_layers(self) -> list[str]:
        """The blocks: position ``i`` is block ``i``, and the default units."""
        return [f"{self._blocks}.{i}" for i in range(self._n_blocks)]

    def resolve_layer(self, layer: str | int) -> str:
        """An address, a block position, a TransformerLens hook or an nnsight path."""
        known = set(self.addresses) if isinstance(layer, str) else set()
        if isinstance(layer, str) and layer not in known and self._add_tap(layer):
            known.add(layer)
        if isinstance(layer, str) and layer not in known:
            mapped = names.translate(layer, self._blocks, self._n_blocks, self.module, self._taps)
            if mapped is not None and mapped not in known and self._add_tap(mapped):
                known.add(mapped)
            if mapped is not None and mapped not in known:
                raise LayerError(
                    f"{layer!r} maps to {mapped!r}, which model {self.name!r} does not have."
                    f"{did_you_mean(mapped, self.addresses)}"
                )
            layer = mapped or layer
        if isinstance(layer, str) and layer not in known:
            layer = seq2seq.translate(layer, self._decoder_blocks) or layer
        address = super().resolve_layer(layer)
        seq2seq.needs_rule(self, address)
        return address

    def _add_tap(self, address: str) -> bool:
        """Make the computed or ``.input`` tap ``address`` names (:mod:`.computed`), if any.

        It joins :attr:`addresses` after every other address (earlier units keep their
        positions), and the next :meth:`layer_widths` measures it.
        """
        tap = computed.lazy_tap(self.module, address, self._blocks, self._heads[1])
        if tap is None:
            return False
        self._taps[address] = tap
        self._widths, self._probed = {}, False  # measured again, with it, on the next call
        return True

    def _module(self, name: str) -> nn.Module:
        tap = self._taps.get(name)
        if tap is not None:
            return self.module.get_submodule(tap.module)
        if name in self._attn:
            return self.module.get_submodule(self._attn[name][0])
        return super()._module(name)

    def token_id(self, token: int | str) -> int:
        """The id of ``token``: an id as it is, or a string the tokenizer keeps whole."""
        if not isinstance(token, str):
            return super().token_id(token)
        ids = self.tokenizer(str(token), add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise DNIError(
                f"{token!r} is {len(ids)} tokens for model {self.name!r}'s tokenizer; give one "
                "token (a string the tokenizer keeps whole, or its id)."
            )
        return int(ids[0])

    def forceable(self, address: str) -> bool:
        """Whether forcing ``address`` can hook one module's input or output as a whole.

        A slice of a fused projection (GPT-2's ``attn.hook_q``) cannot: its units are
        not that module's units; nor can a computed value (``hook_normalized``,
        ``hook_result``, ``hook_rot_q``: :mod:`.computed`).
        """
        tap = self._taps.get(address)
        plain = tap is None or (tap.start is None and tap.kind is None)
        return address not in self._attn and plain

    def with_heads(self, frame: Any) -> Any:
        """A score frame with a ``head`` column: ``unit // head_dim`` on per-head layers.

        Rows of this model on ``attn.hook_q``, ``hook_k``, ``hook_v``, ``hook_z``,
        ``hook_rot_q/k``, ``hook_q/k_normed`` (and on the projections they map to) get
        their head; ``attn.hook_result`` rows ``unit // d_model``; every other row gets
        null. Keys and values under GQA have fewer heads, the same ``head_dim``.
        """
        import polars as pl

        layers = frame.filter(pl.col("mid") == self.name)["layer"].unique().to_list()
        dims = {a: d for a in layers if (d := self._head_dim_of(a)) is not None}
        dim = pl.col("layer").replace_strict(dims, default=None, return_dtype=pl.Int64)
        head = pl.when(pl.col("mid") == self.name).then(pl.col("unit") // dim)
        return frame.with_columns(head.cast(pl.Int64).alias("head"))

    def attention_to(
        self, pair: attention.Pair, name: str | None = None, blocks: Sequence[int] | None = None
    ) -> list[str]:
        """Units that read each head's attention to the token ``pair`` names (:mod:`.attention`).

        Parameters
        ----------
        pair : callable
            ``pair(record) -> [target of token 0, ...]``: per token (symbol) the index of
            the token it should attend to, or None.
        name : str, optional
            Names the addresses (``{block}.attn.to_{name}``); ``pair.__name__`` by default.
        blocks : sequence of int, optional
            Block positions; every block by default.

        Returns
        -------
        list of str
            One address per block, one unit per head: the attention weight from each
            symbol to its target (0 where there is none). Score it with ``diffmeans``
            against ``dni_lab.backend.hf.attention.has_target(pair)``.
        """
        return attention.register(self, pair, name, blocks)

    def attention_patterns(self) -> patterns.Patterns:
        """``attn.hook_pattern`` / ``hook_attn_scores``, read by ``dl.activations``."""
        return patterns.Patterns(self)

    def _head_dim_of(self, address: str) -> int | None:
        tap = self._taps.get(address)
        if tap is not None and tap.kind == "result":  # heads x d_model units
            return getattr(getattr(self.module, "config", None), "hidden_size", None)
        if tap is not None and tap.kind is not None:  # rotated q/k; q/k norms' normalized
            address = tap.module
        per_head = address.endswith(hooks.PER_HEAD) or any(
            address == hooks.role_or_none(self.module, b, r)
            for b in self.positional_layers()
            for r in ("q", "k", "v", "q_norm", "k_norm")
        )
        return self._heads[1] if per_head else None

    def _probe_widths(self, sample: list[Any], device: torch.device) -> dict[str, int]:
        # a module the forward pass calls twice (a shared layer) must not stop it at its
        # first call: count calls during the probe pass, which runs every module
        calls: dict[str, int] = {}
        with contextlib.ExitStack() as stack:
            for a in self.layers:
                count = functools.partial(capture.count_call, calls, a)
                stack.callback(self._module(a).register_forward_hook(count).remove)
            widths = super()._probe_widths(sample, device)
        self._repeated = {a for a, n in calls.items() if n > 1}
        heads = getattr(getattr(self.module, "config", None), "num_attention_heads", None)
        widths.update({a: heads for a in self._attn if isinstance(heads, int)})
        # virtual addresses are no module's output: hook_z is the out projection's input,
        # heads × head_dim units, which is not hidden_size when head_dim is set apart
        # from it (Qwen3, Gemma); read the projection, or measure where it does not say
        found = {
            a: names.input_width(self._module(a)) if t.side == "input" and not t.kind else None
            for a, t in self._taps.items()
        }
        widths.update({a: w for a, w in found.items() if w is not None})
        unknown = sorted(a for a, w in found.items() if w is None)
        if unknown:
            with torch.inference_mode(), self.capture(unknown) as store:
                self.forward(to_device(self.encode(sample), device))
            widths.update({a: int(store[a].shape[-1]) for a in unknown})
        return widths

    @contextlib.contextmanager
    def capture(self, addresses: Sequence[str]) -> Iterator[dict[str, Any]]:
        """Hooks as in :class:`Model`; captured outputs come back in symbol order.

        Virtual addresses (:mod:`.hooks`) are read by a forward pre-hook on their
        module's input, or as a slice of its output. Once every address has fired,
        the forward pass stops (:meth:`forward` returns None): units in block ``k``
        run blocks ``<= k`` only, never the LM head. ``stop_early = False`` on the
        model turns that off; so does a module the probe pass saw called twice.
        """
        virtual = [a for a in addresses if a in self._taps]
        plain = [a for a in addresses if a not in self._taps]
        store = capture.SymbolStore(self)
        pending = set(addresses)
        if not self.stop_early or pending & self._repeated or not pending:
            pending = None  # a hook never stops the pass
        attn = [a for a in plain if a in self._attn]
        plain = [a for a in plain if a not in self._attn]
        with super().capture(plain) as raw, contextlib.ExitStack() as stack:
            capture.keep_taps(self.module, {a: self._taps[a] for a in virtual}, store, stack)
            if attn:  # only eager attention returns its weights
                stack.enter_context(attention.eager(self.module))
            for a in attn:
                keep = capture.keep_attention(store, a, self, self._attn[a][1])
                stack.callback(self._module(a).register_forward_hook(keep).remove)
            if pending is not None:  # after the keeping hooks: on one module they run in order
                capture.stop_after(
                    {a: (self._module(a), a in self._taps and self._taps[a].side == "input")
                     for a in addresses},
                    pending,
                    stack,
                )  # fmt: skip
            store.raw = raw
            yield store


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
