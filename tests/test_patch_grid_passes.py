"""How a patching grid's passes are cut, and what its null is, on the planted GPT-2.

A grid's patched passes start late: at the patched token (the target run's keys and
values before it), after the blocks before the site, and after the part of a block
before it (an attention under a head's output, the block's MLP under ``mlp_out``). None of
this may change a cell: each shortcut turned off gives the same grid. The null grid is
the grid of each record patched from its null partner's source: the same cells as a grid
whose clean records are the partners.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.verify import grid_kernels, grid_prefix, grid_replay
from dni_lab.backend.verify.patch_grid import derangement

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from planted_circuit import build_planted
from test_patch_grid import SAME_CLEAN, SAME_CORRUPTED, Passes


@pytest.fixture(scope="module")
def planted():
    module, tok, m, _answers = build_planted()
    same = [(tok(a)["input_ids"][0], tok(b)["input_ids"][0])
            for a, b in zip(SAME_CLEAN, SAME_CORRUPTED, strict=True)]  # fmt: skip
    return module, tok, m, same


@pytest.mark.parametrize("site", ["resid_pre", "resid_mid", "z"])
def test_the_null_is_the_grid_patched_from_random_other_pairs(planted, site):
    _module, _tok, m, same = planted
    g = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, site, answers=same, seed=3,
                             device="cpu")  # fmt: skip
    # one batch of one length: its pairing is one derangement of the seed's generator
    perm = derangement(len(SAME_CLEAN), np.random.default_rng(3)).tolist()
    assert all(p != i for i, p in enumerate(perm))
    donors = [SAME_CLEAN[p] for p in perm]
    want = dl.verify.patch_grid(m, donors, SAME_CORRUPTED, site, answers=same, null=False,
                                device="cpu")  # fmt: skip
    np.testing.assert_allclose(g.frame["null_metric"], want.frame["metric"], atol=1e-5)
    # a partner's values are not the record's own: the null is no copy of the grid
    assert np.abs(g.frame["null_metric"] - g.frame["metric"]).max() > 1e-3


@pytest.mark.parametrize("site", ["resid_pre", "mlp_out", "attn_out", "z", "q"])
def test_late_starts_and_replayed_parts_change_no_cell(planted, site, monkeypatch):
    module, tok, m, same = planted
    fast = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, site, answers=same,
                                device="cpu")  # fmt: skip
    monkeypatch.setattr(grid_prefix.Prefix, "check", lambda *_a: False)
    monkeypatch.setattr(grid_replay.Inner, "holds", lambda *_a: False)
    with Passes(module) as seen:
        slow = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, site, answers=same,
                                    device="cpu")  # fmt: skip
    T = len(tok(SAME_CLEAN[0])["input_ids"])
    assert set(seen.tokens) == {T}  # without the check, every pass from token 0
    for col in ("metric", "null_metric"):
        np.testing.assert_allclose(fast.frame[col], slow.frame[col], atol=1e-5)


def test_a_metric_of_the_whole_output_sees_every_token_of_a_late_pass(planted):
    _module, _tok, m, same = planted
    ids = torch.as_tensor(same)
    seen_tokens: list[int] = []

    def logit_diff(records, output, pairs):
        seen_tokens.append(output.shape[1])
        last = output[:, -1]  # one length, no padding: the last token is the last symbol
        want = ids[pairs]
        return last.gather(1, want[:, :1])[:, 0] - last.gather(1, want[:, 1:])[:, 0]

    mine = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "resid_pre", metric=logit_diff,
                                device="cpu")  # fmt: skip
    built_in = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "resid_pre", answers=same,
                                    device="cpu")  # fmt: skip
    for col in ("metric", "null_metric"):
        np.testing.assert_allclose(mine.frame[col], built_in.frame[col], atol=1e-5)
    assert len(set(seen_tokens)) == 1  # the tokens before a late start: the target's output


def test_gpt2_gelu_runs_fused_with_the_same_cells_and_a_hooked_one_is_left(planted, monkeypatch):
    module, _tok, m, same = planted
    acts = [b.mlp.act for b in module.transformer.h]
    fused = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same,
                                 device="cpu")  # fmt: skip
    assert fused.summary["fused_activations"] == len(acts)
    assert [b.mlp.act for b in module.transformer.h] == acts  # put back
    calls: list[int] = []
    h = acts[1].register_forward_hook(lambda *_a: calls.append(1))  # the user's own hook
    try:
        part = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same,
                                    device="cpu")  # fmt: skip
    finally:
        h.remove()
    assert part.summary["fused_activations"] == len(acts) - 1 and calls
    monkeypatch.setattr(grid_kernels, "_STEPWISE_TANH_GELU", set())
    stepwise = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same,
                                    device="cpu")  # fmt: skip
    assert stepwise.summary["fused_activations"] == 0
    for col in ("metric", "null_metric"):
        np.testing.assert_allclose(fused.frame[col], stepwise.frame[col], atol=1e-5)
        np.testing.assert_allclose(part.frame[col], stepwise.frame[col], atol=1e-5)
