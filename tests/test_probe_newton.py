"""The L2 probe's Newton solver (``dni_lab.probe.newton``): scikit-learn's optimum, float64's
precision from float32 steps, warm starts, standardisation without copies, clear warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

import dni_lab as dl
from dni_lab.probe import newton


def problem(n=3000, d=12, seed=0, shift=0.0, spread=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * spread * rng.uniform(0.2, 3.0, size=d) + shift
    X[:, 1] = 0.7 * X[:, 0] + 0.3 * X[:, 1]  # correlated units: a harder Hessian
    w = rng.normal(size=d) / spread
    y = (X @ w - (X @ w).mean() + rng.logistic(size=n) > 0.5).astype(np.float64)
    return X.astype(np.float32), y


def sklearn_fit(X, y, C):
    Xs = (X.astype(np.float64) - X.astype(np.float64).mean(0)) / X.astype(np.float64).std(0)
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(Xs, y)
    return sk.coef_[0], float(sk.intercept_[0])


@pytest.mark.parametrize(("C", "shift"), [(1.0, 0.0), (0.01, 0.0), (100.0, 0.0), (1.0, 50.0)])
def test_it_reaches_scikit_learns_optimum_in_float64(C, shift):
    X, y = problem(shift=shift)
    rows = newton.standardise(torch.from_numpy(X))
    coef, b, steps, ok = newton.newton_l2(rows, torch.from_numpy(y), C, 1e-10, 100)
    ref_coef, ref_b = sklearn_fit(X, y, C)
    assert ok and steps < 30  # Newton: a handful of steps, not L-BFGS's hundred
    np.testing.assert_allclose(coef, ref_coef, atol=2e-7 * max(1.0, np.abs(ref_coef).max()))
    assert b == pytest.approx(ref_b, abs=2e-7 * max(1.0, abs(ref_b)))


def test_the_gradient_it_stops_on_is_float64s():
    X, y = problem(n=5000, d=20, seed=3)
    rows = newton.standardise(torch.from_numpy(X))
    newton.TRACE = []
    try:
        newton.newton_l2(rows, torch.from_numpy(y), 1.0, 1e-10, 100)
        trace = [g for g in newton.TRACE if not isinstance(g, str)]
    finally:
        newton.TRACE = None
    assert trace[-1] <= 1e-10  # below float32's rounding of the gradient (~1e-7)
    assert max(trace[-3:]) < trace[0]


def test_a_warm_start_lands_on_the_same_optimum_in_fewer_steps():
    X, y = problem(seed=5)
    rows = newton.standardise(torch.from_numpy(X))
    yt = torch.from_numpy(y)
    coef, b, cold, _ = newton.newton_l2(rows, yt, 1.0, 1e-10, 100)
    coef2, _, warm, ok = newton.newton_l2(rows, yt, 1.0, 1e-10, 100, start=(coef * 1.01, b))
    assert ok and warm < cold
    np.testing.assert_allclose(coef2, coef, atol=1e-8)


def test_standardise_is_numpys_and_leaves_the_rows_alone():
    X, _ = problem(shift=1e3, spread=1e-2)
    X[:, 4] = 7.0  # a constant unit: scale 1
    for rows_in in (torch.from_numpy(X), torch.from_numpy(X.astype(np.float64))):
        before = rows_in.clone()
        rows = newton.standardise(rows_in)
        assert torch.equal(rows_in, before)
        X64 = X.astype(np.float64)
        np.testing.assert_allclose(rows.mean.numpy(), X64.mean(0), rtol=1e-12)
        sd = np.where(X64.std(0) > 0, X64.std(0), 1.0)
        np.testing.assert_allclose(rows.scale.numpy(), sd, rtol=1e-7)
        assert rows.scale[4] == 1.0 and rows.Z.dtype == torch.float32
        np.testing.assert_allclose(rows.Z.numpy(), (X64 - X64.mean(0)) / sd, atol=1e-5)


def test_logits_on_raw_rows_are_the_standardised_formula():
    X, _ = problem(shift=3.0)
    rng = np.random.default_rng(1)
    mean, scale = X.mean(0).astype(np.float64), X.std(0).astype(np.float64)
    coef = rng.normal(size=X.shape[1])
    got = newton.logits(torch.from_numpy(X), mean, scale, coef, 0.25)
    want = ((X.astype(np.float64) - mean) / scale) @ coef + 0.25
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_a_budget_too_small_warns_and_names_the_fix():
    X, y = problem()
    probe = dl.Probe("x", folds=None, max_iter=1, tol=1e-12)
    with pytest.warns(RuntimeWarning, match="max_iter=1"):
        probe._learn(torch.from_numpy(X), y)


def test_separable_rows_converge_without_warning():
    X, _ = problem(n=800, d=4)
    y = (X[:, 0] > np.median(X[:, 0])).astype(np.float64)  # separable: L2 keeps it finite
    probe = dl.Probe("x", folds=None, C=10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        probe._learn(torch.from_numpy(X), y)
    assert np.isfinite(probe.coef_).all() and probe.coef_[0, 0] > 1


def test_out_of_fold_auroc_keeps_the_full_fit():
    X, y = problem(n=2000, seed=2)
    record = np.arange(len(y)) // 20
    probe = dl.Probe("x", folds=5)
    probe._learn(torch.from_numpy(X), y)
    full = {k: getattr(probe, k).copy() for k in ("coef_", "intercept_", "mean_", "scale_")}
    auc = probe._cv_auroc(torch.from_numpy(X), y, record)
    assert 0.6 < auc < 1.0
    for k, v in full.items():
        np.testing.assert_array_equal(getattr(probe, k), v)
    # a fold's warm-started fit is the fit from scratch on the same rows
    held = record % 5 == 0
    cold = dl.Probe("x", folds=None, tol=1e-11)
    cold._learn(torch.from_numpy(X[~held]), y[~held])
    start = newton.raw_slopes(
        torch.from_numpy(probe.mean_), torch.from_numpy(probe.scale_),
        torch.from_numpy(probe.coef_[0].copy()), float(probe.intercept_[0]),
    )  # fmt: skip
    warm = dl.Probe("x", folds=None, tol=1e-11)
    warm._learn(torch.from_numpy(X[~held]), y[~held], start)
    np.testing.assert_allclose(warm.coef_, cold.coef_, atol=1e-8)


def test_a_start_near_the_optimum_polishes_with_a_hessian_of_its_own():
    # the float32 gradient is already within reach, the float64 one is not: the polishing
    # steps need a Hessian the float32 steps never made
    X, y = problem(seed=7)
    rows = newton.standardise(torch.from_numpy(X))
    yt = torch.from_numpy(y)
    coef, b, _, _ = newton.newton_l2(rows, yt, 1.0, 1e-12, 100)
    newton.TRACE = []
    try:
        got, _, steps, ok = newton.newton_l2(rows, yt, 1.0, 1e-10, 100, (coef + 2e-6, b))
        trace = list(newton.TRACE)
    finally:
        newton.TRACE = None
    assert ok and steps <= 5 and trace.count("H") == 1
    np.testing.assert_allclose(got, coef, atol=1e-8)
