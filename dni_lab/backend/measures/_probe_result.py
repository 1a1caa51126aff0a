"""A merged probe's result: its scores at a checkpoint and why a score is null."""

from __future__ import annotations

import numpy as np

from ._common import kind_reasons, new_reasons, set_reason
from ._probe_error import Checkpoint
from ._probe_rows import LogRegState
from .base import MeasureResult


def probe_scores(
    state: LogRegState,
    check: Checkpoint | None,
    err: np.ndarray | None,
    group_err: np.ndarray | None,
    name: str,
    kinds: tuple[str, ...],
    null_unit: str | None = None,
) -> MeasureResult:
    """A probe state's scores at ``check`` (None: not fitted yet), with the reason of
    every null: nothing read, a kind ``name`` cannot fit, a category fitted by its
    parent, a constant hypothesis, no fit yet, and (``null_unit``) a unit score the
    fit left null. ``state`` is ``logreg``'s or ``lda``'s (both keep their rows)."""
    n_units, n_h = state.X.shape[1], len(state.info)
    shape = (n_units, n_h)
    unit = check.coef if check is not None else np.full(shape, np.nan)
    group = np.broadcast_to(check.f1 if check is not None else np.full(n_h, np.nan), shape)
    reason = new_reasons(n_units, n_h)
    if len(state.X) == 0:
        set_reason(reason, True, "no symbols read")
    kind_reasons(reason, name, state.info, kinds)
    for j, i in enumerate(state.info):
        if i.parent is not None:
            why = f"{name} fits each category of {i.parent!r} itself: see its rows"
            set_reason(reason, (np.arange(n_h) == j)[None, :], why)
    if len(state.out_hyp) and len(state.X):
        some, always = _class_presence(state)
        const = np.zeros(n_h, dtype=bool)
        for j in np.unique(state.out_hyp):
            sel = state.out_hyp == j
            const[j] = not some[sel].any() or always[sel].any()  # nothing to probe
        set_reason(reason, const[None, :], "hypothesis is constant over the symbols read")
    if check is None and len(state.X):
        set_reason(reason, True, "no score yet")
    if null_unit is not None:
        set_reason(reason, np.isnan(unit), null_unit)
    ok = reason == None  # noqa: E711
    unit = np.where(ok, unit, np.nan)
    group = np.where(ok, group, np.nan)
    err = np.full(shape, np.nan) if err is None else err
    group_err = np.full(n_h, np.nan) if group_err is None else group_err
    und = np.zeros(n_h) if state.n_undef is None else state.n_undef.cpu().numpy()
    return MeasureResult(unit, group, err, reason, np.broadcast_to(group_err, shape),
                         n_undefined=und)  # fmt: skip


def _class_presence(state) -> tuple[np.ndarray, np.ndarray]:
    """Per output: some defined row is positive; every defined row is (and one exists).

    ``lda`` counts the records of each class as it reads (``seen``); otherwise from the
    rows kept, over the rows where each output is defined.
    """
    seen = getattr(state, "seen", None)
    if seen is not None:
        pos, neg = seen.cpu().numpy() > 0
        return pos, pos & ~neg
    if state.defined is None:
        frac = state.Y.float().mean(0).cpu().numpy()
    else:
        d = state.defined.float()
        frac = ((state.Y * d).sum(0) / d.sum(0).clamp_min(1)).cpu().numpy()
    return frac > 0, frac >= 1
