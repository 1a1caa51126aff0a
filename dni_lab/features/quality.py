"""How good a feature set is on a model's data: L0, explained variance, dead latents,
and the next-token loss recovered when its reconstruction replaces the hook's output.

Everything streams block by block: sums, never an activation matrix.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..backend.errors import DNIError
from ..backend.extraction.extract import Extractor, on_device, resolve_device, symbol_mask
from ..backend.extraction.models import Model, to_device
from .base import FeatureSet

_F64 = torch.float64


@dataclass
class Quality:
    """A feature set's reconstruction quality over some records (see :func:`evaluate`)."""

    l0: float  # mean active latents per symbol
    explained_variance: float  # 1 - Σ‖x - x̂‖² / Σ‖x - x̄‖²
    dead_share: float  # latents that never fired on these records
    loss_recovered: float | None  # (CE_zero - CE_patched) / (CE_zero - CE_clean), LMs only
    ce_clean: float | None
    ce_patched: float | None
    ce_zero: float | None
    symbols: int
    dense_share: float = 0.0  # latents that fired on more than DENSE of the symbols
    kl_patched: float | None = None  # mean KL(clean ‖ patched) of the next-token distribution
    loss_recovered_note: str | None = None  # why loss_recovered says little (a flat baseline)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lr = "n/a (no LM head)" if self.loss_recovered is None else f"{self.loss_recovered:.3f}"
        ce = ""
        if self.ce_clean is not None:
            ce = f" (CE clean {self.ce_clean:.3f}, patched {self.ce_patched:.3f}, "
            ce += f"zero-ablated {self.ce_zero:.3f})"
        kl = "" if self.kl_patched is None else f", KL(clean ‖ patched) {self.kl_patched:.4f}"
        note = f" [{self.loss_recovered_note}]" if self.loss_recovered_note else ""
        return (
            f"L0 {self.l0:.1f}, explained variance {self.explained_variance:.3f}, dead latents "
            f"{self.dead_share:.1%}, dense latents {self.dense_share:.1%}, next-token loss "
            f"recovered {lr}{note}{ce}{kl} over {self.symbols:,} symbols"
        )


def blocks(records: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Consecutive lists of ``size`` records."""
    it = iter(records)
    while block := list(itertools.islice(it, size)):
        yield block


def hook_address(model: Model, fs: FeatureSet) -> str:
    """The model address ``fs`` reads, checked against its width."""
    addr = model.resolve_layer(fs.hook)
    if addr not in model.layers:
        raise DNIError(
            f"feature set {fs.name!r}: hook {fs.hook!r} resolves to {addr!r}, which is not a "
            "module output; train and patch on a module's output (e.g. a block)."
        )
    return addr


def activations(
    model: Model, addr: str, records: Iterable[Any], block_size: int, device: torch.device
) -> Iterator[tuple[list[Any], torch.Tensor]]:
    """``(block, X)``: each block's hook activations at real symbols, ``(n_symbols, d_in)``."""
    ex = Extractor(model, {addr: None}, "activation", device)
    first = 0
    for block in blocks(records, block_size):
        mask = symbol_mask(model, block, device)
        yield block, ex(block, mask, first)[addr][mask]
        first += len(block)


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


@contextlib.contextmanager
def patched(model: Model, addr: str, fn):
    """The hook's output replaced by ``fn(output)`` inside the block (hook removed on exit)."""

    layout = model.layout(addr) if model.reads_layouts and model.has_widths else None
    if layout is not None:  # the units may not be the last axis (a conv map's channels)
        where = f"layer {addr!r} of model {model.name!r}"
        fn = functools.partial(layout.map_units, fn=fn, where=where)

    def hook(_m, _i, out):
        new = fn(_first(out))
        if isinstance(out, tuple):
            return (new, *out[1:])
        if isinstance(out, list):
            return [new, *out[1:]]
        return new

    handle = model._module(addr).register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def reconstruct(fs: FeatureSet, t: torch.Tensor) -> torch.Tensor:
    """``decode(encode(t))`` in ``t``'s dtype."""
    return fs.decode(fs.encode(t), t).to(t.dtype)


#: A latent firing on more than this share of symbols is dense (SAEBench's 10%).
DENSE = 0.1
#: Zero-ablation loss this close to the clean loss (nats) makes loss recovered a ratio of
#: two small differences: flagged, not trusted.
FLAT_BASELINE = 0.05


def next_token_logprobs(model: Model, batch: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Next-token log-probabilities at real positions and their targets; None without an LM."""
    if not isinstance(batch, dict) or "input_ids" not in batch:
        return None
    out = model.forward(batch)
    logits = getattr(out, "logits", None)
    if logits is None:
        return None
    ids = batch["input_ids"].to(logits.device)
    att = batch.get("attention_mask")
    att = torch.ones_like(ids) if att is None else att.to(logits.device)
    keep = (att[:, :-1] * att[:, 1:]).bool()
    logp = torch.log_softmax(logits[:, :-1][keep].double(), -1)
    return logp, ids[:, 1:][keep]


def next_token_loss(model: Model, batch: Any) -> tuple[float, int] | None:
    """Summed next-token cross-entropy and its count, or None without an LM head."""
    got = next_token_logprobs(model, batch)
    if got is None:
        return None
    logp, target = got
    return float(-logp.gather(1, target[:, None]).sum()), int(target.numel())


class QualityWarning(UserWarning):
    """A quality figure that says little on these records (a flat zero-ablation baseline)."""


def evaluate(
    model: Model,
    fs: FeatureSet,
    records: Iterable[Any],
    block_size: int = 32,
    device: str | torch.device = "auto",
) -> Quality:
    """L0, explained variance, dead and dense latent shares, loss recovered and KL.

    Loss recovered patches the reconstruction ``decode(encode(x))`` into the hook
    for every position and compares the language model's next-token loss with the
    clean run and with the hook zero-ablated: 1 is lossless, 0 no better than zeros.
    Where zero-ablation costs under ``FLAT_BASELINE`` nats the ratio says little: it is
    kept, flagged in ``loss_recovered_note``, and a :class:`QualityWarning` says so.
    ``kl_patched`` is the mean KL divergence from the clean to the patched next-token
    distribution. A latent is dense when it fires on more than ``DENSE`` of the symbols.
    Models whose output has no ``logits`` report None for the LM figures.
    """
    dev = resolve_device(device)
    addr = hook_address(model, fs)
    fs = fs.to(dev).eval()
    n = 0
    active = torch.zeros(fs.d_sae, dtype=torch.bool, device=dev)
    l0 = err = s2 = torch.zeros((), dtype=_F64, device=dev)
    sx = torch.zeros(fs.d_in, dtype=_F64, device=dev)
    ce = {"clean": [0.0, 0], "patched": [0.0, 0], "zero": [0.0, 0]}
    kl = [0.0, 0]
    fired = torch.zeros(fs.d_sae, dtype=_F64, device=dev)
    has_lm = True
    with on_device(model, dev), torch.inference_mode():
        for block, X in activations(model, addr, records, block_size, dev):
            z = fs.encode(X)
            recon = fs.decode(z, X).to(_F64)
            X64 = X.to(_F64)
            n += X.shape[0]
            active |= (z != 0).any(0)
            fired += (z != 0).sum(0)
            l0 = l0 + (z != 0).sum()
            err = err + ((X64 - recon) ** 2).sum()
            sx += X64.sum(0)
            s2 = s2 + (X64**2).sum()
            if has_lm:
                batch = to_device(model.encode(list(block)), dev)
                runs = {
                    "clean": contextlib.nullcontext(),
                    "patched": patched(model, addr, lambda t: reconstruct(fs, t)),
                    "zero": patched(model, addr, torch.zeros_like),
                }
                clean = None
                for key, ctx in runs.items():
                    with ctx:
                        got = next_token_logprobs(model, batch)
                    if got is None:
                        has_lm = False
                        break
                    logp, target = got
                    ce[key][0] += float(-logp.gather(1, target[:, None]).sum())
                    ce[key][1] += int(target.numel())
                    if key == "clean":
                        clean = logp
                    elif key == "patched":  # KL(clean ‖ patched) per position, summed
                        kl[0] += float((clean.exp() * (clean - logp)).sum())
                        kl[1] += int(target.numel())
                    del logp
    if n == 0:
        raise DNIError("evaluating a feature set needs records with at least one symbol.")
    total_var = float(s2 - (sx**2).sum() / n)
    mean = {k: (v[0] / v[1] if v[1] else None) for k, v in ce.items()}
    rec, note = None, None
    if has_lm and mean["clean"] is not None and mean["zero"] != mean["clean"]:
        rec = (mean["zero"] - mean["patched"]) / (mean["zero"] - mean["clean"])
        gap = mean["zero"] - mean["clean"]
        if gap < FLAT_BASELINE:
            note = (
                f"zero-ablating the hook costs only {gap:.3f} nats (CE {mean['clean']:.3f} -> "
                f"{mean['zero']:.3f}): loss recovered divides by that gap and says little; "
                "read KL(clean ‖ patched) and the patched CE instead"
            )
            warnings.warn(f"feature set {fs.name!r}: {note}.", QualityWarning, stacklevel=2)
    return Quality(
        l0=float(l0) / n,
        explained_variance=1.0 - float(err) / total_var if total_var > 0 else float("nan"),
        dead_share=float((~active).sum()) / fs.d_sae,
        loss_recovered=rec,
        ce_clean=mean["clean"] if has_lm else None,
        ce_patched=mean["patched"] if has_lm else None,
        ce_zero=mean["zero"] if has_lm else None,
        symbols=n,
        dense_share=float((fired / n > DENSE).sum()) / fs.d_sae,
        kl_patched=kl[0] / kl[1] if has_lm and kl[1] else None,
        loss_recovered_note=note,
    )
