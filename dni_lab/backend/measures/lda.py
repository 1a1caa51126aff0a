"""Closed-form probe: Fisher's linear discriminant of every hypothesis from co-moments.

The fit needs no optimiser. Per fold, the state keeps float64 centered moments of the
units and the 0/1 targets (count, means, ``Cuu`` units × units, ``Cuy`` units × outputs:
:class:`._lda_fit.Gram`), folded in block by block with Chan et al.'s union, which is
also :meth:`LDA.merge`. Fold ``f``'s model is the union of the other folds' moments, and
one Cholesky factor per fold gives every output's direction (:func:`._lda_fit.fit`:
ridge-regularised LDA on standardised units, equal to least squares up to scale). Folds
follow from each record's content (``logreg.record_codes``, as ``logreg``'s): a record
never splits, and the full-data answer does not depend on the order records arrive in.

The held-out F1 needs scores of held-out rows, so the state also keeps every row read,
as ``logreg`` does (``X`` float32 ``(n, units)``). A *checkpoint* projects each row with
its own fold's model (one GEMM), thresholds the logits (``threshold``), and pools the
folds' confusion counts; its grouped-jackknife error comes from record groups
(``logreg.record_groups``, copies of a record are separate draws) through
``confusion_by_group``/``f1_and_se``. Categorical hypotheses are one output per category
(one-vs-rest) with a macro F1, as in ``logreg``.

A unit's score is its *loading*, its correlation with the full-data discriminant,
``(Σw)_i / sqrt(Σ_ii · wᵀΣw)``: identifiable (near-copies of a unit get the same
loading; coefficients are not), on corr's scale, and exact from the moments. Its error is
the record-group jackknife with the fit refitted without each group: the groups' moments
are folded in block by block with the folds', from the same float32 products, one per
(fold, group) cell of the block (``_lda_fit.row_grams2``: each row multiplied once; a
record's group is known when it is read: its content and how many copies of that
content came before; a merge recomputes the later state's), and each replicate is the
total (the folds': the same rows) less one group.
A refit, not the fit held fixed, because the loading is ``corr / R`` (the fit's multiple
correlation moves with the records; ``logreg``'s loadings showed the same).

Early stopping reuses ``logreg``'s drift logic (``_probe_error.error``): once a
convergence check has run, a block triggers a checkpoint whenever the records read grew
by a factor since the last one; a score's error is the larger of its sampling half-width
and its change since the checkpoint at half the records. Without early stopping
(``eps=None``) no checkpoint runs before :meth:`result`, whose error is then the
sampling half-width alone (the scores are the full data's: there is no drift to bound).

A hypothesis undefined (NaN) at some rows: its outputs' moments are rebuilt at each
checkpoint from the kept rows where it is defined (those rows are left out of its fit
and its F1); a run without NaN pays nothing for it.

What a checkpoint costs is a pass over the rows for the held-out logits, one integer
histogram of their outcomes (``_lda_fit.confusion``: no predictions built), for the
open hypotheses only, and one batched Cholesky per set of fits (the folds' models, the
jackknife's loadings alone); the rows live in buffers grown in place (``_probe_buffer``),
and the records of each class are counted per block (``seen``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..errors import MeasureError
from . import _lda_fit as lf
from . import _probe_buffer as _buffer
from ._common import add_counts, count_undefined
from ._probe_error import Checkpoint, error, f1_and_se, pick_per_unit
from ._probe_result import probe_scores
from ._probe_retire import extend_checkpoint, live_outputs, output_subset, retired_union
from ._probe_rows import group_hash, per_hyp_all, record_codes, record_groups
from .base import HypothesisInfo, Measure, MeasureResult
from .logreg import LogReg

_RULES = ("accuracy", "f1", "gaussian")


@dataclass
class LDAState:
    folds: lf.Gram  # (folds, ...) moments of each fold's rows
    X: torch.Tensor  # (n, units) behaviors of every row read
    Y: torch.Tensor  # (n, outputs) bool targets (False where undefined)
    fold: torch.Tensor  # (n,)
    code: torch.Tensor  # (n,) content code of each row's record
    rec: torch.Tensor  # (n,) serial of each row's record in reading order
    out_hyp: np.ndarray  # (outputs,) hypothesis of each output
    info: list[HypothesisInfo] = field(default_factory=list)
    defined: torch.Tensor | None = None  # (n, outputs) bool; None while every value is
    n_undef: torch.Tensor | None = None
    n_records: int = 0
    checks: list[Checkpoint] = field(default_factory=list)
    stopping: bool = False  # a convergence check ran: checkpoints follow the reading
    growth: float | None = None
    retired: np.ndarray | None = None  # (H,) bool: every pair converged, no more checkpoints
    # (2, outputs) records in which each output's positive / negative class occurs
    # (where defined), counted per block: a checkpoint needs no pass over the rows for it
    seen: torch.Tensor | None = None
    # the loadings' jackknife: (groups, ...) moments of each record group's rows, folded
    # in per block; None only after a merge with a state that had none (rebuilt from the
    # rows at the next checkpoint); each row's group and how many records of each
    # content came before
    by_group: lf.Gram | None = None
    grp: torch.Tensor | None = None
    occ: dict[int, int] = field(default_factory=dict)
    store: dict[str, torch.Tensor] = field(default_factory=dict)  # the rows' buffers

    def __getstate__(self) -> dict:
        return _buffer.compact(self.__dict__, self.store)


class LDA(Measure):
    """Closed-form probe (Fisher's LDA, ridge-regularised) over a unit group.

    Parameters
    ----------
    folds : int
        Cross-validation folds (records, never split; the same folds as ``logreg``'s).
    alpha : float
        Ridge added to the standardised units' correlation matrix (relative to its mean
        eigenvalue, 1): keeps collinear units solvable.
    threshold : {"accuracy", "f1", "gaussian"}
        Where a fold's logits turn positive. ``"accuracy"`` (the default): the threshold
        of most correct rows on the other folds' held-out logits, the decision ``logreg``
        makes (a probability of 0.5); ``"f1"``: of the best F1 there; ``"gaussian"``: LDA
        log-odds 0 (the Bayes rule for Gaussian classes with one covariance).
    groups : int
        Record groups of the grouped jackknife (the F1's and the loadings' errors).
    checkpoint_growth, max_growth : float
        Under early stopping, the growth of the records read that triggers a checkpoint,
        adapted between the two to how far the open groups' errors are from eps (as
        ``logreg``).
    min_class_records : int
        A hypothesis gets an error once each class of each output occurred in this many
        records (as ``logreg``).
    bins, span : int, float
        Histogram of the logits the threshold is chosen from: ``bins`` bins over
        ``[-span, span]`` (log-odds).
    rel_tol : float
        Relative variance below which a unit counts as constant.
    """

    name = "lda"
    joint = True
    has_error = True
    kinds = ("binary", "categorical")

    def __init__(
        self,
        folds: int = 5,
        alpha: float = 1e-4,
        threshold: str = "accuracy",
        groups: int = 20,
        checkpoint_growth: float = 1.5,
        max_growth: float = 4.0,
        min_class_records: int = 100,
        bins: int = 512,
        span: float = 16.0,
        rel_tol: float = 1e-10,
    ) -> None:
        if threshold not in _RULES:
            raise MeasureError(
                f"LDA(threshold={threshold!r}) is not a threshold rule: use one of "
                f"{', '.join(map(repr, _RULES))}"
            )
        self.folds = folds
        self.alpha = alpha
        self.threshold = threshold
        self.groups = groups
        self.checkpoint_growth = checkpoint_growth
        self.max_growth = max_growth
        self.min_class_records = min_class_records
        self.bins = bins
        self.span = span
        self.rel_tol = rel_tol

    # -- protocol ---------------------------------------------------------------
    def start(self, n_units, n_hyps, device="cpu", info: list[HypothesisInfo] | None = None):
        info = info or [HypothesisInfo(str(j), "binary") for j in range(n_hyps)]
        out_hyp = []
        for j, i in enumerate(info):  # a category's indicator row is its parent's output
            if i.parent is None and i.kind in self.kinds:
                out_hyp += [j] * (int(i.n_categories or 2) if i.kind == "categorical" else 1)
        no = len(out_hyp)
        e = lambda *s, dt=torch.float32: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
        return LDAState(
            folds=lf.Gram.zeros((self.folds,), n_units, no, device), X=e(0, n_units),
            Y=e(0, no, dt=torch.bool), fold=e(0, dt=torch.long), code=e(0, dt=torch.long),
            rec=e(0, dt=torch.long), out_hyp=np.asarray(out_hyp, dtype=np.int64), info=info,
            seen=e(2, no, dt=torch.long), grp=e(0, dt=torch.long),
            by_group=lf.Gram.zeros((self.groups,), n_units, no, device),
        )  # fmt: skip

    def update(self, state: LDAState, U, H, mask):
        R, T = mask.shape
        und = count_undefined(state, H, mask)
        rcode = record_codes(H, mask)
        code = rcode[:, None].expand(R, T)[mask]
        grp = _record_groups(state.occ, rcode, mask.any(1), self.groups)[:, None].expand(R, T)[mask]
        rec = (state.n_records + torch.arange(R, device=mask.device))[:, None].expand(R, T)[mask]
        X, Hm = U[mask].float(), H[mask]
        Y = LogReg._targets(None, state, Hm) > 0.5  # type: ignore[arg-type]  # undefined: False
        D = None
        if und is not None or state.defined is not None:
            D = ~torch.isnan(Hm[:, torch.as_tensor(state.out_hyp, dtype=torch.long)])
        fold = code % self.folds
        if len(X):
            state.seen += _class_records(Y, D, mask)
            # every output's moments, retired or not: the targets' products are the cheap
            # part, and an open output's bits then do not depend on which ones retired;
            # the folds' and the groups' moments from one product per (fold, group) cell
            by_fold, by_group = lf.row_grams2(X, Y, fold, self.folds, grp, self.groups)
            state.folds = lf.union(state.folds, by_fold)
            if state.by_group is not None:
                state.by_group = lf.union(state.by_group, by_group)
        _append(state, X, Y, fold, code, rec, D, grp)
        state.n_records += R
        last = state.checks[-1].n_records if state.checks else 0
        if state.stopping and len(state.X) and state.n_records >= (state.growth or 1.0) * last:
            self._checkpoint(state)
        return state

    def merge(self, a: LDAState, b: LDAState) -> LDAState:
        out = LDAState(
            folds=a.folds.combine(b.folds.to(a.X.device)), X=a.X, Y=a.Y, fold=a.fold,
            code=a.code, rec=a.rec, out_hyp=a.out_hyp, info=a.info, defined=a.defined,
            n_undef=add_counts(a.n_undef, b.n_undef), stopping=a.stopping or b.stopping,
            growth=a.growth, retired=retired_union(a.retired, b.retired),
            seen=a.seen + b.seen.to(a.seen.device), by_group=a.by_group, grp=a.grp,
            occ={c: a.occ.get(c, 0) + b.occ.get(c, 0) for c in a.occ.keys() | b.occ.keys()},
        )  # fmt: skip
        # b's records were read after a's: numbered on from a's, as one process numbers them
        _append(out, b.X, b.Y, b.fold, b.code, b.rec + a.n_records, b.defined, b.grp)
        # b's copies of contents a read too come after a's: their groups move
        out.grp = record_groups(out.code, out.rec, self.groups)
        if a.by_group is None or b.by_group is None:
            out.by_group = None  # rebuilt from the rows at the next checkpoint
        elif len(b.X):
            n_a = len(a.X)
            new = lf.row_grams(b.X, b.Y, out.grp[n_a:].to(b.X.device), self.groups)
            out.by_group = a.by_group.combine(new.to(a.X.device))
        out.n_records = a.n_records + b.n_records
        out.checks = sorted(a.checks + b.checks, key=lambda c: c.n_records)
        return out

    def peek(self, state: LDAState, confidence: float = 0.95) -> MeasureResult:
        if not state.checks:
            return self._scores(state, None, None)
        if state.stopping:
            return self._scores(state, state.checks[-1], *error(state.checks, confidence))
        return self._scores(state, state.checks[-1], *_sampling(state.checks[-1], confidence))

    def result(self, state: LDAState, confidence: float = 0.95) -> MeasureResult:
        if len(state.X) and (not state.checks or state.checks[-1].n_records != state.n_records):
            self._checkpoint(state)
        return self.peek(state, confidence)

    def retire(self, state: LDAState, converged: np.ndarray) -> None:
        """Hypotheses whose every pair converged leave the checkpoints: their held-out
        predictions, thresholds and jackknife cost rows times outputs at each one."""
        done = np.asarray(converged).all(0)
        state.retired = done if state.retired is None else state.retired | done

    def plan(self, state: LDAState, current: MeasureResult, eps: float, open_) -> None:
        """Start checkpoints, spaced by how far the open groups' F1 errors are from eps."""
        state.stopping = True
        groups = np.asarray(open_).any(0)
        err = np.asarray(current.group_err)[0] if current.group_err is not None else None
        if err is None or not groups.any() or np.isnan(err[groups]).any():
            state.growth = self.checkpoint_growth
            return
        need = float(np.max(err[groups]) / eps) ** 2
        state.growth = min(max(need, self.checkpoint_growth), self.max_growth)

    # -- internals --------------------------------------------------------------
    def _fits(self, state: LDAState, parts: lf.Gram, split: torch.Tensor, models: bool,
              total: lf.Gram | None = None) -> lf.Fit:  # fmt: skip
        """Fits of the complements of ``parts`` (:func:`_complement`; the jackknife's
        loadings alone, from ``total``); a NaN output's from its defined rows alone, which
        ``split`` (``(n,)`` part of each row) divides alike."""
        f = lf.fit(_complement(parts, models, total), self.alpha, self.rel_tol, full=models)
        if state.defined is None:
            return f
        P = int(parts.n.shape[0])
        for o in np.flatnonzero(~state.defined.all(0).cpu().numpy()):
            d = state.defined[:, o]
            g = lf.row_grams(state.X[d], state.Y[d][:, [o]], split[d], P)
            sub = lf.fit(_complement(g, models), self.alpha, self.rel_tol, full=models)
            if models:
                f.w[..., o], f.off[..., o] = sub.w[..., 0], sub.off[..., 0]
            f.loading[..., o] = sub.loading[..., 0]
        return f

    def _checkpoint(self, state: LDAState) -> None:
        """Checkpoint the hypotheses not retired (all of them while none is)."""
        if state.by_group is None and len(state.X):
            state.by_group = lf.row_grams(state.X, state.Y, state.grp, self.groups)
        live = live_outputs(state)
        if live is None:
            self._checkpoint_all(state)
            return
        fields, _, outs_t, hyps = output_subset(state, live)
        g = state.folds
        sub = replace(
            state, folds=lf.Gram(g.n, g.mean_u, g.mean_y[..., outs_t], g.cuu, g.cuy[..., outs_t]),
            seen=state.seen[:, outs_t], store={}, by_group=lf.columns(state.by_group, outs_t),
            **fields,
        )  # fmt: skip
        self._checkpoint_all(sub)
        if sub.checks:
            state.checks.append(extend_checkpoint(
                state.checks[-1] if state.checks else None, sub.checks[-1], hyps,
                state.n_records, state.X.shape[1], len(state.info)))  # fmt: skip

    def _checkpoint_all(self, state: LDAState) -> None:
        k, G, n_h = self.folds, self.groups, len(state.info)
        if len(state.out_hyp) == 0:
            return
        fit = self._fits(state, state.folds, state.fold, models=True)
        center = state.X.mean(0)
        z = lf.predict(state.X, state.fold, fit, k, center)
        group = state.grp
        counts = lf.confusion(z, state.Y, state.fold, state.defined, group, k, G,
                              self.threshold, self.bins, self.span)  # fmt: skip
        f1, f1_se = f1_and_se(counts, state.out_hyp, n_h)
        # the loadings' record-group jackknife: the full fit refitted without each group
        # (the total of the groups' moments is the folds': the same rows)
        total = state.folds.total() if state.defined is None else None
        loo = self._fits(state, state.by_group, group, False, total).loading.cpu().numpy()
        with np.errstate(invalid="ignore"):
            se = np.sqrt((G - 1) / G * ((loo - loo.mean(0)) ** 2).sum(0))
        load, load_se = pick_per_unit(fit.loading[k].cpu().numpy(), se, state.out_hyp, n_h)
        seen = state.seen.min(0).values.cpu().numpy()
        enough = per_hyp_all(seen >= self.min_class_records, state, n_h)
        done = np.ones(n_h, dtype=bool)  # closed form: every fit is at its optimum
        state.checks.append(Checkpoint(state.n_records, f1, f1_se, load, np.zeros_like(load),
                                       done, k, G, load_se, enough))  # fmt: skip

    def _scores(self, state: LDAState, check: Checkpoint | None, err: np.ndarray | None,
                group_err: np.ndarray | None = None) -> MeasureResult:  # fmt: skip
        return probe_scores(state, check, err, group_err, self.name, self.kinds,
                            null_unit="unit is constant over the symbols read")  # fmt: skip


def _complement(g: lf.Gram, models: bool, total: lf.Gram | None = None) -> lf.Gram:
    """``models``: each fold's model (the other folds) and, last, the full data's;
    otherwise the jackknife's replicates, the total (``total``, else the parts' union)
    less each part."""
    if models:
        return g.leave_one_out()
    return (g.total() if total is None else total).without(g)


def _sampling(check: Checkpoint, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Half-widths of the F1's and the loadings' jackknife intervals (no drift term)."""
    from scipy.special import stdtrit

    t = stdtrit(check.groups - 1, 0.5 + confidence / 2)
    f1_err = t * check.f1_se
    err = np.maximum(f1_err[None, :], t * check.coef_ij)
    if check.enough is not None:
        err[:, ~check.enough] = np.nan
        f1_err = np.where(check.enough, f1_err, np.nan)
    return err, f1_err


def _class_records(y: torch.Tensor, defined: torch.Tensor | None,
                   mask: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``(2, outputs)`` records of one block in which each output is positive, negative
    (where defined): ``y`` ``(n, outputs)`` bool, the rows of ``mask`` ``(R, T)``."""
    out = []
    for hit in (y if defined is None else y & defined, ~y if defined is None else ~y & defined):
        cells = torch.zeros((*mask.shape, y.shape[1]), dtype=torch.bool, device=y.device)
        cells[mask] = hit
        out.append(cells.any(1).sum(0))
    return torch.stack(out)


def _record_groups(occ: dict[int, int], rcode: torch.Tensor, present: torch.Tensor,
                   n_groups: int) -> torch.Tensor:  # fmt: skip
    """``(R,)`` jackknife group of each record of a block (``record_groups``' for its
    rows), counting in ``occ`` the copies of each content read; a record without a
    symbol counts for nothing."""
    nth = []
    for c, here in zip(rcode.tolist(), present.tolist(), strict=True):
        k = occ.get(c, 0)
        nth.append(k)
        if here:
            occ[c] = k + 1
    return group_hash(rcode, torch.as_tensor(nth, device=rcode.device), n_groups)


def _append(state: LDAState, X, Y, fold, code, rec, defined: torch.Tensor | None,
            grp: torch.Tensor) -> None:  # fmt: skip
    """Append a block's rows to the state's buffers (amortised: no copy of the rows kept)."""
    if defined is not None and state.defined is None:  # every earlier row was defined
        state.defined = torch.ones(state.Y.shape, dtype=torch.bool, device=state.Y.device)
    if defined is None and state.defined is not None:
        defined = torch.ones(Y.shape, dtype=torch.bool, device=Y.device)
    new = {"X": X, "Y": Y, "fold": fold, "code": code, "rec": rec, "grp": grp}
    if defined is not None:
        new["defined"] = defined
    _buffer.append(state, state.store, new)
