"""Significance and controls: permutation p-values, BH q-values, untrained copy, selectivity."""

from __future__ import annotations

import zlib

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from scipy import stats
from specialized import hypothesis, one_thread, records, specialized

import dni_lab as dl
from dni_lab.backend.engine.frames import SCHEMA

N_NOISE = 40


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


@dl.hypothesis_family(signals=[f"n{j}" for j in range(N_NOISE)], kind="continuous")
def noise(record):
    """Pure noise, a fixed function of the record (so the hypothesis cache stays valid)."""
    return np.random.default_rng(zlib.crc32(record.encode())).normal(size=(len(record), N_NOISE))


def direct_bh(p):
    """BH by its definition: q_i = min over j with p_j >= p_i of min(1, m p_j / rank_j)."""
    p = np.asarray(p, float)
    m = len(p)
    rank = np.argsort(np.argsort(p, kind="stable"), kind="stable") + 1
    return np.array(
        [min(1.0, min(m * p[j] / rank[j] for j in range(m) if p[j] >= p[i])) for i in range(m)]
    )


def test_bh_qvalues_match_the_definition_and_scipy():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(size=60), rng.uniform(0, 1e-3, 20), [0.5, 0.5, 1.0]])
    q = dl.verify.bh_qvalues(p)
    np.testing.assert_allclose(q, direct_bh(p), rtol=1e-12)
    np.testing.assert_allclose(q, stats.false_discovery_control(p, method="bh"), rtol=1e-12)
    with_nan = dl.verify.bh_qvalues(np.r_[p, np.nan])
    assert np.isnan(with_nan[-1])
    np.testing.assert_allclose(with_nan[:-1], q)  # NaN is not counted as a test
    assert dl.verify.bh_qvalues([]).shape == (0,)


def test_with_qvalues_groups_and_nulls():
    f = pl.DataFrame({"g": ["a", "b", "a", "b", "a"], "p_value": [0.01, 0.2, None, 0.04, 0.03]})
    out = dl.verify.with_qvalues(f, by="g")
    assert out["g"].to_list() == f["g"].to_list()  # row order kept
    a = dl.verify.bh_qvalues([0.01, 0.03])
    b = dl.verify.bh_qvalues([0.2, 0.04])
    assert out["q_value"].to_list() == pytest.approx([a[0], b[0], None, b[1], a[1]], nan_ok=True)
    assert out["q_value"][2] is None
    whole = dl.verify.with_qvalues(f)
    assert whole["q_value"].null_count() == 1


def test_permutation_pvalues_are_uniform_under_the_null():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=16, layers=1), encode=encode_chars, name="toy")
    recs = random_records(300, seed=11, lo=4, hi=14)  # few lengths: big strata
    f = dl.verify.permutation_test(model, [noise], recs, units=[("lstm", "*")], n_permutations=199)
    p = f["p_value"].to_numpy()
    assert len(p) == 16 * N_NOISE and np.isfinite(p).all()
    assert p.min() >= 1 / 200 and p.max() <= 1
    ks = stats.kstest(p, "uniform")
    assert ks.pvalue > 0.01, ks
    assert 0.03 < (p <= 0.05).mean() < 0.08  # the nominal rate, up to the null's discreteness
    assert (f["q_value"] >= f["p_value"]).all()


def test_permutation_test_frame_and_a_true_signal():
    model, S, _ = specialized("paren")
    recs = records(300, seed=12, unique=True)
    h = hypothesis("paren")
    f = dl.verify.permutation_test(model, [h], recs, units=[("lstm", "*")], n_permutations=99)
    ref = dl.inspect(model, [h], ["corr"], recs, units=[("lstm", "*")], eps=None, cache=False)
    assert {k: f.schema[k] for k in SCHEMA} == SCHEMA
    np.testing.assert_allclose(
        f.sort("uid")["unit_score"], ref.sort("uid")["unit_score"], atol=1e-5
    )
    top = f.filter(pl.col("unit").is_in(S))
    assert (top["p_value"] == 1 / 100).all() and (top["q_value"] < 0.05).all()
    assert f["n_records"].unique().to_list() == [len(recs)]
    one_sided = dl.verify.permutation_test(
        model, [h], recs, units=[("lstm", S)], n_permutations=19, alternative="less"
    )
    assert (one_sided["p_value"] == 1.0).all()  # S correlates positively with the signal
    with pytest.raises(ValueError, match="alternative"):
        dl.verify.permutation_test(model, [h], recs, alternative="bigger")


def test_duplicate_records_are_read_once():
    model, _, _ = specialized("paren")
    recs = records(100, seed=13)
    assert len(set(recs)) < len(recs)
    f = dl.verify.permutation_test(
        model, [hypothesis()], recs, units=[("lstm", [0])], n_permutations=9
    )
    assert f["n_records"][0] == len(set(recs))


def test_untrained_copy_and_baseline():
    model, S, _ = specialized("paren")
    copy = dl.verify.untrained_copy(model, seed=1)
    assert copy.name == "parens-paren:untrained" and copy.meta["trained"] is False
    same = dl.verify.untrained_copy(model, seed=1)
    for (name, a), b, c in zip(
        model.module.state_dict().items(),
        copy.module.state_dict().values(),
        same.module.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(b, c), name  # seeded
        assert not torch.equal(a, b) or not a.any(), name  # no trained weight survives
    recs = records(200, seed=14)
    v = dl.verify.untrained_baseline(model, [hypothesis()], recs, units=[("lstm", "*")])
    row = v.summary["by_hypothesis"].row(0, named=True)
    assert row["trained_best"] > row["untrained_best"] + 0.1
    flagged = v.frame.filter(pl.col("above_untrained"))["unit"].to_list()
    assert set(S) <= set(flagged)
    assert v.summary["untrained"]["mid"].unique().to_list() == [copy.name]


def test_control_task_and_selectivity():
    model, S, _ = specialized("depth")
    recs = records(200, seed=15)
    ctrl = dl.verify.control_task(hypothesis("depth"), recs, seed=0)
    r = "0(1())"
    values = ctrl(r)["control:depth"]
    assert values[1] == values[3] and values[4] == values[5]  # one label per symbol type
    real = set(np.concatenate([hypothesis("depth")(x) for x in recs]).round(6))
    assert set(np.round(values, 6)) <= real  # labels drawn from the task's own values
    assert ctrl.fingerprint() == dl.verify.control_task(hypothesis("depth"), recs).fingerprint()
    others = dl.verify.random_unit_sets(64, 4, 2, S, np.random.default_rng(0))
    groups = [("lstm", S)] + [("lstm", o.tolist()) for o in others] + [("lstm", "*")]
    sel = dl.verify.selectivity(model, [hypothesis("depth")], recs, units=groups)
    assert sel.height == 4 and set(sel["measure"]) == {"ridge"} and set(sel["hid"]) == {"depth"}
    s_units, *s_random, s_all = sel["selectivity"].to_list()
    # S holds the depth, not the symbol identity that the control task needs
    assert sel["task_score"][0] > 0.9 and s_units > 0.5
    assert s_units > max(s_random) + 0.2
    # 64 units can memorise a label per symbol type: the control task is solved too, and the
    # layer's high task score alone says little (Hewitt & Liang's warning)
    assert sel["control_score"][3] > 0.9 and abs(s_all) < 0.1
    per_unit = dl.verify.selectivity(model, [hypothesis("depth")], recs, [("lstm", S)], "corr")
    assert per_unit.height == 4 and "uid" in per_unit.columns


def test_selectivity_of_two_signals_of_one_family():
    model, _, _ = specialized("depth")
    recs = records(120, seed=16)

    @dl.hypothesis_family(signals=["depth", "open"])
    def parens_family(r):
        return {"depth": hypothesis("depth")(r), "open": [float(c == "(") for c in r]}

    from dni_lab.backend.query.subset import SubsetFamily

    picked = [SubsetFamily(parens_family, [s]) for s in ("depth", "open")]
    assert dl.verify.control_task(picked[1], recs).signals() == ["control:parens_family.open"]
    sel = dl.verify.selectivity(model, picked, recs, units=[("lstm", "*")])
    assert sorted(sel["hid"]) == ["parens_family.depth", "parens_family.open"]
    assert sel["control_score"].is_not_null().all()  # each task met its own control


def test_untrained_baseline_compares_a_probe_by_its_group_score():
    model, S, _ = specialized("depth")
    recs = records(120, seed=17)
    v = dl.verify.untrained_baseline(model, [hypothesis("depth")], recs,
                                     units=[("lstm", S)], measures="ridge")  # fmt: skip
    row = v.summary["by_hypothesis"].row(0, named=True)
    trained = v.frame["group_score"].drop_nulls()[0]
    assert row["trained_best"] == abs(trained) and row["trained_best"] <= 1.0  # an R², not a weight
    assert row["trained_best"] > row["untrained_best"] + 0.3
