"""dl.features.train_sae and evaluate: a TopK SAE trained on streamed activations."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from feature_sets import identity_set, tiny_gpt2

import dni_lab as dl
from dni_lab import features as F

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt():
    return tiny_gpt2()


def test_evaluate_a_lossless_set_recovers_all_loss(gpt):
    from dni_lab.features.quality import QualityWarning

    model, corpus = gpt
    # this tiny random GPT-2 barely needs block 0 (zero-ablating it costs 0.02 nats): the
    # ratio is flagged, as issue 38 found on a real model
    with pytest.warns(QualityWarning, match="says little"):
        q = F.evaluate(model, identity_set(16, "blocks.0.hook_resid_post"), corpus(30, seed=4))
    assert q.explained_variance == pytest.approx(1.0, abs=1e-6)
    assert q.loss_recovered == pytest.approx(1.0, abs=1e-6)
    assert q.ce_zero > q.ce_clean  # zero-ablating the block costs loss
    assert q.l0 == pytest.approx(16, abs=0.01)  # one of each ± pair fires per coordinate
    assert q.dead_share == 0.0
    assert q.kl_patched == pytest.approx(0.0, abs=1e-9)  # the patched run is the clean run
    assert q.dense_share > 0.9  # each ± latent fires on about half the symbols
    assert "zero-ablating the hook costs only" in q.loss_recovered_note


def test_kl_of_a_poor_set_and_no_flag_over_a_real_gap(gpt, monkeypatch):
    from dni_lab.features import quality

    model, corpus = gpt
    fs = F.TopKSAE(16, 32, "blocks.0.hook_resid_post", k=2)  # a poor set: KL clearly > 0
    torch.manual_seed(0)
    with torch.no_grad():
        for p in fs.parameters():
            p.normal_(0, 0.3)
    monkeypatch.setattr(quality, "FLAT_BASELINE", 0.0)  # every gap counts as real
    with warnings.catch_warnings():
        warnings.simplefilter("error", quality.QualityWarning)
        q = F.evaluate(model, fs, corpus(20, seed=6))
    assert q.loss_recovered is not None and q.loss_recovered_note is None
    assert q.kl_patched > 1e-3 and "KL(clean ‖ patched)" in str(q)


def test_train_sae_streams_saves_and_reports(gpt, tmp_path, capsys):
    model, corpus = gpt
    records = (r for r in corpus(400, seed=5))  # a generator: read once, a block at a time
    res = F.train_sae(model, records, "blocks.1.hook_resid_post", d_sae=64, k=4,
                      path=tmp_path / "sae", block_size=50, batch_size=128)  # fmt: skip
    printed = capsys.readouterr().out
    assert "explained variance" in printed and "loss recovered" in printed
    q = res.quality
    assert q.l0 <= 4.0 + 1e-9 and 0.0 <= q.dead_share < 1.0
    assert 0.3 < q.explained_variance <= 1.0
    assert q.loss_recovered is not None and q.ce_patched < q.ce_zero
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == "topk" and cfg["k"] == 4
    assert cfg["metadata"]["sae_lens_version"] and cfg["metadata"]["model_name"] == "gpt"
    assert cfg["metadata"]["hook_name"] == "blocks.1.hook_resid_post"
    back = dl.features.load(tmp_path / "sae")
    x = torch.randn(5, 16)
    torch.testing.assert_close(back.encode(x), res.features.encode(x))
    # the trained set is a unit set at once
    @dl.hypothesis(kind="binary", level="word")
    def is_from(r):
        return [w == "from" for w in r.split(" ")]

    f = dl.inspect(model, [is_from], ["corr"], corpus(40, seed=6), units=[back], eps=None)
    assert f.height == 64


def test_train_sae_needs_a_list_for_several_epochs(gpt):
    model, corpus = gpt
    with pytest.raises(dl.DNIError, match="epochs > 1 needs records it can read twice"):
        F.train_sae(model, iter(corpus(5)), "blocks.1.hook_resid_post", 8, 2, epochs=2)
