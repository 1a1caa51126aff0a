"""Early stopping keeps its promise: scores within eps of the full-data value."""

from __future__ import annotations

import functools

import numpy as np
import polars as pl
import torch
from scipy.signal import lfilter
from torch import nn

import dni_lab as dl

N_UNITS, N_HYPS = 24, 6
WEIGHTS = np.linspace(0.0, 1.6, N_UNITS)  # true affinities from none to strong


@functools.cache
def _record(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth (autocorrelated) hypotheses and units inside one record."""
    rng = np.random.default_rng(seed)
    L = int(rng.integers(15, 45))
    # runs of 1s: binary hypotheses that are constant over stretches of symbols
    hyps = np.zeros((L, N_HYPS), np.float32)
    for k in range(N_HYPS):
        start, width = rng.integers(0, L), rng.integers(2, 10)
        hyps[start : start + width, k] = 1.0
    # AR(1) noise, phi=0.9: neighbouring symbols are far from independent
    e = rng.normal(size=(L, N_UNITS)) * 0.44
    noise = lfilter([1.0], [1.0, -0.9], e, axis=0).astype(np.float32)
    units = noise + hyps[:, np.arange(N_UNITS) % N_HYPS] * WEIGHTS
    return units, hyps


class Replay(nn.Module):
    """Stands in for a network whose activations we control exactly."""

    def forward(self, x):
        return x


def _encode(records):
    arrs = [_record(r)[0] for r in records]
    T = max(len(a) for a in arrs)
    out = torch.zeros(len(arrs), T, N_UNITS)
    for i, a in enumerate(arrs):
        out[i, : len(a)] = torch.from_numpy(a)
    return out


def _hyp_family():
    return dl.hypothesis_family(signals=[f"h{k}" for k in range(N_HYPS)], name="runs")(
        lambda seed: _record(seed)[1]
    )


def test_early_stopped_scores_within_eps_of_full_data():
    model = dl.Model(Replay(), encode=_encode, symbols=lambda s: len(_record(s)[0]), name="replay")
    data = list(range(20_000))
    fam = _hyp_family()
    full = dl.inspect([model], [fam], ["corr"], data, units=[("", "*")], eps=None, block_size=1024)
    early = dl.inspect([model], [fam], ["corr"], data, units=[("", "*")], eps=0.025, block_size=256)
    key = ["uid", "hid"]
    j = early.join(full, on=key, suffix="_full")
    diff = (j["unit_score"] - j["unit_score_full"]).abs().to_numpy()
    within = float(np.mean(diff <= 0.025))
    assert within >= 0.95, f"only {within:.1%} of early-stopped scores are within eps"
    assert early["n_records"].max() < 20_000, "early stopping read every record"
    assert full["n_records"].min() == 20_000
    assert full["converged"].all()
    done = early.filter(pl.col("converged"))
    assert done.height >= 0.9 * early.height
    assert (done["err"] <= 0.025).all()
    # every pair left open says why, and none of them is among its hypothesis's top units
    left = early.filter(~pl.col("converged"))
    assert left["reason"].str.starts_with("left open").all()
    top = early.with_columns(pl.col("unit_score").abs().rank("ordinal", descending=True)
                             .over("hid").alias("rank"))
    assert top.filter(pl.col("rank") <= 3)["converged"].all()
