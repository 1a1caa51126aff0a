"""Where a patching grid's cells live: one hook per layer of a site, and how a cell writes.

A *site* is what TransformerLens' patching helpers sweep (``resid_pre``, ``attn_out``,
``z``, ...). Each layer's site is one tensor of the forward pass: a module's output or its
first input, maybe a slice of the last dimension (GPT-2's fused ``c_attn`` holds q, k and
v). :class:`SiteHook` finds that tensor once through the model's own TransformerLens
names (:meth:`~dni_lab.backend.hf.model.HFModel.resolve_layer`) and writes a batch of
cells into it: a batch of ``cells × records`` rows, row ``c * R + r`` holding record ``r``
with cell ``c`` patched (a symbol position, a head, or a head at one position).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import DNIError, LayerError
from ..extraction.models import Model
from ..hf.names import reads_input

#: site → (TransformerLens hook under ``blocks.{layer}.``, whether cells are heads)
SITES: dict[str, tuple[str, bool]] = {
    "resid_pre": ("hook_resid_pre", False),
    "resid_mid": ("hook_resid_mid", False),
    "resid_post": ("hook_resid_post", False),
    "attn_out": ("hook_attn_out", False),
    "mlp_out": ("hook_mlp_out", False),
    "z": ("attn.hook_z", True),
    "q": ("attn.hook_q", True),
    "k": ("attn.hook_k", True),
    "v": ("attn.hook_v", True),
    "pattern": ("attn.hook_pattern", True),  # written inside the attention: grid_pattern
}
#: other names of a site (TransformerLens' helpers call ``z`` the heads' output)
ALIASES = {"head_out": "z", "attn_head_out": "z"}
#: how a grid's cells split a site: positions, heads over all positions, heads per position
BY = ("position", "head", "head_position")


def check_site(site: str, by: str | None) -> tuple[str, str]:
    """``(site, by)`` resolved and checked, or a :class:`DNIError` naming the choices."""
    site = ALIASES.get(site, site)
    if site not in SITES:
        raise DNIError(
            f"no patching site {site!r}; choose one of {sorted(SITES) + sorted(ALIASES)}."
        )
    heads = SITES[site][1]
    by = by or ("head" if heads else "position")
    allowed = ("head",) if site == "pattern" else BY[1:] if heads else BY[:1]
    if by not in allowed:
        raise DNIError(
            f"site {site!r} is patched by {' or '.join(map(repr, allowed))}, not {by!r}"
            + ("" if heads else "; per-head grids read z, q, k, v or pattern")
            + ("; a pattern is patched whole (query × key) per head" if site == "pattern"
               else "")
            + "."
        )
    return site, by


@dataclass
class SiteHook:
    """One layer's site: the module hooked, which side, the slice, heads of ``head_dim``."""

    name: str  # the TransformerLens name
    module: torch.nn.Module
    side: str  # "input" (pre-hook on the first positional input) or "output"
    start: int | None
    stop: int | None
    head_dim: int | None
    #: where the site is read when it is written elsewhere (``resid_mid``: read at the
    #: MLP norm's input, written as a change of the attention's output, so the residual
    #: stream itself changes and not the MLP's input alone)
    reader: SiteHook | None = None

    @classmethod
    def resolve(cls, model: Model, site: str, layer: int) -> SiteHook:
        """The site ``site`` of block ``layer``, found through the model's TL names."""
        name = f"blocks.{layer}.{SITES[site][0]}"
        if site == "pattern":  # no held tensor: patch_grid writes it (grid_pattern)
            raise DNIError(
                f"{name}: an attention pattern is held by no tensor a hook can read or "
                "write; dl.verify.patch_grid patches it (site='pattern'), attribution "
                "grids do not."
            )
        if site == "resid_mid":
            write = cls.resolve(model, "attn_out", layer)
            read = cls._at(model, name, model.resolve_layer(name), False)
            return cls(name, write.module, write.side, write.start, write.stop, None, read)
        return cls._at(model, name, model.resolve_layer(name), SITES[site][1])

    @classmethod
    def _at(cls, model: Model, name: str, addr: str, per_head: bool) -> SiteHook:
        tap = getattr(model, "_taps", {}).get(addr)
        if tap is not None and (tap.kind is not None or tap.head_size is not None):
            raise LayerError(
                f"{name} is computed on model {model.name!r} ({addr!r}), not held by one "
                "tensor; a grid patches held values: choose another site."
            )
        if tap is not None:
            module, side = model.module.get_submodule(tap.module), tap.side
            start, stop = tap.start, tap.stop
        else:
            module = model._module(addr)
            side = "input" if reads_input(addr) and addr not in model.layers else "output"
            start = stop = None
        head_dim = None
        if per_head:
            head_dim = getattr(model, "_head_dim_of", lambda _a: None)(addr)
            if not head_dim:
                raise LayerError(f"{name} of model {model.name!r} is not read per head.")
        return cls(name, module, side, start, stop, head_dim)

    def write(self, x: torch.Tensor, src: torch.Tensor, head: torch.Tensor, pos: torch.Tensor,
              tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """``x`` with each row's cell written from ``src`` (:func:`write_cells`)."""
        return write_cells(x, src, head, pos, tokens, real, self.head_dim)

    @contextlib.contextmanager
    def hooked(self, edit: Callable[[torch.Tensor], torch.Tensor | None]) -> Iterator[None]:
        """Within the block, ``edit(site tensor)`` runs at every pass: it may return the
        tensor to put in its place (a slice is written back into the whole)."""

        def apply(t: torch.Tensor) -> torch.Tensor | None:
            part = t if self.start is None else t[..., self.start : self.stop]
            new = edit(part)
            if new is None or self.start is None:
                return new
            return torch.cat([t[..., : self.start], new, t[..., self.stop :]], dim=-1)

        if self.side == "input":

            def pre(_mod, args):
                new = apply(args[0])
                return None if new is None else (new, *args[1:])

            handle = self.module.register_forward_pre_hook(pre)
        else:

            def post(_mod, _args, out):
                first = out[0] if isinstance(out, (tuple, list)) else out
                new = apply(first)
                if new is None:
                    return None
                return type(out)([new, *out[1:]]) if isinstance(out, (tuple, list)) else new

            handle = self.module.register_forward_hook(post)
        try:
            yield
        finally:
            handle.remove()


def grid_cells(by: str, n_positions: int, heads: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(head, position)`` of each cell of one layer, ``-1`` where a cell spans that axis.

    A position grid's cells are its symbol positions; a head grid's the ``heads`` (each
    at every symbol); a head × position grid's every pair, head-major.
    """
    pos = torch.arange(n_positions)
    h = torch.as_tensor(heads, dtype=torch.long)
    if by == "position":
        return torch.full_like(pos, -1), pos
    if by == "head":
        return h, torch.full_like(h, -1)
    return h.repeat_interleave(n_positions), pos.repeat(len(heads))


def write_cells(
    t: torch.Tensor,
    src: torch.Tensor,
    head: torch.Tensor,
    pos: torch.Tensor,
    tokens: torch.Tensor,
    real: torch.Tensor,
    head_dim: int | None,
) -> torch.Tensor:
    """``t`` (``(C·R, T, D)``: C cells of R records) with each row's cell taken from ``src``.

    ``src`` is ``(R, T, D)``: the values patched in, per record. ``head`` / ``pos``
    (``(C,)``, ``-1``: all) say each cell's head and symbol position; ``tokens`` / ``real``
    (``(R, S)``) the token of each symbol slot and whether it holds a symbol. Special
    tokens and padding keep the target's values.
    """
    R, S = tokens.shape
    C = len(head)
    dev = t.device
    out = t.clone()
    rows = torch.arange(C * R, device=dev)
    rec = rows % R
    h_c, p_c = head.to(dev).repeat_interleave(R), pos.to(dev).repeat_interleave(R)
    if bool((p_c < 0).all()):  # every symbol of the record
        slot = torch.arange(S, device=dev).expand(C * R, S)
        ok = real[rec]
    else:
        p = p_c.clamp(max=S - 1)
        slot, ok = p[:, None], (real[rec, p] & (p_c < S))[:, None]
    r_i, s_i = rec[:, None].expand_as(slot)[ok], slot[ok]
    row_i, tok_i = rows[:, None].expand_as(slot)[ok], tokens[r_i, s_i]
    if head_dim is None:
        out[row_i, tok_i] = src[r_i, tok_i]
        return out
    h_i = h_c[:, None].expand_as(slot)[ok]
    o = out.unflatten(-1, (-1, head_dim))
    o[row_i, tok_i, h_i] = src.unflatten(-1, (-1, head_dim))[r_i, tok_i, h_i]
    return o.flatten(-2)


def pair_lengths(model: Model, clean: list[Any], corrupted: list[Any]) -> list[int]:
    """Each pair's length in symbols; a :class:`DNIError` naming every pair that differs."""
    if not clean or len(clean) != len(corrupted):
        raise DNIError(
            f"a patching grid needs record pairs: {len(clean)} clean and {len(corrupted)} "
            "corrupted records given; pass as many of each (at least one), pair by pair."
        )
    a = [model.symbols(r) for r in clean]
    b = [model.symbols(r) for r in corrupted]
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if bad:
        shown = "; ".join(
            f"pair {i}: clean {x} symbols, corrupted {y} (positions {min(x, y)}..."
            f"{max(x, y) - 1} exist in one only)"
            for i, x, y in bad[:5]
        )
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise DNIError(
            f"{shown}{more}. Patching writes symbol t into symbol t, so a pair's records "
            "must be as long (in the model's symbols)."
        )
    return a
