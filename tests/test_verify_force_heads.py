"""Forcing and ablating per-head units (``attn.hook_z``): the out projection's *input*.

``blocks.N.attn.hook_z`` reads the input of the attention's out projection (heads ×
head_dim units, head-major), so forcing unit ``u`` must change column ``u`` of that
input, seen by a hand-written pre-hook, and not the projection's hidden-size output.
A Qwen3 whose heads × head_dim (64) is not its hidden size (32), and a GPT-2 (Conv1D).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.verify.common import forward_output
from dni_lab.backend.verify.force import force_units

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

RECORDS = ["select a from tab", "x1 = 1", "insert into tab values a b", "where"]
CPU = torch.device("cpu")
HEADS, HEAD_DIM = 4, 16  # Qwen3: 64 per-head units over a hidden size of 32


@pytest.fixture(scope="module")
def tok():
    return bpe(RECORDS * 4, vocab_size=280)


@pytest.fixture(scope="module")
def qwen3(tok):
    cfg = transformers.Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS // 2,
        head_dim=HEAD_DIM,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = HFModel(transformers.Qwen3ForCausalLM(cfg).eval(), tok, name="qwen3")
    return model, model.module.model.layers[1].self_attn.o_proj, "model.layers.1.attn.hook_z"


@pytest.fixture(scope="module")
def gpt2(tok):
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=4
    )
    torch.manual_seed(0)
    model = HFModel(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="gpt2")
    return model, model.module.transformer.h[1].attn.c_proj, "transformer.h.1.attn.hook_z"


def projection_io(model: HFModel, proj: nn.Module, *forcing) -> tuple[torch.Tensor, torch.Tensor]:
    """The out projection's input and output over RECORDS, ``forcing`` = (addr, units, values).

    The observers are registered after the forcing hooks, so they see forced values.
    """
    seen = {}
    with contextlib.ExitStack() as stack, torch.inference_mode():
        if forcing:
            stack.enter_context(force_units(model, *forcing))
        pre = proj.register_forward_pre_hook(lambda _m, a: seen.update(x=a[0].clone()))
        post = proj.register_forward_hook(lambda _m, _a, out: seen.update(y=out.clone()))
        stack.callback(pre.remove)
        stack.callback(post.remove)
        forward_output(model, RECORDS, CPU)
    return seen["x"], seen["y"]


def symbol_mask(model: HFModel, t: torch.Tensor) -> torch.Tensor:
    """``(R, T_tokens)``: True at the tokens that are symbols of the batch last run."""
    index, real = model.symbol_slots(t)
    return torch.zeros(t.shape[:2], dtype=torch.bool).scatter(1, index, real)


@pytest.mark.parametrize("which", ["qwen3", "gpt2"])
def test_forcing_a_head_unit_changes_exactly_that_column_of_the_projection_input(which, request):
    model, proj, addr = request.getfixturevalue(which)
    width = model.layer_widths(RECORDS, CPU)[addr]
    assert width == (HEADS * HEAD_DIM if which == "qwen3" else 32)
    plain_x, plain_y = projection_io(model, proj)
    assert plain_x.shape[-1] == width
    sym = symbol_mask(model, plain_x)
    # unit 40 lies past the hidden size on Qwen3 (it used to raise an IndexError)
    for u in sorted({0, 40 % width, width - 1}):
        x, y = projection_io(model, proj, addr, [u], 3.0)
        assert torch.all(x[..., u][sym] == 3.0), u
        torch.testing.assert_close(x[..., u][~sym], plain_x[..., u][~sym])  # specials, padding
        others = [c for c in range(width) if c != u]
        torch.testing.assert_close(x[..., others], plain_x[..., others])
        # the projection ran on the forced input: its output is not edited directly
        with torch.inference_mode():
            torch.testing.assert_close(y, proj(x))
        assert not torch.allclose(y, plain_y)


def test_a_pattern_lands_on_each_symbol_of_the_projection_input(qwen3):
    model, proj, addr = qwen3
    n = [model.symbols(r) for r in RECORDS]
    units = [5, HEADS * HEAD_DIM - 1]
    pattern = torch.arange(len(RECORDS) * max(n) * 2, dtype=torch.float32)
    pattern = pattern.reshape(len(RECORDS), max(n), 2)
    x, _ = projection_io(model, proj, addr, units, pattern)
    got = model.gather_symbols(x)
    for r, k in enumerate(n):
        torch.testing.assert_close(got[r, :k][:, units], pattern[r, :k])


def test_ablating_the_last_head_zeroes_its_units_and_runs_the_ablation(qwen3):
    model, proj, addr = qwen3
    last = list(range((HEADS - 1) * HEAD_DIM, HEADS * HEAD_DIM))
    plain_x, _ = projection_io(model, proj)
    x, _ = projection_io(model, proj, addr, last, 0.0)
    sym = symbol_mask(model, x)
    assert torch.all(x[..., last][sym] == 0) and plain_x[..., last][sym].abs().sum() > 0
    torch.testing.assert_close(x[..., : last[0]], plain_x[..., : last[0]])
    v = dl.verify.ablation(
        model,
        RECORDS,
        "blocks.1.attn.hook_z",
        last,
        evaluate=dl.verify.next_symbol_accuracy(model, score="log_likelihood"),
        n_random=2,
        device="cpu",
    )
    frame = v.frame
    assert v.summary["layer"] == addr
    top = frame.filter(frame["set"] == "top")
    assert top["units"][0].to_list() == last
    assert top["drop"][0] != 0  # removing a head changes the next-token likelihood
    assert max(max(u) for u in frame["units"].to_list()) < HEADS * HEAD_DIM


def test_a_real_module_named_like_heads_is_forced_at_its_output():
    """A module path ending in ``attn.hook_z`` (a TransformerLens hook point) is read,
    and so forced, at its output, as the plain model's capture reads it."""
    attn = nn.Module()
    attn.hook_z = nn.Linear(3, 5)
    model = dl.Model(nn.Sequential(nn.ModuleDict({"attn": attn})), name="named-like-heads")
    layer = model.module[0]["attn"].hook_z
    x = torch.randn(4, 3)
    with force_units(model, "0.attn.hook_z", [4], 2.0), model.capture(["0.attn.hook_z"]) as s:
        layer(x)
    assert torch.all(s["0.attn.hook_z"][:, 4] == 2.0)
