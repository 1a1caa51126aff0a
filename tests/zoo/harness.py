"""The zoo's hand-written side: hooks, the reference reading per module, Pearson in float64,
and dni_lab's answers to compare with (``dl.inspect`` scores, the behaviors service).

``case(entry, address)`` runs one (model, module) and returns its outcome: ``"equal"``,
``"named-error"`` (a refusal before any data was read, as expected) or raises
``AssertionError`` with what differed.
"""

from __future__ import annotations

import inspect as pyinspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

import dni_lab as dl

from . import Entry, values
from .reference import Read, ReadingError, Refuse, read, replay_rnn

_SUB = re.compile(r"^(?P<base>.+)\.l(?P<k>\d+)(?P<cell>\.cell)?$|^(?P<cbase>.+)\.cell$")
NOT_RUN = Refuse("LayerError", "does not run in the forward pass")
TWICE = Refuse("LayerError", "called twice in one forward pass: which call is read?")
CONTRACT = "needs the layout contract: Model(layouts=..., prefix=...) and dl.Layout"


class NeedsContract(Exception):
    """The entry declares layouts or a prefix that this dni_lab cannot take yet."""


def has_contract() -> bool:
    """Whether ``dl.Model`` takes ``layouts=`` and ``prefix=`` and ``dl.Layout`` exists."""
    params = pyinspect.signature(dl.Model.__init__).parameters
    return hasattr(dl, "Layout") and "layouts" in params and "prefix" in params


def make_model(entry: Entry) -> tuple[dl.Model, dict[str, Any]]:
    """A fresh ``dl.Model`` of the entry (fresh module, fixed seed) and its keywords."""
    module, kw = entry.build()
    if kw.get("from_hf"):  # a vision transformer: nothing declared, all from the model
        model = dl.Model.from_hf(module, name=entry.name)
        return model, {"prefix": model.prefix, "resize": False}
    if ("layouts" in kw or "prefix" in kw) and not has_contract():
        raise NeedsContract(CONTRACT)
    return dl.Model(module, name=entry.name, **kw), kw


def sub_layer(address: str) -> tuple[str, int, bool] | None:
    """``"rnn.l1.cell"`` → (``"rnn"``, 1, True); ``"rnn.cell"`` → (``"rnn"``, -1, True)."""
    m = _SUB.match(address)
    if not m:
        return None
    if m.group("cbase"):
        return m.group("cbase"), -1, True
    return m.group("base"), int(m.group("k")), bool(m.group("cell"))


def named_modules_of(entry: Entry) -> list[str]:
    """The entry's named modules (ModuleList/ModuleDict cannot run) and its recurrent
    sub-layers (``rnn.l0``, LSTM cells), listed without asking dni_lab."""
    module, _kw = entry.build()
    out = []
    for name, mod in module.named_modules():
        if not name or isinstance(mod, (nn.ModuleList, nn.ModuleDict)):
            continue
        out.append(name)
        if isinstance(mod, nn.RNNBase):
            out += [f"{name}.l{k}" for k in range(mod.num_layers)]
            if isinstance(mod, nn.LSTM):
                out += [f"{name}.l{k}.cell" for k in range(mod.num_layers)] + [f"{name}.cell"]
    return out


@dataclass
class Hand:
    """What the hand hooks saw: every call's output (or a recurrent module's input)."""

    calls: list[Any]
    rnn_input: torch.Tensor | None = None


def hand_run(model: dl.Model, records: list[Any], address: str) -> Hand:
    """Run the module in eval mode under ``no_grad`` with one hand-written forward hook on
    ``address``; every submodule's mode is restored after."""
    sub = sub_layer(address)
    target = model.module.get_submodule(sub[0] if sub else address)
    hand = Hand([])

    def hook(_mod, inp, out):
        hand.calls.append(out)
        if sub:
            assert len(inp) == 1, "the zoo's recurrent modules start from a zero state"
            hand.rnn_input = inp[0]

    modes = {m: m.training for m in model.module.modules()}
    handle = target.register_forward_hook(hook)
    try:
        model.module.eval()
        with torch.no_grad():
            batch = model.encode(list(records))
            if isinstance(batch, dict):
                model.module(**batch)
            elif isinstance(batch, tuple):
                model.module(*batch)
            else:
                model.module(batch)
    finally:
        handle.remove()
        for m, mode in modes.items():
            m.training = mode
    return hand


def expected(entry: Entry, model: dl.Model, kw: dict, records: list, address: str):
    """``Refuse`` or the per-record float64 ``(symbols, units)`` arrays the contract reads."""
    want = entry.expected(address)
    sub = sub_layer(address)
    if want is None and not sub:
        raise AssertionError(f"zoo entry {entry.name!r} has no expectation for {address!r}")
    hand = hand_run(model, records, address)
    if not hand.calls:
        return NOT_RUN
    if len(hand.calls) > 1:
        return TWICE
    if isinstance(want, Refuse):
        return want
    counts = [int(model.symbols(r)) for r in records]
    try:
        if sub:
            base, k, cell = sub
            mod = model.module.get_submodule(base)
            layer = mod.num_layers - 1 if k == -1 else k
            return replay_rnn(mod, hand.rnn_input, layer, cell, counts)
        prefix = want.prefix if want.prefix is not None else kw.get("prefix", 0)
        return read(hand.calls[0], want, counts, None if want.grid else image_hw(records),
                    kw.get("resize", True), prefix)  # fmt: skip
    except ReadingError as exc:
        return Refuse("LayerError", f"the contract refuses this reading: {exc}")


def image_hw(records: list) -> tuple[int, int] | None:
    """(H, W) of (C, H, W) image records that all share it; else None."""
    shapes = {getattr(r, "shape", None) for r in records}
    if len(shapes) == 1 and (s := shapes.pop()) is not None and len(s) == 3:
        return int(s[1]), int(s[2])
    return None


def hypothesis(model: dl.Model, calls: list[int]) -> Any:
    """The zoo's continuous hypothesis, counting its calls in ``calls[0]``."""

    @dl.hypothesis(name="zoo", kind="continuous")
    def zoo(record):
        calls[0] += 1
        return values(record, int(model.symbols(record)))

    return zoo


def counted(records: list, pulled: list[int]) -> Iterator[Any]:
    """The records as a generator that counts how many were pulled."""
    for r in records:
        pulled[0] += 1
        yield r


def pearson(acts: list[np.ndarray], hyp: list[np.ndarray]) -> np.ndarray:
    """Per unit Pearson r over every (record, symbol) in float64; NaN for a constant unit."""
    a = np.concatenate(acts).astype(np.float64)
    h = np.concatenate(hyp).astype(np.float64)
    a = a - a.mean(0)
    h = h - h.mean()
    den = np.sqrt((a * a).sum(0) * (h * h).sum())
    raw = np.concatenate(acts)
    # constant up to float32 rounding (a resized 1x1 map, a BatchNorm of a dead channel)
    flat = np.ptp(raw, 0) <= 1e-6 * np.maximum(1.0, np.abs(raw).max(0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(flat, np.nan, (a * h[:, None]).sum(0) / den)


def scores(model: dl.Model, records: list, address: str) -> np.ndarray:
    """dl.inspect's corr unit scores for every unit of ``address`` (NaN where null)."""
    frame = dl.inspect(models=[model], hypotheses=[hypothesis(model, [0])], measures=["corr"],
                       data=records, units=[(address, "*")], eps=None, device="cpu",
                       cache=False)  # fmt: skip
    rows = frame.filter(frame["layer"] == address).sort("unit")
    if rows.height == 0 and frame["layer"].n_unique() == 1:
        rows = frame.sort("unit")  # an alias (TransformerLens' legacy name) names its target
    assert rows["unit"].to_list() == list(range(len(rows))), "one row per unit, in order"
    return rows["unit_score"].fill_null(float("nan")).to_numpy().astype(np.float64)


def behaviors(model: dl.Model, records: list, address: str) -> list[np.ndarray]:
    """The behaviors service's activations of every unit of ``address``, per record."""
    from dni_lab.backend.extraction.behaviors import symbol_activations
    from dni_lab.backend.extraction.extract import on_device

    cpu = torch.device("cpu")
    address = model.resolve_layer(address)  # as verify and examples do (aliases to targets)
    out: list[np.ndarray] = []
    with on_device(model, cpu):
        for _first, acts, mask in symbol_activations(model, records, address, None, cpu):
            n = mask.sum(1).tolist()
            out += [acts[i, : n[i]].double().numpy() for i in range(len(n))]
    return out


def case(entry: Entry, address: str) -> tuple[str, str]:
    """Compare dni_lab with the hand reading on one (model, module): ``(outcome, detail)``."""
    model, kw = make_model(entry)
    records = entry.records()
    want = expected(entry, model, kw, records, address)
    if isinstance(want, Refuse):
        return refused(model, records, address, want)
    hyp = [np.asarray(values(r, int(model.symbols(r)))) for r in records]
    try:
        got = scores(model, records, address)
    except dl.DNIError as exc:
        kind = type(exc).__name__
        raise AssertionError(f"refused a reading the contract gives: {kind}: {exc}") from None
    ref = pearson(want, hyp)
    assert got.shape == ref.shape, f"{got.shape[0]} units scored, the hand has {ref.shape[0]}"
    null = np.isnan(ref)
    odd = np.flatnonzero(np.isnan(got) != null).tolist()
    assert not odd, f"null scores differ: units {odd}"
    diff = np.abs(got[~null] - ref[~null])
    assert (diff <= 1e-6).all(), f"corr differs by {diff.max():.3g} at unit {int(diff.argmax())}"
    acts = behaviors(model, records, address)
    for i, (a, w) in enumerate(zip(acts, want, strict=True)):
        assert a.shape == w.shape, f"record {i}: behaviors {a.shape}, hand {w.shape}"
        scale = max(1.0, float(np.abs(w).max(initial=0)))
        err = float(np.abs(a - w).max(initial=0))
        assert err <= 1e-5 * scale, f"record {i}: behaviors differ by {err:.3g} (scale {scale:.3g})"
    return "equal", f"{ref.shape[0]} units"


def refused(model: dl.Model, records: list, address: str, want: Refuse) -> tuple[str, str]:
    """dl.inspect must raise ``want.kind`` before scoring any record."""
    calls, pulled = [0], [0]
    try:
        dl.inspect(models=[model], hypotheses=[hypothesis(model, calls)], measures=["corr"],
                   data=counted(records, pulled), units=[(address, "*")], eps=None,
                   device="cpu", cache=False)  # fmt: skip
    except dl.DNIError as exc:
        kind = type(exc).__name__
        assert kind == want.kind or want.kind in [c.__name__ for c in type(exc).__mro__], (
            f"raised {kind} ({exc}), expected {want.kind} ({want.why})")
        # deciding a level before reading may read the first record (patches or pixels?):
        # no more than dl.check's dry run reads, and nothing of a block
        decided = [0]
        dl.check(model, records, [hypothesis(model, decided)])
        assert calls[0] <= decided[0], (
            f"{kind} raised after {calls[0]} hypothesis calls (data read): {exc}")
        return "named-error", f"{kind}: {exc}"
    raise AssertionError(f"read without error; expected {want.kind}: {want.why}")


__all__ = ["NeedsContract", "Read", "case", "has_contract", "make_model", "named_modules_of"]
