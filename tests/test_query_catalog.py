"""The catalog and its relations: models, units, hypotheses, inputs, and the namespace."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from query_workloads import one_thread  # noqa: F401  (an autouse fixture)

import dni_lab as dl


@dl.hypothesis
def paren(r):
    return [c in "()" for c in r]


@dl.hypothesis_family(signals=["a", "b"], name="ab", kind={"a": "binary", "b": "continuous"})
def ab(r):
    return {"a": [c == "a" for c in r], "b": [float(c == "b") for c in r]}


@pytest.fixture
def cat():
    cat = dl.Catalog()
    torch.manual_seed(0)
    cat.register(dl.Model(CharLM(hidden=5), encode_chars, name="lm", meta={"trained": False}))
    cat.register(paren)
    cat.register(ab, source="tests")
    cat.register(random_records(10), name="chars", split="dev")
    cat.register(pl.DataFrame({"uid": [1, 2]}), name="favourites")
    return cat


def test_models_relation_has_metadata_columns(cat):
    m = cat.relation("models")
    assert m.columns[:4] == ["mid", "epoch", "architecture", "trained"]
    assert m.row(0) == ("lm", None, "CharLM", False)


def test_units_relation_matches_the_engine_uids(cat):
    units = cat.relation("units")
    assert units.columns == ["mid", "uid", "layer", "unit", "layer_index"]
    lm = cat.models[0].model
    f = dl.inspect(
        [lm], [paren], ["corr"], random_records(20), units=[("lstm", "*"), ("head", [3])]
    )
    joined = f.join(units, on=["mid", "uid"], suffix="_rel")
    assert joined.height == f.height
    assert (joined["layer"] == joined["layer_rel"]).all()
    assert (joined["unit"] == joined["unit_rel"]).all()
    by_pos = units.filter(pl.col("layer_index").is_not_null()).unique("layer").sort("layer_index")
    assert by_pos["layer"].to_list() == lm.positional_layers()
    assert set(units["layer"]) == set(lm.addresses)


def test_hypotheses_relation_has_one_row_per_signal(cat):
    h = cat.relation("hypotheses")
    assert h.select("hid", "name", "family", "kind", "source", "h").rows() == [
        ("paren", "paren", "paren", "binary", __name__, "paren"),
        ("ab.a", "a", "ab", "binary", "tests", "ab.a"),
        ("ab.b", "b", "ab", "continuous", "tests", "ab.b"),
    ]


def test_inputs_relation_has_one_row_per_record(cat):
    d = cat.relation("inputs")
    assert d.columns == ["did", "rid", "seq", "length", "split"] and d.height == 10
    assert d["seq"].to_list() == random_records(10)
    assert (d["length"] == d["seq"].str.len_chars()).all()
    assert cat.relation("favourites")["uid"].to_list() == [1, 2]


def test_registration_errors_and_the_default_catalog(cat):
    lm = cat.models[0].model
    with pytest.raises(dl.DNIError, match="need distinct metadata"):
        cat.add_model(dl.Model(CharLM(hidden=5), encode_chars, name="lm", meta={"trained": False}))
    cat.add_model(dl.Model(CharLM(hidden=5), encode_chars, name="lm"), epoch=3)  # a checkpoint
    assert cat.relation("models")["epoch"].to_list() == [None, 3]
    with pytest.raises(dl.DNIError, match="needs a name"):
        cat.register([1, 2, 3])
    with pytest.raises(dl.DNIError, match="generator"):
        cat.add_inputs((r for r in "ab"), "gen")
    assert dl.Catalog.default() is dl.Catalog.default()
    assert cat.add_model(lm, epoch=0) is lm and len(cat.models) == 2
    with pytest.raises(dl.QueryError, match="Did you mean 'models'"):
        cat.relation("model")


def test_namespace_objects_join_the_relations_and_fresh_objects_replace_registered_ones(cat):
    torch.manual_seed(1)
    other = dl.Model(CharLM(hidden=3), encode_chars, name="other")

    @dl.hypothesis(name="paren")
    def paren_v2(r):  # the notebook cell defining `paren` ran again
        return [c == "(" for c in r]

    ns = {"other": other, "paren_v2": paren_v2, "_hidden": dl.Model(CharLM(), encode_chars)}
    assert cat.relation("models", ns)["mid"].to_list() == ["lm", "other"]
    h = cat.relation("hypotheses", ns)
    assert h["hid"].to_list() == ["paren", "ab.a", "ab.b"]
    assert h.row(0, named=True)["source"] == __name__
    out = dl.query(
        "SELECT S.mid, S.hid, S.unit_score INSPECT U.uid AND H.h OVER D.seq AS S "
        "FROM units U, hypotheses H, inputs D WHERE U.layer = 'lstm' AND H.hid = 'paren'",
        catalog=cat,
        namespace=ns,
        eps=None,
    )
    records = random_records(10)
    want = dl.inspect([cat.models[0].model, other], [paren_v2], ["corr"], records,
                      units=[("lstm", "*")], eps=None)  # fmt: skip
    np.testing.assert_allclose(out["unit_score"].to_numpy(), want["unit_score"].to_numpy())
    assert cat.hypotheses[0].family is paren  # the catalog itself is unchanged
