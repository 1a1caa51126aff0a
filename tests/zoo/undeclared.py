"""Issue 47's shapes, each with no declaration: a transformer whose blocks add into a
residual stream tapped with ``nn.Identity``, a tracr-like ``ModuleList`` of taps, a
CREPE-like wrapper that frames audio, a model whose hidden width equals every record's
length, and a corpus with one-character records.

Nothing passes ``layouts=`` or ``prefix=``: each module is proved by the probes (and read
as the hand hook reads it) or asked up front (``Refuse``) with its one-line fix.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from . import VOCAB, Read, Refuse, encode_strings, entry, seeded, strings

SEQ, VEC = Read("n s u"), Read("n u")
WIDTH = 8  # the hidden width of ``width-equals-length``, and every record's length there


class Block(nn.Module):
    """Pre-norm attention and MLP, each adding into the residual stream."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.hook_resid_mid = nn.Identity()
        self.hook_resid_post = nn.Identity()

    def forward(self, x):
        h = self.ln1(x)
        x = self.hook_resid_mid(x + self.attn(h, h, h, need_weights=False)[0])
        return self.hook_resid_post(x + self.mlp(self.ln2(x)))


class ResidualTaps(nn.Module):
    """A small transformer: Identity taps on every residual sum (TransformerLens-style)."""

    def __init__(self, d: int = 12, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB) + 1, d)
        self.pos = nn.Embedding(16, d)
        self.hook_embed = nn.Identity()
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.unembed = nn.Linear(d, len(VOCAB) + 1)

    def forward(self, x):
        h = self.hook_embed(self.embed(x) + self.pos(torch.arange(x.shape[1])))
        for block in self.blocks:
            h = block(h)
        return self.unembed(self.ln_f(h))


@entry("residual-identity-taps", strings, {
    # (T, d) with no record axis: asked up front
    "pos": Refuse("LayerError", "a position table has no record axis"),
    "*": SEQ,
}, family="undeclared")  # fmt: skip
def residual_taps():
    seeded(40)
    return ResidualTaps().eval(), {"encode": encode_strings}


class TracrLike(nn.Module):
    """Residual layers with their taps in a ``ModuleList`` (tracr's ``residual`` hooks)."""

    def __init__(self, d: int = 10, layers: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB) + 1, d)
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])
        self.taps = nn.ModuleList([nn.Identity() for _ in range(layers + 1)])

    def forward(self, x):
        h = self.taps[0](self.embed(x))
        for layer, tap in zip(self.layers, self.taps[1:], strict=True):
            h = tap(h + torch.relu(layer(h)))
        return h


@entry("modulelist-taps", strings, {"*": SEQ}, family="undeclared")
def tracr_like():
    seeded(41)
    return TracrLike().eval(), {"encode": encode_strings}


FRAME = 16  # samples per frame: one symbol


def framed_signals(n: int = 8, seed: int = 3) -> list:
    """Raw signals of 3..8 frames of :data:`FRAME` samples."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=int(rng.integers(3, 9)) * FRAME).astype(np.float32)
            for _ in range(n)]  # fmt: skip


def frames_of(samples: int) -> int:
    """Frames of a signal of ``samples``: its last one zero-padded."""
    return -(-samples // FRAME)


class Unframe(nn.Module):
    """Every record's frames back on a padded record axis: ``(N, frames, bins)``."""

    def forward(self, h, per_record):
        out = h.new_zeros(len(per_record), max(per_record), h.shape[1])
        for i, part in enumerate(h.split(per_record)):
            out[i, : len(part)] = part
        return out


class FramedPitch(nn.Module):
    """CREPE-like: the wrapper frames each signal, classifies every frame of every record
    on one batch axis (its inner modules see ``(frames of all records, ...)``) and returns
    ``(N, frames, bins)`` from :class:`Unframe`."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 6, 3, 2, 1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(6 * FRAME // 2, 10)
        self.act = nn.ReLU()
        self.bins = nn.Linear(10, 12)
        self.unframe = Unframe()

    def forward(self, x, lengths):  # x: (N, L) zero-padded; lengths: samples per record
        per_record = [frames_of(int(n)) for n in lengths]
        # a signal's last frame zero-padded, as a framer does (any length frames)
        frames = torch.cat([nn.functional.pad(x[i, : int(n)], (0, f * FRAME - int(n)))
                            .reshape(f, FRAME) for i, (n, f) in
                            enumerate(zip(lengths, per_record, strict=True))])  # fmt: skip
        h = self.act(self.fc(self.flat(self.conv(frames[:, None]))))
        return self.unframe(self.bins(h), per_record)


def encode_framed(records: list) -> tuple[torch.Tensor, torch.Tensor]:
    """``(N, L)`` zero-padded to the longest signal, and each record's length."""
    L = max(len(r) for r in records)
    out = torch.zeros(len(records), L)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.from_numpy(r)
    return out, torch.tensor([len(r) for r in records])


@entry("framed-audio-undeclared", framed_signals, {
    "unframe": SEQ,  # (N, frames, bins): proved per frame
    # (frames of every record, ...) on the batch axis: asked, layouts={name: "f u"} settles it
    "*": Refuse("LayerError", "frames on the batch axis: declare layouts={name: 'f u'}"),
}, family="undeclared")  # fmt: skip
def framed_pitch():
    seeded(42)
    return FramedPitch().eval(), {"encode": encode_framed, "symbols": lambda r: frames_of(len(r))}


def fixed_strings(n: int = 10, seed: int = 4) -> list[str]:
    """Strings of exactly :data:`WIDTH` characters: the sequence length is the width."""
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(VOCAB), WIDTH)) for _ in range(n)]


class SquareNet(nn.Module):
    """Hidden width :data:`WIDTH`, the records' length: an (N, T, T) output whose axes a
    shape cannot tell apart; a transposed copy of it read where a function made it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB) + 1, WIDTH)
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, 5)
        self.tap = nn.Identity()  # after a function: only the probes can read it
        self.tap_t = nn.Identity()  # the same, transposed: (N, units, symbols), all 8

    def forward(self, x):
        h = self.tap(torch.tanh(self.mix(self.embed(x))))
        self.tap_t(h.transpose(1, 2))  # a tap: its output is discarded
        return self.head(self.norm(h))


@entry("width-equals-length", fixed_strings, {"tap_t": Read("n u s"), "*": SEQ},
       family="undeclared")  # fmt: skip
def square():
    seeded(43)
    return SquareNet().eval(), {"encode": encode_strings}


def with_one_character(n: int = 12, seed: int = 5) -> list[str]:
    """Strings with one-character records among them (``'a'``: one of everything)."""
    out = strings(n, seed=seed)
    return ["a", *out[:5], "h", *out[5:], "c"]


class CharNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(VOCAB) + 1, 10)
        self.rnn = nn.GRU(10, 11, batch_first=True)
        self.head = nn.Linear(11, 13)

    def forward(self, x):
        return self.head(self.rnn(self.embed(x))[0])


@entry("one-character-records", with_one_character, {"*": SEQ}, family="undeclared")
def one_character():
    seeded(44)
    return CharNet().eval(), {"encode": encode_strings}
