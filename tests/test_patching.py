"""Activation patching on a planted circuit whose answer is known (tests/planted_circuit.py).

A GPT-2 of 16 heads per block (built from a config) gets one head planted in block 0:
every query attends to the first token and the head copies that token's embedding into the
residual stream, where the (tied) unembedding reads it. Clean and corrupted records differ
in their first word only, so the logit difference between the two first words at the last
token is carried by that head: patching it restores the difference, random heads do not.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from planted_circuit import CLEAN, CORRUPTED, DH, HEAD, HEADS, D, build_planted  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402


@pytest.fixture(scope="module")
def planted():
    return build_planted()


def logit_diffs(module, tok, records, answers, patch=None) -> np.ndarray:
    """Per record, by hand: logit(right) - logit(wrong) at the last token; ``patch(i)`` is
    a pre-hook for the out projection of block 0 while record ``i`` runs."""
    out = []
    for i, rec in enumerate(records):
        h = (
            module.transformer.h[0].attn.c_proj.register_forward_pre_hook(patch(i))
            if patch
            else None
        )
        try:
            with torch.inference_mode():
                logits = module(**tok(rec, return_tensors="pt")).logits[0, -1]
        finally:
            if h is not None:
                h.remove()
        a, b = answers[i]
        out.append(float(logits[a] - logits[b]))
    return np.asarray(out)


def test_the_planted_head_moves_the_logit_difference_and_random_heads_do_not(planted):
    module, tok, m, answers = planted
    v = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                           answers=answers, n_random=19, device="cpu")  # fmt: skip
    s = v.summary
    assert s["layer"] == "transformer.h.0.attn.hook_z" and s["heads"] == [HEAD]
    assert s["units"] == list(range(HEAD * DH, (HEAD + 1) * DH))
    # the unpatched runs, by hand
    clean = logit_diffs(module, tok, CLEAN, answers)
    corrupted = logit_diffs(module, tok, CORRUPTED, answers)
    assert clean.mean() > 1 and corrupted.mean() < -1  # the head decides the answer
    assert_close_f32(s["clean"], clean.mean(), scale=np.abs(clean).max(), reduction=D * 4)
    assert_close_f32(s["corrupted"], corrupted.mean(), scale=np.abs(clean).max(), reduction=D * 4)
    # the patched run, by hand: the head's clean values at the out projection's input
    seen = {}
    for i, rec in enumerate(CLEAN):
        h = module.transformer.h[0].attn.c_proj.register_forward_pre_hook(
            lambda _m, a, i=i: seen.__setitem__(i, a[0].clone())
        )
        with torch.inference_mode():
            module(**tok(rec, return_tensors="pt"))
        h.remove()
    cols = slice(HEAD * DH, (HEAD + 1) * DH)

    def put(i):
        def hook(_m, a):
            x = a[0].clone()
            x[..., cols] = seen[i][..., cols]
            return (x,)

        return hook

    by_hand = logit_diffs(module, tok, CORRUPTED, answers, put).mean()
    f = v.frame
    tested = f.filter(pl.col("set") == "tested").row(0, named=True)
    assert_close_f32(tested["metric"], by_hand, scale=np.abs(clean).max(), reduction=D * 4)
    assert tested["recovered"] > 0.95  # measured: 1.0002
    rand = f.filter(pl.col("set") == "random")
    assert rand.height == 19 and HEAD not in {h for hs in rand["heads"] for h in hs}
    assert rand["recovered"].abs().max() < 0.05  # measured: < 1e-4
    (row,) = s["per_k"].iter_rows(named=True)
    assert row["p_value"] == pytest.approx(1 / 20)
    assert row["possible_sets"] == HEADS - 1


def test_noising_and_positions(planted):
    _module, _tok, m, answers = planted
    kw = dict(answers=answers, n_random=3, device="cpu")
    noise = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                               direction="noise", **kw)  # fmt: skip
    assert noise.summary["direction"] == "noise"
    assert noise.frame["recovered"][0] > 0.9  # the corrupted head breaks the clean answer
    last = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                              positions=[-1], **kw)  # fmt: skip
    first = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                               positions=[0], **kw)  # fmt: skip
    # the head copies at the last token: its value there is the whole effect
    assert last.frame["recovered"][0] > 0.9
    assert abs(first.frame["recovered"][0]) < 0.2
    # units instead of heads: the head's units are the same patch
    units = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z",
                               units=list(range(HEAD * DH, (HEAD + 1) * DH)), **kw)  # fmt: skip
    every = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD], **kw)
    assert units.frame["metric"][0] == every.frame["metric"][0]
    assert units.frame["heads"][0] is None


def test_a_user_metric_and_the_default_answers(planted):
    _module, _tok, m, answers = planted
    ids = torch.as_tensor(answers)

    def right_prob(records, output, pairs):
        from dni_lab.backend.verify.patching import _last_symbol

        return _last_symbol(m, records, output).softmax(-1).gather(1, ids[pairs][:, :1])[:, 0]

    v = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                           metric=right_prob, n_random=3, device="cpu")  # fmt: skip
    assert v.summary["clean"] > v.summary["corrupted"]
    assert v.frame["recovered"][0] > 0.8
    # no answers: each run's own top token at the last symbol
    d = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                           n_random=3, device="cpu")  # fmt: skip
    assert d.summary["clean"] > 0 > d.summary["corrupted"]


def test_the_model_is_left_as_found_and_bad_input_is_named(planted):
    module, _tok, m, answers = planted
    before = [p.detach().clone() for p in module.parameters()]
    hooks = [(len(x._forward_hooks), len(x._forward_pre_hooks)) for x in module.modules()]
    module.train()
    try:
        with pytest.raises(DNIError, match="pair 0"):
            dl.verify.patching(m, ["select a b"], ["where"], "blocks.0.attn.hook_z",
                               heads=[HEAD], device="cpu")  # fmt: skip
        with pytest.raises(DNIError, match="units=.*or heads="):
            dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", device="cpu")
        with pytest.raises(LayerError, match="not read per head"):
            dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.hook_resid_post", heads=[0],
                               device="cpu")  # fmt: skip
        dl.verify.patching(m, CLEAN[:2], CORRUPTED[:2], "blocks.0.attn.hook_z", heads=[HEAD],
                           answers=answers[:2], n_random=2, device="cpu")  # fmt: skip
        assert all(x.training for x in module.modules())
    finally:
        module.eval()
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    assert hooks == [(len(x._forward_hooks), len(x._forward_pre_hooks)) for x in module.modules()]


def test_the_plot_shows_the_tested_set_against_random_sets(planted):
    pytest.importorskip("altair")
    from dni_lab.widgets import patching_chart

    _module, _tok, m, answers = planted
    v = dl.verify.patching(m, CLEAN[:4], CORRUPTED[:4], "blocks.0.attn.hook_z", heads=[HEAD],
                           answers=answers[:4], n_random=3, device="cpu")  # fmt: skip
    chart, data, keys = patching_chart(v)
    assert data["label"].to_list() == ["tested", "random", "random", "random"]
    assert data["recovered"].to_list() == v.frame["recovered"].to_list()
    spec = chart.to_dict()
    assert "transformer.h.0.attn.hook_z" in str(spec) and keys == []
