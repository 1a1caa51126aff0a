"""Layouts: every reading equals a hand-written hook, forcing writes the axes read,
several readings raise before any data, frames and prefixes are declared."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.extraction.extract import Extractor, on_device, symbol_mask
from dni_lab.backend.verify.force import force_units


def _values(model: dl.Model, addr: str, records: list) -> torch.Tensor:
    """dni_lab's (records, symbols, units) behaviors of ``addr``."""
    model.layer_widths(records[:2], "cpu")
    mask = symbol_mask(model, records, torch.device("cpu"))
    return Extractor(model, {addr: None}, "activation", torch.device("cpu"))(records, mask)[addr]


def _hand(module: nn.Module, sub: nn.Module, batch) -> torch.Tensor:
    box = {}
    h = sub.register_forward_hook(lambda _m, _i, o: box.setdefault("o", o))
    with torch.no_grad():
        module(batch)
    h.remove()
    out = box["o"]
    return out[0] if isinstance(out, tuple) else out


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 6, 3, padding=1)
        self.bn = nn.BatchNorm1d(6)
        self.act = nn.ReLU()
        self.head = nn.Linear(6, 3)

    def forward(self, x):  # (N, 2, L)
        h = self.act(self.bn(self.conv(x)))
        return self.head(h.transpose(1, 2))


def _signals(n: int, length: int = 9, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, length)).astype(np.float32) for _ in range(n)]


def _enc(recs):
    return torch.as_tensor(np.stack(recs))


def test_conv1d_units_are_channels_and_symbols_are_positions():
    torch.manual_seed(0)
    net = Conv1dNet().eval()
    recs = _signals(5)
    m = dl.Model(net, encode=_enc, symbols=lambda r: r.shape[1], name="c1d")
    got = _values(m, "conv", recs)
    hand = _hand(net, net.conv, _enc(recs))  # (N, C, L)
    assert got.shape == (5, 9, 6)
    torch.testing.assert_close(got, hand.transpose(1, 2))
    # the ReLU after BatchNorm1d inherits its producer's layout through the data flow
    assert str(m.layout("act")) == "'n u s'" and str(m.layout("head")) == "'n s u'"
    hand_act = _hand(net, net.act, _enc(recs)).transpose(1, 2)
    torch.testing.assert_close(_values(m, "act", recs), hand_act)


@pytest.mark.parametrize(
    ("addr", "units"), [("conv", [2]), ("act", [0, 4]), ("head", [1])]
)
def test_forcing_writes_the_axis_scoring_reads(addr, units):
    torch.manual_seed(1)
    net = Conv1dNet().eval()
    recs = _signals(4)
    m = dl.Model(net, encode=_enc, symbols=lambda r: r.shape[1], name="c1d")
    m.layer_widths(recs[:2], "cpu")
    with force_units(m, addr, units, 7.0):
        got = _values(m, addr, recs)
    assert torch.all(got[..., units] == 7.0)
    others = [u for u in range(got.shape[-1]) if u not in units]
    clean = _values(m, addr, recs)
    torch.testing.assert_close(got[..., others], clean[..., others])
    # a pattern lands on its symbol: position t of record r gets pattern[r, t]
    pattern = torch.arange(4 * 9 * len(units), dtype=torch.float32).reshape(4, 9, len(units))
    with force_units(m, addr, units, pattern):
        got = _values(m, addr, recs)
    torch.testing.assert_close(got[..., units], pattern)


def test_time_major_recurrent_and_attention_follow_batch_first():
    torch.manual_seed(2)
    for batch_first in (False, True):
        lstm = nn.LSTM(3, 5, batch_first=batch_first)
        recs = [np.random.default_rng(i).standard_normal((7, 3)).astype(np.float32)
                for i in range(4)]
        enc = (lambda rs: _enc(rs)) if batch_first else (lambda rs: _enc(rs).transpose(0, 1))
        m = dl.Model(lstm, encode=enc, symbols=len, name=f"lstm{batch_first}")
        got = _values(m, "", recs)
        hand = _hand(lstm, lstm, enc(recs))
        torch.testing.assert_close(got, hand if batch_first else hand.transpose(0, 1))
        with force_units(m, "", [1], 0.0):
            assert torch.all(_values(m, "", recs)[..., 1] == 0)


class Opaque(nn.Module):
    """A module of its own whose 3-D output no rule can read."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):  # (N, 4, L) -> (N, 4, L): which axis are the units?
        return torch.einsum("ncl,cd->ndl", x, self.w).tanh()


def _counting(recs):
    pulled = {"n": 0}

    def gen():
        for r in recs:
            pulled["n"] += 1
            yield r

    return gen(), pulled


def test_several_readings_raise_before_any_block_is_read():
    recs = [np.random.default_rng(i).standard_normal((4, 6)).astype(np.float32)
            for i in range(600)]
    m = dl.Model(nn.Sequential(Opaque()), encode=_enc, symbols=lambda r: 6, name="opaque")
    data, pulled = _counting(recs)
    hyp = dl.hypothesis(lambda r: [0.0, 1.0] * 3, name="alt")
    with pytest.raises(dl.LayerError) as err:
        dl.inspect([m], [hyp], ["corr"], data, units=[("0", "*")], eps=None, block_size=256)
    msg = str(err.value)
    assert "'n s u'" in msg and "'n u s'" in msg and "layouts={'0'" in msg
    # the first block is pulled for the probe pass's sample; no block is extracted or scored
    assert pulled["n"] <= 256
    declared = dl.Model(nn.Sequential(Opaque()), encode=_enc, symbols=lambda r: 6, name="dec",
                        layouts={"0": "n u s"})
    frame = dl.inspect([declared], [hyp], ["corr"], recs[:20], units=[("0", "*")], eps=None)
    assert frame.height == 4


def test_a_shape_keeping_module_of_its_own_inherits_unless_a_transpose_could_hide():
    class Scale(nn.Module):
        def forward(self, x):
            return 2 * x

    net = nn.Sequential(nn.Conv1d(2, 3, 1), Scale())
    m = dl.Model(net, encode=_enc, symbols=lambda r: r.shape[1], name="scale")
    recs = _signals(3, length=5)
    hand = _hand(net, net[1], _enc(recs)).transpose(1, 2)
    torch.testing.assert_close(_values(m, "1", recs), hand)
    square = dl.Model(net, encode=_enc, symbols=lambda r: r.shape[1], name="square")
    square.layer_widths(_signals(2, length=3), "cpu")  # 3 channels x 3 positions
    with pytest.raises(dl.LayerError, match="transpose"):
        square.layout("1")
    assert str(square.layout("0")) == "'n u s'"  # the conv's own kind still decides


def test_frames_as_symbols_split_the_batch_by_record():
    fr = dl.Frames(8, hop=4, center=False)
    net = nn.Sequential(nn.Unflatten(1, (1, 8)), nn.Conv1d(1, 3, 3), nn.ReLU())
    recs = [np.random.default_rng(i).standard_normal(8 + 4 * i).astype(np.float32)
            for i in range(3)]
    m = dl.Model(net, encode=fr.encode, symbols=fr.symbols, frames=True, reduce="max",
                 name="framed")
    got = _values(m, "1", recs)
    hand = _hand(net, net[1], fr.encode(recs)).amax(-1)  # (frames, units)
    counts = [fr.symbols(r) for r in recs]
    assert counts == [1, 2, 3] and got.shape == (3, 3, 3)
    for i, part in enumerate(torch.split(hand, counts)):
        torch.testing.assert_close(got[i, : counts[i]], part)
        assert torch.all(got[i, counts[i]:] == 0)
    with pytest.raises(dl.LayerError, match="reduce="):
        dl.Model(net, encode=fr.encode, symbols=fr.symbols, frames=True).layer_widths(recs, "cpu")


def test_prefix_drops_a_bos_position_and_forcing_leaves_it():
    emb = nn.Embedding(10, 4)
    enc = lambda rs: torch.tensor([[9] + [int(c) for c in r] for r in rs])  # noqa: E731
    m = dl.Model(nn.Sequential(emb), encode=enc, symbols=len, prefix=1, name="bos")
    recs = ["123", "456"]
    got = _values(m, "0", recs)
    torch.testing.assert_close(got, emb(enc(recs))[:, 1:].detach())
    seen = {}
    h = emb.register_forward_hook(lambda _m, _i, o: seen.setdefault("o", o.detach()))
    with force_units(m, "0", [2], 5.0), torch.no_grad():
        m.module(enc(recs))
    h.remove()
    out = emb(enc(recs)).detach()
    assert torch.all(seen["o"][:, 1:, 2] == out[:, 1:, 2])  # the hook saw the clean value


def test_extra_positions_are_an_error_unless_encode_pads():
    emb = nn.Embedding(10, 4)
    enc = lambda rs: torch.zeros(len(rs), 12, dtype=torch.long)  # noqa: E731
    m = dl.Model(emb, encode=enc, symbols=len, name="long")
    with pytest.raises(dl.LayerError, match="padded=True"):
        _values(m, "", ["12", "345"])
    ok = dl.Model(emb, encode=enc, symbols=len, name="pads", padded=True)
    assert _values(ok, "", ["12", "345"]).shape == (2, 3, 4)


def test_output_picks_one_tensor_of_a_dict_output():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return {"logits": self.lin(x), "hidden": torch.tanh(x)}

    net = nn.Sequential(Two())
    recs = [np.ones((4, 3), np.float32) * i for i in range(3)]
    m = dl.Model(net, encode=_enc, symbols=len, name="dict",
                 layouts={"0": dl.Layout("n s u", output="hidden")})
    torch.testing.assert_close(_values(m, "0", recs), torch.tanh(_enc(recs)))
    bad = dl.Model(net, encode=_enc, symbols=len, name="bad",
                   layouts={"0": dl.Layout("n s u", output="nope")})
    bad.layer_widths(recs, "cpu")  # one bad declaration refuses its own address only
    with pytest.raises(dl.LayerError, match="'logits', 'hidden'"):
        bad.layout("0")
    assert str(bad.layout("0.lin")) == "'n s u'"


def test_on_device_restores_every_submodules_own_mode():
    inner = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.5)).eval()
    wrapper = nn.Sequential(inner, nn.Linear(3, 2))  # a fresh wrapper is in train mode
    modes = {n: m.training for n, m in wrapper.named_modules()}
    assert modes[""] and not modes["0.1"]
    with on_device(dl.Model(wrapper, name="w"), torch.device("cpu")):
        assert not any(m.training for m in wrapper.modules())
    assert {n: m.training for n, m in wrapper.named_modules()} == modes


def test_a_torchscript_module_is_refused_by_name():
    scripted = torch.jit.script(nn.Linear(2, 2))
    with pytest.raises(dl.DNIError, match="TorchScript"):
        dl.Model(scripted, name="jit")


def test_bad_layout_specs_say_what_to_write():
    with pytest.raises(dl.LayerError, match="one letter per axis"):
        dl.Layout("n x u")
    with pytest.raises(dl.LayerError, match="reduce="):
        dl.Layout("n u r s")
    with pytest.raises(dl.LayerError, match="batch axis"):
        dl.Layout("s u")


def test_forcing_units_on_axes_that_are_not_adjacent():
    """(batch, head, pos, d_head): units head x d_head straddle the symbol axis."""
    from dni_lab.backend.extraction.layouts import Layout

    t = torch.randn(2, 3, 5, 4)
    lay = Layout("n u s u")
    view = lay.view(t, [5, 5], None, "t")
    assert view.shape == (2, 5, 12)
    torch.testing.assert_close(view[:, :, 4 * 1 + 2], t[:, 1, :, 2])
    forced = lay.write(t, torch.tensor([6, 11]), 9.0, None, "t")
    again = lay.view(forced, [5, 5], None, "t")
    assert torch.all(again[..., [6, 11]] == 9.0)
    keep = [u for u in range(12) if u not in (6, 11)]
    torch.testing.assert_close(again[..., keep], view[..., keep])
    pattern = torch.randn(2, 5, 2)
    again = lay.view(lay.write(t, torch.tensor([6, 11]), pattern, None, "t"), [5, 5], None, "t")
    torch.testing.assert_close(again[..., [6, 11]], pattern)


def test_a_linear_after_a_time_major_gru_is_time_major_too():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gru = nn.GRU(3, 4)  # time-major
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.gru(x)[0])

    net = Net()
    recs = [np.random.default_rng(i).standard_normal((6, 3)).astype(np.float32) for i in range(5)]
    enc = lambda rs: _enc(rs).transpose(0, 1)  # noqa: E731
    m = dl.Model(net, encode=enc, symbols=len, name="tm")
    assert str(m.layer_widths(recs[:2], "cpu") and m.layout("head")) == "'s n u'"
    hand = _hand(net, net.head, enc(recs)).transpose(0, 1)
    torch.testing.assert_close(_values(m, "head", recs), hand)


def test_a_module_called_twice_and_a_record_vector_on_many_symbols_are_refused_at_the_probe():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(3, 3)
            self.pool = nn.Linear(3, 2)

        def forward(self, x):  # (N, L, 3)
            return self.pool(self.shared(self.shared(x)).mean(1))

    m = dl.Model(Twice(), encode=_enc, symbols=len, name="twice")
    recs = [np.ones((4, 3), np.float32)] * 3
    m.layer_widths(recs[:2], "cpu")
    with pytest.raises(dl.LayerError, match="runs 2 times"):
        m.layout("shared")
    with pytest.raises(dl.LayerError, match="1 symbol positions"):
        m.layout("pool")  # one vector per record, but a record has 4 symbols


def test_a_sequential_is_one_layer_by_its_path_and_the_probe_runs_in_eval_mode():
    net = nn.Sequential()
    net.add_module("block", nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Tanh()))
    net.add_module("head", nn.Linear(5, 2))
    net.train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    m = dl.Model(net, encode=lambda rs: torch.as_tensor(np.stack(rs)), symbols=lambda r: 1,
                 name="seq")
    recs = [np.random.default_rng(i).standard_normal(3).astype(np.float32) for i in range(6)]
    assert "block" not in m.layers
    frame = dl.inspect([m], [dl.hypothesis(lambda r: [float(r[0])], name="x0")], ["corr"],
                       recs, units=[("block", "*")], eps=None)
    assert frame["layer"].unique().to_list() == ["block"] and frame.height == 5
    assert all(net.get_submodule(n).training for n in ("", "block", "block.1"))
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k  # BatchNorm's statistics untouched
    with torch.no_grad():
        net.eval()
        hand = net.block(torch.as_tensor(np.stack(recs)))
    torch.testing.assert_close(_values(m, "block", recs)[:, 0], hand)
