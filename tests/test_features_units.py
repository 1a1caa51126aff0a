"""Feature sets as units: dl.inspect(..., units=[features]) scores latents like neurons."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars
from tolerances import assert_close_f32
from torch import nn

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.engine.frames import SCHEMA
from dni_lab.backend.errors import LayerError


def topk_set(d_in: int = 12, d_sae: int = 32, k: int = 6, hook: str = "lstm", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    fs = F.TopKSAE(d_in, d_sae, hook, name="sae", k=k)
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return fs


class Encode(nn.Module):
    def __init__(self, fs):
        super().__init__()
        self.fs = fs

    def forward(self, h):
        return self.fs.encode(h)


class WithLatents(nn.Module):
    """The same LM with a layer whose output is the encoded latents: the reference."""

    def __init__(self, lm: CharLM, fs):
        super().__init__()
        self.embed, self.lstm, self.head = lm.embed, lm.lstm, lm.head
        self.latents = Encode(fs)

    def forward(self, x):
        out = self.lstm(self.embed(x))[0]
        self.latents(out)
        return self.head(out)


@pytest.fixture
def lm():
    torch.manual_seed(0)
    return CharLM()


def test_latents_score_as_a_layer_that_outputs_them(lm, records, hyps):
    fs = topk_set()
    model = dl.Model(lm, encode=encode_chars, name="m")
    # the reference's latents come from a module of its own: their axes are declared
    ref = dl.Model(WithLatents(lm, fs), encode=encode_chars, name="m",
                   layouts={"latents": "n s u"})
    measures = ["corr", "diffmeans", "logreg"]
    got = dl.inspect(model, hyps, measures, records, units=[fs], eps=None)
    want = dl.inspect(ref, hyps, measures, records, units=[("latents", "*")], eps=None)
    assert got.schema == pl.Schema(SCHEMA)
    assert set(got["layer"]) == {"lstm:sae"} and fs.address == "lstm:sae"
    assert sorted(set(got["unit"])) == list(range(32))
    assert got.height == want.height == 32 * 2 * 3
    key = ["unit", "hid", "measure"]
    a, b = got.sort(key), want.sort(key)
    symbols = sum(map(len, records))  # the scores sum over every symbol, in float32 GEMMs
    for col in ("unit_score", "group_score"):
        x, y = a[col].to_numpy(), b[col].to_numpy()
        np.testing.assert_array_equal(np.isnan(x), np.isnan(y))
        assert_close_f32(x, y, reduction=symbols, equal_nan=True, msg=col)
    assert np.isfinite(a.filter(pl.col("measure") == "corr")["unit_score"].to_numpy()).sum() > 5


def test_latents_beside_neurons_with_distinct_uids(lm, records, hyps):
    fs = topk_set()
    model = dl.Model(lm, encode=encode_chars, name="m")
    f = dl.inspect(model, hyps, ["corr"], records[:64], units=[("lstm", "*"), (fs, [3, 5])],
                   eps=None)  # fmt: skip
    layers = f.group_by("layer").agg(pl.col("unit").unique().sort()).sort("layer")
    assert layers["layer"].to_list() == ["lstm", "lstm:sae"]
    assert layers["unit"].to_list()[1] == [3, 5]
    assert f["uid"].n_unique() == 12 + 2
    alone = dl.inspect(model, hyps, ["corr"], records[:64], units=[fs], eps=None)
    both = f.filter(pl.col("layer") == "lstm:sae").sort("unit", "hid")["unit_score"]
    solo = alone.filter(pl.col("unit").is_in([3, 5])).sort("unit", "hid")["unit_score"]
    np.testing.assert_allclose(both.to_numpy(), solo.to_numpy(), rtol=1e-6, equal_nan=True)


def test_feature_sets_of_several_architectures_attach(lm, records, hyps, tmp_path):
    model = dl.Model(lm, encode=encode_chars, name="m")
    sets = []
    for i, arch in enumerate(["standard", "jumprelu", "gated"]):
        fs = F.ARCHITECTURES[arch](12, 8, "lstm", name=arch)
        with torch.no_grad():
            for p in fs.parameters():
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.3)
        F.save(fs, tmp_path / arch)
        sets.append(dl.features.load(tmp_path / arch))
    f = dl.inspect(model, hyps, ["corr"], records[:32], units=sets, eps=None)
    assert set(f["layer"]) == {"lstm:standard", "lstm:jumprelu", "lstm:gated"}


def test_attach_errors_name_the_set_and_the_fix(lm, records, hyps):
    model = dl.Model(lm, encode=encode_chars, name="m")
    with pytest.raises(LayerError, match="encodes 6-wide activations, but hook 'lstm'.*12 wide"):
        dl.inspect(model, hyps, ["corr"], records[:8], units=[topk_set(d_in=6, k=2)])
    with pytest.raises(LayerError, match="reads hook 'lstmx'.*lacks"):
        dl.inspect(model, hyps, ["corr"], records[:8], units=[topk_set(hook="lstmx")])
    twin = topk_set(seed=1)
    with pytest.raises(LayerError, match="both named 'lstm:sae'"):
        dl.inspect(model, hyps, ["corr"], records[:8], units=[topk_set(), twin])


def test_a_feature_set_on_a_transformer_hook_name(records):
    transformers = pytest.importorskip("transformers")
    from test_hf import corpus

    from hypotheses.workloads.hf_tokenizers import bpe

    tok = bpe(corpus(200, seed=1), vocab_size=300)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2,
                                  n_head=4, eos_token_id=tok.eos_token_id)  # fmt: skip
    model = dl.Model.from_hf(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="gpt")
    fs = topk_set(d_in=32, d_sae=64, k=8, hook="blocks.1.hook_resid_post")

    @dl.hypothesis(kind="binary", level="word")
    def has_from(r):
        return ["from" in w for w in r.split(" ")]

    data = corpus(40, seed=2)
    f = dl.inspect(model, [has_from], ["corr"], data, units=[fs], eps=None)
    assert set(f["layer"]) == {"blocks.1.hook_resid_post:sae"} and f.height == 64
    assert f["unit_score"].is_not_null().sum() > 3
    # the extractor's latents are the hook's activations (TransformerLens name) encoded
    from dni_lab.backend.engine.resolve import resolve_units
    from dni_lab.backend.extraction.extract import Extractor, symbol_mask

    cpu = torch.device("cpu")
    mu = resolve_units(model, [[(fs, "*")]], data[:2], cpu)
    assert mu.features["blocks.1.hook_resid_post:sae"][0] == "transformer.h.1"
    mask = symbol_mask(model, data[:6], cpu)
    latents = Extractor(model, mu.layer_units, "activation", cpu, mu.features)(data[:6], mask)
    hook = Extractor(model, {"transformer.h.1": None}, "activation", cpu)(data[:6], mask)
    with torch.no_grad():
        want = fs.encode(hook["transformer.h.1"]) * mask[..., None]
    torch.testing.assert_close(latents["blocks.1.hook_resid_post:sae"] * mask[..., None], want)


def test_provenance_hashes_a_sets_weights_not_only_its_name(lm, records, hyps, tmp_path):
    model = dl.Model(lm, encode=encode_chars, name="m")
    a, b = topk_set(seed=0), topk_set(seed=1)
    assert repr(a) == repr(b) and a.address == b.address  # same name, hook and shape

    def record(fs):
        frame = dl.inspect(model, hyps, ["corr"], records[:40], units=[fs], eps=None)
        return frame, dl.provenance(frame)

    fa, ra = record(a)
    _, rb = record(b)
    assert ra["units"] == rb["units"]  # the repr cannot tell them apart
    ha, hb = ra["features_sha256"]["m"]["lstm:sae"], rb["features_sha256"]["m"]["lstm:sae"]
    assert len(ha) == 64 and ha != hb
    assert record(a)[1]["features_sha256"] == ra["features_sha256"]  # deterministic
    with torch.no_grad():
        a.W_dec[0, 0] += 1.0  # a weight the latents do not even read
    assert record(a)[1]["features_sha256"]["m"]["lstm:sae"] != ha
    c = topk_set(seed=0)
    c.k = 3  # same weights, another k: other latents
    assert record(c)[1]["features_sha256"]["m"]["lstm:sae"] != record(topk_set(seed=0))[1][
        "features_sha256"]["m"]["lstm:sae"]  # fmt: skip
    dl.export(fa, tmp_path / "f.parquet")
    meta = dl.read_params(tmp_path / "f.parquet")
    assert meta["features_sha256"] == {"m": {"lstm:sae": ha}}
    plain = dl.inspect(model, hyps, ["corr"], records[:20], units=[("lstm", "*")], eps=None)
    assert dl.provenance(plain)["features_sha256"] == {}


def test_a_query_records_its_sets_hashes(lm, records, hyps):
    model = dl.Model(lm, encode=encode_chars, name="m")
    a, b = topk_set(seed=0), topk_set(seed=1)
    b.name = "other"
    cat = dl.Catalog()
    cat.add_model(model)
    cat.add_hypothesis(hyps[0])
    cat.add_inputs(records[:30], "chars")
    cat.add_features(a, model)
    cat.add_features(b, model)
    sql = "SELECT S.* INSPECT F.fid AND H.h OVER D.seq AS S FROM features F, hypotheses H, inputs D"
    got = dl.provenance(dl.query(sql, catalog=cat, namespace={}, eps=None))["features_sha256"]
    direct = dl.provenance(dl.inspect(model, hyps[:1], ["corr"], records[:30], units=[a, b]))
    assert got == direct["features_sha256"] and set(got["m"]) == {"lstm:sae", "lstm:other"}
