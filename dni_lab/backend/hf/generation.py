"""``dl.generate``: a causal language model writes, and is read and steered as it writes.

What TransformerLens's ``generate`` with hooks and nnsight's ``.generate()`` tracing
give, on a :class:`~.model.HFModel`: prompts are tokenized and padded on the left,
one forward pass reads the prompts and fills the model's key/value cache
(``past_key_values``), then each step runs the new tokens alone (no prefix is
computed again). Names read during the passes (``activations=``) come back as an
:class:`~dni_lab.backend.extraction.activations.ActivationCache` over every token of
each record, prompt and generated; steering vectors (``steer=``, :mod:`.steer_hooks`)
are added where the names say. Greedy by default; ``do_sample=True`` samples from
the softmax at ``temperature`` (``top_k`` most likely tokens), reproducibly with ``seed``.

The model runs in eval mode (no dropout) and is left as found: hooks live in one
``ExitStack``, every submodule's ``training`` flag is put back and nothing runs with
gradients, also when a hook or a ``KeyboardInterrupt`` ends generation midway.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..errors import DNIError
from ..extraction.activations import ActivationCache
from ..extraction.readings import eval_mode
from . import steer_hooks
from .names import token_major


class Generation:
    """What :func:`generate` wrote and read.

    Attributes
    ----------
    prompts : list
        The prompts as given.
    prompt_ids, new_ids : list of list of int
        Each record's prompt tokens (special tokens included) and generated tokens (up to
        and including an end-of-sequence token, if one came).
    texts : list of str
        The generated text of each record (decoded ``new_ids``, special tokens skipped).
    sequences : torch.Tensor
        ``(R, P + N)`` int64, as ``model.generate`` returns them: left-padded prompts, then
        the new tokens (padding after a record's end).
    cache : ActivationCache or None
        With ``activations=``: ``cache[name]`` is ``(R, T, U)`` over each record's tokens,
        its prompt's first (``prompt_lengths``) then one per generated token; ``lengths``
        counts both. Positions are tokens, special tokens included.
    prompt_lengths : torch.Tensor
        ``(R,)`` int64: each prompt's token count.
    """

    def __init__(self, prompts, prompt_ids, new_ids, texts, sequences, cache) -> None:
        self.prompts = prompts
        self.prompt_ids = prompt_ids
        self.new_ids = new_ids
        self.texts = texts
        self.sequences = sequences
        self.cache = cache
        self.prompt_lengths = torch.tensor([len(p) for p in prompt_ids], dtype=torch.int64)

    def frame(self) -> pl.DataFrame:
        """One row per record: ``record``, ``prompt``, ``text``, ``n_new``."""
        return pl.DataFrame({
            "record": np.arange(len(self.texts), dtype=np.int64),
            "prompt": [p if isinstance(p, str) else None for p in self.prompts],
            "text": self.texts,
            "n_new": [len(n) for n in self.new_ids],
        })  # fmt: skip

    def __repr__(self) -> str:
        read = None if self.cache is None else self.cache.names
        return f"Generation({len(self.texts)} records, read={read})"


def _check_options(max_new_tokens: Any, temperature: Any, top_k: Any, positions: str) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
            max_new_tokens < 1:  # fmt: skip
        raise DNIError(f"max_new_tokens must be a whole number of at least 1, got "
                       f"{max_new_tokens!r}.")  # fmt: skip
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise DNIError(f"temperature must be a number above 0, got {temperature!r}; "
                       "do_sample=False picks the most likely token.")  # fmt: skip
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise DNIError(f"top_k must be None or a whole number of at least 1, got {top_k!r}.")
    if positions not in ("all", "new"):
        raise DNIError(f"positions must be 'all' (prompt and new tokens) or 'new' (generated "
                       f"tokens only), got {positions!r}.")  # fmt: skip


def _check_model(model: Any) -> None:
    from .model import HFModel

    if not isinstance(model, HFModel):
        raise DNIError(f"dl.generate runs a Hugging Face causal language model, not "
                       f"{type(model).__name__}; wrap it with dl.Model.from_hf(module, "
                       "tokenizer).")  # fmt: skip
    module = model.module
    config = getattr(module, "config", None)
    can = getattr(module, "can_generate", None)
    if getattr(config, "is_encoder_decoder", False) or not (callable(can) and can()):
        raise DNIError(
            f"model {model.name!r} ({type(module).__name__}) is not a causal language model "
            "with a head that predicts the next token; load it with "
            "AutoModelForCausalLM (GPT2LMHeadModel, LlamaForCausalLM, ...)."
        )


def _prompt_ids(model: Any, prompts: Any) -> tuple[list[Any], list[list[int]]]:
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(prompts) if isinstance(prompts, Sequence) else None
    if not prompts:
        raise DNIError("prompts must be a non-empty list of strings (or of token-id lists).")
    ids = []
    for k, p in enumerate(prompts):
        if isinstance(p, str):
            row = list(model.tokenizer(p)["input_ids"])
        elif isinstance(p, (list, tuple, torch.Tensor, np.ndarray)):
            row = [int(i) for i in (p.tolist() if hasattr(p, "tolist") else p)]
        else:
            raise DNIError(f"prompt {k} is {type(p).__name__}; pass a string or token ids.")
        if not row:
            raise DNIError(f"prompt {k} ({p!r}) has no tokens; the tokenizer adds no BOS "
                           "token, so give it some text.")  # fmt: skip
        vocab = model._vocab
        if vocab is not None and (max(row) >= vocab or min(row) < 0):
            raise DNIError(f"prompt {k} holds token ids outside model {model.name!r}'s "
                           f"vocabulary (0..{vocab - 1}).")  # fmt: skip
        ids.append(row)
    return prompts, ids


def _reading_plan(model: Any, names: Any) -> dict[str, tuple[str, Any]]:
    """``{name: (address, units or None)}`` for ``activations=``, resolved before any pass."""
    if names is None:
        return {}
    names = [names] if isinstance(names, (str, tuple)) else list(names)
    plan = {}
    for n in names:
        name, units = (n[0], list(n[1])) if isinstance(n, tuple) else (n, None)
        if str(name).endswith(("hook_pattern", "hook_attn_scores")):
            raise DNIError(f"{name!r}: attention patterns are not read during generation; "
                           "read them with dl.activations over the generated texts.")  # fmt: skip
        plan[name] = (model.resolve_layer(name), units)
    return plan


def _choose(logits: torch.Tensor, do_sample: bool, temperature: float, top_k: int | None,
            gen: torch.Generator | None) -> torch.Tensor:  # fmt: skip
    if not do_sample:
        return logits.argmax(-1)
    scaled = logits.double().cpu() / temperature
    if top_k is not None and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.multinomial(torch.softmax(scaled, -1), 1, generator=gen)[:, 0].to(logits.device)


def _raw(store: Any, address: str, n_tokens: int, heads: Any) -> torch.Tensor:
    t = dict.get(store, address, store.raw.get(address))
    if not isinstance(t, torch.Tensor):
        raise DNIError(f"{address!r} gave no tensor during generation; read another name.")
    return token_major(t, n_tokens, *heads) if t.dim() == 4 else t


def generate(
    model: Any,
    prompts: str | Sequence[Any],
    max_new_tokens: int = 20,
    *,
    activations: Sequence[Any] | str | None = None,
    steer: Mapping[str, Any] | None = None,
    scale: float = 1.0,
    positions: str = "all",
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    stop_at_eos: bool = True,
) -> Generation:
    """Generate from ``prompts``, reading ``activations`` and adding ``steer`` as it goes.

    Parameters
    ----------
    model : HFModel
        ``dl.Model.from_hf(module, tokenizer)`` of a causal language model.
    prompts : str or sequence
        One prompt or several (strings, or token-id lists), run as one batch padded on
        the left.
    max_new_tokens : int
        Tokens to generate per prompt (fewer where a record ends, ``stop_at_eos``).
    activations : sequence, optional
        Names to read, as ``dl.activations`` takes them (``"blocks.3.hook_resid_post"``,
        ``("blocks.0.attn.hook_z", [0, 1])``): read at every token, prompt and new.
    steer : dict, optional
        ``{name: vector}``: ``scale · vector`` is added to the value at ``name`` (a 1-D
        vector as wide as it), checked before any forward pass.
    scale : float
        Multiplies every steering vector.
    positions : {"all", "new"}
        Steer every position, or only the passes over generated tokens (the first new
        token is then predicted unsteered).
    do_sample, temperature, top_k, seed
        Greedy decoding by default; sampling draws from ``softmax(logits / temperature)``
        over the ``top_k`` most likely tokens, from a generator seeded with ``seed``.
    stop_at_eos : bool
        A record that writes the tokenizer's end-of-sequence token stops there (later
        slots hold padding, as in ``model.generate``); generation ends when all have.

    Returns
    -------
    Generation
        Tokens, texts and (with ``activations=``) the cache over every token.

    Raises
    ------
    DNIError
        A model that cannot generate, bad prompts or options, a steering vector of the
        wrong width (``LayerError`` for a name the model lacks), all before any pass.
    """
    _check_model(model)
    _check_options(max_new_tokens, temperature, top_k, positions)
    prompts, ids = _prompt_ids(model, prompts)
    longest = max(len(r) for r in ids) + max_new_tokens
    if model.max_length is not None and longest > model.max_length:
        raise DNIError(f"a prompt of {longest - max_new_tokens} tokens plus {max_new_tokens} "
                       f"new ones exceeds the {model.max_length} positions model {model.name!r} "
                       "reads; shorten the prompt or ask for fewer tokens.")  # fmt: skip
    reading = _reading_plan(model, activations)
    device = next(iter(model.module.parameters())).device
    phase = {"new": False}
    active = (lambda: True) if positions == "all" else (lambda: phase["new"])
    sample = [p if isinstance(p, str) else list(i) for p, i in zip(prompts, ids, strict=True)]
    plan = steer_hooks.resolve(model, steer, scale, lambda: model.layer_widths(sample[:1], device))
    gen = None
    if do_sample:
        gen = torch.Generator().manual_seed(int(seed) if seed is not None else 0)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(eval_mode(model.module))
        steer_hooks.install(model.module, plan, active, stack)
        stop = model.stop_early
        model.stop_early = False  # every pass runs to the logits
        stack.callback(setattr, model, "stop_early", stop)
        store = stack.enter_context(model.capture([a for a, _ in reading.values()]))
        steps = _run(model, ids, max_new_tokens, reading, store, phase, device,
                     (do_sample, float(temperature), top_k, gen), stop_at_eos)  # fmt: skip
    return _result(model, prompts, ids, reading, *steps, stop_at_eos)


@functools.cache
def _cache_keyword(cls: type) -> str:
    """The forward's key/value cache keyword: ``cache`` (transformers 5.2x) or the older
    ``past_key_values``; the output carries it under the same name."""
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _run(model, ids, max_new, reading, store, phase, device, how, stop_at_eos):
    """The passes: the padded prompts once, then one token per record per step."""
    tok = model.tokenizer
    pad = tok.pad_token_id
    eos = tok.eos_token_id if stop_at_eos else None
    R, P = len(ids), max(len(r) for r in ids)
    x = torch.full((R, P), pad, dtype=torch.long)
    mask = torch.zeros((R, P), dtype=torch.long)
    for i, r in enumerate(ids):
        x[i, P - len(r):] = torch.tensor(r)
        mask[i, P - len(r):] = 1
    x, mask = x.to(device), mask.to(device)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    done = torch.zeros(R, dtype=torch.bool, device=device)
    past, new, read = None, [], {a: [] for a, _ in reading.values()}

    key = _cache_keyword(type(model.module))

    def forward(x, mask, pos, past):
        out = model.module(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=True,
                           return_dict=True, **{key: past})  # fmt: skip
        for a in read:
            read[a].append(_raw(store, a, x.shape[1], model._heads).float().cpu())
        return out

    for _ in range(max_new):
        out = forward(x, mask, pos, past)
        past = getattr(out, key)
        phase["new"] = True
        nxt = _choose(out.logits[:, -1], *how)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        new.append(nxt)
        if eos is not None:
            done |= nxt == eos
        mask = torch.cat([mask, mask.new_ones(R, 1)], 1)
        pos, x = pos[:, -1:] + 1, nxt[:, None]
        if bool(done.all()):
            break
    if read:  # the last tokens were never read: one more pass, whose logits are not needed
        forward(x, mask, pos, past)
    return new, read


def _result(model, prompts, ids, reading, new, read, stop_at_eos) -> Generation:
    tok = model.tokenizer
    N = len(new)
    new_t = torch.stack(new, 1).cpu() if new else torch.zeros((len(ids), 0), dtype=torch.long)
    eos = tok.eos_token_id if stop_at_eos else None
    new_ids = []
    for row in new_t.tolist():
        end = row.index(eos) + 1 if eos is not None and eos in row else N
        new_ids.append(row[:end])
    texts = [tok.decode(r, skip_special_tokens=True) for r in new_ids]
    P = max(len(r) for r in ids)
    pad = torch.full((len(ids), P), tok.pad_token_id, dtype=torch.long)
    for i, r in enumerate(ids):
        pad[i, P - len(r):] = torch.tensor(r)
    sequences = torch.cat([pad, new_t], 1)
    cache = None
    if reading:
        lengths = torch.tensor([len(p) + len(n) for p, n in zip(ids, new_ids, strict=True)])
        T = int(lengths.max())
        start = torch.tensor([P - len(p) for p in ids])
        idx = start[:, None] + torch.arange(T)[None, :]
        real = torch.arange(T)[None, :] < lengths[:, None]
        values, addresses, units = {}, {}, {}
        for name, (address, sel) in reading.items():
            full = torch.cat(read[address], 1)  # (R, P + N, D): every pass's tokens
            idx_c = idx.clamp(max=full.shape[1] - 1)
            t = full.gather(1, idx_c[..., None].expand(-1, -1, full.shape[2]))
            cols = np.arange(full.shape[2]) if sel is None else np.asarray(sel, dtype=np.int64)
            if cols.size and (cols.min() < 0 or cols.max() >= full.shape[2]):
                raise DNIError(f"units {sel} of {name!r} are outside its {full.shape[2]} units.")
            t = t[..., torch.as_tensor(cols)] * real[..., None]
            values[name], addresses[name], units[name] = [t], address, cols
        cache = ActivationCache(values, lengths, addresses, units)
    return Generation(prompts, ids, new_ids, texts, sequences, cache)
