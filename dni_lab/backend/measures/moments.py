"""Co-moments of units and hypotheses: count, means, centered sums of squares, and the
Chan et al. pairwise union that folds groups of records into running totals in float64.

:class:`Moments` is what :mod:`.corr` keeps per bucket and in total; the functions below
build a block's moments from shifted sums and fold them into buckets in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_F64 = torch.float64


@dataclass
class Moments:
    """Count, means, centered sums of squares and co-moment of one set of symbols.

    Leading dimensions broadcast: the running total has none, the buckets one.
    """

    n: torch.Tensor  # (...,) symbols
    mean_u: torch.Tensor  # (..., U)
    mean_h: torch.Tensor  # (..., H)
    m2_u: torch.Tensor  # (..., U)
    m2_h: torch.Tensor  # (..., H)
    c_uh: torch.Tensor  # (..., U, H)

    @classmethod
    def zeros(cls, lead: tuple[int, ...], nu: int, nh: int, device) -> Moments:
        def z(*dims: int) -> torch.Tensor:
            return torch.zeros((*lead, *dims), dtype=_F64, device=device)

        return cls(z(), z(nu), z(nh), z(nu), z(nh), z(nu, nh))

    def combine(self, other: Moments) -> Moments:
        """Chan et al.'s pairwise union (exact; an empty side contributes nothing)."""
        n = self.n + other.n
        safe = n.clamp_min(1.0)
        w = (other.n / safe)[..., None]
        f = (self.n * other.n / safe)[..., None]
        du, dh = other.mean_u - self.mean_u, other.mean_h - self.mean_h
        return Moments(
            n=n,
            mean_u=self.mean_u + du * w,
            mean_h=self.mean_h + dh * w,
            m2_u=self.m2_u + other.m2_u + du * du * f,
            m2_h=self.m2_h + other.m2_h + dh * dh * f,
            c_uh=self.c_uh + other.c_uh + du[..., :, None] * dh[..., None, :] * f[..., None],
        )

    def without(self, part: Moments) -> Moments:
        """The moments of the symbols of ``self`` that are not in ``part`` (Chan reversed)."""
        n = self.n - part.n
        safe = n.clamp_min(1.0)
        mean_u = (self.n[..., None] * self.mean_u - part.n[..., None] * part.mean_u) / safe[
            ..., None
        ]
        mean_h = (self.n[..., None] * self.mean_h - part.n[..., None] * part.mean_h) / safe[
            ..., None
        ]
        f = (n * part.n / self.n.clamp_min(1.0))[..., None]
        du, dh = part.mean_u - mean_u, part.mean_h - mean_h
        return Moments(
            n=n,
            mean_u=mean_u,
            mean_h=mean_h,
            m2_u=self.m2_u - part.m2_u - du * du * f,
            m2_h=self.m2_h - part.m2_h - dh * dh * f,
            c_uh=self.c_uh - part.c_uh - du[..., :, None] * dh[..., None, :] * f[..., None],
        )

    def r(self) -> torch.Tensor:
        """Correlations, NaN where a side has no variance."""
        den = torch.sqrt((self.m2_u[..., :, None] * self.m2_h[..., None, :]).clamp_min(0))
        nan = torch.full_like(self.c_uh, float("nan"))
        return torch.where(den > 0, self.c_uh / den.clamp_min(1e-300), nan)


def rolled(m: Moments, shift: int) -> Moments:
    """Buckets moved ``shift`` slots on (bucket k lands in slot k + shift, cyclically)."""
    return Moments(*(torch.roll(getattr(m, f), shift, 0) for f in Moments.__dataclass_fields__))


def block_mean(X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of the real symbols of ``X`` ``(R, T, D)`` as float64 ``(D,)`` (padding ignored).

    A matrix-vector product with the mask reads the block once without gathering a copy
    (padding must be finite, as ``update`` already assumes when it zeroes it).
    """
    flat = X.reshape(-1, X.shape[-1])
    if bool(mask.all()):
        return flat.mean(0).to(_F64)
    m = mask.reshape(-1).to(X.dtype)
    return (torch.mv(flat.T, m) / m.sum()).to(_F64)


def sum_groups(cnt, su, sh, s_u, s_h, q_u, q_h, S) -> Moments:
    """The block's moments straight from the shifted sums (cheaper than G unions)."""
    n = cnt.sum()
    su_t, sh_t = s_u.sum(0), s_h.sum(0)
    safe = n.clamp_min(1.0)
    return Moments(
        n=n,
        mean_u=su + su_t / safe,
        mean_h=sh + sh_t / safe,
        m2_u=q_u.sum(0) - su_t * su_t / safe,
        m2_h=q_h.sum(0) - sh_t * sh_t / safe,
        c_uh=S.sum(0) - torch.outer(su_t, sh_t) / safe,
    )


def fold(b: Moments, slots: torch.Tensor, part: Moments) -> None:
    """Chan's union of ``part`` into buckets ``slots`` of ``b``, in place.

    The (k, U, H) co-moments are the only large tensors: they are updated in place
    (on a view when the slots are consecutive, the usual case), the outer product
    fused into one ``baddbmm``, instead of building four temporaries of that size.
    """
    lo, k = int(slots[0]), len(slots)
    run = bool((slots == torch.arange(lo, lo + k)).all())
    idx: slice | torch.Tensor = slice(lo, lo + k) if run else slots
    n_a = b.n[idx]
    n = n_a + part.n
    safe = n.clamp_min(1.0)
    w = (part.n / safe)[:, None]
    f = (n_a * part.n / safe)[:, None]
    du, dh = part.mean_u - b.mean_u[idx], part.mean_h - b.mean_h[idx]
    c = b.c_uh[idx]  # a view for a run of slots, else a copy written back below
    c.add_(part.c_uh).baddbmm_((du * f)[:, :, None], dh[:, None, :])
    if not run:
        b.c_uh[idx] = c
    b.m2_u[idx] = b.m2_u[idx] + part.m2_u + du * du * f
    b.m2_h[idx] = b.m2_h[idx] + part.m2_h + dh * dh * f
    b.mean_u[idx] = b.mean_u[idx] + du * w
    b.mean_h[idx] = b.mean_h[idx] + dh * w
    b.n[idx] = n


def index(m: Moments, idx) -> Moments:
    return Moments(m.n[idx], m.mean_u[idx], m.mean_h[idx], m.m2_u[idx], m.m2_h[idx], m.c_uh[idx])
