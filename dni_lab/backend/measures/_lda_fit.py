"""The closed-form probe's statistics and fits: per-part Gram moments, LDA from them.

:class:`Gram` holds, per part of the rows (a fold, a record group), the count, the means
of the units and of the 0/1 targets and the centered co-moments ``Cuu`` (units × units)
and ``Cuy`` (units × outputs), in float64. Parts merge exactly with Chan et al.'s
pairwise union (:meth:`Gram.combine`) and come apart again with its reverse
(:meth:`Gram.without`), so a fold's model is the union of the other folds and a
jackknife replicate is the total less one group, without revisiting a row.

:func:`fit` turns a Gram into Fisher's discriminant per output. For a 0/1 target the
least-squares direction ``Σ⁻¹ c`` (``Σ`` the units' total covariance, ``c`` their
covariance with the target) is Fisher's ``Σ_W⁻¹ (μ₁ - μ₀)`` up to scale (Sherman–Morrison:
``Σ = Σ_W + π₁π₀ d dᵀ``), also with a ridge ``λI`` added to both, so one Cholesky factor
of the standardised units' correlation matrix gives every output's direction; with
``R² = cᵀΣ⁻¹c / (π₁π₀)`` the Mahalanobis distance is ``D² = R² / (π₁π₀ (1 - R²))`` and
Fisher's direction ``Σ⁻¹c / (π₁π₀ (1 - R²))``, which makes the Gaussian LDA log-odds
``wᵀ(x - (μ₁ + μ₀)/2) + log(π₁/π₀)`` closed form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ._common import F64

#: The largest R² a fit keeps (a separable target would give Fisher's direction infinite scale).
_R2_MAX = 1.0 - 1e-9


@dataclass
class Gram:
    """Count, means and centered co-moments of some rows; leading dimensions broadcast."""

    n: torch.Tensor  # (...,)
    mean_u: torch.Tensor  # (..., U)
    mean_y: torch.Tensor  # (..., O)
    cuu: torch.Tensor  # (..., U, U)
    cuy: torch.Tensor  # (..., U, O)

    @classmethod
    def zeros(cls, lead: tuple[int, ...], nu: int, no: int, device) -> Gram:
        def z(*dims: int) -> torch.Tensor:
            return torch.zeros((*lead, *dims), dtype=F64, device=device)

        return cls(z(), z(nu), z(no), z(nu, nu), z(nu, no))

    def combine(self, other: Gram) -> Gram:
        """Chan et al.'s union (exact; an empty side contributes nothing)."""
        n = self.n + other.n
        safe = n.clamp_min(1.0)
        w = (other.n / safe)[..., None]
        f = (self.n * other.n / safe)[..., None, None]
        du, dy = other.mean_u - self.mean_u, other.mean_y - self.mean_y
        return Gram(
            n=n,
            mean_u=self.mean_u + du * w,
            mean_y=self.mean_y + dy * w,
            cuu=self.cuu + other.cuu + du[..., :, None] * du[..., None, :] * f,
            cuy=self.cuy + other.cuy + du[..., :, None] * dy[..., None, :] * f,
        )

    def without(self, part: Gram) -> Gram:
        """The rows of ``self`` that are not in ``part`` (Chan's union reversed)."""
        n = self.n - part.n
        safe = n.clamp_min(1.0)[..., None]
        mean_u = (self.n[..., None] * self.mean_u - part.n[..., None] * part.mean_u) / safe
        mean_y = (self.n[..., None] * self.mean_y - part.n[..., None] * part.mean_y) / safe
        f = (n * part.n / self.n.clamp_min(1.0))[..., None, None]
        du, dy = part.mean_u - mean_u, part.mean_y - mean_y
        return Gram(
            n=n,
            mean_u=mean_u,
            mean_y=mean_y,
            cuu=self.cuu - part.cuu - du[..., :, None] * du[..., None, :] * f,
            cuy=self.cuy - part.cuy - du[..., :, None] * dy[..., None, :] * f,
        )

    def part(self, i: int) -> Gram:
        return Gram(self.n[i], self.mean_u[i], self.mean_y[i], self.cuu[i], self.cuy[i])

    def total(self) -> Gram:
        """The union of the parts along the first dimension, in their order."""
        out = self.part(0)
        for i in range(1, int(self.n.shape[0])):
            out = out.combine(self.part(i))
        return out

    def leave_one_out(self) -> Gram:
        """``(P + 1, ...)``: part ``p``'s complement, the union of the other parts, for
        each ``p``, then the union of all (``P >= 2``).

        Built by unions, never by subtraction, so a fold's model does not depend on how
        large the other folds are (no cancellation): the unions of the parts before and
        after each ``p`` (prefixes and suffixes), joined.
        """
        P = int(self.n.shape[0])
        pre, suf = [self.part(0)], [self.part(P - 1)]
        for i in range(1, P - 1):  # pre[i]: parts 0..i; suf[i]: parts P-1-i..P-1
            pre.append(pre[-1].combine(self.part(i)))
            suf.append(self.part(P - 1 - i).combine(suf[-1]))
        outs = [suf[P - 2]]
        if P > 2:  # p in 1..P-2: parts before p with parts after p, in one batched union
            mid = stack(pre[: P - 2]).combine(stack(suf[P - 3 :: -1]))
            outs += [mid.part(i) for i in range(P - 2)]
        outs += [pre[P - 2], pre[P - 2].combine(self.part(P - 1))]
        return stack(outs)

    def to(self, device) -> Gram:
        return Gram(*(t.to(device) for t in (self.n, self.mean_u, self.mean_y, self.cuu, self.cuy)))


def stack(grams: list[Gram]) -> Gram:
    """Grams stacked along a new first dimension."""
    return Gram(*(torch.stack([getattr(g, f) for g in grams]) for f in Gram.__dataclass_fields__))


def row_grams(X: torch.Tensor, Y: torch.Tensor, part: torch.Tensor, P: int) -> Gram:
    """``(P, ...)`` Grams of the rows of each part: ``X`` ``(n, U)`` float32, ``Y`` ``(n, O)``
    0/1 (float32 or bool)."""
    return row_grams2(X, Y, part, P)[0]


def row_grams2(X: torch.Tensor, Y: torch.Tensor, part: torch.Tensor, P: int,
               other: torch.Tensor | None = None, Q: int = 1) -> tuple[Gram, Gram]:  # fmt: skip
    """``(P, ...)`` Grams of the rows of each ``part`` and ``(Q, ...)`` of each ``other``
    (a second partition of the same rows, such as the jackknife's record groups), from
    one product per (part, other) cell: each row is multiplied once for both.

    The block is centred on its own float32 mean before the float32 GEMMs (a unit far
    from 0 keeps its digits); a column of ones beside the rows makes each product carry
    its cell's sums too (the GEMM's blocked sums, not a long running one). Cells add up
    per part and per other, and each sum becomes centered moments in float64
    (``C = S - s sᵀ / n`` about the block's mean: a part's mean lies close to it).
    """
    nu, no, n, dev = X.shape[1], Y.shape[1], X.shape[0], X.device
    Q = Q if other is not None else 1
    cell = part if other is None else part * Q + other
    order = torch.argsort(cell, stable=True)
    counts = torch.bincount(cell, minlength=P * Q).tolist()
    W = nu + no + 1
    Z = torch.empty(n, W, dtype=torch.float32, device=dev)  # [1, X, Y] sorted by cell
    Z[:, 1 : nu + 1] = X.index_select(0, order)
    Z[:, nu + 1 :] = Y.index_select(0, order)
    m = torch.zeros(W, device=dev)
    if n:  # each side's mean apart, as its products
        m[1 : nu + 1], m[nu + 1 :] = Z[:, 1 : nu + 1].mean(0), Z[:, nu + 1 :].mean(0)
    Z.sub_(m)
    Z[:, 0] = 1.0
    S_p = torch.zeros(P, nu + 1, W, dtype=torch.float32, device=dev)
    S_q = torch.zeros(Q, nu + 1, W, dtype=torch.float32, device=dev)
    buf = torch.empty(Q, nu + 1, W, dtype=torch.float32, device=dev)
    left = Z[:, : nu + 1]
    ends = np.cumsum(counts).tolist()
    for p in range(P):
        first = ends[p * Q - 1] if p else 0
        if ends[(p + 1) * Q - 1] == first:  # no row in this part
            continue
        for q in range(Q):
            hi = ends[p * Q + q]
            lo = hi - counts[p * Q + q]
            if lo == hi:
                buf[q].zero_()
            else:
                torch.mm(left[lo:hi].T, Z[lo:hi], out=buf[q])
        torch.sum(buf, 0, out=S_p[p])
        if other is not None:
            S_q.add_(buf)
    cnt = torch.as_tensor(counts, dtype=F64, device=dev).view(P, Q)
    m64 = m[1:].to(F64)
    g_p = _centered(cnt.sum(1), S_p, m64, nu)
    g_q = _centered(cnt.sum(0), S_q, m64, nu) if other is not None else g_p
    return g_p, g_q


def _centered(n: torch.Tensor, S: torch.Tensor, m: torch.Tensor, nu: int) -> Gram:
    """A Gram from counts ``n`` and the float32 products ``S`` of ``[1, x - m, y - m]``:
    row 0 holds the sums about ``m``, the rest the second moments about it.

    The correction ``s dᵀ`` is tiny beside ``S`` (a part's mean lies close to the
    block's), so taking it off in float32 costs no digit the products kept.
    """
    s = S[:, 0, 1:].to(F64)
    d = s / n.clamp_min(1.0)[:, None]  # each part's mean less m
    mean = torch.where((n > 0)[:, None], m + d, torch.zeros_like(d))
    C = S[:, 1:, 1:] - S[:, 0, 1 : nu + 1, None] * d.float()[:, None, :]  # per element
    return Gram(n, mean[:, :nu], mean[:, nu:], C[..., :nu].to(F64), C[..., nu:].to(F64))


def columns(g: Gram, cols: torch.Tensor) -> Gram:
    """``g``'s moments of the outputs ``cols`` alone."""
    return Gram(g.n, g.mean_u, g.mean_y[..., cols], g.cuu, g.cuy[..., cols])


def union(g: Gram, new: Gram) -> Gram:
    """``g`` with ``new`` folded in (Chan's union); nothing read yet (the first block):
    ``new`` as it is."""
    return new if bool((g.n == 0).all()) else g.combine(new)


@dataclass
class Fit:
    """Fisher discriminants per output, in raw units: ``logit = x @ w + off``."""

    w: torch.Tensor  # (..., U, O); None for loadings alone (``fit(full=False)``)
    off: torch.Tensor  # (..., O)
    loading: torch.Tensor  # (..., U, O) each unit's correlation with the discriminant
    const_u: torch.Tensor  # (..., U) bool: units constant over the rows (left out)


def fit(g: Gram, alpha: float, rel_tol: float, full: bool = True) -> Fit:
    """Ridge-regularised LDA of every output from ``g`` (any leading dimensions).

    Units are standardised (their correlation matrix ``R``, plus ``alpha`` times the
    identity: ``alpha`` is relative to the mean eigenvalue, 1), and those constant over
    the rows decouple with a zero coefficient. A unit's loading is its correlation with
    the discriminant, ``(Rβ)_i / sqrt(βᵀRβ)``: without a ridge exactly its correlation
    with the target divided by the fit's multiple correlation ``R``. Without ``full``
    only the loadings are computed (``w`` and ``off`` are None): the jackknife's refits.
    """
    n = g.n.clamp_min(1.0)[..., None]
    var = g.cuu.diagonal(dim1=-2, dim2=-1) / n
    const = var <= rel_tol * torch.clamp(g.mean_u * g.mean_u, min=1.0)
    sd = torch.where(const, torch.ones_like(var), var.clamp_min(1e-300).sqrt())
    keep = (~const).to(F64)
    # one scale per unit (0 for a constant one): R = s_i s_j Cuu, c = s_i Cuy / sqrt(n)
    scale = keep / (sd * n.sqrt())
    R = g.cuu * scale[..., :, None]
    R.mul_(scale[..., None, :])
    c = g.cuy * (scale / n.sqrt())[..., :, None]
    A = R.clone()
    A.diagonal(dim1=-2, dim2=-1).add_(alpha + (1 - keep))  # a constant unit: identity row
    L, _ = torch.linalg.cholesky_ex(A)
    del A
    beta = torch.cholesky_solve(c, L)  # (..., U, O) standardised least-squares slopes
    w = off = None
    if full:
        p1 = g.mean_y.clamp(1e-12, 1 - 1e-12)
        v = p1 * (1 - p1)
        r2 = ((c * beta).sum(-2) / v).clamp(0.0, _R2_MAX)
        d2 = r2 / (v * (1 - r2))
        w = beta / ((v * (1 - r2))[..., None, :] * sd[..., :, None])
        off = (-(g.mean_u[..., :, None] * w).sum(-2) - (1 - 2 * p1) / 2 * d2
               + torch.log(p1 / (1 - p1)))  # fmt: skip
    Rb = R @ beta
    den = (beta * Rb).sum(-2).clamp_min(0).sqrt()[..., None, :]
    nan = torch.full_like(Rb, float("nan"))
    loading = torch.where((den > 0) & ~const[..., :, None], Rb / den.clamp_min(1e-300), nan)
    return Fit(w, off, loading.clamp(-1, 1), const)  # type: ignore[arg-type]


def predict(X: torch.Tensor, folds: torch.Tensor, f: Fit, k: int,
            center: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``(n, O)`` each row's logit under the model of its own (held-out) fold.

    ``center`` (the units' mean, float32) is taken off ``X`` first, so that units far from
    0 keep their float32 digits in the product.
    """
    z = torch.empty(X.shape[0], f.w.shape[-1], dtype=torch.float32, device=X.device)
    c64 = center.to(F64)
    for fo in range(k):
        idx = (folds == fo).nonzero().squeeze(1)
        if len(idx):
            w = f.w[fo]
            off = f.off[fo] + c64 @ w
            z[idx] = torch.addmm(off.float(), X.index_select(0, idx).sub_(center), w.float())
    return z


def _bin(z: torch.Tensor, bins: int, span: float) -> torch.Tensor:
    """Each logit's histogram bin, int32 (``bins`` bins over ``[-span, span]``)."""
    b = z.clamp(-span, span).add_(span).mul_(bins / (2 * span)).to(torch.int32)
    return b.clamp_(0, bins - 1)


def _slots(z: torch.Tensor, y: torch.Tensor, folds: torch.Tensor, k: int, bins: int,
           span: float) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Each (row, output)'s histogram slot ``((fold · O + o) · 2 + y) · bins + bin``, int32,
    built in place (``k·O·2·bins`` is far below 2**31: rows × outputs int64 temporaries
    made this pass memory-bound, ~4x slower), and each row's logit bin."""
    O = z.shape[1]
    b = _bin(z, bins, span)
    idx = b.clone().add_(y, alpha=bins)
    idx.add_((folds.to(torch.int32) * (O * 2 * bins))[:, None])
    idx.add_((torch.arange(O, dtype=torch.int32, device=z.device) * (2 * bins))[None, :])
    return idx, b


def _edges(hist: torch.Tensor, rule: str, bins: int) -> torch.Tensor:
    """``(k, O)`` each fold's threshold edge from the ``(k, O, 2, bins)`` histogram: the
    rule's best over the *other* folds' rows; ties go to the edge nearest 0."""
    other = hist.sum(0, keepdim=True) - hist  # (k, O, 2, bins)
    # predicted positive where bin >= e, for e in 0..bins: counts at or above each edge
    above = torch.cat([other.flip(-1).cumsum(-1).flip(-1), torch.zeros_like(other[..., :1])], -1)
    tp, fp = above[:, :, 1], above[:, :, 0]
    pos, neg = other[:, :, 1].sum(-1, keepdim=True), other[:, :, 0].sum(-1, keepdim=True)
    if rule == "accuracy":
        score = tp + (neg - fp)
    else:
        score = 2 * tp / (2 * tp + fp + (pos - tp)).clamp_min(1e-300)
    # ties: the edge nearest the Gaussian threshold (edge bins // 2)
    near = -(torch.arange(bins + 1, device=hist.device) - bins // 2).abs().to(F64) * 1e-12
    score = score / score.abs().amax(-1, keepdim=True).clamp_min(1e-300) + near
    return score.argmax(-1)


def thresholds(z: torch.Tensor, y: torch.Tensor, folds: torch.Tensor, defined: torch.Tensor | None,
               k: int, rule: str, bins: int, span: float) -> torch.Tensor:  # fmt: skip
    """``(n, O)`` bool predictions: each fold's rows above its threshold.

    ``rule="gaussian"`` thresholds the LDA log-odds at 0 (the Bayes rule if the classes
    were Gaussian with one covariance). ``"accuracy"`` and ``"f1"`` pick, for fold ``f``,
    the threshold that maximises that criterion over the *other* folds' held-out logits
    (each under its own model: out of sample, so no row chooses its own threshold), from
    per-fold histograms of ``bins`` bins over ``[-span, span]``; ties go to the bin edge
    nearest 0. Integer counts: the choice does not depend on the order rows were read in.
    """
    if rule == "gaussian":
        return z > 0
    O = z.shape[1]
    idx, b = _slots(z, y, folds, k, bins, span)
    size = k * O * 2 * bins
    if defined is None:
        hist = torch.bincount(idx.view(-1), minlength=size).to(F64)
    else:
        hist = torch.bincount(idx.view(-1), weights=defined.reshape(-1).to(F64), minlength=size)
    edge = _edges(hist.view(k, O, 2, bins), rule, bins)  # (k, O)
    return b >= edge[folds]


def confusion(z: torch.Tensor, y: torch.Tensor, folds: torch.Tensor, defined: torch.Tensor | None,
              group: torch.Tensor, k: int, n_groups: int, rule: str, bins: int,
              span: float) -> np.ndarray:  # fmt: skip
    """``(3, n_groups, O)`` true positive, false positive and false negative counts of
    :func:`thresholds`' predictions per record group (``group`` ``(n,)``), where defined.

    The same counts as thresholding every row and adding up its hits, without building
    the predictions as booleans: each (row, output) cell becomes its outcome code
    ``2·predicted + y`` (4 where undefined) in place, and one integer histogram over
    (group, output, outcome) counts them.
    """
    O = z.shape[1]
    dev = z.device
    if rule == "gaussian":
        code = (z > 0).to(torch.int32).mul_(2).add_(y)
    else:
        idx, code = _slots(z, y, folds, k, bins, span)
        size = k * O * 2 * bins
        if defined is not None:  # undefined cells go to a slot of their own, then dropped
            idx.masked_fill_(~defined, size)
        hist = torch.bincount(idx.view(-1), minlength=size + 1)[:size].to(F64)
        del idx
        edge = _edges(hist.view(k, O, 2, bins), rule, bins).to(torch.int32)  # (k, O)
        # predicted where bin >= edge: bin - edge clamped to [-1, 0], plus 1, is 0 or 1
        code.sub_(edge.index_select(0, folds)).clamp_(-1, 0).add_(1).mul_(2).add_(y)
    if defined is not None:
        code.masked_fill_(~defined, 4)
    code.add_((group.to(torch.int32) * (O * 5))[:, None])
    code.add_((torch.arange(O, dtype=torch.int32, device=dev) * 5)[None, :])
    counts = torch.bincount(code.view(-1), minlength=n_groups * O * 5)
    counts = counts.view(n_groups, O, 5)
    return counts[..., [3, 2, 1]].permute(2, 0, 1).to(F64).cpu().numpy()
