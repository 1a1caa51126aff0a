"""``Probe.save`` / ``Probe.load``: safetensors + a JSON sidecar bound to the model; a fresh
process applies the loaded probe exactly; other weights and altered files are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records

import dni_lab as dl
from dni_lab.backend.engine.provenance import weights_sha256

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def lm() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy")


@pytest.fixture(scope="module")
def probe(lm) -> dl.Probe:
    return dl.Probe("lstm", folds=3).fit(lm, random_records(120), paren)


@pytest.fixture
def saved(probe, tmp_path) -> Path:
    return probe.save(tmp_path / "paren")


def other_model() -> dl.Model:
    torch.manual_seed(1)  # the same architecture and width, other weights
    return dl.Model(CharLM(), encode=encode_chars, name="other")


def test_the_files_hold_what_applying_needs(probe, saved, lm):
    assert saved.name == "paren.safetensors"
    side = json.loads(saved.with_suffix(".json").read_text())
    assert side["format"] == "dni_lab.probe"
    assert side["model"] == {"name": "toy", "weights_sha256": weights_sha256(lm.module)}
    assert side["layer"] == "lstm" and side["address"] == probe.address_
    assert side["width"] == 12 and side["symbols"] == "symbol"
    assert side["threshold"] == probe.threshold_
    assert side["training"]["records"] == 120
    assert len(side["training"]["data_sha256"]) == 64
    assert side["training"]["hypothesis"]["name"] == "paren"
    assert side["versions"]["dni_lab"] == dl.__version__
    assert side["params"]["C"] == 1.0 and side["params"]["penalty"] == "l2"
    # plain tensors, no pickle: the safetensors header is JSON naming float64/int64 tensors
    import safetensors.torch as st

    tensors = st.load_file(str(saved))
    assert sorted(tensors) == ["coef", "intercept", "mean", "scale", "units"]
    assert tensors["coef"].dtype == torch.float64


def test_a_fresh_process_applies_it_exactly(probe, saved, lm, tmp_path):
    records = random_records(20, seed=5)
    here = probe.predict_proba(lm, records)
    out = tmp_path / "proba.npy"
    script = f"""
import sys, torch
sys.path.insert(0, {str(TESTS)!r})
torch.set_num_threads(1)  # as the tests' fixture runs
import numpy as np
from conftest import CharLM, encode_chars, random_records
import dni_lab as dl
torch.manual_seed(0)
model = dl.Model(CharLM(), encode=encode_chars, name="toy")
probe = dl.Probe.load({str(saved)!r}, model=model)
np.save({str(out)!r}, probe.predict_proba(model, random_records(20, seed=5)), allow_pickle=False)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(out, allow_pickle=False), here)


def test_loaded_in_process_it_is_the_same_probe(probe, saved, lm):
    back = dl.Probe.load(saved, model=lm)
    for k in ("coef_", "intercept_", "mean_", "scale_", "units_"):
        np.testing.assert_array_equal(getattr(back, k), getattr(probe, k))
    assert back.get_params() == {**probe.get_params(), "device": str(probe.device)}
    assert back.threshold_ == probe.threshold_ and back.cv_auroc_ == probe.cv_auroc_
    assert back.transfers_ == []
    assert dl.Probe.load(saved.with_suffix(".json"), model=lm).threshold_ == probe.threshold_


def test_other_weights_are_refused(saved):
    with pytest.raises(dl.DNIError, match=r"paren\.json binds the probe to model 'toy'.*"
                                          r"allow_other_model=True"):  # fmt: skip
        dl.Probe.load(saved, model=other_model())


def test_allow_other_model_records_the_transfer(probe, saved, tmp_path):
    other = other_model()
    moved = dl.Probe.load(saved, model=other, allow_other_model=True)
    (t,) = moved.transfers_
    assert t["from"]["name"] == "toy" and t["to"]["name"] == "other"
    assert t["to"]["weights_sha256"] == weights_sha256(other.module)
    assert moved.model_sha256_ == probe.model_sha256_  # still says where it was fitted
    records = random_records(10, seed=3)
    assert moved.apply(other, records).height == sum(len(r) for r in records)
    again = dl.Probe.load(moved.save(tmp_path / "moved"), model=other, allow_other_model=True)
    assert len(again.transfers_) == 2  # the first transfer is kept in the file


def test_a_changed_byte_is_refused(saved, lm):
    blob = bytearray(saved.read_bytes())
    blob[-3] ^= 0x01  # one bit of the last coefficient bytes' region
    saved.write_bytes(bytes(blob))
    with pytest.raises(dl.DNIError, match=r"paren\.safetensors was altered since it was saved"):
        dl.Probe.load(saved, model=lm)
    # allowing another model does not allow altered weights
    with pytest.raises(dl.DNIError, match="was altered"):
        dl.Probe.load(saved, model=lm, allow_other_model=True)


def test_missing_or_broken_files_are_named(saved, lm):
    side = saved.with_suffix(".json")
    text = side.read_text()
    side.write_text(text[: len(text) // 2])
    with pytest.raises(dl.DNIError, match=r"paren\.json is not valid JSON"):
        dl.Probe.load(saved, model=lm)
    side.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(dl.DNIError, match="not a dni_lab probe sidecar"):
        dl.Probe.load(saved, model=lm)
    side.unlink()
    with pytest.raises(dl.DNIError, match=r"no sidecar .*paren\.json"):
        dl.Probe.load(saved, model=lm)
    with pytest.raises(dl.DNIError, match="not fitted"):
        dl.Probe("lstm").save(saved)
