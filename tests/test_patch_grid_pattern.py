"""The ``pattern`` site of ``dl.verify.patch_grid``: one head's attention weights patched.

Each cell must equal a GPT-2 forward written out by hand here (no Hugging Face code in
it) in which block ``l``'s head ``h`` uses the source run's softmax output instead of
its own, and the head's output is that pattern times the target run's values. The null
grid is the grid patched from the partners; an attention module that computes no
softmax is refused naming the layer, and the model is left as it was found.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError
from dni_lab.backend.verify.patch_grid import derangement

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

WORDS = "the a cat dog sat ran on under mat box red blue".split()
PAIRS, TOKENS = 4, 6


@pytest.fixture(scope="module")
def tiny():
    from hypotheses.workloads.hf_tokenizers import bpe

    rng = np.random.default_rng(0)
    tok = bpe([" ".join(rng.choice(WORDS, 20)) for _ in range(16)], vocab_size=120)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=16, n_embd=32, n_layer=2,
                                  n_head=4, initializer_range=0.3, bos_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id)  # fmt: skip
    module = transformers.GPT2LMHeadModel(cfg).eval()
    m = dl.Model.from_hf(module, tok, name="tiny")
    vocab = len(tok)
    clean = rng.integers(1, vocab, (PAIRS, TOKENS))
    corrupted = clean.copy()
    corrupted[:, 1] = clean[:, 1] % (vocab - 1) + 1
    answers = [(int(a), int(a) % (vocab - 1) + 1) for a in rng.integers(1, vocab, PAIRS)]
    return module, m, clean.tolist(), corrupted.tolist(), answers


def manual(module, ids, patch=None):
    """GPT-2 by hand: ``(logits, patterns)``; ``patch = (layer, head, pattern)`` puts
    ``pattern`` (``(R, T, T)``) in place of that head's softmax output."""
    tr, cfg = module.transformer, module.config
    x = torch.as_tensor(ids)
    R, T = x.shape
    nh, d = cfg.n_head, cfg.n_embd // cfg.n_head
    h = tr.wte(x) + tr.wpe(torch.arange(T))
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    patterns = []
    for i, b in enumerate(tr.h):
        a = b.ln_1(h)
        q, k, v = (a @ b.attn.c_attn.weight + b.attn.c_attn.bias).split(cfg.n_embd, dim=-1)
        q, k, v = (t.view(R, T, nh, d).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        p = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        patterns.append(p)
        if patch is not None and patch[0] == i:
            p = p.clone()
            p[:, patch[1]] = patch[2]
        z = (p @ v).transpose(1, 2).reshape(R, T, -1)
        h = h + (z @ b.attn.c_proj.weight + b.attn.c_proj.bias)
        u = b.ln_2(h) @ b.mlp.c_fc.weight + b.mlp.c_fc.bias
        u = torch.nn.functional.gelu(u, approximate="tanh")
        h = h + (u @ b.mlp.c_proj.weight + b.mlp.c_proj.bias)
    return module.lm_head(tr.ln_f(h)), patterns


def logit_diff(logits, answers):
    ans = torch.as_tensor(answers)
    last = logits[:, -1]
    return (last.gather(1, ans[:, :1]) - last.gather(1, ans[:, 1:]))[:, 0]


def test_pattern_cells_equal_a_hand_written_forward_with_the_softmax_replaced(tiny):
    module, m, clean, corrupted, answers = tiny
    g = dl.verify.patch_grid(m, clean, corrupted, "pattern", answers=answers, device="cpu")
    f = g.frame
    assert f.height == 2 * 4 and f["position"].null_count() == f.height
    assert g.summary["by"] == "head" and g.summary["site"] == "pattern"
    with torch.inference_mode():
        _, src = manual(module, clean)
        base = logit_diff(manual(module, corrupted)[0], answers).mean()
        worst = 0.0
        for row in f.iter_rows(named=True):
            L, hd = row["layer"], row["head"]
            want = logit_diff(manual(module, corrupted, (L, hd, src[L][:, hd]))[0], answers)
            worst = max(worst, abs(float(want.mean()) - row["metric"]))
            assert row["effect"] == pytest.approx(row["metric"] - float(base), abs=1e-5)
    assert worst < 1e-4
    # a pattern moves the metric: the check above compares something that varies
    assert float(f["effect"].abs().max()) > 1e-3


def test_the_pattern_null_is_the_grid_patched_from_partners(tiny):
    module, m, clean, corrupted, answers = tiny
    g = dl.verify.patch_grid(m, clean, corrupted, "pattern", answers=answers, seed=5,
                             device="cpu", layers=[1])  # fmt: skip
    perm = derangement(PAIRS, np.random.default_rng(5))
    with torch.inference_mode():
        _, src = manual(module, clean)
        for row in g.frame.iter_rows(named=True):
            hd = row["head"]
            want = logit_diff(manual(module, corrupted, (1, hd, src[1][perm, hd]))[0], answers)
            assert abs(float(want.mean()) - row["null_metric"]) < 1e-4


def test_pattern_bad_input_is_refused_and_the_model_left_as_found(tiny):
    module, m, clean, corrupted, answers = tiny
    with pytest.raises(DNIError, match="patched by 'head'"):
        dl.verify.patch_grid(m, clean, corrupted, "pattern", by="head_position",
                             answers=answers)  # fmt: skip
    with pytest.raises(LayerError, match="heads \\[7\\] do not exist"):
        dl.verify.patch_grid(m, clean, corrupted, "pattern", heads=[7], answers=answers)
    with pytest.raises(DNIError, match="attribution grids do not"):
        dl.verify.attribution_grid(m, clean, corrupted, "pattern", answers=answers)
    attn = module.transformer.h[1].attn
    impl = module.config._attn_implementation
    # an attention that computes no softmax (here: none at all): refused, naming the layer
    attn.forward = lambda hidden_states, *a, **k: (torch.zeros_like(hidden_states), None)
    try:
        with pytest.raises(LayerError, match=r"blocks\.1\.attn\.hook_pattern.*0 softmaxes"):
            dl.verify.patch_grid(m, clean, corrupted, "pattern", answers=answers, device="cpu")
    finally:
        del attn.forward
    for mod in module.modules():
        assert not mod._forward_hooks and not mod._forward_pre_hooks
    assert module.config._attn_implementation == impl
    assert not torch.overrides._is_torch_function_mode_enabled()
    # and the model still runs as it did
    g = dl.verify.patch_grid(m, clean, corrupted, "pattern", layers=[0], heads=[0],
                             answers=answers, null=False, device="cpu")  # fmt: skip
    assert g.frame.height == 1


def test_pattern_layouts_must_match_position_for_position():
    from dni_lab.backend.verify.grid_pattern import check_layouts

    ids = torch.ones(2, 3, dtype=torch.long)
    full = {"input_ids": ids, "attention_mask": torch.ones(2, 3, dtype=torch.long)}
    check_layouts(full, full, [0, 1])  # the same layout: accepted
    padded = {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1], [0, 1, 1]])}
    with pytest.raises(DNIError, match=r"pairs \[0, 1\].*same token count"):
        check_layouts(full, padded, [0, 1])
    with pytest.raises(DNIError, match="same positions"):
        check_layouts(padded, padded, [0, 1])  # rows of one batch laid out differently
