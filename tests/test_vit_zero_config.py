"""Vision transformers with no declaration (issue 47, item 5): ``dl.Model.from_hf(vit)``
reads patches as symbols and [CLS]/distillation/register tokens as a prefix, from the
model; per-pixel hypotheses are pooled onto patches; a count that fits nothing is the
model's question, asked before any block. Also ``dl.check``'s layout rows, one error for
levels and layouts, layout questions that list only the layers named, a declaration the
probe contradicts and a model whose shape changes between two identical forwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tolerances import assert_close_f32
from torch import nn
from transformers import (
    DeiTConfig,
    DeiTModel,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    ViTConfig,
    ViTModel,
)

import dni_lab as dl
from dni_lab.backend.engine.declarations import (
    DeclarationError,
    ask_declarations,
    layout_questions,
)
from dni_lab.backend.engine.folding import _symbol_spaces
from dni_lab.backend.engine.levels import decide_levels
from dni_lab.backend.hf.patch_align import PatchFamily
from dni_lab.backend.hypothesis.hypotheses import as_family

SMALL = dict(num_hidden_layers=2, image_size=32, patch_size=8, hidden_size=32,
             num_attention_heads=2)  # fmt: skip


def _vit(kind: str = "vit") -> nn.Module:
    torch.manual_seed(0)
    if kind == "vit":
        return ViTModel(ViTConfig(**SMALL, intermediate_size=64), add_pooling_layer=False).eval()
    if kind == "deit":
        return DeiTModel(DeiTConfig(**SMALL, intermediate_size=64), add_pooling_layer=False).eval()
    cfg = Dinov2WithRegistersConfig(**SMALL, num_register_tokens=4)
    return Dinov2WithRegistersModel(cfg).eval()


IMAGES = [np.random.default_rng(i).random((3, 32, 32)).astype(np.float32) for i in range(10)]


@dl.hypothesis(kind="continuous")
def brightness(img):
    """One value per 8 x 8 patch, row-major."""
    return np.asarray(img).mean(0).reshape(4, 8, 4, 8).mean((1, 3)).ravel()


@dl.hypothesis(kind="continuous")
def red(img):
    """One value per pixel, as an H x W array."""
    return np.asarray(img)[0]


@dl.hypothesis(kind="binary")
def bright_pixel(img):
    """One value per pixel, flat."""
    return (np.asarray(img)[1] > 0.9).astype(float).ravel()


def _hand(module: nn.Module, address: str, images: list) -> torch.Tensor:
    """A hand forward hook's output of ``address`` on ``images``, as the model returns it."""
    got = {}
    sub = module.get_submodule(address)
    h = sub.register_forward_hook(lambda _m, _i, o: got.setdefault(
        "x", (o[0] if isinstance(o, tuple) else o).detach()))  # fmt: skip
    with torch.no_grad():
        module(pixel_values=torch.from_numpy(np.stack(images)))
    h.remove()
    return got["x"]


class Forwards:
    """The batch size of every forward pass of ``module`` (probe passes included)."""

    def __init__(self, module: nn.Module) -> None:
        self.sizes: list[int] = []
        self._h = module.register_forward_hook(self._seen, with_kwargs=True)

    def _seen(self, _mod, args, kwargs, _out):
        x = args[0] if args else kwargs["pixel_values"]
        self.sizes.append(len(x))

    @property
    def n(self) -> int:
        return len(self.sizes)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._h.remove()


@pytest.mark.parametrize(("kind", "prefix"), [("vit", 1), ("deit", 2), ("registers", 5)])
def test_patches_are_symbols_and_the_prefix_is_read_from_the_model(kind, prefix):
    vit = _vit(kind)
    m = dl.Model.from_hf(vit, name=kind)
    assert m.prefix == prefix and m.symbols(IMAGES[0]) == 16
    block = m.positional_layers()[0]
    names = ["embeddings.patch_embeddings.projection", "embeddings.patch_embeddings",
             "embeddings", block]  # fmt: skip
    got = dl.activations(m, IMAGES, names=names)
    conv = _hand(vit, names[0], IMAGES)  # (N, D, 4, 4): patches row-major
    want = {names[0]: conv.flatten(2).transpose(1, 2),
            names[1]: _hand(vit, names[1], IMAGES),  # before the prefix is added
            names[2]: _hand(vit, names[2], IMAGES)[:, prefix:],
            block: _hand(vit, block, IMAGES)[:, prefix:]}  # fmt: skip
    for a in names:
        assert got[a].shape == (len(IMAGES), 16, 32), a
        assert_close_f32(got[a], want[a], reduction=32, msg=a)
        assert float((got[a] - want[a]).abs().max()) <= 1e-6, a


def test_a_per_patch_hypothesis_is_scored_as_a_hand_hook_reads_it():
    vit = _vit()
    m = dl.Model.from_hf(vit, name="vit")
    with Forwards(vit) as seen:
        frame = dl.inspect(m, [brightness], data=IMAGES, measures=["corr"], eps=None,
                           cache=False)  # fmt: skip
    assert seen.n >= 1 and set(frame["layer"]) == {"layers.0", "layers.1"}
    acts = _hand(vit, "layers.0", IMAGES)[:, 1:].reshape(-1, 32).double().numpy()
    h = np.concatenate([brightness(im) for im in IMAGES])
    want = [np.corrcoef(acts[:, u], h)[0, 1] for u in range(32)]
    rows = frame.filter(frame["layer"] == "layers.0").sort("unit")
    np.testing.assert_allclose(rows["unit_score"].to_numpy(), want, atol=1e-5)
    levels = dl.provenance(frame)["levels"]
    assert levels[0]["level"] == "symbol" and "16 patches" in levels[0]["evidence"]


def test_a_per_pixel_hypothesis_is_pooled_onto_patches():
    m = dl.Model.from_hf(_vit(), name="vit")
    fam = PatchFamily(as_family(red), m)
    got = fam.evaluate(IMAGES[0])[:, 0]
    np.testing.assert_allclose(got, IMAGES[0][0].reshape(4, 8, 4, 8).mean((1, 3)).ravel(),
                               rtol=1e-6)  # fmt: skip
    binary = PatchFamily(as_family(bright_pixel), m).evaluate(IMAGES[1])[:, 0]
    hand = (IMAGES[1][1] > 0.9).reshape(4, 8, 4, 8).any((1, 3)).ravel()
    assert binary.tolist() == hand.astype(float).tolist()  # binary pools with "any"
    pooled = dl.hypothesis(lambda im: np.asarray(im)[0].reshape(4, 8, 4, 8).mean((1, 3)).ravel(),
                           name="red", kind="continuous")  # fmt: skip
    a = dl.inspect(m, [red], data=IMAGES, eps=None, cache=False, units=[("layers.1", "*")])
    b = dl.inspect(m, [pooled], data=IMAGES, eps=None, cache=False, units=[("layers.1", "*")])
    np.testing.assert_allclose(a["unit_score"].to_numpy(), b["unit_score"].to_numpy(), atol=1e-6)
    assert dl.provenance(a)["levels"][0]["level"] == "pixel"


def test_a_count_that_fits_neither_is_the_models_question_before_any_forward():
    vit = _vit()
    m = dl.Model.from_hf(vit, name="vit")
    five = dl.hypothesis(lambda im: [0.0] * 5, name="five", kind="continuous")
    with Forwards(vit) as seen, pytest.raises(dl.LevelError) as err:
        dl.inspect(m, [five], data=IMAGES, eps=None, cache=False)
    assert all(n <= 3 for n in seen.sizes)  # a probe at most (layouts asked too): no block
    msg = str(err.value)
    for part in ("'five'", "16 patches", "4 x 4 of 8 x 8 pixels", "1,024 pixels",
                 "returned 5 values", "level='record'"):  # fmt: skip
        assert part in msg, (part, msg)


def test_a_plain_model_of_a_vit_is_told_its_count_not_the_hypothesis():
    vit = _vit()

    def encode(rs):
        return {"pixel_values": torch.from_numpy(np.stack(rs))}

    plain = dl.Model(vit, encode=encode, name="plain")
    calls = []
    counted = dl.hypothesis(lambda im: calls.append(1) or brightness(im), name="patches",
                            kind="continuous")  # fmt: skip
    with Forwards(vit) as seen, pytest.raises(dl.LayerError) as err:
        dl.inspect(plain, [counted], data=IMAGES, eps=None, cache=False,
                   units=[("layers.0", "*")])  # fmt: skip
    assert all(n <= 3 for n in seen.sizes) and calls == []  # no block, no hypothesis read
    msg = str(err.value)
    for part in ("no axis is the records' 1,024 symbols", "17, 32 positions",
                 "Model(..., symbols=fn) and prefix=", "dl.Model.from_hf(module)"):  # fmt: skip
        assert part in msg, (part, msg)
    assert not isinstance(err.value, dl.HypothesisError)  # the model's count, not the hypothesis
    rows = dl.check(plain, IMAGES, [], units=[("layers.0", "*")])
    row = rows.row(0, named=True)
    assert (row["layer"], row["layout"], row["decided_by"]) == ("layers.0", None, "asked")
    assert "no axis is the records' 1,024 symbols" in row["evidence"]
    assert "17, 32 positions" in row["evidence"]
    # the declaration the issue needed still reads what a hand hook reads
    declared = dl.Model(vit, encode=encode, name="declared", symbols=lambda i: 16, prefix=1,
                        layouts={"layers.0": "n s u"})  # fmt: skip
    got = dl.activations(declared, IMAGES, names=["layers.0"])["layers.0"]
    assert float((got - _hand(vit, "layers.0", IMAGES)[:, 1:]).abs().max()) <= 1e-6


def test_the_layers_the_defaults_leave_out_are_named_in_provenance():
    m = dl.Model.from_hf(_vit(), name="vit")
    frame = dl.inspect(m, [brightness], data=IMAGES[:4], eps=None, cache=False)
    layouts = dl.provenance(frame)["layouts"]["vit"]
    assert layouts["layers.0"] == {"layout": "n s u", "how": "rule", "evidence": ""}
    for left in ("embeddings.patch_embeddings", "embeddings"):
        assert layouts[left]["how"] == "left out", left
        assert f"units=[({left!r}, '*')]" in layouts[left]["evidence"]
    named = dl.inspect(m, [brightness], data=IMAGES[:4], eps=None, cache=False,
                       units=[("embeddings", "*")])  # fmt: skip
    assert dl.provenance(named)["layouts"]["vit"]["embeddings"]["how"] == "rule"


def test_check_has_one_row_per_tap():
    m = dl.Model.from_hf(_vit(), name="vit")
    frame = dl.check(m, IMAGES, [brightness, red], units=True)
    assert frame.columns[-2:] == ["layer", "layout"]
    taps = frame.filter(frame["layer"].is_not_null())
    assert taps["layer"].to_list() == ["layers.0", "layers.1"]
    assert set(taps["layout"]) == {"n s u"} and set(taps["decided_by"]) == {"rule"}
    hyps = frame.filter(frame["layer"].is_null())
    assert hyps["level"].to_list() == ["symbol", "pixel"]
    assert dl.provenance(frame)["layouts"] == taps.to_dicts()


class Square(nn.Module):
    """Two identity taps on sums, square (d x d) per record; refuses other lengths."""

    def __init__(self, d: int = 6) -> None:
        super().__init__()
        self.d = d
        self.emb = nn.Embedding(10, d)
        self.taps = nn.ModuleList([nn.Identity(), nn.Identity()])

    def forward(self, ids):
        if ids.shape[1] != self.d:
            raise ValueError(f"windows of {self.d} only")
        x = self.taps[0](self.emb(ids) + 1)
        return self.taps[1](x * 2)


def _square() -> tuple[Square, dl.Model]:
    torch.manual_seed(1)
    net = Square().train()

    def enc(rs):
        return torch.tensor([[int(c) for c in r] for r in rs])

    return net, dl.Model(net, encode=enc, name="square")


DIGITS = ["012345", "543210", "111222", "909090"]


def test_a_layout_question_lists_only_the_layers_named():
    _net, m = _square()
    with pytest.raises(dl.LayerError) as err:
        dl.inspect(m, [dl.hypothesis(lambda r: [1.0] * 6, name="h")], data=DIGITS,
                   units=[("taps.0", "*")], eps=None, cache=False)  # fmt: skip
    msg = str(err.value)
    assert "'taps.0'" in msg and "'taps.1'" not in msg and "1 layer" in msg


def test_levels_and_layouts_are_asked_in_one_error():
    vit = _vit()

    def encode(rs):
        return {"pixel_values": torch.from_numpy(np.stack(rs))}

    plain = dl.Model(vit, encode=encode, name="plain")
    five = dl.hypothesis(lambda im: [0.0] * 5, name="five", kind="continuous")
    spaces = _symbol_spaces([dl.Model.from_hf(vit, name="vit")], [as_family(five)],
                            cached=False)  # fmt: skip
    decisions = decide_levels(spaces, IMAGES, ask_now=False)
    assert not decisions[0].decided
    layouts = [layout_questions(plain, [("layers.0", "*")], IMAGES)]
    with pytest.raises(DeclarationError) as err:
        ask_declarations(decisions, layouts)
    assert isinstance(err.value, dl.LevelError) and isinstance(err.value, dl.LayerError)
    msg = str(err.value)
    assert msg.startswith("2 declarations are needed")
    assert "'five'" in msg and "'layers.0'" in msg
    with pytest.raises(dl.LayerError):  # layouts alone: the layout error as before
        ask_declarations([], layouts)


def test_a_declaration_the_probe_contradicts_is_refused_with_what_it_saw():
    from conftest import CharLM, encode_chars

    net = CharLM(hidden=4).train()
    m = dl.Model(net, encode_chars, name="wrong", layouts={"embed": "n u s"})
    m.layer_widths(["(ab)", "((a))"], "cpu")
    with pytest.raises(dl.LayerError) as err:
        m.layout("embed")
    msg = str(err.value)
    assert "declared 'n u s'" in msg and "did not move with the longest record" in msg
    assert "(2, 5, 6)" in msg and "'n s u'" in msg
    assert all(mod.training for mod in net.modules())  # modes as found
    assert m.layout_report(["embed"])["embed"]["how"] == "contradicted"


def test_a_model_whose_shape_changes_between_identical_forwards_says_so():
    class Tap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 8)
            self.tap = nn.Identity()

        def forward(self, x):
            return self.tap(self.proj(x) + 0)

    crops = iter([10, 7, 9, 6])  # a "random" crop, drawn again on every encode

    def encode(rs):
        return torch.from_numpy(np.stack(rs))[:, : next(crops)]

    net = Tap().train()
    m = dl.Model(net, encode=encode, name="crop", symbols=len)
    m.layer_widths([np.zeros((12, 4), np.float32)] * 2, "cpu")
    with pytest.raises(dl.LayerError) as err:
        m.layout("tap")
    msg = str(err.value)
    assert "changes shape between two forwards of the same records" in msg
    assert "(10 then 7)" in msg
    assert all(mod.training for mod in net.modules())


class TimmShaped(nn.Module):
    """timm's ``VisionTransformer`` names (``patch_embed.proj``, ``cls_token``,
    ``reg_token``, ``blocks``, ``num_prefix_tokens``) on a tiny model: timm itself runs in
    a side venv (tests/test_timm.py); this mimic keeps the names checked in the main
    suite."""

    def __init__(self, d: int = 16, regs: int = 2, sequential: bool = False) -> None:
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.patch_size = (8, 8)
        self.patch_embed.proj = nn.Conv2d(3, d, 8, stride=8)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d))
        self.reg_token = nn.Parameter(torch.randn(1, regs, d))
        self.pos_embed = nn.Parameter(torch.randn(1, 16, d))
        self.num_prefix_tokens = 1 + regs
        # timm itself keeps its blocks in an nn.Sequential (``sequential``)
        blocks = [nn.TransformerEncoderLayer(d, 2, 32, batch_first=True) for _ in range(2)]
        self.blocks = nn.Sequential(*blocks) if sequential else nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.pos_embed
        n = len(x)
        x = torch.cat([self.cls_token.expand(n, -1, -1), self.reg_token.expand(n, -1, -1), x], 1)
        for b in self.blocks:
            x = b(x)
        return self.norm(x)


def test_a_timm_shaped_vit_reads_patches_after_its_prefix_tokens():
    torch.manual_seed(2)
    net = TimmShaped().eval()
    m = dl.Model.from_hf(net, name="timmish")
    assert m.prefix == 3 and m.positional_layers() == ["blocks.0", "blocks.1"]
    last = [np.moveaxis(im, 0, -1) for im in IMAGES[:4]]  # channels last reads the same
    assert m.symbols(last[0]) == 16
    got = dl.activations(m, last, names=["blocks.1", "patch_embed.proj"])
    seen = {}
    h = net.blocks[1].register_forward_hook(lambda _m, _i, o: seen.setdefault("b", o))
    with torch.no_grad():
        net(torch.from_numpy(np.stack(IMAGES[:4])))
    h.remove()
    assert float((got["blocks.1"] - seen["b"][:, 3:]).abs().max()) <= 1e-6
    assert got["patch_embed.proj"].shape == (4, 16, 16)


def test_stop_at_layer_counts_a_sequential_of_blocks_and_ends_the_pass_there():
    torch.manual_seed(0)
    net = TimmShaped(sequential=True).eval()
    m = dl.Model.from_hf(net, name="seqblocks")
    assert m.positional_layers() == ["blocks.0", "blocks.1"]
    images = IMAGES[:4]
    ran = []
    hooks = [b.register_forward_hook(lambda mod, i, o, k=k: ran.append(k))
             for k, b in enumerate(net.blocks)]  # fmt: skip
    try:
        full = dl.activations(m, images, names=["blocks.0"])  # proves the layout too
        assert set(ran) == {0, 1}
        ran.clear()
        got = dl.activations(m, images, names=["blocks.0"], stop_at_layer=0)
        assert ran and set(ran) == {0}  # block 1 never ran
    finally:
        for h in hooks:
            h.remove()
    assert torch.equal(got["blocks.0"], full["blocks.0"])
    with pytest.raises(dl.LayerError, match="read after block 0"):
        dl.activations(m, images, names=["blocks.1"], stop_at_layer=0)
    assert not any(b._forward_hooks or b._forward_pre_hooks for b in net.modules())
    assert "forward" not in vars(m)


def test_a_model_that_is_one_sequential_has_no_block_list_to_stop_in():
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    m = dl.Model(net, encode=lambda rs: torch.tensor(np.stack(rs), dtype=torch.float32),
                 name="seq")  # fmt: skip
    records = [np.ones(4, dtype=np.float32)] * 3
    with pytest.raises(dl.DNIError, match="no list of blocks"):
        dl.activations(m, records, names=["0"], stop_at_layer=0)


def test_inspect_asks_levels_and_layouts_in_one_error_before_any_block():
    vit = _vit()
    plain = dl.Model(vit, encode=lambda rs: {"pixel_values": torch.from_numpy(np.stack(rs))},
                     name="plain")  # fmt: skip
    five = dl.hypothesis(lambda im: [0.0] * 5, name="five", kind="continuous")
    calls = []
    handle = vit.register_forward_hook(lambda mod, args, kw, out: calls.append(
        len(kw.get("pixel_values", args[0] if args else []))), with_kwargs=True)
    try:
        with pytest.raises(DeclarationError) as err:
            dl.inspect([dl.Model.from_hf(vit, name="vit"), plain], [five], data=IMAGES,
                       units={"vit": [("layers.0", "*")], "plain": [("layers.0", "*")]},
                       eps=None, cache=False)  # fmt: skip
        batches = list(calls)
    finally:
        handle.remove()
    msg = str(err.value)
    assert msg.startswith("2 declarations are needed")
    assert "'five'" in msg and "'layers.0'" in msg and "level=" in msg and "layouts=" in msg
    # the probe passes only (2 or 3 records each): no block of the 10 images was read
    assert batches and max(batches) <= 3
