"""Each address's layout, from a declaration or a rule that cannot be wrong.

One probe forward pass records, for every module, the tensor it returned and the
tensor it was given. An address then gets, in this order:

1. the layout the user declared (``Model(layouts={address: ...})``);
2. the layout its module kind fixes (:mod:`.kinds`), or the model's own rule
   (a TransformerLens hook point by its name);
3. the layout of the module that returned the very same tensor (a ``Sequential``
   returns its last child's output; a wrapper returns its inner module's);
4. the layout of the module that produced its input, when it only acts on each
   value (an activation, ``Dropout``) or keeps the input's shape with no two axes
   of different roles of equal size (where a transpose could hide);
5. ``"n u"`` for a 2-D output (one vector per record), ``"n"`` for a 1-D one.

Anything else has more than one reading: the address records an error that lists
them and the declaration that picks one, and is left to :mod:`.proof` (a second probe
whose records move one axis at a time) in :attr:`Inferred.ambiguous`; what no probe
settles is raised when a caller names the address, before any data are read. Sizes
never decide a reading: a 3-D output is never taken as (records, symbols, units)
because its middle axis matches a count in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import LayerError
from .kinds import ELEMENTWISE, UNITS_LAST, kind_layout, readings
from .spec import Layout


@dataclass
class Seen:
    """What one module returned and was given in the probe pass."""

    out: torch.Tensor
    inp: torch.Tensor | None
    #: a structured output's items (:func:`.outputs.describe`); '' for a tensor
    structure: str = ""
    #: the ``output=`` values of its other top-level tensors, which a question offers
    others: tuple[int | str, ...] = ()


@dataclass
class Inferred:
    """The layouts found, and why the others could not be found."""

    layouts: dict[str, Layout]
    errors: dict[str, str]
    #: addresses with more than one reading (each also in ``errors``), with the note on
    #: why the data flow did not settle it: what a second probe may still prove
    ambiguous: dict[str, str] = field(default_factory=dict)


def infer_layouts(
    modules: Mapping[str, nn.Module],
    seen: Mapping[str, Seen],
    declared: Mapping[str, Layout],
    own_rule: Callable[[str, nn.Module, int], str | None] | None = None,
    model_name: str = "model",
    frames: bool = False,
    reduce: str | None = None,
) -> Inferred:
    """Layouts of the addresses the probe pass saw (see the module docstring).

    With ``frames`` the batch axis of every layout a rule gives holds frames (``f``)
    and the symbol axes inside one frame are reduced with ``reduce``.
    """

    def ruled(spec: str) -> Layout:
        if not frames:
            return Layout(spec)
        axes = ["f" if a == "n" else "r" if a == "s" else a for a in spec.split()]
        if "r" in axes and reduce is None:
            raise LayerError(
                f"model {model_name!r} reads frames as symbols, and a layer's layout {spec!r} "
                "has axes inside a frame; pass Model(..., reduce='mean' or 'max')."
            )
        return Layout(" ".join(axes), reduce=reduce if "r" in axes else None)

    producer: dict[int, str] = {}
    for addr, s in seen.items():  # hooks fire innermost first: the producer is the first
        producer.setdefault(id(s.out), addr)
    layouts: dict[str, Layout] = {}
    errors: dict[str, str] = {}
    ambiguous: dict[str, str] = {}
    busy: set[str] = set()

    def find(addr: str) -> Layout | None:
        if addr in layouts:
            return layouts[addr]
        if addr in errors or addr in busy:
            return None
        busy.add(addr)
        try:
            found, why = _decide(addr)
        finally:
            busy.discard(addr)
        if found is not None:
            layouts[addr] = found
        else:
            errors[addr] = why
        return found

    def _decide(addr: str) -> tuple[Layout | None, str]:
        s, mod = seen[addr], modules[addr]
        ndim = s.out.dim()
        if addr in declared:
            return declared[addr], ""
        try:
            spec = own_rule(addr, mod, ndim) if own_rule is not None else None
        except LayerError as exc:  # the model's rule knows this address cannot be read
            return None, str(exc)
        source = producer.get(id(s.inp)) if s.inp is not None else None
        if not spec and isinstance(mod, UNITS_LAST) and source not in (None, addr):
            # units on the last axis; the other axes are the input's (a Linear after a
            # time-major GRU is time-major too)
            found = find(source)
            if found is not None and found.ndim == ndim and found.axes[-1] == "u":
                return found, ""
        spec = spec or kind_layout(mod, ndim)
        if spec:
            return ruled(spec), ""
        origin = producer.get(id(s.out))
        if origin is not None and origin != addr:
            found = find(origin)
            if found is not None:
                return found, ""
        note = ""
        if source is not None and source != addr and s.inp.shape == s.out.shape:
            found = find(source)
            if found is not None:
                if isinstance(mod, ELEMENTWISE) or _distinct_roles(found, s.out.shape):
                    return found, ""
                note = (
                    f" It keeps its input's shape {tuple(s.out.shape)}, but two axes of "
                    f"different roles in {source!r}'s layout {found} have the same size, so "
                    "a transpose inside it could not be told apart."
                )
        if ndim == 2:
            return ruled("n u"), ""
        if ndim == 1:
            return ruled("n"), ""
        if s.others:  # the first tensor may not be the one meant: say how to pick another
            note += (f" It returns {s.structure} and its first tensor is read; if another is "
                     f"meant, declare it with output=, e.g. dl.Layout("
                     f"{readings(ndim)[0]!r}, output={s.others[0]!r}).")
        ambiguous[addr] = note
        options = ", ".join(repr(r) for r in readings(ndim))
        example = readings(ndim)[0]
        return None, (
            f"layer {addr!r} of model {model_name!r} ({type(mod).__name__}) returns shape "
            f"{tuple(s.out.shape)}, which has more than one reading as (records, symbols, "
            f"units): {options}.{note} Declare it: "
            f"dl.Model(..., layouts={{{addr!r}: {example!r}}}) "
            "with one letter per axis (n records, s symbols, u units, r reduced with reduce=, "
            "f frames), e.g. dl.Layout('n u r s', reduce='mean')."
        )

    for addr in seen:
        if addr in modules:
            find(addr)
    return Inferred(layouts, errors, ambiguous)


def _distinct_roles(layout: Layout, shape: torch.Size) -> bool:
    """Whether no two axes of different roles have the same size."""
    sizes: dict[int, set[str]] = {}
    for letter, n in zip(layout.axes, shape, strict=True):
        sizes.setdefault(int(n), set()).add(letter)
    return all(len(roles) == 1 for roles in sizes.values())


def first_input(args: tuple, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The first tensor a module was called with, if any."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None
