"""Perturbation with RecordRules: whole-record edits for maps and images (DeepBase §4.4)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl

EMPTY, DOT, OBJECT = 0, 1, 2


class OneByOne(nn.Module):
    """A 1x1 convolution over one-hot cells: unit 0 fires on the object and nowhere else;
    unit 1 on dots; units 2..5 fire alike on dots and the object (they cannot tell them apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 1)
        w = torch.zeros(6, 3)
        w[0, OBJECT] = 1.0
        w[1, DOT] = 1.0
        for u, v in zip(range(2, 6), (0.5, 1.0, 2.0, 3.0), strict=True):
            w[u, DOT] = w[u, OBJECT] = v
        with torch.no_grad():
            self.conv.weight.copy_(w[:, :, None, None])
            self.conv.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def encode(maps):
    codes = torch.as_tensor(np.stack([np.asarray(m, dtype=np.int64) for m in maps]))
    return nn.functional.one_hot(codes, 3).permute(0, 3, 1, 2).float()


def maps(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        m = (rng.random((5, 6)) < 0.5).astype(np.int8)  # dots
        m[divmod(int(rng.integers(30)), 6)] = OBJECT
        out.append(m)
    return out


def has_object(m) -> np.ndarray:
    return (np.asarray(m) == OBJECT).reshape(-1).astype(float)


def edits(m, k):
    """Move the object to cell k (treatment), or toggle the dot at k (baseline)."""
    m = np.asarray(m)
    r, c = divmod(k, m.shape[1])
    if m[r, c] == OBJECT:
        return []
    moved = np.where(m == OBJECT, EMPTY, m).astype(np.int8)
    moved[r, c] = OBJECT
    toggled = m.copy()
    toggled[r, c] = 1 - m[r, c]
    return [(moved, None), (toggled, None)]


@pytest.fixture(scope="module")
def model() -> dl.Model:
    return dl.Model(OneByOne(), encode=encode, name="one-by-one")


def test_the_object_unit_separates_moves_from_dot_toggles(model):
    rules = dl.verify.RecordRules(edits, name="move object / toggle dot")
    v = dl.verify.perturbation(
        model, maps(40), "conv", [0], has_object, rules, n_random=5, max_pairs=60, device="cpu"
    )
    s = v.summary
    assert s["n_baseline"] == s["n_treatment"] == 40  # one pair per map
    # unit 0 moves by exactly 1 when the object arrives, by 0 for a dot: two points
    assert s["silhouette"] == pytest.approx(1.0)
    treat = v.frame.filter(v.frame["kind"] == "treatment")
    assert (treat["replacement"] == str(OBJECT)).all() and (treat["h_perturbed"] == 1.0).all()
    assert np.allclose(np.concatenate(treat["delta"].to_list()), 1.0)
    base = v.frame.filter(v.frame["kind"] == "baseline")
    assert (base["h_perturbed"] == 0.0).all() and np.allclose(base["delta_norm"], 0.0)
    # the others see a dot and the object alike: moving the object onto a dot changes
    # nothing, toggling a dot changes as much as moving it onto an empty cell
    assert max(s["random_silhouettes"]) < 0.5
    assert s["p_value"] == pytest.approx(1 / 6)
    again = dl.verify.perturbation(
        model, maps(40), "conv", [0], has_object, rules, n_random=5, max_pairs=60, device="cpu"
    )
    assert again.frame["position"].to_list() == v.frame["position"].to_list()


def test_explicit_labels_win_over_the_hypothesis(model):
    # both edits labelled by the rule, whatever the hypothesis says at k
    def labelled(m, k):
        pairs = zip(edits(m, k), ("baseline", "treatment"), strict=False)
        return [(e, lab) for (e, _), lab in pairs]

    v = dl.verify.perturbation(
        model, maps(10), "conv", [0], has_object, dl.verify.RecordRules(labelled),
        n_random=2, device="cpu",
    )  # fmt: skip
    base = v.frame.filter(v.frame["kind"] == "baseline")
    assert (base["h_perturbed"] == 1.0).all()  # the object moved, yet "baseline" as told


def test_record_rules_explain_their_mistakes(model):
    recs = maps(3)
    with pytest.raises(dl.DNIError, match="RecordRules"):  # symbol swaps cannot edit a map
        dl.verify.perturbation(model, recs, "conv", [0], has_object, [0, 1], device="cpu")
    with pytest.raises(dl.DNIError, match="pairs"):
        dl.verify.RecordRules(lambda m, k: [m]).candidates(recs[0], 0)
    with pytest.raises(dl.DNIError, match="label 'treat'"):
        dl.verify.RecordRules(lambda m, k: [(m, "treat")]).candidates(recs[0], 0)
    with pytest.raises(dl.DNIError, match="needs a function"):
        dl.verify.RecordRules("not callable")
    shrink = dl.verify.RecordRules(lambda m, k: [(np.asarray(m)[:4], None)])
    with pytest.raises(dl.DNIError, match="keep the symbol count"):
        dl.verify.perturbation(model, recs, "conv", [0], has_object, shrink, device="cpu")
    assert repr(shrink) == "RecordRules('record rules')"
    assert dl.verify.candidates(shrink, recs[0], 0)[0][1] is None
