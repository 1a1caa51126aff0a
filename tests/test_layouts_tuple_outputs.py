"""A declared ``Layout(..., output=...)`` on a tuple or dict output is proved by the probes
like any other declaration (issue 47, "Bad input").

Real modules that return several things: ``nn.LSTM`` (``(out, (h, c))``), ``nn.GRU``
(time-major), ``nn.MultiheadAttention`` (``(out, weights)``), a Hugging Face
``GPT2Attention`` (``(out, weights)``, from a tiny random-weights ``GPT2Model`` built from
a config) and a module of one's own returning a dict. A right declaration reads what a
hand forward hook reads; a wrong one is refused before any block with what the probes
saw; an ``output=`` the output does not have names the layer, the output's structure and
the fix; an undeclared tuple whose first tensor no probe can place is asked with
``output=`` offered; ``dl.check`` says which tensor each such tap reads. The model is
left as found (modes, hooks, weights) every time.
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest
import torch
import transformers
from test_layouts_proved import _enc, _hand, _same, _state, _values, _windows
from tolerances import assert_close_f32
from torch import nn

import dni_lab as dl
from dni_lab.backend.extraction.layouts import outputs, proof

VOCAB = 128
D = 16


class Recurrent(nn.Module):
    """Embedding, then an LSTM or GRU whose whole tuple output is what its hook sees."""

    def __init__(self, kind: type[nn.RNNBase], hidden: int = D, batch_first: bool = True):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.rnn = kind(D, hidden, batch_first=batch_first)
        self.head = nn.Linear(hidden, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        out, _ = self.rnn(x if self.rnn.batch_first else x.transpose(0, 1))
        return self.head(out if self.rnn.batch_first else out.transpose(0, 1))


class Attention(nn.Module):
    """Self-attention whose weights (records, queries, keys) come back beside its output."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        return self.attn(x, x, x)[0]


class Gated(nn.Module):
    """A module of one's own returning a dict; its gate, not its first entry, is wanted."""

    def __init__(self, d: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(d, 2 * d)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h, g = self.lin(x).chunk(2, -1)
        return {"hidden": h, "gate": torch.sigmoid(g)}


class DictNet(nn.Module):
    def __init__(self, d: int = D) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.block = Gated(d)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.block(self.emb(ids))
        return out["hidden"] * out["gate"]


class PairTap(nn.Module):
    """A tap returning the stream and a second tensor of the same shape."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return 2 * x, x.tanh()  # a new tensor: the data flow cannot tell its axes


class PairNet(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.tap = PairTap()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        return x + self.tap(x)[1]


def _gpt2() -> nn.Module:
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=D, n_layer=1,
                                  n_head=2, bos_token_id=0, eos_token_id=0,
                                  attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    return transformers.GPT2Model(cfg).eval()


#: name -> (builder, tapped address, right declaration, wrong declaration, hand selection)
CASES = {
    "lstm": (lambda: Recurrent(nn.LSTM, hidden=10), "rnn", dl.Layout("n s u", output=0),
             dl.Layout("n u s", output=0), lambda o: o[0]),
    "gru-time-major": (lambda: Recurrent(nn.GRU, batch_first=False), "rnn",
                       dl.Layout("s n u", output=0), dl.Layout("n s u", output=0),
                       lambda o: o[0].transpose(0, 1)),
    "multihead-attention": (Attention, "attn", dl.Layout("n s u", output=0),
                            dl.Layout("n s u", output=1), lambda o: o[0]),
    "gpt2-attention": (_gpt2, "h.0.attn", dl.Layout("n s u", output=0),
                       dl.Layout("n u s", output=0), lambda o: o[0]),
    "dict-gate": (lambda: DictNet(d=10), "block", dl.Layout("n s u", output="gate"),
                  dl.Layout("n u s", output="gate"), lambda o: o["gate"]),
}


def _build(name: str) -> nn.Module:
    torch.manual_seed(1)
    return CASES[name][0]().eval()


HYP = dl.hypothesis(lambda r: [float(c == "a") for c in r], name="is_a")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_right_declaration_reads_the_selected_tensor_as_a_hand_hook(name):
    net = _build(name)
    _b, addr, right, _w, select = CASES[name]
    recs = _windows(5, 10, seed=2)  # one length: no padding inside attention
    m = dl.Model(net, encode=_enc(), name=name, layouts={addr: right})
    got = _values(m, addr, recs)
    hand = select(_hand(net, net.get_submodule(addr), _enc()(recs)))
    assert got.shape == hand.shape
    assert_close_f32(got, hand, reduction=2 * D)
    row = dl.check(m, recs, [HYP], units=[(addr, "*")]).filter(pl.col("layer") == addr).row(
        0, named=True)
    assert row["layout"] == right.spec and row["decided_by"] == "declared"
    assert f"reads output={right.output!r} of " in row["evidence"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_wrong_declaration_is_refused_before_any_block_with_the_probes_evidence(name):
    net = _build(name)
    _b, addr, _right, wrong, _s = CASES[name]
    net.get_submodule(addr).train()  # its own mode, and a hook of the user's: left as found
    net.get_submodule(addr).register_forward_hook(lambda *_: None)
    batches: list[int] = []
    net.register_forward_pre_hook(lambda _m, args: batches.append(args[0].shape[0]))
    before = _state(net)
    recs = _windows(300, 10, seed=3)  # windows as long as the LSTM is wide: square
    m = dl.Model(net, encode=_enc(), name=name, layouts={addr: wrong})
    with pytest.raises(dl.LayerError) as err:
        dl.inspect([m], [HYP], ["corr"], recs, units=[(addr, "*")], eps=None, block_size=256,
                   cache=False)  # fmt: skip
    msg = str(err.value)
    assert f"layer {addr!r} is declared {wrong}" in msg, msg
    assert "the probes saw 2 records of at most 10 symbols gave" in msg
    assert "3 records of at most 5 symbols gave" in msg
    assert f"output={wrong.output!r}" in msg.split("the probes saw")[1]  # the fix keeps it
    assert max(batches) <= 3  # only the probes ran: no block reached the model
    assert _same(before, _state(net))
    rows = dl.check(m, recs[:4], [HYP], units=[(addr, "*")]).filter(pl.col("layer") == addr)
    assert rows["decided_by"].item() == "contradicted" and rows["layout"].item() is None
    assert rows["evidence"].item().splitlines()[0] in msg
    assert _same(before, _state(net))


def test_the_right_declaration_of_a_square_output_stays_exact_and_is_not_refused():
    net = _build("lstm")  # hidden 10, windows of 10: only the second probe tells
    recs = _windows(4, 10, seed=4)
    m = dl.Model(net, encode=_enc(), name="square", layouts={"rnn": CASES["lstm"][2]})
    frame = dl.inspect([m], [HYP], ["corr"], recs, units=[("rnn", "*")], eps=None, cache=False)
    assert frame.height == 10
    assert dl.provenance(frame)["layouts"]["square"]["rnn"] == {
        "layout": "n s u", "how": "declared", "evidence": "reads output=0"}


def test_an_output_that_does_not_exist_names_the_structure_and_the_fix():
    net = _build("lstm")
    net.rnn.train()
    before = _state(net)
    recs = _windows(4, 6, seed=5)
    asks = {
        dl.Layout("n s u", output=5): "which has no item output=5",
        dl.Layout("n s u", output=1): "its item output=1 is tuple of 2, not a tensor",
    }
    for layout, why in asks.items():
        m = dl.Model(net, encode=_enc(), name="lstm", layouts={"rnn": layout})
        with pytest.raises(dl.LayerError) as err:
            dl.inspect([m], [HYP], ["corr"], recs, units=[("rnn", "*")], eps=None, cache=False)
        msg = str(err.value)
        assert "layer 'rnn' (LSTM) returns tuple of 2: [0] tensor (2, 6, 10), [1] tuple of 2" in msg
        assert why in msg and "dl.Layout('n s u', output=0)" in msg
    assert _same(before, _state(net))
    net = _build("dict-gate")
    gate = dl.Layout("n s u", output="g")
    m = dl.Model(net, encode=_enc(), name="gated", layouts={"block": gate})
    with pytest.raises(dl.LayerError) as err:
        dl.inspect([m], [HYP], ["corr"], recs, units=[("block", "*")], eps=None, cache=False)
    msg = str(err.value)
    assert ("layer 'block' (Gated) returns dict of 2: ['hidden'] tensor (2, 6, 10), ['gate'] "
            "tensor (2, 6, 10), which has no item output='g'") in msg
    assert "(output= one of 'hidden', 'gate')" in msg


def test_an_undeclared_tuple_whose_first_tensor_stays_square_offers_output():
    torch.manual_seed(6)
    net = PairNet(d=12).eval()
    m = dl.Model(net, encode=_enc(12), name="pairs", padded=True)  # fixed 12 wide: square
    with pytest.raises(dl.LayerError) as err:
        dl.inspect([m], [HYP], ["corr"], _windows(20, 12, seed=6), units=[("tap", "*")],
                   eps=None, cache=False)  # fmt: skip
    msg = str(err.value)
    assert "layouts={'tap': 'n s u'}" in msg
    assert ("It returns tuple of 2: [0] tensor (2, 12, 12), [1] tensor (2, 12, 12) and its "
            "first tensor is read") in msg
    assert "dl.Layout('n s u', output=1)" in msg


def test_check_says_which_tensor_an_undeclared_tap_reads():
    net = _gpt2()
    recs = _windows(3, 8, seed=7)
    m = dl.Model(net, encode=_enc(), name="gpt2")
    rows = dl.check(m, recs, [HYP], units=[("h.0.attn", "*"), ("h.0.mlp", "*")])
    attn = rows.filter(pl.col("layer") == "h.0.attn").row(0, named=True)
    assert attn["layout"] == "n s u"
    assert attn["evidence"].startswith(
        "reads the first tensor (output=0) of tuple of 2: [0] tensor (2, 8, 16), [1] tensor "
        "(2, 2, 8, 8); declare output= to read another (output=1)")
    mlp = rows.filter(pl.col("layer") == "h.0.mlp").row(0, named=True)
    assert "reads" not in mlp["evidence"]  # a plain tensor: nothing to choose


def test_the_structure_and_the_second_probes_key():
    out = (torch.zeros(2, 3), (torch.zeros(1), torch.zeros(1)))
    assert outputs.describe(out) == "tuple of 2: [0] tensor (2, 3), [1] tuple of 2"
    assert outputs.default_key(((torch.zeros(1),), torch.zeros(2))) == 0
    assert outputs.alternatives({"a": torch.zeros(1), "b": None, "c": torch.zeros(2)}, "a") == ["c"]
    hf = transformers.modeling_outputs.BaseModelOutput(last_hidden_state=torch.zeros(2, 3),
                                                       hidden_states=(torch.zeros(1),))
    assert outputs.describe(hf) == ("BaseModelOutput of 2: ['last_hidden_state'] tensor (2, 3), "
                                    "['hidden_states'] tuple of 1")
    assert torch.equal(dl.Layout("n u", output="last_hidden_state").select(hf, "x"),
                       hf.last_hidden_state)

    @dataclasses.dataclass
    class Pair:
        hidden: torch.Tensor
        gate: object

    with pytest.raises(dl.LayerError, match=r"returns Pair of 2: .hidden tensor \(2,\), .gate "
                       r"None; its item output='gate' is None, not a tensor"):
        dl.Layout("n u", output="gate").select(Pair(torch.zeros(2), None), "layer 'p'")
    # two declarations of one module read different items: proved apart, not from one cache
    net = _build("multihead-attention")
    recs = _windows(2, 6, seed=8)
    for output in (0, 1):
        m = dl.Model(net, encode=_enc(), name="mha",
                     layouts={"attn": dl.Layout("n s u", output=output)})
        dl.check(m, recs, [HYP], units=[("attn", "*")])
    assert len([k for k in proof._SECOND[net] if k[0] == "output="]) == 2
