"""Model adapter and extraction: every supported shape, hooks, behaviors, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from torch import nn

import dni_lab as dl
from dni_lab.backend.extraction.extract import Extractor, resolve_device, symbol_mask


def extract(model, records, plan, behavior="activation"):
    mask = symbol_mask(model, records, torch.device("cpu"))
    ex = Extractor(model, {a: None for a in plan}, behavior, torch.device("cpu"))
    return ex(records, mask), mask


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("batch_first", [True, False])
def test_recurrent_outputs_per_timestep(cell, batch_first):
    torch.manual_seed(1)
    lm = CharLM(hidden=5, layers=2, cell=cell, batch_first=batch_first)
    model = dl.Model(lm, encode=encode_chars)
    recs = random_records(6, seed=1)
    out, _ = extract(model, recs, ["lstm", "lstm.l0", "lstm.l1"])
    x = encode_chars(recs)
    e = lm.embed(x)
    e_in = e if batch_first else e.transpose(0, 1)
    full = lm.lstm(e_in)[0]
    full = full if batch_first else full.transpose(0, 1)
    T = x.shape[1]
    mask = torch.arange(T)[None, :] < torch.tensor([len(r) for r in recs])[:, None]
    assert torch.allclose(out["lstm"][mask], full.detach()[mask], atol=1e-6)
    assert torch.allclose(out["lstm.l1"][mask], full.detach()[mask], atol=1e-5)
    assert float(out["lstm"][~mask].abs().sum()) == 0  # padding zeroed
    # layer 0 by hand: a one-layer copy of the same weights
    one = cell(6, 5, num_layers=1, batch_first=batch_first)
    one.load_state_dict({k: v for k, v in lm.lstm.state_dict().items() if "_l0" in k})
    l0 = one(e_in)[0]
    l0 = l0 if batch_first else l0.transpose(0, 1)
    assert torch.allclose(out["lstm.l0"][mask], l0.detach()[mask], atol=1e-5)


def test_lstm_cell_state_matches_lstmcell():
    torch.manual_seed(2)
    lm = CharLM(hidden=4, layers=1)
    model = dl.Model(lm, encode=encode_chars)
    recs = ["abc(", "a)"]
    out, mask = extract(model, recs, ["lstm.cell", "lstm.l0.cell"])
    cell = nn.LSTMCell(6, 4)
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in lm.lstm.state_dict().items()})
    e = lm.embed(encode_chars(recs))
    h = c = torch.zeros(2, 4)
    cs = []
    for t in range(e.shape[1]):
        h, c = cell(e[:, t], (h, c))
        cs.append(c)
    ref = torch.stack(cs, 1).detach()
    assert torch.allclose(out["lstm.cell"][mask], ref[mask], atol=1e-5)
    assert torch.allclose(out["lstm.l0.cell"], out["lstm.cell"])


class TupleBlock(nn.Module):
    """A transformer-style block that returns (output, attention weights)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, w = self.attn(x, x, x)
        return x + out, w


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(len("abcdefghij()+*") + 1, 8)
        self.blocks = nn.ModuleList([TupleBlock(), TupleBlock()])

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h, _ = b(h)
        return h


def test_tuple_outputs_and_generic_btd():
    torch.manual_seed(3)
    net = TinyTransformer()
    model = dl.Model(net, encode=encode_chars)
    assert "blocks.0" in model.addresses and "blocks" not in model.addresses
    recs = random_records(4, seed=3)
    out, mask = extract(model, recs, ["blocks.1", "embed"])
    h = net.embed(encode_chars(recs))
    h = net.blocks[0](h)[0]
    ref = net.blocks[1](h)[0]
    assert out["blocks.1"].shape == (4, ref.shape[1], 8)
    assert torch.allclose(out["blocks.1"][mask], ref.detach()[mask], atol=1e-5)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 3, 3, padding=1)
        self.conv2 = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x[:, None])))


def test_conv_maps_are_pixels_resized_to_input():
    torch.manual_seed(4)
    net = TinyCNN()
    model = dl.Model(net)
    imgs = [np.random.default_rng(i).random((6, 8), dtype=np.float32) for i in range(3)]
    out, mask = extract(model, imgs, ["conv1", "conv2"])
    assert mask.shape == (3, 48) and bool(mask.all())
    ref1 = net.conv1(torch.as_tensor(np.stack(imgs))[:, None]).detach()
    assert torch.allclose(out["conv1"], ref1.flatten(2).transpose(1, 2), atol=1e-6)
    assert out["conv2"].shape == (3, 48, 4)  # 3x4 map resized to the 6x8 input
    with pytest.raises(dl.LayerError, match="resize"):
        extract(dl.Model(net, resize=False), imgs, ["conv2"])


def test_unknown_layer_suggests_and_positions(char_model):
    with pytest.raises(dl.LayerError) as e:
        char_model.resolve_layer("lstn")
    assert "did you mean 'lstm'" in str(e.value).lower() and "toy" in str(e.value)
    assert char_model.resolve_layer(1) == "lstm"
    with pytest.raises(dl.LayerError, match="out of range"):
        char_model.resolve_layer(7)


@dl.hypothesis(name="paren")
def paren_hyp(r):
    return [c in "()" for c in r]


class Hook(nn.Identity):
    """A named identity, as TransformerLens' hook points are."""


class BridgedBlock(nn.Module):
    """A block wrapped the way a TransformerLens 4 bridge wraps one: the same hook module
    is registered twice (on the wrapper and inside ``_original_component``) and is also
    reachable under a legacy alias that is an attribute, not a registered name."""

    def __init__(self):
        super().__init__()
        self._original_component = nn.Module()
        self._original_component.lin = nn.Linear(8, 8)
        self._original_component.ln = nn.LayerNorm(8)  # kept by the wrapper, never called
        self._original_component.hook_out = self.hook_out = Hook()

    @property
    def hook_resid_post(self) -> nn.Module:
        return self.hook_out

    def forward(self, h):
        return self.hook_out(h + torch.tanh(self._original_component.lin(h)))


class Bridged(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(len("abcdefghij()+*") + 1, 8)
        self.blocks = nn.ModuleList([BridgedBlock(), BridgedBlock()])

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return h


def test_a_module_under_several_names_is_listed_once_and_aliases_resolve():
    torch.manual_seed(5)
    # a bare Identity fed by functional code: its axes are declared, not read off a shape
    model = dl.Model(Bridged(), encode=encode_chars, name="bridged",
                     layouts={"blocks.1.hook_out": "n s u"})
    assert "blocks.1.hook_out" in model.layers
    assert not any(n.endswith("_original_component.hook_out") for n in model.layers)
    assert len(model.layers) == len({id(model._module(n)) for n in model.layers})
    assert model.resolve_layer("blocks.1.hook_resid_post") == "blocks.1.hook_out"
    recs = random_records(40, seed=5)
    by_alias = dl.inspect(model, [paren_hyp], ["corr"], recs,
                          units=[("blocks.1.hook_resid_post", "*")], eps=None)
    by_name = dl.inspect(model, [paren_hyp], ["corr"], recs,
                         units=[("blocks.1.hook_out", "*")], eps=None)
    assert by_alias["layer"].unique().to_list() == ["blocks.1.hook_out"]
    np.testing.assert_allclose(by_alias["unit_score"].to_numpy(), by_name["unit_score"].to_numpy())
    with pytest.raises(dl.LayerError, match="'blocks.1.hook_out'"):  # a typo still suggests
        model.resolve_layer("blocks.1.hook_ot")
    with pytest.raises(dl.LayerError):  # an attribute that is not a module is not a layer
        model.resolve_layer("blocks.1.training")


def test_default_units_skip_layers_the_forward_pass_never_calls():
    model = dl.Model(Bridged(), encode=encode_chars, name="bridged")
    assert "blocks.0._original_component.ln" in model.positional_layers()
    frame = dl.inspect(model, [paren_hyp], ["corr"], random_records(20, seed=6), eps=None)
    layers = set(frame["layer"].unique().to_list())
    assert "blocks.0._original_component.lin" in layers and "embed" in layers
    assert not any(a.endswith(".ln") for a in layers)
    with pytest.raises(dl.LayerError, match="produced no tensor"):  # asked for, it is an error
        dl.inspect(model, [paren_hyp], ["corr"], random_records(20, seed=6),
                   units=[("blocks.0._original_component.ln", "*")])


class TLBridged(Bridged):
    """What TransformerLens models have in common: a hook registry and a list of blocks."""

    def __init__(self):
        super().__init__()
        self.hook_dict = {}


def test_a_transformer_lens_model_defaults_to_its_residual_stream_and_counts_blocks():
    model = dl.Model(TLBridged(), encode=encode_chars, name="tl")
    assert model.positional_layers() == ["blocks.0.hook_out", "blocks.1.hook_out"]
    assert model.resolve_layer(1) == "blocks.1.hook_out"
    frame = dl.inspect(model, [paren_hyp], ["corr"], random_records(20, seed=7), eps=None)
    assert sorted(frame["layer"].unique().to_list()) == ["blocks.0.hook_out", "blocks.1.hook_out"]


def test_unknown_layer_lists_a_bounded_number_of_layers():
    net = nn.Sequential(*[nn.Linear(4, 4) for _ in range(80)])
    with pytest.raises(dl.LayerError) as e:
        dl.Model(net).resolve_layer("nope")
    msg = str(e.value)
    assert "'29'" in msg and "'30'" not in msg and "50 more: model.addresses" in msg


def test_layer_widths_probe_once_and_cached(char_model):
    calls = []
    encode = char_model.encode

    def counting(records):
        calls.append(len(records))
        return encode(records)

    m = dl.Model(char_model.module, encode=counting, name="toy")
    widths = m.layer_widths(["ab("], "cpu")
    assert widths["embed"] == 6 and widths["lstm"] == 12 and widths["head"] == 14
    assert widths["lstm.l0"] == widths["lstm.l1.cell"] == 12
    widths["lstm"] = -1  # the returned dict is a copy: callers cannot corrupt the cache
    assert m.layer_widths([], "cpu")["lstm"] == 12
    assert calls == [1]
    with pytest.raises(ValueError, match="at least one record"):
        dl.Model(char_model.module, encode=counting).layer_widths([], "cpu")


def test_hooks_removed_even_on_error(char_model):
    recs = ["ab", "c"]

    def boom(records):
        raise RuntimeError("encode failed")

    bad = dl.Model(char_model.module, encode=boom)
    with pytest.raises(RuntimeError):
        extract(bad, recs, ["lstm", "lstm.l1"])
    for m in char_model.module.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_gradient_behavior_is_saliency_of_each_unit(char_model):
    recs = ["ab()", "c"]
    out, mask = extract(char_model, recs, ["lstm"], behavior="gradient")
    g = out["lstm"]
    assert g.shape == (2, 4, 12)
    assert bool((g[mask] >= 0).all()) and float(g[mask].sum()) > 0
    assert float(g[~mask].abs().sum()) == 0  # padding stays masked
    # unit 3 by hand
    lm = char_model.module
    emb = lm.embed(encode_chars(recs)).detach().requires_grad_(True)
    act = lm.lstm(emb)[0][..., 3]
    (act * mask).sum().backward()
    assert torch.allclose(g[..., 3], emb.grad.norm(dim=-1), atol=1e-5)


def test_user_behavior_function_and_shape_check(char_model):
    out, _ = extract(char_model, ["abc"], ["lstm"], behavior=lambda a, recs: a * 2)
    ref, _ = extract(char_model, ["abc"], ["lstm"])
    assert torch.allclose(out["lstm"], ref["lstm"] * 2)
    with pytest.raises(dl.BehaviorError, match="shape"):
        extract(char_model, ["abc"], ["lstm"], behavior=lambda a, recs: a[..., :2])


def test_nan_activations_name_the_layer(char_model):
    with torch.no_grad():
        char_model.module.head.weight[0, 0] = float("nan")
    with pytest.raises(dl.BehaviorError, match="'head'.*NaN"):
        extract(char_model, ["abc"], ["head"])


def test_device_auto_is_cpu_here_and_module_restored(char_model, records, hyps):
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    char_model.module.train()
    dl.inspect([char_model], hyps, ["corr"], records[:20], units=[("lstm", "*")], eps=None)
    assert char_model.module.training  # mode restored
