"""Merged L1 logistic probe: every hypothesis and every fold in one model.

Weights have shape ``(units + 1, folds · outputs)``: one matrix product per
optimisation step scores every hypothesis (categorical ones one-vs-rest) under
every fold's model (DeepBase's model merging). Records are assigned to folds
round-robin in the order the state reads them, so no record is split; fold
``f``'s model never sees fold ``f``'s rows, which it scores afterwards.

The state keeps a bounded, uniform sample of rows (bottom-k of random keys, so
two states merge into the sample their union would have drawn) and the current
weights. ``update`` takes a few warm-started damped Newton steps (``_newton``);
``result`` optimises to convergence, so it does not depend on the read order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ._common import kind_reasons, new_reasons, set_reason
from ._newton import SMOOTH, Problem, initial_weights, newton
from .base import HypothesisInfo, Measure, MeasureResult, stop_requested


@dataclass
class LogRegState:
    X: torch.Tensor  # (n, units) raw behaviors of the kept rows
    Y: torch.Tensor  # (n, outputs) 0/1 targets
    fold: torch.Tensor  # (n,) fold of each row's record
    key: torch.Tensor  # (n,) random keys of the bottom-k sample
    W: torch.Tensor  # (units + 1, folds * outputs), on standardized units
    out_hyp: np.ndarray  # (outputs,) hypothesis of each output
    scorable: np.ndarray  # (hyps,) binary or categorical
    info: list[HypothesisInfo] = field(default_factory=list)
    n_records: int = 0
    history: list[tuple[int, np.ndarray]] = field(default_factory=list)
    gen: torch.Generator | None = None
    damping: torch.Tensor | None = None  # per-column Newton damping, carried across blocks


class LogReg(Measure):
    """L1-regularised logistic regression probe over a unit group.

    Parameters
    ----------
    C : float
        Inverse regularisation strength, as in scikit-learn: the objective per
        hypothesis and fold is ``||w||_1 + C * sum(logloss)`` (the absolute value
        smoothed within 1e-3 of zero; coefficients below 2e-3 are reported as 0).
    folds : int
        Cross-validation folds (records, never split).
    max_rows : int
        Symbols kept for training (a uniform sample beyond that).
    steps_per_block, max_iter, tol : int, int, float
        Newton steps per block; the budget and the relative objective decrease
        below which a probe counts as converged in ``result``.
    hessian_rows : int
        Rows of the sample each Newton step builds its Hessians from.
    window_records : int
        Plateau window: ``err`` is the distance of the current F1 to the mean F1
        of the blocks covering the last ``window_records`` records.
    seed : int
        Seeds the row sample.
    """

    name = "logreg"
    joint = True
    has_error = True
    kinds = ("binary", "categorical")

    def __init__(
        self,
        C: float = 1.0,
        folds: int = 5,
        max_rows: int = 20_000,
        steps_per_block: int = 2,
        max_iter: int = 30,
        tol: float = 1e-4,
        hessian_rows: int = 4096,
        window_records: int = 2048,
        seed: int = 0,
    ) -> None:
        self.C = C
        self.folds = folds
        self.max_rows = max_rows
        self.steps_per_block = steps_per_block
        self.max_iter = max_iter
        self.tol = tol
        self.hessian_rows = hessian_rows
        self.window_records = window_records
        self.seed = seed

    # -- protocol ---------------------------------------------------------------
    def start(self, n_units, n_hyps, device="cpu", info: list[HypothesisInfo] | None = None):
        info = info or [HypothesisInfo(str(j), "binary") for j in range(n_hyps)]
        scorable = np.array([i.kind in self.kinds for i in info])
        out_hyp = []
        for j, i in enumerate(info):
            if i.kind == "categorical":
                out_hyp += [j] * int(i.n_categories or 2)
            elif i.kind == "binary":
                out_hyp.append(j)
        n_out = len(out_hyp)
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        e = lambda *s, dt=torch.float32: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
        return LogRegState(
            X=e(0, n_units), Y=e(0, n_out), fold=e(0, dt=torch.long), key=e(0),
            W=e(n_units + 1, self.folds * n_out), out_hyp=np.asarray(out_hyp, dtype=np.int64),
            scorable=scorable, info=info, gen=gen,
        )  # fmt: skip

    def update(self, state: LogRegState, U, H, mask):
        R, T = mask.shape
        rec = torch.arange(R, device=mask.device)[:, None].expand(R, T)[mask] + state.n_records
        X, Hm = U[mask].float(), H[mask]
        Y = self._targets(state, Hm)
        key = torch.rand(len(X), generator=state.gen).to(X.device)
        _append(state, X, Y, rec % self.folds, key, self.max_rows)
        state.n_records += R
        if len(state.X) == 0 or stop_requested():  # on a Stop the data is kept, the fit waits
            return state
        Xs = self._design(state)
        first = state.damping is None
        state.W, state.damping = self._solve(state, Xs, state.W, self.steps_per_block, None, first)
        if stop_requested():  # the F1 of a fit cut short would be read as this block's
            return state
        f1 = self._cv_f1(state, Xs, state.W)
        state.history.append((state.n_records, f1))
        return state

    def merge(self, a: LogRegState, b: LogRegState) -> LogRegState:
        out = LogRegState(
            X=a.X, Y=a.Y, fold=a.fold, key=a.key, W=(a.W + b.W) / 2,
            out_hyp=a.out_hyp, scorable=a.scorable, info=a.info, n_records=a.n_records,
            gen=a.gen, damping=a.damping,
        )  # fmt: skip
        # b's records come after a's: shift its folds so round-robin continues
        shift = a.n_records % self.folds
        _append(out, b.X, b.Y, (b.fold + shift) % self.folds, b.key, self.max_rows)
        out.n_records = a.n_records + b.n_records
        out.history = sorted(a.history + b.history, key=lambda h: h[0])
        return out

    def peek(self, state: LogRegState, confidence: float = 0.95) -> MeasureResult:
        f1 = state.history[-1][1] if state.history else None
        return self._scores(state, state.W, f1)

    def result(self, state: LogRegState, confidence: float = 0.95) -> MeasureResult:
        if len(state.X) == 0:
            return self._scores(state, state.W, None)
        Xs = self._design(state)
        W, _ = self._solve(state, Xs, state.W, self.max_iter, self.tol, state.damping is None)
        return self._scores(state, W, self._cv_f1(state, Xs, W))

    # -- internals --------------------------------------------------------------
    def _targets(self, state: LogRegState, Hm: torch.Tensor) -> torch.Tensor:
        cols = torch.as_tensor(state.out_hyp, device=Hm.device, dtype=torch.long)
        vals = Hm[:, cols]
        cls = torch.as_tensor(_class_index(state.out_hyp), device=Hm.device)
        cat = torch.as_tensor(_is_categorical(state.out_hyp), device=Hm.device)
        return torch.where(cat, (vals.round() == cls).float(), (vals > 0.5).float())

    def _design(self, state: LogRegState) -> torch.Tensor:
        """Standardized units plus an intercept column (never penalized)."""
        X = state.X
        mu = X.mean(0)
        sd = X.std(0, unbiased=False)
        Xs = (X - mu) / torch.where(sd > 1e-8, sd, torch.ones_like(sd))
        return torch.cat([torch.ones(len(X), 1, device=X.device), Xs], dim=1)

    def _solve(self, state, Xs, W0, steps: int, tol: float | None, cold: bool):
        """Newton steps on every (fold, output) column; ``cold`` starts from base rates."""
        k, n_out = self.folds, len(state.out_hyp)
        if n_out == 0 or steps == 0:
            return W0, state.damping
        train = (state.fold[:, None] != torch.arange(k, device=Xs.device)[None, :]).float()
        n_f = train.sum(0).clamp_min(1)  # rows each fold trains on
        problem = Problem(
            X=Xs,
            Y=state.Y.repeat(1, k),
            w_row=(train / n_f).repeat_interleave(n_out, dim=1),
            lam=(1.0 / (self.C * n_f)).repeat_interleave(n_out),
            col_out=torch.arange(n_out, device=Xs.device).repeat(k),
        )
        W0 = initial_weights(problem) if cold else W0
        # per-block steps stop at their budget; ``result`` at a converged objective
        return newton(problem, W0, steps, tol if tol is not None else 0.0,
                      self.hessian_rows, state.damping)  # fmt: skip

    def _cv_f1(self, state, Xs, W) -> np.ndarray:
        """Pooled out-of-fold F1 per hypothesis (macro over classes for categorical)."""
        k, n_out = self.folds, len(state.out_hyp)
        n_h = len(state.scorable)
        if n_out == 0:
            return np.full(n_h, np.nan)
        Zall = (Xs @ W).view(len(Xs), k, n_out)
        pred = Zall[torch.arange(len(Xs), device=Xs.device), state.fold] > 0
        y = state.Y > 0.5
        tp = (pred & y).sum(0).double()
        fp = (pred & ~y).sum(0).double()
        fn = (~pred & y).sum(0).double()
        den = (2 * tp + fp + fn).cpu().numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            f1_out = np.where(den > 0, 2 * tp.cpu().numpy() / den, np.nan)
        f1 = np.full(n_h, np.nan)
        for j in np.unique(state.out_hyp):
            vals = f1_out[state.out_hyp == j]
            f1[j] = np.nanmean(vals) if np.isfinite(vals).any() else np.nan
        return f1

    def _scores(self, state: LogRegState, W: torch.Tensor, f1: np.ndarray | None) -> MeasureResult:
        n_units, n_h = state.X.shape[1], len(state.scorable)
        k, n_out = self.folds, len(state.out_hyp)
        coef = W[1:].view(n_units, k, n_out).mean(1).cpu().numpy() if n_out else None
        if coef is not None:  # within the smoothing of zero: what L1 sets to zero
            coef = np.where(np.abs(coef) < 2 * SMOOTH, 0.0, coef)
        unit = np.full((n_units, n_h), np.nan)
        for j in np.unique(state.out_hyp):
            c = coef[:, state.out_hyp == j]
            unit[:, j] = c[np.arange(n_units), np.abs(c).argmax(1)]
        group = np.broadcast_to(f1 if f1 is not None else np.full(n_h, np.nan), unit.shape)
        reason = new_reasons(n_units, n_h)
        if len(state.X) == 0:
            set_reason(reason, True, "no symbols read")
        kind_reasons(reason, "logreg", state.info, self.kinds)
        if n_out and len(state.X):
            frac = state.Y.mean(0).cpu().numpy()
            const = np.zeros(n_h, dtype=bool)
            for j in np.unique(state.out_hyp):
                top = frac[state.out_hyp == j].max()
                const[j] = top <= 0 or top >= 1  # never or always true: nothing to probe
            set_reason(reason, const[None, :], "hypothesis is constant over the symbols read")
        if f1 is None and len(state.X):
            set_reason(reason, True, "no score yet")
        ok = reason == None  # noqa: E711
        unit = np.where(ok, unit, np.nan)
        group = np.where(ok, group, np.nan)
        return MeasureResult(unit, group, self._plateau(state, n_h), reason)

    def _plateau(self, state: LogRegState, n_h: int) -> np.ndarray:
        """|current F1 − mean F1 of the previous blocks in the window| (DeepBase §5.3.2)."""
        if len(state.history) < 2:
            return np.full(n_h, np.nan)
        now_n, now = state.history[-1]
        prev = [f for n, f in state.history[:-1] if n >= now_n - self.window_records]
        if not prev:
            prev = [state.history[-2][1]]
        with warnings.catch_warnings():  # a hypothesis with no F1 in the window stays NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.abs(now - np.nanmean(np.stack(prev), axis=0))


def _append(state: LogRegState, X, Y, fold, key, max_rows: int) -> None:
    state.X = torch.cat([state.X, X])
    state.Y = torch.cat([state.Y, Y])
    state.fold = torch.cat([state.fold, fold.to(state.fold.dtype)])
    state.key = torch.cat([state.key, key.to(state.key.device)])
    if len(state.X) > max_rows:  # bottom-k of random keys: a uniform sample, mergeable
        keep = torch.topk(state.key, max_rows, largest=False).indices.sort().values
        state.X, state.Y = state.X[keep], state.Y[keep]
        state.fold, state.key = state.fold[keep], state.key[keep]


def _class_index(out_hyp: np.ndarray) -> np.ndarray:
    """Class code of each output: 0, 1, 2, ... within a categorical hypothesis."""
    idx = np.zeros(len(out_hyp), dtype=np.float32)
    for j in np.unique(out_hyp):
        sel = np.flatnonzero(out_hyp == j)
        idx[sel] = np.arange(len(sel))
    return idx


def _is_categorical(out_hyp: np.ndarray) -> np.ndarray:
    counts = np.bincount(out_hyp) if len(out_hyp) else np.zeros(0, dtype=int)
    return counts[out_hyp] > 1
