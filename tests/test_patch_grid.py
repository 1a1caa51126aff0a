"""Patching grids (dl.verify.patch_grid) and attribution on them, on the planted circuit.

The planted GPT-2 (tests/planted_circuit.py) copies each record's first token with head
``HEAD`` of block 0, so the grids know where the answer lives: the first position of the
residual stream before block 0, the planted head among heads. Every cell must equal the
one-site patching call it stands for; the clean and corrupted runs happen once; the null
grid is there; bad input fails before any forward pass; and the model is left as found.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from planted_circuit import CLEAN, CORRUPTED, FIRST, HEAD, REST, build_planted  # noqa: E402

# one length: the patched copies of one batch share a pass, and the null has partners
SAME_CLEAN = [f"{FIRST[i % 4]} {REST[1]}" for i in range(8)]
SAME_CORRUPTED = [f"{FIRST[(i + 1) % 4]} {REST[1]}" for i in range(8)]


@pytest.fixture(scope="module")
def planted():
    module, tok, m, answers = build_planted()
    same = [(tok(a)["input_ids"][0], tok(b)["input_ids"][0])
            for a, b in zip(SAME_CLEAN, SAME_CORRUPTED, strict=True)]  # fmt: skip
    return module, tok, m, answers, same


class Passes:
    """Counts the module's forward passes: the rows and tokens of each."""

    def __init__(self, module):
        self.rows: list[int] = []
        self.tokens: list[int] = []
        self.h = module.register_forward_pre_hook(self.seen, with_kwargs=True)

    def seen(self, _m, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.rows.append(int(ids.shape[0]))
        self.tokens.append(int(ids.shape[1]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.h.remove()


def one_site(m, layer, answers, **kw) -> float:
    """The mean metric with one site patched, by dl.verify.patching."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a whole-layer set has one random draw: vacuous
        v = dl.verify.patching(m, CLEAN, CORRUPTED, layer, answers=answers, n_random=1,
                               exclude=False, device="cpu", **kw)  # fmt: skip
    return float(v.frame["metric"][0])


def cell(frame, layer, head=None, position=None) -> float:
    f = frame.filter(layer=layer)
    f = f.filter(head=head) if head is not None else f
    f = f.filter(position=position) if position is not None else f
    assert f.height == 1
    return float(f["metric"][0])


def test_grids_equal_one_patching_call_per_cell(planted):
    _module, _tok, m, answers, _ = planted
    heads = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", answers=answers, device="cpu")
    f = heads.frame
    assert f.height == 2 * 16 and set(f["layer"]) == {0, 1} and f["position"].null_count() == 32
    for layer, h in [(0, HEAD), (0, 3), (1, HEAD), (1, 11)]:
        want = one_site(m, f"blocks.{layer}.attn.hook_z", answers, heads=[h])
        assert abs(cell(f, layer, head=h) - want) < 1e-5
    top = f.sort("effect", descending=True).row(0, named=True)
    assert (top["layer"], top["head"]) == (0, HEAD) and top["recovered"] > 0.9
    resid = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_pre", answers=answers,
                                 layers=[0, 1], device="cpu")  # fmt: skip
    r = resid.frame
    assert r["head"].null_count() == r.height and r["position"].max() == max(
        m.symbols(x) for x in CLEAN) - 1  # fmt: skip
    for layer, p in [(0, 0), (0, 2), (1, 0), (1, 3)]:
        want = one_site(m, f"blocks.{layer}.hook_resid_pre", answers,
                        units=list(range(64)), positions=[p])  # fmt: skip
        assert abs(cell(r, layer, position=p) - want) < 1e-5
    by_pos = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", by="head_position", layers=[0],
                                  heads=[HEAD, 2], answers=answers, device="cpu")  # fmt: skip
    want = one_site(m, "blocks.0.attn.hook_z", answers, heads=[HEAD], positions=[1])
    assert abs(cell(by_pos.frame, 0, head=HEAD, position=1) - want) < 1e-5
    # the baselines agree with the one-site call's, and the other direction patches back
    assert abs(heads.summary["clean"] - 2.2598) < 1e-3 and heads.summary["corrupted"] < -1
    noise = dl.verify.patch_grid(
        m,
        CLEAN,
        CORRUPTED,
        "z",
        layers=[0],
        heads=[HEAD],
        direction="noise",
        answers=answers,
        device="cpu",
        null=False,
    )
    want = one_site(m, "blocks.0.attn.hook_z", answers, heads=[HEAD], direction="noise")
    assert abs(float(noise.frame["metric"][0]) - want) < 1e-5


def test_the_same_tensor_read_as_two_sites_gives_the_same_cells(planted):
    _module, _tok, m, answers, _ = planted
    post = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_post", layers=[0], answers=answers,
                                device="cpu", null=False)  # fmt: skip
    pre = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_pre", layers=[1], answers=answers,
                               device="cpu", null=False)  # fmt: skip
    np.testing.assert_allclose(post.frame["metric"], pre.frame["metric"], atol=1e-6)


def test_baselines_run_once_and_cells_share_passes(planted):
    module, tok, m, _answers, same = planted
    with Passes(module) as seen:
        g = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "resid_pre", answers=same,
                                 device="cpu")  # fmt: skip
    n, T = len(SAME_CLEAN), len(tok(SAME_CLEAN[0])["input_ids"])
    S = m.symbols(SAME_CLEAN[0])
    # clean and corrupted once, whole; one check that a pass from the middle token
    # reproduces the target run (the planted GPT-2 is a causal LM)
    assert seen.rows[:3] == [n, n, n] and seen.tokens[:3] == [T, T, T - T // 2]
    # then per layer one pass per patched position, its null's copies in the same pass,
    # each starting at its own token: the tokens before it are the target's keys and values
    patched = list(zip(seen.rows[3:], seen.tokens[3:], strict=True))
    assert len(patched) == 2 * S and {r for r, _ in patched} == {2 * n}
    per_layer = [t for _, t in patched[:S]]
    assert per_layer == sorted(per_layer, reverse=True) and len(set(per_layer)) == S
    assert per_layer[0] == T and per_layer[-1] < T and [t for _, t in patched[S:]] == per_layer
    assert g.summary["forwards"] == len(seen.rows)
    # a per-head grid over all positions cannot start late: whole passes, null included
    with Passes(module) as seen:
        dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same, device="cpu")
    assert seen.rows[:2] == [n, n] and set(seen.tokens) == {T}
    assert all(r % (2 * n) == 0 for r in seen.rows[2:])


def test_every_grid_carries_a_null_read_against_the_cells(planted):
    _module, _tok, m, _answers, same = planted
    g = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same, device="cpu")
    f = g.frame
    for col in ("null_metric", "null_effect", "null_p"):
        assert f[col].null_count() == 0 and np.isfinite(f[col].to_numpy()).all()
    planted_row = f.filter(layer=0, head=HEAD).row(0, named=True)
    # another pair's first word is no more the corrupted one's: the null moves the metric
    # too, but patching the record's own clean values moves it further
    assert planted_row["null_effect"] != pytest.approx(planted_row["effect"])
    assert planted_row["null_p"] == f["null_p"].min() < 0.1
    assert g.summary["null_sd"] > 0
    off = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same, null=False,
                               device="cpu")  # fmt: skip
    assert "null_effect" not in off.frame.columns
    np.testing.assert_allclose(off.frame["metric"], f["metric"], atol=1e-6)


def hooks_of(module) -> int:
    return sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in module.modules())


def state(module):
    return (hooks_of(module), [x.training for x in module.modules()],
            [(p.requires_grad, p.grad) for p in module.parameters()],
            list(module.transformer.h), list(module.modules()))  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"site": "z", "heads": [99]}, LayerError, "heads [99] do not exist"),
        ({"site": "resid_pre", "layers": [7]}, LayerError, "blocks 0..1"),
        ({"site": "resid_pre", "by": "head"}, DNIError, "patched by 'position'"),
        ({"site": "pattern", "by": "head_position"}, DNIError, "a pattern is patched whole"),
        ({"site": "resid_middle"}, DNIError, "no patching site"),
        ({"site": "z", "answers": [(1, 2)]}, DNIError, "one (right, wrong) pair"),
    ],
)
def test_bad_input_fails_before_any_forward_pass(planted, kwargs, error, words):
    module, _tok, m, answers, _ = planted
    kwargs = {"answers": answers, **kwargs}
    before = state(module)
    with Passes(module) as seen, pytest.raises(error, match=re.escape(words)):
        dl.verify.patch_grid(m, CLEAN, CORRUPTED, device="cpu", **kwargs)
    assert seen.rows == [] and state(module) == before


def test_pairs_of_different_lengths_are_named_with_their_positions(planted):
    module, _tok, m, _answers, _ = planted
    corrupted = list(CORRUPTED)
    corrupted[2] = corrupted[2] + " select"
    with Passes(module) as seen, pytest.raises(DNIError, match=r"pair 2: clean \d+ symbols") as e:
        dl.verify.patch_grid(m, CLEAN, corrupted, "resid_pre", device="cpu")
    assert "positions" in str(e.value) and seen.rows == []


def test_the_model_is_left_as_found_after_a_grid_an_error_and_a_stop(planted):
    module, _tok, m, answers, _ = planted
    module.train()  # a mode to put back: the grid runs in eval mode
    module.transformer.h[1].attn.train(False)
    try:
        before = state(module)
        dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_post", answers=answers, device="cpu")
        dl.verify.attribution_grid(m, CLEAN, CORRUPTED, "z", answers=answers, device="cpu")
        assert state(module) == before
        # a Stop inside the first patched pass, blocks (and a block's attention or MLP)
        # replayed: after the two baselines, and a position grid's check of late starts
        for site, at in (("resid_post", 4), ("z", 3), ("mlp_out", 4)):
            passes = []

            def stop(_m, _a, _o, passes=passes, at=at):
                passes.append(1)
                if len(passes) == at:
                    raise KeyboardInterrupt

            h = module.transformer.ln_f.register_forward_hook(stop)
            try:
                with pytest.raises(KeyboardInterrupt):
                    dl.verify.patch_grid(m, CLEAN, CORRUPTED, site, answers=answers, device="cpu")
            finally:
                h.remove()
            assert state(module) == before and len(passes) == at

        def bad(records, output, pairs):
            return output[:, -1, :2]

        with pytest.raises(DNIError, match="one value per record"):
            dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", metric=bad, device="cpu")
        assert state(module) == before
    finally:
        module.eval()


def test_attribution_on_the_grids_ranks_cells_as_exact_patching_does(planted):
    module, _tok, m, answers, _ = planted
    out = {}
    for site, by in [("z", "head"), ("resid_pre", "position"), ("z", "head_position")]:
        a = dl.verify.attribution_grid(m, CLEAN, CORRUPTED, site, by=by, answers=answers,
                                       exact=True, device="cpu")  # fmt: skip
        out[site, by] = a.summary["spearman"]
        # per position, the planted head's cells are close: first order may swap two
        assert a.summary["top_agrees"] or by == "head_position", (site, by)
        f = a.frame
        assert {"attribution", "effect", "recovered_est"} <= set(f.columns)
    # stated rank correlations on the planted model (see docs/api/verify.md)
    assert out["z", "head"] > 0.95
    assert out["resid_pre", "position"] > 0.9
    assert out["z", "head_position"] > 0.95
    assert all(p.grad is None for p in module.parameters())


def test_the_heatmap_panel_shows_the_grid_and_its_null(planted):
    from dni_lab.widgets._patch_grid import patch_grid_chart
    from dni_lab.widgets._patching import patching_chart

    _module, _tok, m, _answers, same = planted
    g = dl.verify.patch_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same, device="cpu")
    chart, df, _ = patch_grid_chart(g)
    spec = chart.to_dict()
    assert spec["mark"]["type"] == "rect" and spec["encoding"]["column"]["field"] == "panel"
    assert sorted(df["panel"].unique()) == ["grid", "null"] and df.height == 2 * g.frame.height
    # the patching panel draws a grid as its heatmap
    panel = dl.widgets.Plot("patching", g)  # rendered offline to SVG
    assert panel.error == "" and panel.data.equals(df) and patching_chart(g)[1].equals(df)
    est = dl.verify.attribution_grid(m, SAME_CLEAN, SAME_CORRUPTED, "z", answers=same,
                                     device="cpu")  # fmt: skip
    _c, df2, _ = patch_grid_chart(est)
    assert df2["panel"].unique().to_list() == ["grid"]
    assert np.isfinite(df2["value"].to_numpy()).all()


def test_batches_of_pairs_and_of_cells_add_up_to_one_grid(planted, monkeypatch):
    import importlib

    # the module where the budgets of one patched pass live
    grid_module = importlib.import_module("dni_lab.backend.verify.grid_run")

    _module, _tok, m, answers, _ = planted
    whole = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_pre", answers=answers, null=False,
                                 device="cpu")  # fmt: skip
    monkeypatch.setattr(grid_module, "_TOKEN_BUDGET", 1)  # one cell per patched pass
    cut = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "resid_pre", answers=answers, null=False,
                               device="cpu", batch_size=1)  # fmt: skip
    np.testing.assert_allclose(cut.frame["metric"], whole.frame["metric"], atol=1e-5)
    # heads over all positions share passes: one head per pass adds up to the same grid
    monkeypatch.undo()
    whole = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", layers=[0], answers=answers,
                                 device="cpu")  # fmt: skip
    monkeypatch.setattr(grid_module, "_TOKEN_BUDGET", 1)
    cut = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", layers=[0], answers=answers,
                               device="cpu")  # fmt: skip
    for col in ("metric", "null_metric"):
        np.testing.assert_allclose(cut.frame[col], whole.frame[col], atol=1e-5)
    assert cut.summary["forwards"] > whole.summary["forwards"]


def test_without_answers_each_run_predicts_its_own_as_one_site_patching_does(planted):
    _module, _tok, m, _answers, _ = planted
    g = dl.verify.patch_grid(m, CLEAN, CORRUPTED, "z", layers=[0], heads=[HEAD], null=False,
                             device="cpu")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = dl.verify.patching(m, CLEAN, CORRUPTED, "blocks.0.attn.hook_z", heads=[HEAD],
                               n_random=1, device="cpu")  # fmt: skip
    assert abs(float(g.frame["metric"][0]) - float(v.frame["metric"][0])) < 1e-5
    assert abs(g.summary["corrupted"] - v.summary["corrupted"]) < 1e-5
