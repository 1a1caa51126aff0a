"""Gradients through the Hugging Face adapter and attribution patching on a planted circuit.

The planted GPT-2 (tests/planted_circuit.py) carries the clean-vs-corrupted logit
difference in one head of block 0. Gradients of the logit difference with respect to a
hook's activations must equal a backward pass written by hand, and attribution patching
(gradient × (clean − corrupted)) must rank the planted head first, as exact patching does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from planted_circuit import CLEAN, CORRUPTED, DH, HEAD, HEADS, build_planted
from tolerances import assert_close_f32


@pytest.fixture(scope="module")
def planted():
    return build_planted()


def hand_gradient(module, tok, record, right, wrong, block):
    """d(logit[right] - logit[wrong]) at the last token / d(block ``block``'s output)."""
    seen = {}

    def keep(_m, _a, out):
        t = out[0] if isinstance(out, tuple) else out
        t.retain_grad()
        seen["h"] = t

    h = module.transformer.h[block].register_forward_hook(keep)
    try:
        logits = module(**tok(record, return_tensors="pt")).logits[0, -1]
        (logits[right] - logits[wrong]).backward()
    finally:
        h.remove()
        module.zero_grad(set_to_none=True)
    return seen["h"].grad[0].detach()


def test_the_metric_gradient_equals_a_hand_backward_and_leaves_grads_alone(planted):
    module, tok, m, answers = planted
    metric = dl.verify.logit_difference(m, answers)
    assert all(p.grad is None for p in module.parameters())
    cache = dl.activations(m, CLEAN, ["blocks.1.hook_resid_post", ("blocks.0.hook_resid_post",
                           [0, 3, 7])], grad=metric, block_size=3, device="cpu")  # fmt: skip
    assert "blocks.1.hook_resid_post_grad" in cache and cache.metric.shape == (len(CLEAN),)
    for i, rec in enumerate(CLEAN):
        a, b = answers[i]
        for block, name, cols in ((1, "blocks.1.hook_resid_post", slice(None)),
                                  (0, "blocks.0.hook_resid_post", [0, 3, 7])):  # fmt: skip
            want = hand_gradient(module, tok, rec, a, b, block)[:, cols]
            got = cache.record(i, f"{name}_grad")
            assert got.shape == want.shape
            assert_close_f32(got, want, scale=float(want.abs().max()), reduction=64 * 8)
        with torch.inference_mode():
            logits = module(**tok(rec, return_tensors="pt")).logits[0, -1]
        assert_close_f32(cache.metric[i], float(logits[a] - logits[b]),
                         scale=float(logits.abs().max()), reduction=64 * 8)  # fmt: skip
    # values still equal the plain cache's
    plain = dl.activations(m, CLEAN, ["blocks.1.hook_resid_post"], device="cpu")
    assert torch.equal(plain["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_post"])
    assert all(p.grad is None for p in module.parameters())
    # a frame of the gradients like any name's
    f = cache.frame("blocks.1.hook_resid_post_grad")
    assert f.height == int(cache.lengths.sum()) * 64


def test_attribution_patching_ranks_the_planted_head_first_as_exact_patching_does(planted):
    _module, _tok, m, answers = planted
    v = dl.verify.attribution_patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", per="head",
                                       answers=answers, exact=True, device="cpu")  # fmt: skip
    f, s = v.frame, v.summary
    assert f.height == HEADS and f.sort("rank")["head"][0] == HEAD
    assert s["top_agrees"]
    planted_row = f.filter(f["head"] == HEAD).row(0, named=True)
    assert planted_row["recovered"] > 0.95  # exact patching of the head alone
    assert planted_row["recovered_est"] > 0.3  # first order through LayerNorm and softmax
    others = f.filter(f["head"] != HEAD)
    assert others["attribution"].abs().max() < 0.05 * abs(planted_row["attribution"])
    print(f"\nattribution vs exact over {HEADS} heads: spearman {s['spearman']:.3f}; planted "
          f"head estimated {planted_row['recovered_est']:.3f}, "
          f"exact {planted_row['recovered']:.3f}")
    # per unit: the head's units carry the attribution
    u = dl.verify.attribution_patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z",
                                       answers=answers, device="cpu")  # fmt: skip
    top = u.frame.sort("rank")["unit"][:4].to_list()
    assert all(HEAD * DH <= x < (HEAD + 1) * DH for x in top)
    heads_sum = u.frame["attribution"].to_numpy().reshape(HEADS, DH).sum(1)
    np.testing.assert_allclose(heads_sum, f["attribution"].to_numpy(), rtol=1e-5, atol=1e-6)


def test_bad_input_is_named_and_the_model_is_left_as_found(planted):
    module, _tok, m, answers = planted
    hooks = [(len(x._forward_hooks), len(x._forward_pre_hooks)) for x in module.modules()]
    module.train()
    try:
        with pytest.raises(LayerError, match="cannot take gradients at"):
            dl.activations(m, CLEAN[:2], ["blocks.0.attn.hook_q"],
                           grad=dl.verify.logit_difference(m, answers), device="cpu")  # fmt: skip
        with pytest.raises(DNIError, match="one value per record"):
            dl.activations(m, CLEAN[:2], ["blocks.0.hook_resid_post"],
                           grad=lambda r, out, i: out.sum(), device="cpu")  # fmt: skip
        with pytest.raises(DNIError, match="does not depend"):
            dl.activations(m, CLEAN[:2], ["blocks.0.hook_resid_post"],
                           grad=lambda r, out, i: out.detach()[:, 0, 0], device="cpu")  # fmt: skip
        with pytest.raises(DNIError, match="per must be"):
            dl.verify.attribution_patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z",
                                           per="neuron", answers=answers)  # fmt: skip
        assert all(x.training for x in module.modules())
    finally:
        module.eval()
    assert hooks == [(len(x._forward_hooks), len(x._forward_pre_hooks)) for x in module.modules()]
    assert all(p.grad is None for p in module.parameters())


def test_inspect_scores_gradient_behaviors_of_a_transformer(planted):
    """``behavior=GradientOf(metric)``: corr of each unit's gradient with a hypothesis,
    equal to the Pearson correlation of dl.activations(grad=...) by hand."""
    _module, _tok, m, answers = planted
    metric = dl.verify.logit_difference(m, answers)

    @dl.hypothesis(level="token")
    def last_token(record):
        n = m.symbols(record)
        return (np.arange(n) == n - 1).astype(np.float32)

    data = CLEAN * 3
    answers3 = answers * 3
    metric = dl.verify.logit_difference(m, answers3)
    frame = dl.inspect(m, [last_token], ["corr"], data, units=[("blocks.1.hook_resid_post", "*")],
                       behavior=dl.verify.GradientOf(metric, "logit_diff"), eps=None,
                       block_size=5, device="cpu", cache=False)  # fmt: skip
    cache = dl.activations(m, data, ["blocks.1.hook_resid_post"], grad=metric, device="cpu")
    g = torch.cat([cache.record(i, "blocks.1.hook_resid_post_grad") for i in range(len(data))])
    h = np.concatenate([(np.arange(n) == n - 1) for n in map(m.symbols, data)])
    want = np.array([np.corrcoef(g[:, u].double().numpy(), h)[0, 1] for u in range(g.shape[1])])
    got = frame.sort("unit")["unit_score"].to_numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.nanmax(np.abs(want)) > 0.5  # the gradient lives at the last token
    assert dl.provenance(frame)["behavior"] == "gradient_of(logit_diff)"
