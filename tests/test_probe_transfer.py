"""``Probe.transfer``: the probe on another layer of its model or on another model of its
width, with the held-out AUROC at both taps, the drop and paired record intervals; the
transfer recorded in ``transfers_``; another width refused naming both widths."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records

import dni_lab as dl


@pytest.fixture(scope="module")
def lm() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture(scope="module")
def other() -> dl.Model:
    torch.manual_seed(1)  # the same architecture and width, other weights
    return dl.Model(CharLM(), encode=encode_chars, name="other")


@pytest.fixture
def probe(lm) -> dl.Probe:
    # fitted per test: transfer appends to transfers_, which a shared probe would carry over
    return dl.Probe("lstm", folds=None).fit(lm, random_records(120), paren)


TEST = random_records(60, seed=7)


def test_another_layer_reports_both_aurocs_and_the_drop(probe, lm):
    out = probe.transfer(lm, TEST, paren, layer="lstm.l0", n_boot=200)
    assert out.columns == ["name", "model", "layer", "value", "lo", "hi", "se"]
    assert out["name"].to_list() == ["auroc_original", "auroc_transfer", "auroc_drop"]
    assert out["layer"].to_list() == ["lstm", "lstm.l0", "lstm.l0"]
    assert out["model"].to_list() == ["toy", "toy", "toy"]
    orig, new, drop = out["value"].to_list()
    assert orig == pytest.approx(probe.score(lm, TEST, paren), abs=1e-12)
    assert drop == pytest.approx(orig - new, abs=1e-12)
    assert orig > 0.8  # the probe reads its own layer well...
    assert drop > 0.05  # ...and a layer it was not fitted on worse
    for row in out.iter_rows(named=True):
        assert row["lo"] <= row["value"] <= row["hi"] and row["se"] > 0
    # recorded beside load's transfers, with the layers it left and met
    (t,) = probe.transfers_
    assert t["from"]["layer"] == "lstm" and t["to"]["layer"] == "lstm.l0"
    assert t["to"]["weights_sha256"] == probe.model_sha256_
    assert t["via"] == "Probe.transfer" and t["records"] == len(TEST)
    assert t["auroc"]["drop"] == pytest.approx(drop)


def test_the_drop_interval_is_paired_over_records(probe, lm):
    """``lstm.l1`` reads the same values as ``lstm`` under another address: every replicate
    draws the same records at both taps, so the drop is zero in each, not a spread of the
    difference of two independent draws."""
    out = probe.transfer(lm, TEST, paren, layer="lstm.l1", n_boot=100, seed=3)
    orig, new, drop = out["value"].to_list()
    assert orig == pytest.approx(new, abs=1e-12) and drop == pytest.approx(0, abs=1e-12)
    assert out.row(2, named=True)["lo"] == pytest.approx(0, abs=1e-12)
    assert out.row(2, named=True)["hi"] == pytest.approx(0, abs=1e-12)
    assert out["lo"][0] < out["hi"][0]  # while each tap's own interval is not a point


def test_another_model_of_the_same_width(probe, lm, other):
    with pytest.raises(dl.DNIError, match="source="):
        probe.transfer(other, TEST, paren, n_boot=50)
    assert probe.transfers_ == []
    out = probe.transfer(other, TEST, paren, source=lm, n_boot=50)
    assert out["model"].to_list() == ["toy", "other", "other"]
    assert out["layer"].to_list() == ["lstm", "lstm", "lstm"]
    (t,) = probe.transfers_
    assert t["from"]["name"] == "toy" and t["to"]["name"] == "other"
    # as after load(allow_other_model=True): the recorded model is now accepted as is
    assert probe.apply(other, TEST[:3]).height > 0
    # a source that is not the probe's own model cannot stand for its tap
    with pytest.raises(dl.DNIError, match="the one the probe is bound to"):
        probe.transfer(lm, TEST, paren, source=other, n_boot=50)


def test_labels_instead_of_a_hypothesis(probe, lm):
    labels = [np.array(paren(r), dtype=float) for r in TEST]
    by_labels = probe.transfer(lm, TEST, labels=labels, layer="lstm.l0", n_boot=50)
    by_hyp = probe.transfer(lm, TEST, paren, layer="lstm.l0", n_boot=50)
    assert np.allclose(by_labels["value"].to_numpy(), by_hyp["value"].to_numpy())
    assert by_labels.equals(by_hyp)  # the same seed draws the same records


def test_another_width_is_refused_naming_both(probe, lm):
    with pytest.raises(dl.DNIError) as err:
        probe.transfer(lm, TEST, paren, layer="embed", n_boot=50)
    msg = str(err.value)
    assert "'embed'" in msg and "6 units" in msg and "weighs 12" in msg
    assert probe.transfers_ == []  # nothing recorded for a refused transfer


def test_bad_calls_are_refused(probe, lm):
    with pytest.raises(dl.DNIError, match="the probe's own tap"):
        probe.transfer(lm, TEST, paren, n_boot=50)
    with pytest.raises(dl.DNIError, match="exactly one"):
        probe.transfer(lm, TEST, layer="lstm.l0")
    with pytest.raises(dl.DNIError, match="n_boot"):
        probe.transfer(lm, TEST, paren, layer="lstm.l0", n_boot=0)
    with pytest.raises(dl.DNIError, match="not fitted"):
        dl.Probe("lstm").transfer(lm, TEST, paren, layer="lstm.l0")
    assert probe.transfers_ == []


def test_a_saved_probe_keeps_its_transfers(probe, lm, tmp_path):
    probe.transfer(lm, TEST, paren, layer="lstm.l0", n_boot=50)
    saved = probe.save(tmp_path / "p")
    side = json.loads(saved.with_suffix(".json").read_text())
    assert side["transfers"][0]["to"]["layer"] == "lstm.l0"
    back = dl.Probe.load(saved, model=lm)
    assert back.transfers_ == json.loads(json.dumps(probe.transfers_))
