"""The DeepBase paper's §4.1 query, verbatim, and the blog's three PacMan analyses as queries."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from query_workloads import (
    PAPER_QUERY,
    agent_checkpoints,
    f_ghost,
    ghost_ahead,
    grids,
    keywords,
    one_thread,  # noqa: F401  (an autouse fixture)
    sql_checkpoints,
    sql_records,
)

import dni_lab as dl


def by(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort("mid", "uid", "hid")


def test_paper_query_verbatim():
    cat = dl.Catalog()
    ckpts = [cat.add_model(m) for m in sql_checkpoints(epochs=(1, 2, 3))]
    records = sql_records(150)
    cat.add_inputs(records, "sql_queries")
    cat.add_hypothesis(keywords, source="sql grammar")
    out = dl.query(PAPER_QUERY, catalog=cat, namespace={})
    # Unit 0 of layer 0 learns the keyword detector as training goes on.
    assert out.rows() == [(2, 0), (3, 0)]
    want = []
    for ckpt in ckpts:
        f = dl.inspect([ckpt], [keywords], ["corr"], records, units=[(0, "*")])
        want += [(ckpt.meta["epoch"], uid) for uid in f.filter(pl.col("unit_score") > 0.8)["uid"]]
    assert out.rows() == want


@pytest.fixture(scope="module")
def pacman():
    pytest.importorskip("dni_lab.backend.measures.iou")
    cat = dl.Catalog()
    ckpts = [cat.add_model(m) for m in agent_checkpoints(epochs=(0, 25, 50, 100))]
    data = grids(60)
    cat.add_inputs(data, "episodes")
    cat.add_hypothesis(f_ghost, source="simulator")
    cat.add_hypothesis(ghost_ahead, source="simulator")
    return cat, ckpts, data


def test_blog_2_1_all_units_of_layers_1_and_2_with_local_iou(pacman):
    cat, ckpts, data = pacman
    out = dl.query(
        """SELECT S.layer, S.unit, S.unit_score
        INSPECT U.uid AND H.h USING local_iou OVER D.seq AS S
        FROM models M, units U, hypotheses H, inputs D
        WHERE M.epoch = 100 AND U.layer IN (1, 2) AND H.name = 'ghost'
        ORDER BY S.unit_score DESC""",
        catalog=cat,
        namespace={},
    )
    # deepbase.inspect(models, hyp, scores, data, units) with units = [(1, '*'), (2, '*')]
    want = dl.inspect([ckpts[-1]], [f_ghost], ["local_iou"], data, units=[(1, "*"), (2, "*")])
    assert out.height == want.height == 16 + 8
    assert out.row(0) == ("conv2", 14, 1.0)  # "hidden unit 14 in layer 1 has a high score"
    want = want.sort("unit_score", descending=True, maintain_order=True)
    assert_frame_equal(out, want.select("layer", "unit", "unit_score"))


def test_blog_2_2_one_unit_across_training_epochs(pacman):
    cat, ckpts, data = pacman
    out = dl.query(
        """SELECT M.epoch, S.unit_score
        INSPECT U.uid AND H.h USING local_iou OVER D.seq AS S
        FROM models M, units U, hypotheses H, inputs D
        WHERE U.layer = 1 AND U.unit = 14 AND H.name = 'ghost'
        GROUP BY M.epoch
        ORDER BY M.epoch""",
        catalog=cat,
        namespace={},
    )
    assert out["epoch"].to_list() == [0, 25, 50, 100]
    scores = out["unit_score"].to_list()
    assert scores[0] < scores[1] < scores[2] == scores[3] == 1.0  # converges by epoch 50
    for ckpt, score in zip(ckpts, scores, strict=True):
        f = dl.inspect([ckpt], [f_ghost], ["local_iou"], data, units=[(1, [14])])
        assert f["unit_score"].to_list() == [score]


def test_blog_2_3_ghost_positions_n_steps_ahead(pacman):
    cat, ckpts, data = pacman
    out = dl.query(
        """SELECT *
        INSPECT U.uid AND H.h USING local_iou OVER D.seq AS S
        FROM models M, units U, hypotheses H, inputs D
        WHERE M.epoch = 100 AND U.layer IN (1, 2) AND H.family = 'ghost_ahead'""",
        catalog=cat,
        namespace={},
    )
    want = dl.inspect([ckpts[-1]], [ghost_ahead], ["local_iou"], data, units=[(1, "*"), (2, "*")])
    assert_frame_equal(by(out), by(want))
    assert set(out["hid"]) == {f"ghost_ahead.ghost_{n}" for n in (1, 2, 4, 8)}
    # The ghost detector sees where the ghost is, not where it will be.
    unit14 = out.filter((pl.col("layer") == "conv2") & (pl.col("unit") == 14))
    assert unit14["unit_score"].max() < 0.5
