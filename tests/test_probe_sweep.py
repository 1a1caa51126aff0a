"""Probe.sweep: one fitted probe per layer, scored on held-out records, with its nulls
beside it and a chart of AUROC against depth."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import paren, random_records
from test_probe_fit import planted_model

import dni_lab as dl
from dni_lab.probe.sweep import COLUMNS

LAYERS = ["embed", "lstm"]


@pytest.fixture(scope="module")
def swept():
    model = planted_model()
    recs = random_records(80, seed=3)
    untrained = dl.verify.untrained_copy(model)
    sw = dl.Probe.sweep(model, recs, paren, layers=LAYERS, untrained=untrained, n_boot=100,
                        n_directions=3)  # fmt: skip
    return model, recs, sw


def test_one_fitted_probe_per_layer_and_a_row_each(swept):
    model, recs, sw = swept
    assert list(sw.probes) == LAYERS and sw.frame["layer"].to_list() == LAYERS
    assert dict(sw.frame.schema) == COLUMNS and sw.frame["depth"].to_list() == [0, 1]
    train = [r for i, r in enumerate(recs) if i % 4 != 3]
    held = [r for i, r in enumerate(recs) if i % 4 == 3]
    for layer, row in zip(LAYERS, sw.frame.iter_rows(named=True), strict=True):
        p = sw.probes[layer]
        assert p.layer == layer and 0 < p.threshold_ < 1
        same = dl.Probe(layer, folds=None).fit(model, train, paren)  # the probe it fitted
        np.testing.assert_allclose(p.coef_, same.coef_, atol=1e-10)
        assert row["auroc"] == pytest.approx(p.score(model, held, paren), abs=1e-12)
        assert row["lo"] <= row["auroc"] <= row["hi"]
        assert row["n_units"] == p.coef_.shape[1]
        assert row["selectivity"] == pytest.approx(row["auroc"] - row["control_auroc"])
        assert row["untrained_auroc"] is not None


def test_the_planted_concept_beats_its_random_directions(swept):
    _, _, sw = swept
    embed = sw.frame.row(0, named=True)
    assert embed["auroc"] > 0.99 and embed["random_max"] < embed["auroc"]
    assert sw.best().layer in LAYERS


def test_the_chart_plots_auroc_and_the_nulls_against_depth(swept):
    _, _, sw = swept
    spec = sw.chart().to_dict()
    text = str(spec)
    for name in ("probe", "control task", "random direction", "untrained model", "lstm"):
        assert name in text, name
    from dni_lab.widgets.plots import to_svg

    assert "<svg" in to_svg(sw.chart(title="paren"))


def test_bad_arguments_are_refused_before_any_fit():
    model = planted_model()
    recs = random_records(8)
    with pytest.raises(dl.DNIError, match="holdout=1"):
        dl.Probe.sweep(model, recs, paren, holdout=1)
    with pytest.raises(dl.DNIError, match="n_boot=0"):
        dl.Probe.sweep(model, recs, paren, n_boot=0)
    with pytest.raises(dl.DNIError, match="exactly one"):
        dl.Probe.sweep(model, recs)
    with pytest.raises(dl.DNIError, match="no layers"):
        dl.Probe.sweep(model, recs, paren, layers=[])
