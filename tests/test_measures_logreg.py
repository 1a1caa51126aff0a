"""logreg: merged L1 probe vs scikit-learn on the same folds, kinds, nulls, merge, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score

from dni_lab.backend.measures import _newton
from dni_lab.backend.measures._probe_error import confusion_by_group, f1_and_se, influence
from dni_lab.backend.measures.base import HypothesisInfo, stop_check
from dni_lab.backend.measures.logreg import LogReg, record_codes, record_groups

R, T, NU = 400, 20, 12


def planted(seed: int = 0, weights=(2.0, 1.0, 0.5, 0.0), with_weights: bool = False):
    """Units and binary hypotheses drawn from logistic models of decreasing strength."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, T + 1, R)
    mask = torch.as_tensor(np.arange(T)[None, :] < lengths[:, None])
    U = torch.as_tensor(rng.normal(size=(R, T, NU)), dtype=torch.float32)
    W = rng.normal(size=(NU, len(weights))) * np.asarray(weights)
    p = 1 / (1 + np.exp(-(U.numpy() @ W - 1.0)))
    H = torch.as_tensor((rng.random(p.shape) < p).astype(np.float32))
    U[~mask], H[~mask] = 99.0, 7.0  # padding garbage must be ignored
    return (U, H, mask, W) if with_weights else (U, H, mask)


def feed(m, U, H, mask, info, blocks=4):
    s = m.start(U.shape[2], H.shape[2], info=info)
    step = len(U) // blocks
    for b in range(blocks):
        sl = slice(b * step, (b + 1) * step)
        s = m.update(s, U[sl], H[sl], mask[sl])
    return s


def sklearn_f1(U, H, mask, j, C=1.0, folds=5):
    X, Y = U[mask].numpy(), H[mask].numpy()[:, j] > 0.5
    code = record_codes(H, mask).numpy()  # the probe's folds: by record content
    fold = (code[:, None].repeat(U.shape[1], 1)[mask.numpy()]) % folds
    Xs = (X - X.mean(0)) / X.std(0)
    pred = np.zeros(len(X), dtype=bool)
    for f in range(folds):
        tr = fold != f
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = LogisticRegression(l1_ratio=1.0, C=C, solver="liblinear").fit(Xs[tr], Y[tr])
        pred[~tr] = clf.predict(Xs[~tr])
    return f1_score(Y, pred)


def test_f1_matches_sklearn_per_hypothesis_on_same_folds():
    U, H, mask, W = planted(with_weights=True)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg()
    res = m.result(feed(m, U, H, mask, info))
    for j in range(4):
        ref = sklearn_f1(U, H, mask, j)
        assert abs(res.group_score[0, j] - ref) <= 0.02, (j, res.group_score[0, j], ref)
    assert res.group_score[0, 0] > 0.7 > res.group_score[0, 3]  # strong signal found, none not
    assert (res.group_score == res.group_score[0]).all()  # one group score per hypothesis
    # the unit with the largest planted weight has the largest coefficient (standardised
    # units have unit variance, so the coefficients estimate the planted weights)
    for j in range(2):
        assert np.abs(res.unit_score[:, j]).argmax() == np.abs(W[:, j]).argmax(), j
    assert np.isfinite(res.unit_score).all()


def test_categorical_one_vs_rest_and_continuous_null():
    U, H, mask = planted(1, weights=(2.0, 1.0))
    cat = (H[..., 0] + 2 * H[..., 1])[..., None]  # 4 classes
    cont = U[..., :1] * 0.3  # continuous: not for logreg
    Hc = torch.cat([cat, cont], dim=2)
    info = [HypothesisInfo("cls", "categorical", 4), HypothesisInfo("x", "continuous")]
    m = LogReg()
    res = m.result(feed(m, U, Hc, mask, info))
    assert 0.3 < res.group_score[0, 0] <= 1.0
    assert np.isnan(res.group_score[:, 1]).all()
    assert "logreg cannot score continuous" in res.reason[0, 1]


def test_constant_hypothesis_is_null_with_reason():
    U, H, mask = planted(2)
    H[..., 1] = 0.0
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg()
    res = m.result(feed(m, U, H, mask, info))
    assert np.isnan(res.group_score[:, 1]).all()
    assert res.reason[0, 1] == "hypothesis is constant over the symbols read"


def test_merge_matches_union():
    U, H, mask = planted(3)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg()
    whole = m.result(feed(m, U, H, mask, info, blocks=2))
    a = feed(m, U[:200], H[:200], mask[:200], info, blocks=1)
    b = feed(m, U[200:], H[200:], mask[200:], info, blocks=1)
    merged = m.result(m.merge(a, b))
    np.testing.assert_allclose(merged.group_score, whole.group_score, atol=0.01)
    np.testing.assert_allclose(merged.unit_score, whole.unit_score, atol=0.02)


def test_error_waits_for_a_converged_fit_at_half_the_records_then_bounds_the_full_fit():
    U, H, mask = planted(4)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg(checkpoint_growth=1.0)  # a checkpoint every block
    s = m.start(NU, 4, info=info)
    errs, peeks = [], []
    for b in range(8):
        sl = slice(b * 50, (b + 1) * 50)
        s = m.update(s, U[sl], H[sl], mask[sl])
        peeks.append(m.peek(s))
        errs.append(peeks[-1].err[:, :3])
    assert np.isnan(errs[0]).all()  # no checkpoint at half the records yet
    assert np.isnan(errs[1]).all()  # one checkpoint with an error: not yet two
    assert np.isfinite(errs[3]).all() and np.isfinite(errs[-1]).all()
    assert np.nanmax(errs[-1]) < np.nanmax(errs[3])  # the error shrinks as records come
    # the scores at half the records lie within their error of the fit on every record
    # (other records: the gap is real, and an error a third as wide fails this)
    half, full = peeks[3], m.result(s)
    gap = np.abs(half.unit_score[:, :3] - full.unit_score[:, :3])
    f1_gap = np.abs(half.group_score[0, :3] - full.group_score[0, :3])
    assert gap.min() > 0 and np.isfinite(errs[3]).all()
    assert np.mean(gap <= errs[3]) >= 0.9, (gap - errs[3]).max()
    assert (f1_gap <= errs[3].min(0)).all(), (f1_gap, errs[3].min(0))


def test_a_fit_short_of_its_tolerance_never_counts_as_converged():
    U, H, mask = planted(4)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg(steps_per_block=1, checkpoint_growth=1.0)  # one Newton step: never at tol
    s = m.start(NU, 4, info=info)
    for b in range(8):
        sl = slice(b * 50, (b + 1) * 50)
        s = m.update(s, U[sl], H[sl], mask[sl])
        assert np.isnan(m.peek(s).err).all()


def test_folds_follow_the_records_not_their_order():
    U, H, mask = planted(6)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg()
    a = m.result(feed(m, U, H, mask, info, blocks=4))
    perm = torch.as_tensor(np.random.default_rng(0).permutation(R))
    b = m.result(feed(m, U[perm], H[perm], mask[perm], info, blocks=4))
    np.testing.assert_allclose(a.group_score, b.group_score, atol=1e-3)


def test_jackknife_groups_split_copies_of_a_record_whatever_the_order_or_the_merge():
    rng = np.random.default_rng(0)
    code = torch.as_tensor(np.r_[np.full(300, 7), rng.integers(0, 10**6, 200)])
    code = code[torch.as_tensor(rng.permutation(500))]
    rec = torch.arange(500)
    g = record_groups(code, rec, 20)
    copies = g[code == 7]
    assert len(copies.unique()) == 20  # 300 copies of one record spread over every group
    assert np.bincount(copies.numpy(), minlength=20).max() <= 30  # ... about evenly
    # the groups' contents: the same (content, group) pairs in any reading order
    perm = torch.as_tensor(rng.permutation(500))
    g2 = record_groups(code[perm], rec, 20)
    pairs = lambda c, gg: sorted(zip(c.tolist(), gg.tolist(), strict=True))  # noqa: E731
    assert pairs(code, g) == pairs(code[perm], g2)
    # a record's symbols stay together: rows of one record share its group
    rows = torch.repeat_interleave(rec, 3)
    assert (record_groups(code.repeat_interleave(3), rows, 20) == g.repeat_interleave(3)).all()


def test_a_record_read_many_times_does_not_hold_the_f1_error_up():
    """One record repeated in 40% of the data (as a SQL workload repeats its commonest
    window): the F1's error shrinks like an error of independent records; grouped by
    content, as before, the copies formed one group and held it several times higher."""
    U, H, mask = planted(8)
    idx = torch.arange(R)
    copies = idx[torch.as_tensor(np.random.default_rng(1).random(R) < 0.4)]
    pick = idx.clone()
    pick[copies] = int(copies[0])
    U, H, mask = U[pick], H[pick], mask[pick]
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    m = LogReg()
    s = feed(m, U, H, mask, info, blocks=2)
    m.result(s)
    now = s.checks[-1]
    by_content = (s.code // m.folds) % m.groups  # the old grouping, for comparison
    rows = torch.arange(len(s.X))
    Z = _newton.logits(m._design(s), s.W).view(m.folds, -1, len(s.X))
    pred = Z[s.fold, :, rows] > 0
    _, se_content = f1_and_se(confusion_by_group(pred, s.Y > 0.5, by_content, m.groups),
                              s.out_hyp, 4)  # fmt: skip
    assert (now.f1_se[:2] < 0.5 * se_content[:2]).all(), (
        now.f1_se, se_content)


def test_max_rows_keeps_a_bounded_uniform_sample():
    U, H, mask = planted(5)
    U[..., 0] = torch.arange(R, dtype=torch.float32)[:, None]  # unit 0 carries the record
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(4)]
    rows = 1000
    m = LogReg(max_rows=rows)
    s = feed(m, U, H, mask, info)
    assert len(s.X) == rows
    # every quarter of the records keeps its share of the rows (a uniform sample, not
    # the first or last rows read): expected share per quarter, +- 5 points
    rec = s.X[:, 0].numpy().astype(int)
    per_row = mask.sum(1).numpy()
    share = [per_row[q * 100 : (q + 1) * 100].sum() / per_row.sum() for q in range(4)]
    kept = np.bincount(rec // 100, minlength=4) / rows
    np.testing.assert_allclose(kept, share, atol=0.05)
    counts = np.bincount(s.fold.numpy(), minlength=5)
    assert counts.min() > rows / 5 * 0.6  # folds stay balanced in the sample
    assert len(feed(LogReg(), U, H, mask, info).X) == int(mask.sum())  # default: every row


def test_a_stop_keeps_the_blocks_data_and_skips_the_fit():
    U, H, mask = planted(seed=3)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(H.shape[2])]
    m = LogReg()
    s = m.update(m.start(NU, H.shape[2], info=info), U[:200], H[:200], mask[:200])
    W, rows, checks = s.W.clone(), len(s.X), list(s.checks)
    with stop_check(lambda: True):  # what the engine sets once Stop is pressed
        s = m.update(s, U[200:], H[200:], mask[200:])
    assert s.n_records == R and len(s.X) > rows  # the block's data is folded in
    assert torch.equal(s.W, W) and s.checks == checks  # no Newton step, no stale F1
    # the fit it skipped happens on the next update or the final result
    assert np.isfinite(m.result(s).group_score).all()


def test_a_stop_inside_a_newton_step_ends_the_fit_at_the_next_check(monkeypatch):
    U, H, mask = planted(seed=4)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(H.shape[2])]
    m = LogReg(max_iter=50, tol=0.0)  # would take every one of its 50 steps
    s = feed(m, U, H, mask, info, blocks=2)
    calls, stop = {"n": 0}, {"at": None}
    real = _newton.objective

    def objective(*args, **kwargs):  # the Stop arrives during the third evaluation
        calls["n"] += 1
        if calls["n"] == 3:
            stop["at"] = calls["n"]
        return real(*args, **kwargs)

    monkeypatch.setattr(_newton, "objective", objective)
    with stop_check(lambda: stop["at"] is not None):
        res = m.result(s)
    assert stop["at"] == 3 and calls["n"] <= 4  # at most the step's own trial point more
    assert np.isfinite(res.unit_score).all()  # the fit so far, not garbage


def test_a_stop_during_the_hessians_or_the_step_solves_ends_the_fit_there(monkeypatch):
    """The longest stretches of a wide fit: the Hessians (fold by fold) and the step's
    solves (round by round); a Stop in them ends the fit before the step is evaluated,
    and the checkpoint skips its record-group error pass (bench_stop: max 0.40 s, was
    1.55 s, on the demo's 191 hypotheses)."""
    from dni_lab.backend.measures import logreg as logreg_mod

    U, H, mask = planted(seed=4)
    info = [HypothesisInfo(f"h{j}", "binary") for j in range(H.shape[2])]
    stop, seen = {"on": False}, {"objective": 0, "error_pass": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            seen[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for where in ("hessians", "_face_step"):
        m = LogReg(max_iter=50, tol=0.0)
        s = feed(m, U, H, mask, info, blocks=2)
        stop["on"], seen["objective"], seen["error_pass"] = False, 0, 0

        real = getattr(_newton, where)

        def pressed(*args, _real=real, **kwargs):  # Stop pressed as this part starts
            stop["on"] = True
            return _real(*args, **kwargs)

        monkeypatch.setattr(_newton, where, pressed)
        monkeypatch.setattr(_newton, "objective", counted("objective", _newton.objective))
        # the record-group error pass starts with the groups' gradients
        monkeypatch.setattr(logreg_mod, "group_gradients",
                            counted("error_pass", logreg_mod.group_gradients))  # fmt: skip
        with stop_check(lambda: stop["on"]):
            res = m.result(s)
        monkeypatch.undo()
        assert stop["on"], where
        assert seen["objective"] <= 1, (where, seen)  # the start point's, no trial point
        assert seen["error_pass"] == 0, (where, seen)
        assert np.isfinite(res.unit_score).all(), where  # the fit so far
    # inside them: the Hessians end at the next fold ...
    m = LogReg(max_iter=1, tol=0.0)
    s = feed(m, U, H, mask, info, blocks=2)
    _, problem = m._solve(s, m._design(s), s.W, 0, True)
    Z = _newton.logits(problem.X, s.W)
    with stop_check(lambda: True), pytest.raises(_newton.Stopped):
        _newton.hessians(problem, torch.arange(s.W.shape[1]), Z, 64, torch.Generator())
    # ... as does the checkpoint's record-group error pass
    Hs = _newton.hessians(problem, torch.arange(s.W.shape[1]), Z, 64, torch.Generator())
    with stop_check(lambda: True), pytest.raises(_newton.Stopped):
        influence(problem.X, s.W, Z, problem.Y, problem.w_row, Hs,
                  record_groups(s.code, s.rec, m.groups), m.groups)  # fmt: skip
    # ... and the step's solves after their first round: every slope of this step crosses
    # zero, so without a Stop a second round solves again with them pinned
    d, c = 5, 3
    args = (torch.eye(d).expand(c, d, d).clone(), torch.full((d, c), 10.0),
            torch.full((d, c), 0.01), torch.ones(d, c, dtype=torch.bool), torch.ones(d, c))
    rounds = {"n": 0}
    real_chol = torch.linalg.cholesky_ex

    def chol(*a, **k):
        rounds["n"] += 1
        return real_chol(*a, **k)

    monkeypatch.setattr(torch.linalg, "cholesky_ex", chol)
    _newton._face_step(*args)
    assert rounds["n"] >= 2
    rounds["n"] = 0
    with stop_check(lambda: True):
        _newton._face_step(*args)
    assert rounds["n"] == 1


def test_plan_spaces_checkpoints_by_the_open_groups_error():
    """A fit that cannot settle an open group is skipped: checkpoints wait for the records
    where the largest open group error would reach eps, within [growth, max_growth]."""
    U, H, mask = planted(seed=3)
    info = [HypothesisInfo(str(j), "binary") for j in range(H.shape[2])]
    m = LogReg(checkpoint_growth=1.5, max_growth=4.0)
    s = m.start(NU, H.shape[2], info=info)
    step = 25
    s = m.update(s, U[:step], H[:step], mask[:step])
    assert [c.n_records for c in s.checks] == [25]
    res = m.peek(s)
    open_ = np.ones(res.unit_score.shape, dtype=bool)
    err = np.full(H.shape[2], 0.2)
    m.plan(s, _with_group_err(res, err), 0.05, open_)
    assert s.growth == 4.0  # (0.2 / 0.05)**2 = 16, capped
    for b in range(1, 5):  # 50 and 75 records: below 4 x 25, no fit; 100: a fit; 125: none
        s = m.update(s, U[b * step : (b + 1) * step], H[b * step : (b + 1) * step],
                     mask[b * step : (b + 1) * step])  # fmt: skip
    assert [c.n_records for c in s.checks] == [25, 100]
    m.plan(s, _with_group_err(m.peek(s), np.full(H.shape[2], 0.06)), 0.05, open_)
    assert abs(s.growth - 1.5) < 1e-9  # (0.06 / 0.05)**2 = 1.44: the base growth
    m.plan(s, _with_group_err(m.peek(s), np.full(H.shape[2], np.nan)), 0.05, open_)
    assert s.growth == 1.5  # no error yet: the base growth
    settled = np.zeros_like(open_)
    s.growth = 3.0
    m.plan(s, _with_group_err(m.peek(s), np.full(H.shape[2], 9.0)), 0.05, settled)
    assert s.growth == 3.0  # nothing open: nothing to plan


def _with_group_err(res, err):
    import dataclasses

    return dataclasses.replace(res, group_err=np.broadcast_to(err, res.unit_score.shape))
