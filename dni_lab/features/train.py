"""``dl.features.train_sae``: a TopK SAE trained on streamed activations.

Gao et al. (2024)'s recipe at small scale: decoder rows of unit norm (renormalized
after every step, their gradient's parallel part removed), the encoder initialized
as the decoder's transpose, ``b_dec`` at the first block's mean, a loss normalized
by the activations' variance, and an auxiliary TopK loss that lets latents dead
for a while learn the residual. Activations come one block of records at a time
and are dropped after their steps: the activation matrix never exists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..backend.errors import DNIError
from ..backend.extraction.extract import on_device, resolve_device
from ..backend.extraction.models import Model
from .formats.saelens import save
from .quality import Quality, activations, evaluate
from .topk import TopKSAE, topk_relu


@dataclass
class TrainedSAE:
    """What :func:`train_sae` returns: the set, its quality and where it was saved."""

    features: TopKSAE
    quality: Quality
    path: Path | None
    steps: int
    symbols_seen: int

    def __str__(self) -> str:
        where = f", saved to {self.path}" if self.path else ""
        return (
            f"TopK SAE {self.features.name!r} at {self.features.hook!r} "
            f"(d_sae={self.features.d_sae}, k={self.features.k}): {self.steps} steps over "
            f"{self.symbols_seen:,} symbols{where}\n  {self.quality}"
        )


def _init(fs: TopKSAE, X: torch.Tensor, gen: torch.Generator) -> None:
    with torch.no_grad():
        W = torch.randn(fs.d_sae, fs.d_in, generator=gen, dtype=torch.float32).to(fs.W_dec)
        fs.W_dec.copy_(W / W.norm(dim=-1, keepdim=True))
        fs.W_enc.copy_(fs.W_dec.T)
        fs.b_enc.zero_()
        fs.b_dec.copy_(X.mean(0))


def _step(
    fs: TopKSAE,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    var: float,
    idle: torch.Tensor,
    dead_after: int,
    k_aux: int,
) -> None:
    pre = fs.hidden_pre(fs.process_in(x))
    z = topk_relu(pre, fs.k)
    recon = z @ fs.W_dec + fs.b_dec
    loss = ((recon - x) ** 2).sum(-1).mean() / var
    fired = (z != 0).any(0)
    idle.add_(x.shape[0]).masked_fill_(fired.detach(), 0)
    dead = idle > dead_after
    n_dead = int(dead.sum())
    if n_dead:  # AuxK: the dead latents' top pre-activations model what is left
        e = (x - recon).detach()
        z_aux = topk_relu(pre.masked_fill(~dead, -math.inf), min(k_aux, n_dead))
        z_aux = torch.nan_to_num(z_aux, neginf=0.0)
        scale = (e**2).sum(-1).mean().clamp_min(1e-12)
        aux = ((z_aux @ fs.W_dec - e) ** 2).sum(-1).mean() / scale
        loss = loss + aux / 32
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        W, g = fs.W_dec, fs.W_dec.grad
        g -= (g * W).sum(-1, keepdim=True) * W  # keep the step tangent to unit-norm rows
    opt.step()
    with torch.no_grad():
        fs.W_dec /= fs.W_dec.norm(dim=-1, keepdim=True)


def train_sae(
    model: Model,
    records: Iterable[Any],
    hook: str,
    d_sae: int,
    k: int,
    path: str | Path | None = None,
    *,
    name: str | None = None,
    epochs: int = 1,
    batch_size: int = 256,
    block_size: int = 64,
    lr: float | None = None,
    eval_records: Sequence[Any] | None = None,
    device: str | torch.device = "auto",
    seed: int = 0,
    verbose: bool = True,
) -> TrainedSAE:
    """Train a TopK SAE on ``hook``'s activations and save it in SAELens' layout.

    Parameters
    ----------
    model : Model
        The model (``dl.Model`` or ``dl.Model.from_hf``); it is not changed.
    records : iterable
        Training records, read a block at a time (a sequence when ``epochs > 1``).
    hook : str
        The address (or TransformerLens hook name) whose output is encoded.
    d_sae, k : int
        Latents, and latents active per symbol.
    path : str or Path, optional
        Directory to save to (``cfg.json`` + ``sae_weights.safetensors``, SAELens v6).
    name : str, optional
        The set's name; defaults to ``f"topk-{d_sae}-k{k}"``.
    epochs, batch_size, block_size : int
        Passes over the records, symbols per optimizer step, records per block.
    lr : float, optional
        Adam's learning rate; defaults to ``2e-4 · sqrt(16384 / d_sae)`` (Gao et al.).
    eval_records : sequence, optional
        Records for the quality figures; defaults to the first 256 training records.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    seed : int
        Initialization and shuffling seed.
    verbose : bool
        Print the quality figures.

    Returns
    -------
    TrainedSAE
        ``features`` (the :class:`TopKSAE`), ``quality`` (L0, explained variance,
        dead-latent share, next-token loss recovered), ``path``.
    """
    if epochs > 1 and not isinstance(records, Sequence):
        raise DNIError("train_sae with epochs > 1 needs records it can read twice: a list.")
    dev = resolve_device(device)
    addr = model.resolve_layer(hook)
    # a latent idle this many symbols counts as dead and joins the auxiliary loss
    dead_after = min(100_000, 8 * batch_size)
    gen = torch.Generator().manual_seed(seed)
    fs: TopKSAE | None = None
    opt = idle = None
    var = 1.0
    steps = seen = 0
    kept: list[Any] = []
    with on_device(model, dev):
        for _ in range(epochs):
            for block, X in activations(model, addr, records, block_size, dev):
                if eval_records is None and len(kept) < 256:
                    kept += block[: 256 - len(kept)]
                X = X.float().clone()  # a normal tensor: autograd may save it
                if fs is None:
                    fs = TopKSAE(X.shape[1], d_sae, hook, name=name or f"topk-{d_sae}-k{k}", k=k)
                    fs = fs.to(dev)
                    _init(fs, X, gen)
                    var = float(((X - X.mean(0)) ** 2).sum(-1).mean().clamp_min(1e-12))
                    rate = lr if lr is not None else 2e-4 * math.sqrt(16384 / d_sae)
                    opt = torch.optim.Adam(fs.parameters(), lr=rate)
                    idle = torch.zeros(d_sae, device=dev)
                order = torch.randperm(X.shape[0], generator=gen).to(dev)
                for i in range(0, X.shape[0], batch_size):
                    with torch.enable_grad():
                        _step(fs, opt, X[order[i : i + batch_size]], var, idle, dead_after, 2 * k)
                    steps += 1
                seen += X.shape[0]
    if fs is None:
        raise DNIError("train_sae read no records; pass a non-empty list of records.")
    fs = fs.eval().requires_grad_(False)
    quality = evaluate(model, fs, eval_records if eval_records is not None else kept, device=dev)
    fs.meta.update({f"dni_lab_{k_}": v for k_, v in quality.as_dict().items()})
    saved = save(fs, path, model_name=model.name) if path is not None else None
    result = TrainedSAE(fs, quality, saved, steps, seen)
    if verbose:
        print(result)
    return result
