"""The statistics probe users report (``dni_lab.probe.metrics``, ``Probe.report``): equal to
scikit-learn on the same arrays; intervals from resampling records, which contain the
estimate, shrink with more records and widen when a record's symbols are correlated."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import paren, random_records
from scipy.special import expit, logit
from sklearn.calibration import calibration_curve
from sklearn.metrics import f1_score, roc_auc_score, roc_curve
from test_probe_fit import planted_model

import dni_lab as dl
from dni_lab.probe import metrics


def scored(n: int, seed: int, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 0/1 labels and scores that separate them partly (rounded: many ties)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = rng.normal(size=n) + 1.2 * y
    return (np.round(s, 1) if ties else s), y


def records_data(n_records: int, per: int, seed: int, shared: float):
    """Scores and labels of ``n_records`` records of ``per`` symbols each; ``shared`` is the
    spread of an effect every symbol of a record shares (its score and its label rate)."""
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.normal(0, shared, n_records), per)
    y = (rng.random(n_records * per) < expit(u)).astype(np.int64)
    s = u + 0.8 * y + rng.normal(size=n_records * per)
    return s, y, np.repeat(np.arange(n_records), per)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_auroc_is_scikit_learns(seed, ties):
    s, y = scored(3000, seed, ties)
    assert metrics.auroc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-9)
    w = np.random.default_rng(seed).integers(0, 4, len(y)).astype(float)
    assert metrics.auroc(s, y, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-9)
    assert np.isnan(metrics.auroc(s, np.ones_like(y)))  # one class: undefined


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [False, True])
def test_recall_at_fpr_is_read_off_scikit_learns_roc_curve(seed, ties):
    s, y = scored(5000, seed, ties)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    for f in (0.001, 0.01, 0.1, 0.5):
        assert metrics.recall_at_fpr(s, y, f) == pytest.approx(tpr[fpr <= f].max(), abs=1e-12)


def test_f1_at_a_threshold_is_scikit_learns():
    s, y = scored(2000, 0, ties=True)
    p = expit(s)
    for t in (0.2, 0.5, float(p[7]), 0.9):
        assert metrics.f1_at_threshold(p, y, t) == pytest.approx(f1_score(y, p >= t), abs=1e-12)


def test_reliability_table_and_calibration_error():
    rng = np.random.default_rng(0)
    p = rng.random(20_000)
    y = (rng.random(p.size) < p).astype(np.int64)  # calibrated by construction
    wide = metrics.reliability_table(p, y, n_bins=10, bins="equal_width")
    assert wide.columns == ["bin", "mean_predicted", "observed_rate", "count"]
    true, pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    np.testing.assert_allclose(wide["observed_rate"], true, atol=1e-12)
    np.testing.assert_allclose(wide["mean_predicted"], pred, atol=1e-12)
    mass = metrics.reliability_table(p, y, n_bins=7)  # equal mass: counts differ by one at most
    assert mass.height == 7 and mass["count"].max() - mass["count"].min() <= 1
    for bins in metrics.BINS:
        t = metrics.reliability_table(p, y, 10, bins)
        ece = (t["count"] / t["count"].sum()) * (t["observed_rate"] - t["mean_predicted"]).abs()
        assert metrics.expected_calibration_error(p, y, 10, bins) == pytest.approx(ece.sum())
        assert metrics.expected_calibration_error(p, y, 10, bins) < 0.02
    # overconfident: probabilities pushed away from 1/2 are miscalibrated
    sharp = expit(3 * logit(np.clip(p, 1e-6, 1 - 1e-6)))
    assert metrics.expected_calibration_error(sharp, y) > 0.1


def test_intervals_contain_the_estimate_and_shrink_with_more_records():
    small = metrics.summary(*records_data(100, 10, 0, 0.5), threshold=0.5, n_boot=400)
    large = metrics.summary(*records_data(1600, 10, 0, 0.5), threshold=0.5, n_boot=400)
    assert small["name"].to_list() == [
        "auroc", "recall_at_fpr_0.01", "recall_at_fpr_0.001", "ece_equal_mass_10",
        "f1_at_threshold",
    ]  # fmt: skip
    for frame in (small, large):
        assert (frame["lo"] <= frame["value"]).all() and (frame["value"] <= frame["hi"]).all()
        assert (frame["se"] > 0).all()
    width = lambda f: (f["hi"] - f["lo"]).to_numpy()  # noqa: E731
    assert (width(large) < width(small)).all()
    # sixteen times the records: a quarter of the width, roughly (1/sqrt(16))
    auroc = [width(f)[0] for f in (small, large)]
    assert 0.15 < auroc[1] / auroc[0] < 0.4


def correlated(n_records: int, per: int, seed: int, within: bool):
    """Records whose symbols share their label and most of their score (``within``), or
    the same number of symbols drawn independently."""
    rng = np.random.default_rng(seed)
    n = n_records * per
    y = rng.integers(0, 2, n_records if within else n)
    u = rng.normal(size=n_records if within else n)
    if within:
        y, u = np.repeat(y, per), np.repeat(u, per)
    return y + 1.5 * u + 0.3 * rng.normal(size=n), y, np.repeat(np.arange(n_records), per)


def test_resampling_records_is_not_resampling_symbols():
    s, y, rec = correlated(150, 20, 1, within=True)
    stat = lambda w: metrics.auroc(s, y, w)  # noqa: E731
    by_record = metrics.bootstrap(stat, rec, 400, seed=0)
    by_symbol = metrics.bootstrap(stat, np.arange(len(y)), 400, seed=0)
    assert by_record[0] == by_symbol[0]  # one estimate, two intervals
    w_rec, w_sym = by_record[2] - by_record[1], by_symbol[2] - by_symbol[1]
    # 20 symbols that move together are one observation, not 20: about sqrt(20) times wider
    assert w_rec > 2.5 * w_sym
    # symbols that are independent: the two agree
    s, y, rec = correlated(150, 20, 1, within=False)
    stat = lambda w: metrics.auroc(s, y, w)  # noqa: E731
    a = metrics.bootstrap(stat, rec, 400, seed=0)
    b = metrics.bootstrap(stat, np.arange(len(y)), 400, seed=0)
    assert 0.6 < (a[2] - a[1]) / (b[2] - b[1]) < 1.5


def test_the_bootstrap_is_seeded():
    s, y, rec = records_data(80, 10, 2, 0.5)
    a = metrics.summary(s, y, rec, 0.5, n_boot=200, seed=3)
    assert a.equals(metrics.summary(s, y, rec, 0.5, n_boot=200, seed=3))
    assert not a.equals(metrics.summary(s, y, rec, 0.5, n_boot=200, seed=4))


@pytest.fixture(scope="module")
def fitted():
    model = planted_model()
    return model, dl.Probe("lstm", folds=None).fit(model, random_records(150), paren)


def test_probe_report_on_held_out_records(fitted):
    model, probe = fitted
    test = random_records(80, seed=7)
    rep = probe.report(model, test, paren, n_boot=200)
    assert rep.columns == ["name", "value", "lo", "hi", "se"]
    row = dict(zip(rep["name"], rep["value"], strict=True))
    assert row["auroc"] == pytest.approx(probe.score(model, test, paren), abs=1e-12)
    y = np.concatenate([[c in "()" for c in r] for r in test])
    assert row["f1_at_threshold"] == pytest.approx(f1_score(y, probe.predict(model, test)))
    z = probe.decision_function(model, test)
    fpr, tpr, _ = roc_curve(y, z, drop_intermediate=False)
    assert row["recall_at_fpr_0.01"] == pytest.approx(tpr[fpr <= 0.01].max())
    assert row["auroc"] > 0.95
    # labels instead of the hypothesis: the same numbers
    labels = [[float(c in "()") for c in r] for r in test]
    assert rep.equals(probe.report(model, test, labels=labels, n_boot=200))
    table = probe.reliability(model, test, paren, n_bins=5, bins="equal_width")
    assert isinstance(table, pl.DataFrame) and table["count"].sum() == len(y)
    wide = probe.report(model, test, paren, n_boot=50, fprs=(0.05,), bins="equal_width")
    assert wide["name"].to_list()[1:3] == ["recall_at_fpr_0.05", "ece_equal_width_10"]


def test_bad_arguments_are_named(fitted):
    model, probe = fitted
    test = random_records(20, seed=7)
    for f in (0, 1, 1.5, -0.1):
        with pytest.raises(dl.DNIError, match=rf"fpr={f!r}: pass a false-positive rate"):
            probe.report(model, test, paren, fprs=(f,))
    with pytest.raises(dl.DNIError, match="bins='quantile'"):
        probe.report(model, test, paren, bins="quantile")
    with pytest.raises(dl.DNIError, match="n_boot=0"):
        probe.report(model, test, paren, n_boot=0)
    with pytest.raises(dl.DNIError, match="exactly one of them"):
        probe.report(model, test)
    with pytest.raises(dl.DNIError, match="labels holds 2 entries for 20 records"):
        probe.report(model, test, labels=[0, 1])
    with pytest.raises(dl.DNIError, match="differ in length"):
        metrics.auroc(np.zeros(3), np.zeros(4))
