"""Feature sets in SQL: the relation features(mid, fid, set, hook, latent) as INSPECT's units."""

from __future__ import annotations

import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from polars.testing import assert_frame_equal
from query_workloads import one_thread  # noqa: F401  (an autouse fixture)

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.query import QueryError

KEY = ["uid", "hid", "measure"]


def random_set(cls=F.TopKSAE, d_sae: int = 24, name: str = "sae", seed: int = 0, **kw):
    g = torch.Generator().manual_seed(seed)
    fs = cls(12, d_sae, "lstm", name=name, **({"k": 5} if cls is F.TopKSAE else {}), **kw)
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return fs


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = dl.Model(CharLM(), encode_chars, name="lm")
    sae, relu = random_set(), random_set(F.StandardSAE, 16, "relu", seed=1)
    cat = dl.Catalog()
    cat.add_model(model)
    cat.add_hypothesis(paren)
    cat.add_hypothesis(position)
    records = random_records(120)
    cat.add_inputs(records, "chars")
    cat.add_features(sae, model, source="test")
    cat.add_features(relu, "lm")
    return cat, model, sae, relu, records


def inspect_sql(where: str = "", select: str = "S.*", using: str = "corr, diffmeans") -> str:
    return (
        f"SELECT {select} INSPECT F.fid AND H.h USING {using} OVER D.seq AS S "
        "FROM features F, hypotheses H, inputs D" + (f" WHERE {where}" if where else "")
    )


def n_neurons(model: dl.Model) -> int:
    return sum(model.layer_widths(["ab"], "cpu").values())


def test_the_relation_numbers_latents_after_the_neurons(setup):
    cat, model, sae, relu, _ = setup
    f = cat.relation("features")
    assert f.columns == ["mid", "fid", "set", "hook", "latent", "architecture", "d_sae", "source"]
    assert f.height == 24 + 16
    n = n_neurons(model)
    first = f.filter(pl.col("set") == "sae")
    assert first["fid"].to_list() == [n + i for i in range(24)]
    assert first["latent"].to_list() == list(range(24))
    assert set(first["architecture"]) == {"topk"} and set(first["source"]) == {"test"}
    second = f.filter(pl.col("set") == "relu")
    assert second["fid"].to_list() == [n + 24 + i for i in range(16)]
    assert set(second["hook"]) == {"lstm"} and second["source"].is_null().all()
    # the fids are the uids dl.inspect gives the same sets in registration order
    frame = dl.inspect(model, [paren], ["corr"], random_records(20), units=[sae, relu], eps=None)
    joined = frame.join(f, left_on=["mid", "uid"], right_on=["mid", "fid"])
    assert joined.height == frame.height == 40
    assert (joined["unit"] == joined["latent"]).all()
    assert (joined["layer"] == joined["hook"] + ":" + joined["set"]).all()


def test_a_query_over_one_set_is_dl_inspect_of_that_set(setup):
    cat, model, sae, _, records = setup
    got = dl.query(inspect_sql("F.set = 'sae'"), catalog=cat, namespace={}, eps=None)
    want = dl.inspect(model, [paren, position], ["corr", "diffmeans"], records,
                      units=[sae], eps=None)  # fmt: skip
    assert got.height == 24 * 2 * 2
    assert_frame_equal(got.sort(KEY), want.sort(KEY))


def test_the_second_set_keeps_its_fid_and_its_scores(setup):
    cat, model, _, relu, records = setup
    sql = inspect_sql("F.set = 'relu' AND F.latent < 5 AND H.name = 'paren'",
                      select="S.uid, F.fid, F.set, F.latent, S.unit, S.unit_score")  # fmt: skip
    got = dl.query(sql.replace("corr, diffmeans", "corr"), catalog=cat, namespace={}, eps=None)
    assert got.height == 5
    assert (got["uid"] == got["fid"]).all() and (got["unit"] == got["latent"]).all()
    assert got["fid"].min() == n_neurons(model) + 24
    alone = dl.inspect(model, [paren], ["corr"], records, units=[(relu, [0, 1, 2, 3, 4])],
                       eps=None)  # fmt: skip
    assert got.sort("latent")["unit_score"].to_list() == alone.sort("unit")["unit_score"].to_list()


def test_namespace_sets_join_without_registration(setup):
    cat, model, _, _, records = setup
    extra = random_set(name="extra", seed=3)
    sql = "SELECT S.* INSPECT E.fid AND H.h OVER D.seq AS S FROM extra E, hypotheses H, inputs D"
    got = dl.query(sql, catalog=cat, namespace={"extra": extra}, eps=None)
    want = dl.inspect(model, [paren, position], ["corr"], records, units=[extra], eps=None)
    # an unregistered set comes after the registered ones
    assert (got.sort(KEY)["uid"] - 40).to_list() == want.sort(KEY)["uid"].to_list()
    assert_frame_equal(got.sort(KEY).drop("uid"), want.sort(KEY).drop("uid"))
    listing = cat.relation("features", {"extra": extra})
    assert listing["set"].unique(maintain_order=True).to_list() == ["sae", "relu", "extra"]


def test_a_set_joins_only_models_whose_hook_fits():
    torch.manual_seed(0)
    wide = dl.Model(CharLM(hidden=12), encode_chars, name="wide")
    narrow = dl.Model(CharLM(hidden=5), encode_chars, name="narrow")
    cat = dl.Catalog()
    for m in (wide, narrow):
        cat.add_model(m)
    cat.add_inputs(random_records(5), "chars")
    f = cat.relation("features", {"sae": random_set()})
    assert set(f["mid"]) == {"wide"}
    cat.add_features(random_set(name="bad"), narrow)
    with pytest.raises(QueryError, match=r"registered for model 'narrow'.*5 wide.*encodes 12"):
        cat.relation("features")


def test_an_unknown_set_name_is_a_query_error_with_a_suggestion(setup):
    cat = setup[0]
    with pytest.raises(QueryError) as err:
        dl.query(inspect_sql("F.set = 'sea'"), catalog=cat, namespace={})
    msg = str(err.value)
    assert "no feature set 'sea' in features.set" in msg and "Did you mean 'sae'" in msg
    assert "Known: 'relu', 'sae'" in msg and "^^^^^" in msg
    with pytest.raises(QueryError, match="has no column 'layer'.*Its columns: mid, fid, set"):
        dl.query(inspect_sql("F.layer = 'lstm'"), catalog=cat, namespace={})
    with pytest.raises(QueryError, match="unknown relation 'featurs'.*Did you mean 'features'"):
        dl.query("SELECT * FROM featurs", catalog=cat, namespace={})


def test_no_registered_set_says_how_to_register_one():
    cat = dl.Catalog()
    cat.add_model(dl.Model(CharLM(), encode_chars, name="lm"))
    cat.add_hypothesis(paren)
    cat.add_inputs(random_records(5), "chars")
    with pytest.raises(QueryError, match=r"no latents.*catalog.add_features\(fs, model\)"):
        dl.query(inspect_sql(), catalog=cat, namespace={})
    with pytest.raises(dl.DNIError, match="add_features needs a feature set"):
        cat.add_features(paren)


def test_register_takes_a_set_and_a_set_is_never_a_hypothesis(setup):
    cat, model, sae, _, _ = setup
    again = random_set(name="sae", seed=5)
    with pytest.raises(dl.DNIError, match="already registered for model 'lm'"):
        cat.add_features(again, model)
    other = dl.Catalog()
    other.register(again, model=model)
    assert other.features[0].features is again and not other.hypotheses
    names = dl.query("SELECT DISTINCT name FROM hypotheses", catalog=cat, namespace={"s": sae})
    assert sorted(names["name"].to_list()) == ["paren", "position"]
