"""Query evaluation: the same frames as dl.inspect, GROUP BY, HAVING/ORDER BY/LIMIT, runs."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from polars.testing import assert_frame_equal
from query_workloads import one_thread  # noqa: F401  (an autouse fixture)

import dni_lab as dl
from dni_lab.backend.engine.frames import SCHEMA
from dni_lab.backend.query import QueryRun

FROM = "FROM models M, units U, hypotheses H, inputs D"


@dl.hypothesis_family(signals=["letter", "op", "bracket"], name="charclass")
def charclass(r):
    return {
        "letter": [c.isalpha() for c in r],
        "op": [c in "+*" for c in r],
        "bracket": [c in "()" for c in r],
    }


class GroupMean(dl.Measure):
    """A joint measure whose group score is the mean activation over the whole unit group."""

    name = "groupmean"
    joint = True

    def start(self, n_units, n_hyps, device="cpu", info=None):
        return {"s": torch.zeros(n_units, dtype=torch.float64), "n": 0, "h": n_hyps}

    def update(self, state, U, H, mask):
        u = U[mask]
        state["s"] += u.sum(0).double()
        state["n"] += u.shape[0]
        return state

    def merge(self, a, b):
        return {"s": a["s"] + b["s"], "n": a["n"] + b["n"], "h": a["h"]}

    def result(self, state, confidence=0.95):
        m = (state["s"] / state["n"]).numpy()
        unit = np.repeat(m[:, None], state["h"], axis=1)
        return dl.MeasureResult(unit, np.full_like(unit, m.mean()), np.full_like(unit, np.nan))


@pytest.fixture
def lab():
    """Three checkpoints of 'toy' (epochs 1-3), records and hypotheses in a catalog."""
    cat = dl.Catalog()
    ckpts = []
    for epoch in (1, 2, 3):
        torch.manual_seed(epoch)
        ckpts.append(
            cat.add_model(dl.Model(CharLM(hidden=6), encode_chars, name="toy"), epoch=epoch)
        )
    recs = random_records(120, seed=1)
    cat.add_inputs(recs, "chars")
    for h in (paren, position, charclass):
        cat.add_hypothesis(h)
    return cat, ckpts, recs


def q(cat, sql, **kw):
    return dl.query(sql, catalog=cat, namespace={"groupmean": GroupMean}, **kw)


def sort(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("mid", "uid", "hid", "measure")


def test_query_returns_the_frame_of_the_equivalent_inspect_call(lab):
    cat, ckpts, recs = lab
    got = q(
        cat,
        f"SELECT * INSPECT U.uid AND H.h USING corr OVER D.seq AS S {FROM} "
        "WHERE M.epoch = 2 AND U.layer = 'lstm' AND H.family IN ('paren', 'position')",
    )
    want = dl.inspect([ckpts[1]], [paren, position], ["corr"], recs, units=[("lstm", "*")])
    assert got.columns == list(SCHEMA)  # no GROUP BY: S's columns only
    assert_frame_equal(sort(got), sort(want))
    assert not got["converged"].all() or got["n_records"].max() <= len(recs)


def test_group_by_over_three_checkpoints(lab):
    cat, ckpts, recs = lab
    got = q(
        cat,
        f"SELECT * INSPECT U.uid AND H.h USING corr OVER D.seq AS S {FROM} "
        "WHERE U.layer = 'lstm.l0' AND H.name = 'paren' GROUP BY M.epoch",
    )
    assert got.columns == [*SCHEMA, "epoch"]
    for epoch, ckpt in zip((1, 2, 3), ckpts, strict=True):
        want = dl.inspect([ckpt], [paren], ["corr"], recs, units=[("lstm.l0", "*")])
        part = got.filter(pl.col("epoch") == epoch).drop("epoch")
        assert_frame_equal(sort(part), sort(want))
    assert got.height == 3 * 6 and got["mid"].unique().to_list() == ["toy"]


def test_group_by_forms_the_unit_groups_of_joint_measures(lab):
    cat, ckpts, recs = lab
    base = (
        "SELECT S.layer, S.unit, S.unit_score, S.group_score, S.group "
        "INSPECT U.uid AND H.h USING groupmean OVER D.seq AS S "
        f"{FROM} WHERE M.epoch = 1 AND U.layer IN ('lstm', 'head') AND H.name = 'paren'"
    )
    whole = q(cat, base, eps=None)
    by_layer = q(cat, base + " GROUP BY U.layer", eps=None)
    want = dl.inspect(
        [ckpts[0]],
        [paren],
        [GroupMean()],
        recs,
        units=[[("lstm", "*"), ("head", "*")]],
        eps=None,
    )
    assert whole["group_score"].n_unique() == 1
    np.testing.assert_allclose(whole["group_score"][0], want["group_score"][0])
    assert whole["group"].unique().to_list() == ["lstm[*] + head[*]"]
    for layer in ("lstm", "head"):
        alone = dl.inspect([ckpts[0]], [paren], [GroupMean()], recs, units=[(layer, "*")], eps=None)
        part = by_layer.filter(pl.col("layer") == layer)
        np.testing.assert_allclose(part["group_score"].to_numpy(), alone["group_score"].to_numpy())
        np.testing.assert_allclose(part["unit_score"].to_numpy(), alone["unit_score"].to_numpy())
    assert by_layer["group_score"].n_unique() == 2  # one group per layer, scored apart


def test_having_order_by_limit_over_the_flattened_result(lab):
    cat, _, _ = lab
    sql = (
        "SELECT M.epoch, S.uid, S.hid, S.unit_score INSPECT U.uid AND H.h OVER D.seq AS S "
        f"{FROM} WHERE U.layer = 'lstm' GROUP BY M.epoch"
    )
    everything = q(cat, sql)
    got = q(cat, sql + " HAVING abs(S.unit_score) > 0.05 ORDER BY S.unit_score DESC LIMIT 7")
    want = (
        everything.filter(pl.col("unit_score").abs() > 0.05)
        .sort("unit_score", descending=True, maintain_order=True)
        .head(7)
    )
    assert_frame_equal(got, want)
    assert got.height == 7


def test_aggregates_group_the_result_by_the_grouping_keys(lab):
    cat, _, _ = lab
    got = q(
        cat,
        "SELECT M.epoch, count(*) AS n, max(S.unit_score) AS best "
        f"INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE U.layer = 'lstm' AND H.name = 'paren' GROUP BY M.epoch "
        "HAVING max(S.unit_score) > -1 ORDER BY M.epoch",
    )
    assert got["epoch"].to_list() == [1, 2, 3] and got["n"].to_list() == [6, 6, 6]


def test_rows_join_their_unit_hypothesis_and_model(lab):
    cat, _, _ = lab
    got = q(
        cat,
        "SELECT DISTINCT U.layer, U.layer_index, H.family, M.architecture "
        f"INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE U.layer IN (1, 2) AND H.family = 'charclass' AND M.epoch = 3 "
        "ORDER BY U.layer_index",
    )
    assert got.rows() == [("lstm", 1, "charclass", "CharLM"), ("head", 2, "charclass", "CharLM")]


def test_some_signals_of_a_family_equal_those_rows_of_the_whole_family(lab):
    cat, ckpts, recs = lab
    got = q(
        cat,
        f"SELECT * INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE M.epoch = 1 AND U.layer = 'lstm' AND H.name IN ('letter', 'bracket')",
        eps=None,
    )
    want = dl.inspect([ckpts[0]], [charclass], ["corr"], recs, units=[("lstm", "*")], eps=None)
    want = want.filter(pl.col("hid").is_in(["charclass.letter", "charclass.bracket"]))
    assert_frame_equal(sort(got), sort(want))


def test_inputs_can_be_filtered_and_options_come_from_with_or_the_call(lab):
    cat, _, _ = lab
    sql = (
        f"SELECT * INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE M.epoch = 1 AND U.layer = 'lstm' AND H.name = 'paren' AND D.rid < 100 "
        "WITH (eps = NULL, block_size = 4)"
    )
    assert q(cat, sql)["n_records"].unique().to_list() == [100]
    # the call overrides WITH's eps and keeps its block_size (corr's error needs more
    # than these 100 records, so the provenance says which options the run read with)
    prov = dl.provenance(q(cat, sql, eps=0.5))
    assert prov["eps"] == 0.5 and prov["block_size"] == 4
    assert prov["steps"][0]["eps"] == 0.5


def test_namespace_objects_by_name_without_registration(lab):
    _, ckpts, recs = lab
    ns = {"lm": ckpts[0], "texts": recs, "hyps": [paren, position]}
    got = dl.query("SELECT * INSPECT lm AND hyps OVER texts WITH (eps = NULL)", namespace=ns)
    want = dl.inspect([ckpts[0]], [paren, position], ["corr"], recs, eps=None)
    assert_frame_equal(sort(got), sort(want))
    lm, texts = ckpts[0], recs[:30]  # noqa: F841  (read by dl.query from the caller's frame)
    got = dl.query(
        "SELECT S.uid INSPECT U.uid AND paren OVER texts FROM lm M, units U WHERE U.layer = 'head'"
    )
    assert got.height == len(VOCAB_HEAD)


VOCAB_HEAD = "abcdefghij()+*"  # CharLM's head has one unit per character


def test_empty_selection_gives_an_empty_frame_with_the_columns(lab):
    cat, _, _ = lab
    got = q(
        cat,
        f"SELECT M.epoch, S.uid INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE M.epoch = 9 GROUP BY M.epoch",
    )
    assert got.height == 0 and got.columns == ["epoch", "uid"]


def test_background_query_streams_the_score_frame(lab):
    cat, _, _ = lab
    seen = []
    run = q(
        cat,
        f"SELECT M.epoch, S.uid INSPECT U.uid AND H.h OVER D.seq AS S {FROM} "
        "WHERE U.layer = 'lstm' GROUP BY M.epoch WITH (block_size = 30, eps = NULL)",
        background=True,
        on_block=lambda r: seen.append(r.frame.height),
    )
    assert isinstance(run, QueryRun)
    out = run.result(timeout=60)
    assert out.columns == ["epoch", "uid"] and out.height == 3 * 6 * 5
    assert run.frame.columns == list(SCHEMA) and run.frame.height == out.height
    assert len(seen) >= 4 and run.progress.done
    assert run.progress.records_read == run.progress.total_records == 120


def test_plain_sql_explores_the_catalog(lab):
    cat, _, _ = lab
    got = q(cat, "SELECT layer, count(*) AS n FROM units WHERE layer_index IS NOT NULL "
                 "GROUP BY layer ORDER BY layer")  # fmt: skip
    assert got.rows() == [("embed", 6), ("head", 14), ("lstm", 6)]
    assert q(cat, "SELECT DISTINCT epoch FROM models ORDER BY epoch")["epoch"].to_list() == [
        1,
        2,
        3,
    ]


def test_nulls_sort_last_in_either_direction_unless_the_query_says(lab):
    cat, _, _ = lab
    cat.add_hypothesis(dl.hypothesis(lambda r: [1.0] * len(r), name="flat"))  # null scores
    sql = (
        "SELECT S.hid, S.unit_score INSPECT U.uid AND H.h OVER D.seq AS S "
        f"{FROM} WHERE U.layer = 'lstm' AND M.epoch = 1 AND H.name IN ('flat', 'paren') "
    )
    for order in ("ABS(S.unit_score) DESC", "S.unit_score", "S.unit_score DESC, S.hid"):
        got = q(cat, sql + f"ORDER BY {order}")["unit_score"]
        n = got.null_count()
        assert n > 0 and got.tail(n).is_null().all(), order  # the live table's order
    first = q(cat, sql + "ORDER BY S.unit_score DESC NULLS FIRST")["unit_score"]
    assert first.head(first.null_count()).is_null().all()
