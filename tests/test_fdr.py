"""FDR control in the query: p-values, BH q-values and discoveries, read to the end and
stopped early, on planted data where the truth is known; the SQL form; bad levels."""

from __future__ import annotations

import functools

import numpy as np
import polars as pl
import pytest
import torch
from conftest import CharLM, encode_chars, paren, position, random_records
from polars.testing import assert_frame_equal
from scipy import stats
from torch import nn

import dni_lab as dl
from dni_lab.backend.engine.fdr import p_values
from dni_lab.backend.errors import DNIError
from dni_lab.backend.measures.corr import Corr

FDR = 0.05
# 500 units x 2 hypotheses = 1,000 pairs a run; units 0..24 carry hypothesis h0, every
# other pair (975) is pure noise. Records of L symbols, i.i.d. within and across records.
N_UNITS, N_HYPS, PLANTED, L, RECORDS = 500, 2, 25, 10, 600
WEIGHT = 0.3  # planted correlation about 0.14: some 5 standard errors at 200 records
SEEDS = 100


class Replay(nn.Module):
    """Stands in for a network: its output is the activations the test planted."""

    def forward(self, x):
        return x


@functools.cache
def _planted(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    H = (rng.random((RECORDS, L, N_HYPS)) < 0.3).astype(np.float32)
    U = rng.normal(size=(RECORDS, L, N_UNITS)).astype(np.float32)
    U[:, :, :PLANTED] += WEIGHT * H[:, :, :1]
    return U, H


def _run(seed: int, eps: float | None) -> pl.DataFrame:
    U, H = _planted(seed)
    model = dl.Model(
        Replay(), layouts={"": "n s u"}, name="replay",
        encode=lambda recs: torch.from_numpy(U[recs]), symbols=lambda r: L,
    )  # fmt: skip
    fam = dl.hypothesis_family(signals=[f"h{k}" for k in range(N_HYPS)], name="h")(lambda r: H[r])
    return dl.inspect([model], [fam], ["corr"], list(range(RECORDS)), units=[("", "*")],
                      eps=eps, block_size=40, cache=False, fdr=FDR)  # fmt: skip


@pytest.mark.parametrize("eps", [None, 0.05, 0.03], ids=["read-to-end", "eps-0.05", "eps-0.03"])
def test_false_discovery_rate_is_controlled_on_planted_data(eps):
    fdp, recall, records = [], [], []
    for seed in range(SEEDS):
        f = _run(seed, eps)
        true = ((f["unit"] < PLANTED) & (f["hid"] == "h.h0")).to_numpy()
        sig = f["significant"].to_numpy()
        fdp.append((sig & ~true).sum() / max(int(sig.sum()), 1))
        recall.append((sig & true).sum() / PLANTED)
        records.append(f["n_records"].mean())
        assert dl.provenance(f)["fdr_control"]["tested"] == {"corr": N_UNITS * N_HYPS}
    fdp_mean, fdp_se = float(np.mean(fdp)), float(np.std(fdp, ddof=1) / np.sqrt(SEEDS))
    print(
        f"eps={eps}: mean FDP {fdp_mean:.4f} (se {fdp_se:.4f}) over {SEEDS} seeds, "
        f"recall {np.mean(recall):.3f}, records read per pair {np.mean(records):.0f}"
    )
    if eps is not None:
        assert np.mean(records) < 0.8 * RECORDS, "early stopping read (nearly) every record"
    # BH promises E[FDP] <= (975/1000) * FDR with independent p-values; the mean over the
    # seeds estimates E[FDP] with the standard error printed above: two of them are the
    # Monte-Carlo margin (a run exactly at the bound would exceed it 2.3% of the time).
    assert fdp_mean <= FDR + 2 * fdp_se
    assert np.mean(recall) >= 0.8  # planted at ~5 standard errors: most are found


def test_null_p_values_are_uniform_read_to_the_end():
    """A t-test on corr's jackknife error: under no relation p is uniform (KS test)."""
    p = np.concatenate([
        _run(seed, None).filter(pl.col("unit") >= PLANTED)["p_value"].to_numpy()
        for seed in range(5)
    ])  # fmt: skip
    assert stats.kstest(p, "uniform").pvalue > 0.01
    assert abs(float(np.mean(p < 0.05)) - 0.05) < 0.01  # 4,750 p-values: se 0.003


def test_p_value_is_the_t_test_the_error_stands_for():
    corr = Corr(buckets=20)
    q = stats.t.ppf(0.975, 19)
    score, se = np.array([0.3, -0.1, 0.0, np.nan, 0.2]), np.array([0.1, 0.1, 0.1, 0.1, np.nan])
    p = p_values(score, se * q, corr, 0.95)
    want = 2 * stats.t.sf(np.abs(score[:3]) / se[:3], 19)
    np.testing.assert_allclose(p[:3], want, rtol=1e-9)
    assert np.isnan(p[3:]).all()  # an undefined score or error: no p-value
    # with early stopping an error below eps counts as eps (the stop selected it)
    assert p_values(score[:1], np.array([0.01]), corr, 0.95, eps=0.05)[0] == pytest.approx(
        2 * stats.t.sf(0.3 / (0.05 / q), 19)
    )


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=6), encode_chars, name="toy"), random_records(240, seed=3)


def test_sql_with_fdr_gives_the_q_values_of_inspect(lm):
    model, recs = lm
    want = dl.inspect([model], [paren, position], ["corr"], recs, eps=None, fdr=FDR)
    ns = {"lm": model, "texts": recs, "hyps": [paren, position]}
    key = ["mid", "uid", "hid", "measure"]
    for sql in (
        "SELECT * INSPECT lm AND hyps OVER texts WITH FDR 0.05, eps = NULL",
        "SELECT * INSPECT lm AND hyps OVER texts WITH FDR 0.05 (eps = NULL)",
        "SELECT * INSPECT lm AND hyps OVER texts WITH (eps = NULL, fdr = 0.05)",
    ):
        got = dl.query(sql, namespace=ns)
        assert_frame_equal(got.sort(key), want.sort(key))
        assert got["q_value"].is_not_null().sum() > 0
    tested = dl.provenance(got)["fdr_control"]["tested"]["corr"]
    assert tested == want["p_value"].is_not_null().sum()
    # HAVING reads S's new columns
    sig = dl.query("SELECT S.uid, S.q_value INSPECT lm AND hyps OVER texts AS S "
                   "HAVING S.significant WITH FDR 0.05, eps = NULL", namespace=ns)  # fmt: skip
    assert sig.height == int(want["significant"].sum())
    assert (sig["q_value"] <= FDR).all()


@pytest.mark.parametrize("bad", [0, 1.5, "x", -0.05])
def test_a_bad_fdr_is_refused_naming_the_value(lm, bad):
    model, recs = lm
    with pytest.raises(DNIError, match=repr(bad)):
        dl.inspect([model], [paren], ["corr"], recs[:20], fdr=bad)
    ns = {"lm": model, "texts": recs[:20], "hyps": [paren]}
    written = f"'{bad}'" if isinstance(bad, str) else str(bad)
    with pytest.raises(DNIError, match="WITH FDR takes") as err:
        dl.query(f"SELECT * INSPECT lm AND hyps OVER texts WITH FDR {written}", namespace=ns)
    assert repr(written) in str(err.value)
    assert "^" in str(err.value)  # the caret under the value


def test_pairs_without_p_values_are_null_and_not_counted(lm):
    model, recs = lm
    # diffmeans has no null_score (and no error estimate); 100 records is fewer than corr's
    # jackknife needs (160) for an error: no pair here can be tested
    f = dl.inspect([model], [paren], ["corr", "diffmeans"], recs[:100], eps=None, fdr=FDR)
    assert f["p_value"].is_null().all() and f["q_value"].is_null().all()
    assert not f["significant"].any()
    rec = dl.provenance(f)["fdr_control"]
    assert rec["tested"] == {"corr": 0} and rec["no_p_values"] == ["diffmeans"]
    # with enough records corr's pairs are tested, diffmeans' still are not
    f = dl.inspect([model], [paren], ["corr", "diffmeans"], recs, eps=None, fdr=FDR)
    by = f.group_by("measure").agg(pl.col("p_value").is_not_null().sum()).sort("measure")
    assert by.rows() == [("corr", f.filter(pl.col("measure") == "corr")["err"].is_not_null().sum()),
                         ("diffmeans", 0)]  # fmt: skip
    assert "p_value" not in dl.inspect([model], [paren], ["corr"], recs[:20]).columns
