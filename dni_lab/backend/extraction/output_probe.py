"""Taps on structured outputs: which tensor each reads, and a declared ``output=`` proved.

A layer declared ``Layout(..., output=...)`` reads one item of a tuple, dict, dataclass
or ``ModelOutput`` output (``nn.LSTM``'s ``(out, (h, c))`` declared ``output=0``). Such
a declaration is checked against the probes like any other (issue 47): the model runs
on the probe's records and on a second sample (one record more, records cut to half
their length, :func:`.layouts.proof.second_pass`), both seen through the very item the
run reads (:meth:`.layouts.Layout.select`), and a records axis that is not the record
count, or a symbol axis that does not move with the records' length, is refused before
any block with what the probes saw (:func:`.layouts.proof.contradiction`).
:func:`probe_outputs` also says, for ``dl.check``, which tensor every tap on a
structured output reads and which others ``output=`` could pick.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .layouts import Layout, first_tensor
from .layouts.outputs import reading
from .layouts.proof import Pass, contradiction, second_pass, signature
from .probe_hooks import eval_mode, to_device


@dataclass
class OutputProbe:
    """What :func:`probe_outputs` found, per address."""

    #: which tensor of a structured output is read, with its structure ('' entries left out)
    readings: dict[str, str] = field(default_factory=dict)
    #: declared ``output=`` layouts the probes contradict: the error, with what they saw
    contradicted: dict[str, str] = field(default_factory=dict)


def declares_output(model: Any, addresses: Sequence[str]) -> bool:
    """Whether any of ``addresses`` is declared with ``output=`` (the check is due)."""
    layouts = getattr(model, "layouts", {})
    return any(layouts[a].output is not None for a in addresses if a in layouts)


def _modules(model: Any, addresses: Sequence[str]) -> dict[str, nn.Module]:
    """The modules behind ``addresses`` (a recurrent sub-layer is replayed, not hooked)."""
    out = {}
    for a in addresses:
        if model.split_address(a)[1] is not None:
            continue
        with contextlib.suppress(AttributeError):  # a computed address has no module
            out[a] = model._module(a)
    return out


def _checked(layout: Layout | None, ndim: int) -> bool:
    """Whether the probes can judge a declared ``output=`` layout (as for a tensor)."""
    return (layout is not None and layout.output is not None and layout.axes.count("n") == 1
            and len(layout.axes) == ndim >= 3)  # fmt: skip


def probe_outputs(model: Any, addresses: Sequence[str], sample: Sequence[Any],
                  device: torch.device | str = "cpu") -> OutputProbe:  # fmt: skip
    """Which tensor each of ``addresses`` reads, and the declared ``output=`` layouts the
    probes contradict.

    Parameters
    ----------
    model : dl.Model
        A model that reads layouts (not a Hugging Face capture).
    addresses : sequence of str
        Resolved addresses.
    sample : sequence
        The probe's records (the first two are run, then the second sample).
    device : torch.device or str
        Where the model's parameters are.

    Returns
    -------
    OutputProbe
        Per address, the reading of a structured output and any contradiction.
    """
    found = OutputProbe()
    records = list(sample[:2])
    modules = _modules(model, addresses)
    if not records or not modules or not getattr(model, "reads_layouts", False):
        return found
    raw: dict[str, Any] = {}
    handles = []

    def run(recs: list[Any], batch: Any = None) -> None:
        with torch.inference_mode(), eval_mode(model.module):
            model.forward(to_device(model.encode(recs) if batch is None else batch, device))

    def keep(a: str) -> Callable[..., None]:  # the raw output: its structure is the point
        return lambda _m, _i, out: raw.setdefault(a, out)

    batch = model.encode(records)
    try:
        for a, mod in modules.items():
            handles.append(mod.register_forward_hook(keep(a)))
        run(records, batch)
    finally:
        for h in handles:
            h.remove()
    shapes = {}
    for a, out in raw.items():
        lay = model.layouts.get(a)
        text = reading(out, lay.output if lay is not None else None)
        if text:
            found.readings[a] = text
        try:
            t = lay.select(out, a) if lay is not None else first_tensor(out, a)
        except Exception:  # an output= it does not have: the probe pass's own error
            continue
        shapes[a] = tuple(t.shape)
    declared = {a: model.layouts[a] for a in shapes
                if _checked(model.layouts.get(a), len(shapes[a]))}  # fmt: skip
    if not declared or model.frames:  # a frame's batch axis is no record count
        return found
    counts = [int(model.symbols(r)) for r in records]
    first = Pass(len(records), max(counts), {a: shapes[a] for a in declared})
    key = ("output=", signature(batch), tuple(counts), tuple(sorted(declared)))
    second = second_pass(model.module, key, records, model.symbols,
                         {a: modules[a] for a in declared}, run, declared)  # fmt: skip
    for a, lay in declared.items():
        wrong = contradiction(a, lay, first, second, model.prefix_of(a), model.padded)
        if wrong:
            found.contradicted[a] = f"model {model.name!r}: {wrong}"
    return found
