"""A categorical hypothesis under corr / ridge / diffmeans: one binary row per category.

Its codes are no quantity, so these measures never read them: each category ``c``
becomes the hypothesis ``h == c``, named ``"{hid}={c}"`` in the frame, and the
categorical row itself is null with a reason that points there.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records

import dni_lab as dl

RECS = random_records(60, seed=7)


@dl.hypothesis(kind="categorical", categories=3)
def char_class(r):  # 0: letter, 1: bracket, 2: operator
    return [1 if c in "()" else 2 if c in "+*" else 0 for c in r]


@pytest.fixture(scope="module")
def toy():
    torch.manual_seed(0)
    module = CharLM(hidden=5)
    with torch.no_grad():
        acts = np.concatenate(
            [module.lstm(module.embed(encode_chars([r])))[0][0].numpy() for r in RECS]
        )
    return dl.Model(module, encode_chars, name="toy"), acts


def _inspect(model, hyps, measures):
    return dl.inspect(model, hyps, measures=measures, data=RECS, units=[("lstm", "*")],
                      eps=None, cache=False)  # fmt: skip


def test_corr_scores_each_category_as_its_indicator(toy):
    model, acts = toy
    f = _inspect(model, [char_class], ["corr"])
    assert sorted(set(f["hid"])) == ["char_class", "char_class=0", "char_class=1", "char_class=2"]
    codes = np.concatenate([char_class(r) for r in RECS])
    for c in range(3):
        got = f.filter(pl.col("hid") == f"char_class={c}").sort("unit")["unit_score"].to_numpy()
        ind = (codes == c).astype(float)
        want = [np.corrcoef(acts[:, i], ind)[0, 1] for i in range(acts.shape[1])]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    codes_row = f.filter(pl.col("hid") == "char_class")
    assert codes_row["unit_score"].null_count() == codes_row.height  # never the codes
    assert codes_row["reason"].str.contains("'char_class=<code>'").all()


@pytest.mark.parametrize("measure", ["ridge", "diffmeans"])
def test_ridge_and_diffmeans_score_the_same_indicator_as_a_binary_hypothesis(toy, measure):
    model, _ = toy
    f = _inspect(model, [char_class], [measure])
    bracket = dl.hypothesis(lambda r: [c in "()" for c in r], name="bracket", kind="binary")
    g = _inspect(model, [bracket], [measure])
    got = f.filter(pl.col("hid") == "char_class=1").sort("unit")
    want = g.sort("unit")
    # float32 block products over another set of columns: equal to a few ulps, not bitwise
    np.testing.assert_allclose(got["unit_score"].to_numpy(), want["unit_score"].to_numpy(),
                               rtol=1e-5, atol=1e-7)  # fmt: skip
    np.testing.assert_allclose(got["group_score"].to_numpy(), want["group_score"].to_numpy(),
                               rtol=1e-5, atol=1e-7)  # fmt: skip


def test_logreg_keeps_fitting_the_categorical_hypothesis_itself(toy):
    model, _ = toy
    f = _inspect(model, [char_class], ["corr", "logreg"])
    lr = f.filter(pl.col("measure") == "logreg")
    own = lr.filter(pl.col("hid") == "char_class")
    assert own["group_score"].null_count() == 0
    ind = lr.filter(pl.col("hid") != "char_class")
    assert ind["unit_score"].null_count() == ind.height
    assert ind["reason"].str.contains("logreg fits each category of 'char_class'").all()


def test_without_declared_categories_the_reason_says_how(toy):
    model, _ = toy
    undeclared = dl.hypothesis(lambda r: [1 if c in "()" else 0 for c in r], name="cls",
                               kind="categorical")  # fmt: skip
    f = _inspect(model, [undeclared], ["corr"])
    assert set(f["hid"]) == {"cls"}
    assert f["unit_score"].null_count() == f.height
    assert f["reason"].str.contains("declare categories=N").all()


def test_only_measures_that_read_quantities_add_indicator_rows(toy):
    model, _ = toy
    f = _inspect(model, [char_class], ["mi"])
    assert set(f["hid"]) == {"char_class"}
    assert f["unit_score"].null_count() == 0


def test_an_undefined_code_leaves_every_indicator_undefined(toy):
    model, acts = toy

    @dl.hypothesis(kind="categorical", categories=2)
    def bracket_kind(r):  # 0 '(' , 1 ')', undefined elsewhere
        return ["()".index(c) if c in "()" else None for c in r]

    f = _inspect(model, [bracket_kind], ["corr"])
    vals = np.concatenate([np.asarray(bracket_kind(r), dtype=float) for r in RECS])
    ok = ~np.isnan(vals)
    assert f["n_undefined"].unique().to_list() == [int((~ok).sum())]
    got = f.filter(pl.col("hid") == "bracket_kind=1").sort("unit")["unit_score"].to_numpy()
    want = [np.corrcoef(acts[ok, i], vals[ok] == 1)[0, 1] for i in range(acts.shape[1])]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_constant_hypothesis_is_named_as_the_cause():
    torch.manual_seed(0)
    module = CharLM(hidden=4)
    with torch.no_grad():  # unit 0 of the top layer dead (every gate 0: c = h = 0)
        for name in ("weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"):
            getattr(module.lstm, name)[0::4].zero_()
    model = dl.Model(module, encode_chars, name="toy")
    varying = dl.hypothesis(lambda r: [c == "(" for c in r], name="varying")
    dead = _inspect(model, [varying], ["corr"]).filter(pl.col("unit") == 0)
    assert dead["reason"].to_list() == ["unit is constant over the symbols read"]
    const = dl.hypothesis(lambda r: [1.0] * len(r), name="const", kind="continuous")
    f = _inspect(model, [const], ["corr", "ridge", "mi"])
    assert f["unit_score"].null_count() == f.height
    # the hypothesis is the cause, also on the dead unit's rows
    assert f["reason"].str.starts_with("hypothesis is constant").all(), f["reason"].unique()


def test_a_query_keeps_the_indicator_rows_and_joins_them_to_their_hypothesis(toy):
    model, _ = toy
    want = dl.inspect(model, [char_class], ["corr"], RECS, eps=None, cache=False)
    ns = {"lm": model, "texts": RECS, "hyps": [char_class]}
    got = dl.query("SELECT * INSPECT lm AND hyps OVER texts WITH (eps = NULL)", namespace=ns)
    assert "char_class=1" in set(got["hid"])
    cols = ["layer", "unit", "hid", "unit_score", "reason"]
    assert got.sort(cols[:3]).select(cols).equals(want.sort(cols[:3]).select(cols))
    # joined to the hypotheses relation: an indicator row carries its hypothesis's columns
    sql = ("SELECT S.hid, H.kind INSPECT U.uid AND H.h USING corr OVER texts "
           "FROM lm M, units U, hypotheses H WHERE U.layer = 'lstm' AND H.name = 'char_class' "
           "WITH (eps = NULL)")  # fmt: skip
    joined = dl.query(sql, namespace=ns)
    assert set(joined["hid"]) == set(want["hid"])
    assert set(joined["kind"]) == {"categorical"}
