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


@dataclass
class Excluded:
    """Raw float64 sums of the units over the symbols where each hypothesis is undefined.

    ``corr`` reads an undefined hypothesis value as 0 in its :class:`Moments` and keeps
    these beside them (totals, or one per bucket with a leading dimension), so that
    :func:`defined` can take those symbols back out, pair by pair. They add, subtract
    and roll like the buckets they sit beside.
    """

    n: torch.Tensor  # (..., H) undefined symbols of each hypothesis
    s: torch.Tensor  # (..., U, H) sum of each unit over them
    q: torch.Tensor  # (..., U, H) sum of its squares over them

    def __add__(self, other: Excluded) -> Excluded:
        return Excluded(self.n + other.n, self.s + other.s, self.q + other.q)

    def __sub__(self, other: Excluded) -> Excluded:
        return Excluded(self.n - other.n, self.s - other.s, self.q - other.q)

    def rolled(self, shift: int) -> Excluded:
        """As :func:`rolled` does to buckets."""
        return Excluded(*(torch.roll(t, shift, 0) for t in (self.n, self.s, self.q)))


@dataclass
class PairMoments:
    """Moments of each (unit, hypothesis) pair over the symbols where the hypothesis is defined."""

    n: torch.Tensor  # (..., H)
    mean_u: torch.Tensor  # (..., U, H)
    mean_h: torch.Tensor  # (..., H)
    m2_u: torch.Tensor  # (..., U, H)
    m2_h: torch.Tensor  # (..., H)
    c_uh: torch.Tensor  # (..., U, H)

    def r(self) -> torch.Tensor:
        """Correlations, NaN where a side has no variance."""
        den = torch.sqrt((self.m2_u * self.m2_h[..., None, :]).clamp_min(0))
        nan = torch.full_like(self.c_uh, float("nan"))
        return torch.where(den > 0, self.c_uh / den.clamp_min(1e-300), nan)


def defined(m: Moments, x: Excluded) -> PairMoments:
    """``m`` without the symbols ``x`` counts, for each pair (the hypothesis read 0 there).

    With ``mu``, ``mh`` the means over every symbol and ``d`` the defined ones:
    ``Σ_d (u - mu)² = m2_u - Σ_x (u - mu)²``, ``Σ_d (h - mh)² = m2_h - n_x mh²`` and
    ``Σ_d (u - mu)(h - mh) = c_uh + mh (s_x - n_x mu)``; each is then centred on the
    defined symbols' own means (Chan's union taken back).
    """
    n = m.n[..., None]  # (..., 1)
    nd = n - x.n  # (..., H)
    safe = nd.clamp_min(1.0)
    mu = m.mean_u[..., :, None]  # (..., U, 1)
    mh = m.mean_h  # (..., H)
    mud = (n[..., None] * mu - x.s) / safe[..., None, :]
    mhd = n * mh / safe
    du, dh = mud - mu, mhd - mh
    sq_x = x.q - 2 * mu * x.s + x.n[..., None, :] * mu * mu
    m2_u = m.m2_u[..., :, None] - sq_x - nd[..., None, :] * du * du
    m2_h = m.m2_h - x.n * mh * mh - nd * dh * dh
    c_uh = (m.c_uh + mh[..., None, :] * (x.s - x.n[..., None, :] * mu)
            - nd[..., None, :] * du * dh[..., None, :])  # fmt: skip
    return PairMoments(nd, mud, mhd, m2_u, m2_h, c_uh)
