"""Layouts proved by a second probe (issue 47, item 1): taps on residual sums, a
ModuleList of taps and a width equal to the sequence length read with no declaration,
exactly as a hand forward hook; the second probe runs once per (module, signature);
what no probe can prove is asked in one error before any block, the model left as found."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.extraction.extract import Extractor, symbol_mask
from dni_lab.backend.extraction.layouts import proof

VOCAB = 128


def _enc(width: int | None = None):
    """Characters as ids; padded to ``width`` when given (a fixed-length encode)."""

    def enc(recs: list[str]) -> torch.Tensor:
        n = width or max(len(r) for r in recs)
        return torch.tensor([[ord(c) % VOCAB for c in r.ljust(n)] for r in recs])

    return enc


class Block(nn.Module):
    """A pre-norm block adding into the residual stream, tapped by an ``nn.Identity``."""

    def __init__(self, d: int, heads: int = 2) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.hook_resid = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return self.hook_resid(x + self.mlp(x))


class Residual(nn.Module):
    """A small transformer whose blocks add into a residual stream."""

    def __init__(self, d: int = 16, layers: int = 2, positions: int = 64) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.out = nn.Linear(d, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.out(x)


class Taps(nn.Module):
    """tracr-like: MLPs writing into a residual stream, a ``ModuleList`` of identity taps."""

    def __init__(self, d: int = 12, layers: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.mlps = nn.ModuleList(
            [nn.Sequential(nn.Linear(d, d), nn.ReLU()) for _ in range(layers)]
        )
        self.taps = nn.ModuleList([nn.Identity() for _ in range(layers)])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for mlp, tap in zip(self.mlps, self.taps, strict=True):
            x = tap(x + mlp(x))
        return x


def _windows(n: int, width: int, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    letters = "abcdefghij klmnop"
    return ["".join(letters[int(i)] for i in torch.randint(len(letters), (width,), generator=g))
            for _ in range(n)]


def _values(model: dl.Model, addr: str, records: list) -> torch.Tensor:
    """dni_lab's (records, symbols, units) behaviors of ``addr``."""
    model.layer_widths(records[:2], "cpu")
    mask = symbol_mask(model, records, torch.device("cpu"))
    return Extractor(model, {addr: None}, "activation", torch.device("cpu"))(records, mask)[addr]


def _hand(module: nn.Module, sub: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    box: dict = {}
    handle = sub.register_forward_hook(lambda _m, _i, o: box.setdefault("o", o))
    try:
        with torch.no_grad():
            module.eval()(batch)
    finally:
        handle.remove()
    return box["o"]


def _state(module: nn.Module) -> tuple:
    """Everything about a module a read must leave as it found it."""
    return (
        [(n, m.training) for n, m in module.named_modules()],
        [(n, p.requires_grad) for n, p in module.named_parameters()],
        [(n, len(m._forward_hooks), len(m._forward_pre_hooks)) for n, m in module.named_modules()],
        [v.clone() for v in module.state_dict().values()],
    )


def _same(a: tuple, b: tuple) -> bool:
    return a[:3] == b[:3] and all(torch.equal(x, y) for x, y in zip(a[3], b[3], strict=True))


def _batches(module: nn.Module) -> list[tuple]:
    """A forward-hook counter: the input shape of every forward pass of ``module``."""
    seen: list[tuple] = []
    module.register_forward_pre_hook(lambda _m, args: seen.append(tuple(args[0].shape)))
    return seen


def test_identity_taps_on_a_residual_stream_read_with_no_declaration():
    torch.manual_seed(0)
    net = Residual().eval()
    recs = _windows(9, 12)
    m = dl.Model(net, encode=_enc(), name="resid")
    for i in range(2):
        addr = f"blocks.{i}.hook_resid"
        got = _values(m, addr, recs)
        torch.testing.assert_close(got, _hand(net, net.blocks[i].hook_resid, _enc()(recs)),
                                   rtol=0, atol=0)
        assert str(m.layout(addr)) == "'n s u'"
        assert m.layout_report([addr])[addr]["how"] == "probe"
    # the block returns the tap's very tensor: the same reading, by the data flow
    declared = dl.Model(net, encode=_enc(), name="declared",
                        layouts={"blocks.1.hook_resid": "n s u"})
    assert torch.equal(_values(m, "blocks.1.hook_resid", recs),
                       _values(declared, "blocks.1.hook_resid", recs))
    assert declared.layout_report(["blocks.1.hook_resid"])["blocks.1.hook_resid"]["how"] == (
        "declared")


def test_a_module_list_of_taps_runs_to_the_end_with_provenance():
    torch.manual_seed(1)
    net = Taps().eval()
    recs = _windows(40, 10, seed=1)
    m = dl.Model(net, encode=_enc(), name="tracr")
    hyp = dl.hypothesis(lambda r: [float(c == "a") for c in r], name="is_a")
    units = [(f"taps.{i}", "*") for i in range(3)]
    frame = dl.inspect([m], [hyp], ["corr"], recs, units=units, eps=None)
    assert frame.height == 3 * 12
    layouts = dl.provenance(frame)["layouts"]["tracr"]
    assert set(layouts) == {"taps.0", "taps.1", "taps.2"}
    assert all(v["layout"] == "n s u" and v["how"] == "probe" for v in layouts.values())
    assert "3 records of at most 5 symbols gave (3, 5, 12)" in layouts["taps.0"]["evidence"]
    for i in range(3):
        hand = _hand(net, net.taps[i], _enc()(recs))
        torch.testing.assert_close(_values(m, f"taps.{i}", recs), hand, rtol=0, atol=0)


def test_a_width_equal_to_the_window_length_is_proved_by_shorter_records():
    torch.manual_seed(2)
    net = Residual(d=30, positions=30).eval()
    recs = _windows(8, 30, seed=2)  # windows of 30 characters, 30 hidden units: square
    m = dl.Model(net, encode=_enc(), name="square")
    got = _values(m, "blocks.0.hook_resid", recs)
    assert got.shape == (8, 30, 30)
    hand = _hand(net, net.blocks[0].hook_resid, _enc()(recs))
    torch.testing.assert_close(got, hand, rtol=0, atol=0)
    evidence = m.layout_report(["blocks.0.hook_resid"])["blocks.0.hook_resid"]["evidence"]
    assert "(2, 30, 30)" in evidence and "(3, 15, 30)" in evidence


def test_the_second_probe_runs_once_per_module_and_signature():
    torch.manual_seed(3)
    net = Taps().eval()
    seen = _batches(net)
    recs = _windows(12, 10, seed=3)
    for name in ("a", "b"):  # two wrappers of one module, the same first records
        m = dl.Model(net, encode=_enc(), name=name)
        m.layer_widths(recs[:2], "cpu")
        assert str(m.layout("taps.1")) == "'n s u'"
    assert seen.count((3, 5)) == 1  # the second probe: one record more, each cut to half
    m = dl.Model(net, encode=_enc(), name="c")
    m.layer_widths(_windows(2, 8, seed=4), "cpu")  # another signature: proved again
    assert seen.count((3, 4)) == 1 and seen.count((3, 5)) == 1
    assert len(proof._SECOND[net]) == 2
    # a model whose every layer a rule reads runs no second probe at all
    plain = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, 4), nn.Tanh())
    calls = _batches(plain)
    dl.Model(plain, encode=_enc(), name="plain").layer_widths(recs[:2], "cpu")
    assert calls == [(2, 10)]


def _square_padded(name: str, **kw) -> tuple[nn.Module, dl.Model]:
    torch.manual_seed(4)
    net = Taps(d=30, layers=2).eval()
    return net, dl.Model(net, encode=_enc(30), name=name, padded=True, **kw)


def test_a_square_case_that_stays_square_is_asked_once_before_any_block():
    net, m = _square_padded("padded")
    net.mlps[0].train()  # modes, requires_grad and hooks of its own: all left as found
    net.emb.weight.requires_grad_(False)
    net.taps[1].register_forward_hook(lambda *_: None)
    seen = _batches(net)
    before = _state(net)
    recs = _windows(600, 30, seed=5)
    pulled = {"n": 0}

    def data():
        for r in recs:
            pulled["n"] += 1
            yield r

    hyp = dl.hypothesis(lambda r: [float(c == "a") for c in r], name="is_a")
    with pytest.raises(dl.LayerError) as err:
        dl.inspect([m], [hyp], ["corr"], data(), units=[("taps.0", "*"), ("taps.1", "*")],
                   eps=None, block_size=256)
    msg = str(err.value)
    assert msg.count("\n- layer ") == 2 and "'taps.0'" in msg and "'taps.1'" in msg
    assert "layouts={'taps.0': 'n s u', 'taps.1': 'n s u'}" in msg
    assert "'n u s'" in msg and "(2, 30, 30)" in msg and "(3, 30, 30)" in msg
    assert pulled["n"] <= 256 and all(b[0] <= 3 for b in seen)  # no block reached the model
    assert _same(before, _state(net))
    # one line settles it, and the values are a hand hook's
    fixed = dl.Model(net, encode=_enc(30), name="fixed", padded=True,
                     layouts={"taps.0": "n s u", "taps.1": "n s u"})
    got = _values(fixed, "taps.1", recs[:6])
    hand = _hand(net, net.taps[1], _enc(30)(recs[:6]))
    net.mlps[0].train()  # _hand put the module in eval mode
    torch.testing.assert_close(got, hand, rtol=0, atol=0)


def test_a_model_that_refuses_shorter_records_is_asked_and_left_as_found():
    class Fixed(Taps):
        def forward(self, ids):
            if ids.shape[1] != 30:
                raise ValueError("windows of 30 characters only")
            return super().forward(ids)

    torch.manual_seed(5)
    net = Fixed(d=30, layers=1)
    net.train()
    before = _state(net)
    m = dl.Model(net, encode=_enc(), name="fixed30")
    m.layer_widths(_windows(2, 30, seed=6), "cpu")
    with pytest.raises(dl.LayerError, match="the same records, the first repeated") as err:
        m.layout("taps.0")
    assert "layouts={'taps.0': 'n s u'}" in str(err.value)
    assert "shorter records were refused (ValueError: windows of 30" in str(err.value)
    assert _same(before, _state(net))
    assert m.layout_report(["taps.0"])["taps.0"]["how"] == "asked"
    # a non-square width is still undecided: without a length that moved, no axis is 's'
    assert proof.fitting((2, 30, 8), (3, 30, 8), proof.Pass(2, 30, {}),
                         proof.Pass(3, 30, {}), 0, False) == ["n s u", "n u u"]


def test_the_readings_each_axis_can_hold():
    first, second = proof.Pass(2, 14, {}), proof.Pass(3, 7, {})
    assert proof.fitting((2, 14, 16), (3, 7, 16), first, second, 0, False) == ["n s u"]
    assert proof.fitting((14, 2, 16), (7, 3, 16), first, second, 0, False) == ["s n u"]
    assert proof.fitting((2, 15, 16), (3, 8, 16), first, second, 1, False) == ["n s u"]
    # an axis one longer than the records without prefix= moves, but is no symbol axis
    assert proof.fitting((2, 15, 16), (3, 8, 16), first, second, 0, False) == []
    assert proof.second_sample(["abcd", "ab"], len) == (["ab", "a", "ab"], True)
    assert proof.second_sample(["a", "b"], len) == (["aaa", "bbb", "aaa"], True)
    assert proof.second_sample([[1, 2], [3]], lambda r: 5) == ([[1, 2], [3], [1, 2]], False)
