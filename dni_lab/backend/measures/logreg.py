"""Merged L1 logistic probe: every hypothesis and every fold in one model.

Weights have shape ``(units + 1, folds · outputs)``: one matrix product per
optimisation step scores every hypothesis (categorical ones one-vs-rest) under
every fold's model (DeepBase's model merging). A record's fold follows from its
content (``record_codes``), never from the order it was read in, so no record is split,
copies of a record share a fold, and the full-data score does not depend on the order
in which records arrive (nor do merged shards); fold ``f``'s model never sees fold
``f``'s rows, which it scores afterwards. A record's jackknife group follows from its
content and how many copies of it came before (``record_groups``): copies are separate
draws.

The state keeps every row read (``max_rows`` opts into a bounded uniform sample:
bottom-k of random keys, so two states merge into the sample their union would
have drawn) and the current weights. ``update`` takes warm-started damped Newton
steps (``_newton``) towards the optimum on what was read and, once the fit reached
its tolerance, records a checkpoint: the F1 and coefficients with their sampling
errors (the coefficient's from the fold jackknife and from a record-group infinitesimal
jackknife, ``_probe_error.influence``). ``peek`` reports the last checkpoint with the
error of ``_probe_error`` (sampling half-width and the drift since half the records), so
a pair counts as converged only when its fitted scores are settled; ``result``
optimises to the tolerance on everything read.

A row where a hypothesis is undefined (NaN) has weight 0 in that hypothesis's
outputs (``defined``): they neither train on it nor count it in their F1. The
indicator rows a run adds for other measures (``"{hid}={code}"``) are left to the
categorical hypothesis itself, which the probe already fits one-vs-rest.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import MeasureError
from . import _column_pool
from ._common import add_counts, count_undefined
from ._newton import Stopped, hessians, initial_weights
from ._probe_error import (
    Checkpoint,
    coef_and_se,
    confusion_by_group,
    error,
    f1_and_se,
    f1_refit_se,
    group_gradients,
    halfway,
    pick_per_unit,
    refit_loadings,
    solve_influence,
)
from ._probe_result import probe_scores
from ._probe_retire import carry_back, live_outputs, restricted, retired_union
from ._probe_rows import (
    LogRegState,
    append_rows,
    class_index,
    class_records,
    design,
    fold_problem,
    is_categorical,
    per_hyp_all,
    record_codes,
    record_groups,
)
from .base import HypothesisInfo, Measure, MeasureResult, stop_requested


class LogReg(Measure):
    """L1-regularised logistic regression probe over a unit group.

    Parameters
    ----------
    C : float
        Inverse regularisation strength, as in scikit-learn: the objective per
        hypothesis and fold is ``||w||_1 + C * sum(logloss)``; coefficients the
        penalty zeroes are exactly 0.
    folds : int
        Cross-validation folds (records, never split).
    max_rows : int or None
        None (the default) trains on every symbol read. A number keeps a uniform
        sample of that many symbols instead: faster, but the scores are then those of
        the sample (the frame's provenance records the parameter). With early stopping,
        once the sample is full and fitted with an error estimate the probe stops
        reading (:meth:`saturated`): more records would not shrink that error.
    steps_per_block, max_iter, tol : int, int, float
        Newton steps a checkpoint's fit may take, and the final fit's; the largest
        change of a standardised coefficient that the last Newton step may propose in a
        converged fit (the step is the solver's estimate of its distance to the
        optimum; a fit that stops short of it never counts as converged).
    checkpoint_growth, max_growth : float
        A block triggers a fit (a checkpoint) once the records read have grown by a
        factor since the last one: fits cost a pass over every row read, so they come
        at geometric steps and the whole run costs a few full fits. The factor is
        ``checkpoint_growth`` until the run's convergence check reports the open pairs'
        errors; then it is the growth at which the largest open group error would reach
        eps if it shrinks like ``1/sqrt(records)``, between ``checkpoint_growth`` and
        ``max_growth``: a fit that can settle nothing is skipped.
    hessian_rows : int
        Rows each Newton step builds its Hessians from (drawn by curvature).
    min_class_records : int
        A hypothesis gets an error (and can settle) once each class of each of its
        outputs was seen in this many records: a rare hypothesis's probe is learnt from
        its few positive records, and on 57 of them (SQL's ``SelectItem -> Star`` after
        1,024 records) its jackknife errors came out small while its loadings were
        still 0.2 from their full-data values.
    groups : int
        Record groups of the grouped jackknife of the F1's sampling error.
    seed : int
        Seeds the row sample (``max_rows``).
    unit_score : {"loading", "coef"}
        What a unit's row shows. ``"loading"`` (the default): the unit's correlation with
        the probe's predicted probability (of the folds' mean weights;
        :func:`._probe_error.refit_loadings`), identifiable and on corr's scale, with a
        record-group jackknife error (the fit refitted without each group), so early
        stopping can settle it. ``"coef"``: its mean L1 coefficient over the folds, which
        :func:`dni_lab.features.from_probe` multiplies into directions; the coefficients
        of correlated units are not identifiable (twins trade weight between fits), so
        under early stopping most of these pairs stay open once the F1 settled (on a
        planted workload at eps 0.05: 20 of 512 pairs settled with ``"coef"``, 512 of 512
        with ``"loading"``, each within eps of the full fit).
    workers : int or None
        Threads solving the fit's chunks of outputs, each on one torch thread
        (:mod:`._column_pool`: beside busy processes this lost far less time than
        torch's own threads). None (the default) uses ``torch.get_num_threads()``; 1
        solves in the calling thread with torch's threads. The scores do not depend on it
        (beyond float rounding, well within ``tol``).
    """

    name = "logreg"
    joint = True
    has_error = True
    kinds = ("binary", "categorical")

    def __init__(
        self,
        C: float = 1.0,
        folds: int = 5,
        max_rows: int | None = None,
        steps_per_block: int = 60,
        max_iter: int = 60,
        tol: float = 1e-3,
        checkpoint_growth: float = 1.5,
        max_growth: float = 4.0,
        hessian_rows: int = 4096,
        min_class_records: int = 100,
        groups: int = 20,
        seed: int = 0,
        unit_score: str = "loading",
        workers: int | None = None,
    ) -> None:
        if unit_score not in ("coef", "loading"):
            raise MeasureError(
                f"LogReg(unit_score={unit_score!r}) is not a unit score: use 'loading' (the "
                "unit's correlation with the probe's predicted probability, the default) "
                "or 'coef' (the L1 coefficient)"
            )
        self.unit_score = unit_score
        self.C = C
        self.folds = folds
        self.max_rows = max_rows
        self.steps_per_block = steps_per_block
        self.max_iter = max_iter
        self.tol = tol
        self.checkpoint_growth = checkpoint_growth
        self.max_growth = max_growth
        self.hessian_rows = hessian_rows
        self.min_class_records = min_class_records
        self.groups = groups
        self.seed = seed
        self.workers = workers

    # -- protocol ---------------------------------------------------------------
    def start(self, n_units, n_hyps, device="cpu", info: list[HypothesisInfo] | None = None):
        info = info or [HypothesisInfo(str(j), "binary") for j in range(n_hyps)]
        # a category's indicator is fitted as an output of its categorical hypothesis
        scorable = np.array([i.kind in self.kinds and i.parent is None for i in info])
        out_hyp = []
        for j, i in enumerate(info):
            if i.parent is not None:
                continue
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
            scorable=scorable, info=info, gen=gen, code=e(0, dt=torch.long),
            rec=e(0, dt=torch.long),
        )  # fmt: skip

    def update(self, state: LogRegState, U, H, mask):
        R, T = mask.shape
        und = count_undefined(state, H, mask)
        code = record_codes(H, mask)[:, None].expand(R, T)[mask]
        rec = (state.n_records + torch.arange(R, device=mask.device))[:, None].expand(R, T)[mask]
        X, Hm = U[mask].float(), H[mask]
        Y = self._targets(state, Hm)
        D = None
        if und is not None or state.defined is not None:  # 0 weight where undefined
            cols = torch.as_tensor(state.out_hyp, device=Hm.device, dtype=torch.long)
            D = ~torch.isnan(Hm[:, cols])
            if state.defined is None:  # every row before this block was defined
                state.defined = torch.ones(len(state.X), len(cols), dtype=torch.bool,
                                           device=state.X.device)  # fmt: skip
        key = torch.rand(len(X), generator=state.gen).to(X.device)
        append_rows(state, X, Y, code % self.folds, key, code, rec, self.max_rows, D)
        state.n_records += R
        state.n_seen += len(X)
        if len(state.X) == 0 or stop_requested():  # on a Stop the data is kept, the fit waits
            return state
        last = state.checks[-1].n_records if state.checks else 0
        if state.n_records >= (state.growth or self.checkpoint_growth) * last:
            self._fit(state, self.steps_per_block)
        return state

    def merge(self, a: LogRegState, b: LogRegState) -> LogRegState:
        out = LogRegState(
            X=a.X, Y=a.Y, fold=a.fold, key=a.key, W=(a.W + b.W) / 2,
            out_hyp=a.out_hyp, scorable=a.scorable, info=a.info, n_records=a.n_records,
            gen=a.gen, damping=a.damping, code=a.code, rec=a.rec, growth=a.growth,
            defined=a.defined, n_undef=add_counts(a.n_undef, b.n_undef),
            retired=retired_union(a.retired, b.retired),
        )  # fmt: skip
        D = b.defined
        if D is None and a.defined is not None:
            D = torch.ones(b.Y.shape, dtype=torch.bool, device=b.Y.device)
        if D is not None and out.defined is None:
            out.defined = torch.ones(a.Y.shape, dtype=torch.bool, device=a.Y.device)
        # b's records were read after a's: numbered on from a's, as one process numbers them
        append_rows(out, b.X, b.Y, b.fold, b.key, b.code, b.rec + a.n_records, self.max_rows, D)
        out.n_records = a.n_records + b.n_records
        out.n_seen = a.n_seen + b.n_seen
        out.checks = sorted(a.checks + b.checks, key=lambda c: c.n_records)
        return out

    def peek(self, state: LogRegState, confidence: float = 0.95) -> MeasureResult:
        if not state.checks:
            return self._scores(state, None, None)
        return self._scores(state, state.checks[-1], *error(state.checks, confidence))

    def plan(self, state: LogRegState, current: MeasureResult, eps: float, open_) -> None:
        """Space the next checkpoint by how far the open groups' F1 errors are from eps.

        A group settles when its F1's error reaches eps; that error (a sampling
        half-width, or a drift that shrinks faster) falls like ``1/sqrt(records)``, so the
        records where the worst open group could settle are ``(err / eps)**2`` times
        those read. A group without an error yet (its fit short of tolerance) keeps the
        base growth.
        """
        if self._full(state):
            # more records only rotate the sample: fit once more where the last fit is
            # the half-way checkpoint, then :meth:`saturated` stops the reading
            state.growth = 2.0
            return
        groups = np.asarray(open_).any(0)
        err = np.asarray(current.group_err)[0] if current.group_err is not None else None
        if err is None or not groups.any():
            return
        worst = err[groups]
        if np.isnan(worst).any():
            state.growth = self.checkpoint_growth
            return
        need = float(np.max(worst) / eps) ** 2
        state.growth = min(max(need, self.checkpoint_growth), self.max_growth)

    def retire(self, state: LogRegState, converged: np.ndarray) -> None:
        """Hypotheses whose every pair converged leave the refits (:mod:`._probe_retire`)."""
        done = np.asarray(converged).all(0)
        state.retired = done if state.retired is None else state.retired | done

    def saturated(self, state: LogRegState) -> str | None:
        """With ``max_rows``: the sample is full and fitted, with an error estimate.

        The F1's and coefficients' errors are those of a sample of ``max_rows`` symbols;
        reading more swaps rows in and out of the sample but does not shrink them, so
        the probe stops reading and the pairs still open stay open, saying so.
        """
        if not self._full(state) or not state.checks:
            return None
        now = state.checks[-1]
        if now.n_records != state.n_records:
            return None  # the fit is not of the sample as it is now
        if halfway(state.checks) is None:
            return None  # no error estimate yet
        return (
            f"the probe's sample of max_rows={self.max_rows:,} symbols is full: reading "
            "more would not shrink its error (max_rows=None fits every symbol)"
        )

    def sampled(self, state: LogRegState) -> str | None:
        """With ``max_rows`` below the symbols read: the scores are the sample's.

        Reaching the end of the data then does not make a pair's score its full-data
        value; the engine marks it converged only where its error is within eps.
        """
        if self.max_rows is None or state.n_seen <= self.max_rows:
            return None
        return (
            f"the probe's scores are those of its sample of max_rows={self.max_rows:,} "
            f"of the {state.n_seen:,} symbols read (max_rows=None fits every symbol)"
        )

    def _full(self, state: LogRegState) -> bool:
        return self.max_rows is not None and len(state.X) >= self.max_rows

    def result(self, state: LogRegState, confidence: float = 0.95) -> MeasureResult:
        if len(state.X) == 0:
            return self._scores(state, None, None)
        last = state.checks[-1] if state.checks else None
        if last is None or last.n_records != state.n_records or not last.done.all():
            self._fit(state, self.max_iter)
        return self.peek(state, confidence)

    # -- internals --------------------------------------------------------------
    def _targets(self, state: LogRegState, Hm: torch.Tensor) -> torch.Tensor:
        cols = torch.as_tensor(state.out_hyp, device=Hm.device, dtype=torch.long)
        vals = Hm[:, cols]
        cls = torch.as_tensor(class_index(state.out_hyp), device=Hm.device)
        cat = torch.as_tensor(is_categorical(state.out_hyp), device=Hm.device)
        return torch.where(cat, (vals.round() == cls).float(), (vals > 0.5).float())

    def _design(self, state: LogRegState) -> torch.Tensor:
        return design(state)

    def _solve(self, state, Xs, W0, steps: int, cold: bool):
        """Newton steps on every (fold, output) column; ``cold`` starts from base rates."""
        problem = fold_problem(state, Xs, self.folds, self.C)
        W0 = initial_weights(problem) if cold else W0
        workers = torch.get_num_threads() if self.workers is None else self.workers
        fit = _column_pool.solve(problem, W0, steps, self.tol, self.hessian_rows, state.damping,
                                 workers)  # fmt: skip
        return fit, problem

    def _fit(self, state: LogRegState, steps: int) -> None:
        """Refit the hypotheses not retired on every row read, then checkpoint."""
        live = live_outputs(state)
        if live is None:
            self._checkpoint(state, steps)
            return
        sub, cols, hyps = restricted(state, live, self.folds)
        self._checkpoint(sub, steps)
        carry_back(state, sub, cols, hyps)

    def _checkpoint(self, state: LogRegState, steps: int) -> None:
        """Take up to ``steps`` Newton steps on every row read, then checkpoint the fit.

        A checkpoint whose fit stopped short of the tolerance (budget or a Stop) says so
        in ``done``: its scores are the fit so far and never count as converged.
        """
        if len(state.out_hyp) == 0:
            return
        Xs = self._design(state)
        fit, problem = self._solve(state, Xs, state.W, steps, state.damping is None)
        state.W, state.damping = fit.W, fit.mu
        k, n_out, n_h = self.folds, len(state.out_hyp), len(state.scorable)
        rows = torch.arange(len(Xs), device=Xs.device)
        # each row scored by the model of its held-out fold
        held = fit.Z.view(k, n_out, len(Xs))[state.fold, :, rows]
        pred = held > 0
        if state.defined is not None:  # an undefined row is no positive (its target is 0 too)
            pred = pred & state.defined
        group = record_groups(state.code, state.rec, self.groups)
        counts = confusion_by_group(pred, state.Y > 0.5, group, self.groups)
        f1, f1_se = f1_and_se(counts, state.out_hyp, n_h)
        delta = moved = None  # after a Stop: no record-group error (the run is partial)
        try:
            if not stop_requested():
                H = hessians(problem, torch.arange(fit.W.shape[1]), fit.Z,
                             self.hessian_rows, torch.Generator().manual_seed(1))  # fmt: skip
                S = group_gradients(Xs, fit.Z, problem.Y, problem.w_row, group, self.groups)
                if self.unit_score == "coef":
                    delta = solve_influence(H, S)
                # the F1's and the loadings' errors with the fit's own variability (the
                # F1's threshold flips rows): the active set's refit, the intercept free
                free = fit.W != 0
                free[0] = True
                moved = solve_influence(H, S, free)
                f1_se = np.fmax(f1_se, f1_refit_se(Xs, held, moved, state.fold, state.Y,
                                                   state.defined, group, self.groups,
                                                   state.out_hyp, n_h))  # fmt: skip
        except Stopped:
            delta = moved = None
        if self.unit_score == "loading":  # the error is the loading's own jackknife's
            try:
                load, load_se = refit_loadings(Xs, fit.W, moved, k, state.defined, group,
                                               self.groups)  # fmt: skip
            except Stopped:  # the fit held fixed: one pass, no refit per group
                load, load_se = refit_loadings(Xs, fit.W, None, k, state.defined, group,
                                               self.groups)  # fmt: skip
            coef, coef_ij = pick_per_unit(load, load_se, state.out_hyp, n_h)
            coef_se = np.zeros_like(coef)
        else:
            coef, coef_se, coef_ij = coef_and_se(fit.W, Xs.shape[1] - 1, k, state.out_hyp,
                                                 n_h, delta)  # fmt: skip
        done = per_hyp_all(~fit.open.view(k, n_out).any(0).cpu().numpy(), state, n_h)
        enough = class_records(state) >= self.min_class_records
        state.checks.append(Checkpoint(state.n_records, f1, f1_se, coef, coef_se, done, k,
                                       self.groups, coef_ij, per_hyp_all(enough, state, n_h)))

    def _scores(self, state, check, err, group_err=None) -> MeasureResult:
        return probe_scores(state, check, err, group_err, "logreg", self.kinds)


# callers (tests, benchmarks) import the record keys from the probe's module too
__all__ = ["LogReg", "LogRegState", "class_records", "record_codes", "record_groups"]
