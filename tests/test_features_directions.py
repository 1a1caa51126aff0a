"""PCA and probe directions as feature sets."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.extraction.extract import Extractor, symbol_mask
from dni_lab.backend.measures.logreg import LogReg
from dni_lab.backend.measures.ridge import Ridge


@pytest.fixture
def lm():
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="m")


def hook_rows(model, records, hook="lstm"):
    mask = symbol_mask(model, records, torch.device("cpu"))
    out = Extractor(model, {hook: None}, "activation", torch.device("cpu"))(records, mask)
    return out[hook][mask].double().numpy()


def test_pca_matches_numpy_and_round_trips(lm, tmp_path):
    recs = random_records(80, seed=1)
    fs = F.pca(lm, recs, "lstm", n_components=12, block_size=16)
    X = hook_rows(lm, recs)
    vals, vecs = np.linalg.eigh(np.cov(X.T))
    top = vecs[:, ::-1][:, :3]
    W = fs.W_enc.detach().double().numpy()
    np.testing.assert_allclose(np.abs(W[:, :3].T @ top), np.eye(3), atol=1e-4)
    np.testing.assert_allclose(fs.explained_variance_ratio_[:3], vals[::-1][:3] / vals.sum(),
                               rtol=1e-4)  # fmt: skip
    x = torch.as_tensor(X[:20], dtype=torch.float32)
    torch.testing.assert_close(fs.decode(fs.encode(x)), x, atol=1e-4, rtol=1e-4)  # all 12 kept
    F.save(fs, tmp_path / "pca")
    back = dl.features.load(tmp_path / "pca")
    assert isinstance(back, F.Directions)
    torch.testing.assert_close(back.encode(x), fs.encode(x))
    f = dl.inspect(lm, [lambda r: [c == "(" for c in r]], ["corr"], recs, units=[fs], eps=None)
    assert set(f["layer"]) == {"lstm:pca12"} and f.height == 12


def test_ridge_direction_reproduces_the_probe(lm, records, hyps):
    ols = Ridge(alpha=0.0)
    frame = dl.inspect(lm, hyps, [ols], records, units=[("lstm", "*")], eps=None)
    dirs = F.from_probe(frame, lm, records)
    assert dirs.meta["latent_names"] == ["paren", "position"] and dirs.d_sae == 2
    scored = dl.inspect(lm, hyps, ["corr"], records, units=[dirs], eps=None)
    for j, hid in enumerate(["paren", "position"]):
        r = scored.filter((pl.col("unit") == j) & (pl.col("hid") == hid))["unit_score"][0]
        r2 = frame.filter(pl.col("hid") == hid)["group_score"][0]
        assert r**2 == pytest.approx(r2, abs=1e-4)  # OLS: corr(prediction, h)² = R²


def test_logreg_direction_is_its_logit(lm, records, hyps):
    coef = LogReg(unit_score="coef")
    frame = dl.inspect(lm, hyps[:1], [coef], records, units=[("lstm", "*")], eps=None)
    dirs = F.from_probe(frame, lm, records)
    X = hook_rows(lm, records)
    coef = frame.sort("unit")["unit_score"].fill_null(0.0).to_numpy()
    mu, sd = X.mean(0), X.std(0, ddof=1)
    logit = ((X - mu) / np.where(sd > 0, sd, 1.0)) @ np.where(sd > 0, coef, 0.0)
    z = dirs.encode(torch.as_tensor(X, dtype=torch.float32))[:, 0].double().numpy()
    np.testing.assert_allclose(z, logit, rtol=1e-4, atol=1e-4)
    mixed = pl.concat([frame, frame.with_columns(measure=pl.lit("ridge"))])
    with pytest.raises(dl.DNIError, match="one probe measure"):
        F.from_probe(mixed, lm, records)


def test_a_loading_frame_is_no_direction(lm, records, hyps):
    """The probe's default unit score is a loading: from_probe refuses it, naming the fix,
    and a frame without provenance must say what its rows hold."""
    frame = dl.inspect(lm, hyps[:1], ["logreg"], records, units=[("lstm", "*")], eps=None)
    with pytest.raises(dl.DNIError, match="unit_score='coef'"):
        F.from_probe(frame, lm, records)
    coef = dl.inspect(lm, hyps[:1], [LogReg(unit_score="coef")], records,
                      units=[("lstm", "*")], eps=None)  # fmt: skip
    bare = coef.filter(pl.col("unit") >= 0)  # a new frame: no provenance
    with pytest.raises(dl.DNIError, match="cannot tell"):
        F.from_probe(bare, lm, records)
    a = F.from_probe(bare, lm, records, unit_score="coef").W_enc
    torch.testing.assert_close(a, F.from_probe(coef, lm, records).W_enc)
