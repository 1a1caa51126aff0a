"""Sequence zoo entries: GRU, LSTM (stacked, bidirectional), a plain RNN, nn.TransformerEncoder
and nn.MultiheadAttention used directly, each batch-first and time-first.

Strings have 3..9 characters, 12 records, widths of 10 or more: no sequence length equals
a width or the record count. A time-first module's output reads ``s n u``; a Linear or a
LayerNorm fed that output directly reads ``s n u`` too (units last, the other axes its
input's: the data flow), and ``n s u`` when a function transposed it back first.
"""

from __future__ import annotations

from torch import nn

from . import Read, Refuse, encode_strings, entry, seeded, strings

SEQ, TSEQ = Read("n s u"), Read("s n u")
NOT_RUN = Refuse("LayerError", "does not run in the forward pass")
AFTER_FUNCTION = Refuse("LayerError", "shape-preserving after a function: no data flow")


class RNNNet(nn.Module):
    """Embedding → recurrent module → Linear head (on the time-first tensor when asked)."""

    def __init__(self, cell: type, batch_first: bool, head_time_first: bool = False,
                 **kw) -> None:  # fmt: skip
        super().__init__()
        self.embed = nn.Embedding(9, 8)
        self.rnn = cell(8, 10, batch_first=batch_first, **kw)
        width = 10 * (2 if kw.get("bidirectional") else 1)
        self.head = nn.Linear(width, 11)
        self.batch_first = batch_first
        self.head_time_first = head_time_first

    def forward(self, x):
        e = self.embed(x)
        if not self.batch_first:
            e = e.transpose(0, 1)
        out = self.rnn(e)[0]
        if not self.batch_first and not self.head_time_first:
            out = out.transpose(0, 1)
        return self.head(out)


def _rnn_entry(name: str, cell: type, batch_first: bool, seed: int, head_tf: bool = False,
               **kw) -> None:  # fmt: skip
    expect = {"embed": SEQ, "rnn": SEQ if batch_first else TSEQ, "head": TSEQ if head_tf else SEQ}

    def build():
        seeded(seed)
        return RNNNet(cell, batch_first, head_tf, **kw).eval(), {"encode": encode_strings}

    entry(name, strings, expect, family="rnn")(build)


_rnn_entry("gru-batch-first", nn.GRU, True, 10, num_layers=2)
_rnn_entry("gru-time-first", nn.GRU, False, 11, head_tf=True, num_layers=2)
_rnn_entry("bilstm-batch-first", nn.LSTM, True, 12, bidirectional=True)
_rnn_entry("bilstm-time-first", nn.LSTM, False, 13, bidirectional=True, num_layers=2)
_rnn_entry("lstm-stacked", nn.LSTM, True, 14, num_layers=2)
_rnn_entry("rnn-tanh", nn.RNN, True, 15)


class EncoderNet(nn.Module):
    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 10)
        layer = nn.TransformerEncoderLayer(10, 2, dim_feedforward=14, dropout=0.1,
                                           batch_first=batch_first)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(10, 11)
        self.batch_first = batch_first

    def forward(self, x):
        e = self.embed(x)
        if not self.batch_first:
            e = e.transpose(0, 1)
        out = self.encoder(e)
        return self.head(out if self.batch_first else out.transpose(0, 1))


def _encoder_entry(name: str, batch_first: bool, seed: int) -> None:
    by_kind = SEQ if batch_first else TSEQ
    expect = {
        "*out_proj": NOT_RUN,  # MultiheadAttention uses its weight, never calls it
        "encoder": by_kind, "encoder.layers.?": by_kind, "*self_attn": by_kind,
        "*linear?": SEQ, "*norm?": SEQ,  # by kind: refused on a time-first tensor
        "*.dropout": by_kind,  # after F.relu: proved by a second probe
        "*dropout1": by_kind,  # after self_attn: its reading (data flow)
        "*dropout2": SEQ,  # after linear2
        "embed": SEQ, "head": SEQ,
    }  # fmt: skip

    def build():
        seeded(seed)
        return EncoderNet(batch_first).eval(), {"encode": encode_strings}

    entry(name, strings, expect, family="transformer")(build)


_encoder_entry("transformer-batch-first", True, 20)
_encoder_entry("transformer-time-first", False, 21)


class AttentionNet(nn.Module):
    """``nn.MultiheadAttention`` called directly; it returns (output, weights)."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(9, 12)
        self.attn = nn.MultiheadAttention(12, 3, batch_first=batch_first)
        self.norm = nn.LayerNorm(12)
        self.batch_first = batch_first

    def forward(self, x):
        e = self.embed(x)
        if not self.batch_first:
            e = e.transpose(0, 1)
        out, _weights = self.attn(e, e, e)
        return self.norm(out if self.batch_first else out.transpose(0, 1))


def _attention_entry(name: str, batch_first: bool, seed: int) -> None:
    expect = {"attn.out_proj": NOT_RUN, "attn": SEQ if batch_first else TSEQ,
              "embed": SEQ, "norm": SEQ}  # fmt: skip

    def build():
        seeded(seed)
        return AttentionNet(batch_first).eval(), {"encode": encode_strings}

    entry(name, strings, expect, family="transformer")(build)


_attention_entry("mha-batch-first", True, 22)
_attention_entry("mha-time-first", False, 23)


__all__ = ["AttentionNet", "EncoderNet", "RNNNet"]
