"""Layouts proved by a second probe: the reading whose axes move with the data is kept.

The rules of :mod:`.infer` leave some outputs more than one reading: an ``nn.Identity``
that taps a residual sum (its input comes from an addition, which no module made), a
module of one's own whose output keeps a square shape. For those the model runs once
more, on a probe made from the first one's records (:func:`second_sample`): one record
more and, where the records are sequences (strings, lists, tuples, 1-D arrays), every
record cut to half its length (a one-symbol record tripled instead). Then, axis by axis:

- an axis whose size is the record count in both passes can hold the records (``n``);
- an axis whose size is the longest record's symbol count (plus ``prefix``) in both
  passes, that count having changed, can hold the symbols (``s``); where it could not
  change (records that cannot be cut, a model that refuses shorter ones) or
  ``encode()`` pads (``padded=True``), an axis of at least that size that kept it can too;
- an axis that kept its size can hold units (``u``).

A reading (one ``n``, at most one ``s``, the rest ``u``) that fits every axis is kept
when it is the only one (:func:`prove`). Several, or none, leave a question, and every
question of a model is asked in one error (:func:`ask`) before any block is read. A size
that equals a count in one pass is no proof: the axis has to move with it. The second
pass's shapes are cached per (module, input signature): a model wrapped again, or read
again from the same records, is not run again to prove the same thing.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .kinds import readings
from .spec import Layout, first_tensor


@dataclass(frozen=True)
class Pass:
    """One probe pass: its record count, longest record (symbols) and output shapes."""

    records: int
    longest: int
    shapes: Mapping[str, tuple[int, ...]]
    how: str = ""  # how the records were made, for the evidence


@dataclass(frozen=True)
class Proof:
    """How one address's layout was found: declared, by a rule, by the probe, or asked."""

    address: str
    layout: Layout | None
    how: str  # "declared", "rule", "probe", "asked" or "contradicted"
    evidence: str = ""
    options: tuple[str, ...] = field(default=())
    shape: tuple[int, ...] = field(default=())  # the first probe's output shape

    def row(self) -> dict[str, Any]:
        """The provenance entry: the reading (None when asked), how, and what was seen
        (for a declared ``output=``, at least which item of the output is read)."""
        output = self.layout.output if self.layout is not None else None
        picked = f"reads output={output!r}" if output is not None else ""
        return {
            "layout": self.layout.spec if self.layout is not None else None,
            "how": self.how,
            "evidence": self.evidence or picked,
        }


# -- the second sample --------------------------------------------------------
def _resized(record: Any) -> Any | None:
    """``record`` cut to half its length (tripled when it has one element), or None."""
    if isinstance(record, (np.ndarray, torch.Tensor)) and record.ndim != 1:
        return None  # an image or a signal of channels: which axis is its length?
    if not isinstance(record, (str, bytes, list, tuple, np.ndarray, torch.Tensor)):
        return None
    n = len(record)
    if n >= 2:
        return record[: n // 2]
    if n == 1:
        if isinstance(record, np.ndarray):
            return np.concatenate([record] * 3)
        if isinstance(record, torch.Tensor):
            return torch.cat([record] * 3)
        return record * 3
    return None


def second_sample(sample: Sequence[Any], symbols: Callable[[Any], int]) -> tuple[list, bool]:
    """The second probe's records, and whether their longest record changed length.

    One record more than ``sample`` (the first repeated) moves the records axis; every
    record resized (:func:`_resized`) moves the symbol axis, when that changes the
    longest record's symbol count. Otherwise the records are ``sample``'s, one more.
    """
    longest = max(int(symbols(r)) for r in sample)
    cut = [_resized(r) for r in sample]
    if all(c is not None for c in cut):
        try:
            moved = max(int(symbols(c)) for c in cut) != longest
        except Exception:  # a symbols() that cannot count a cut record: do not cut
            moved = False
        if moved:
            return [*cut, cut[0]], True
    return [*sample, sample[0]], False


def signature(batch: Any) -> tuple:
    """What an encoded batch looks like to a module: its tensors' shapes and dtypes."""
    if isinstance(batch, torch.Tensor):
        return ("tensor", tuple(batch.shape), str(batch.dtype))
    if isinstance(batch, Mapping):
        return ("map", tuple((str(k), signature(v)) for k, v in batch.items()))
    if isinstance(batch, (tuple, list)):
        return (type(batch).__name__, tuple(signature(v) for v in batch))
    return (type(batch).__name__,)


def shapes_of(modules: Mapping[str, nn.Module], forward: Callable[[], Any],
              layouts: Mapping[str, Layout] | None = None) -> dict[str, tuple]:  # fmt: skip
    """Each module's output shape in one call of ``forward``; hooks removed, also on error.

    The shape is the tensor a run reads: a declared layout's ``output=`` item
    (:meth:`.spec.Layout.select`), else the first tensor.
    """
    shapes: dict[str, tuple] = {}
    handles = []
    layouts = layouts or {}

    def keep(addr: str) -> Callable:
        lay = layouts.get(addr)

        def hook(_mod: nn.Module, _inp: Any, out: Any) -> None:
            try:
                t = lay.select(out, addr) if lay is not None else first_tensor(out, addr)
                shapes.setdefault(addr, tuple(t.shape))
            except Exception:  # no tensor output: nothing to prove a layout with
                pass

        return hook

    try:
        for addr, mod in modules.items():
            handles.append(mod.register_forward_hook(keep(addr)))
        forward()
    finally:
        for h in handles:
            h.remove()
    return shapes


_SECOND: weakref.WeakKeyDictionary[nn.Module, dict[tuple, Pass]] = weakref.WeakKeyDictionary()


def second_pass(
    module: nn.Module,
    key: tuple,
    sample: Sequence[Any],
    symbols: Callable[[Any], int],
    modules: Mapping[str, nn.Module],
    run: Callable[[list], Any],
    layouts: Mapping[str, Layout] | None = None,
) -> Pass | str:
    """The second probe pass over ``modules`` (cached per ``module`` and ``key``).

    ``run(records)`` encodes and forwards records (in eval mode, without gradients).
    Records the model refuses once cut are tried again uncut, one more; a model that
    refuses both gives the error's text, which becomes every question's evidence.
    A layer declared with ``output=`` in ``layouts`` is seen through that item, and the
    items read are part of the cache's key.
    """
    picked = tuple((a, lay.output) for a, lay in sorted((layouts or {}).items())
                   if a in modules and lay.output is not None)  # fmt: skip
    key = (*key, picked) if picked else key
    try:
        cache = _SECOND.setdefault(module, {})
    except TypeError:  # a module class with __eq__ and no __hash__: proved, not cached
        cache = {}
    known = cache.get(key)
    if known is not None:
        return known
    records, moved = second_sample(sample, symbols)
    tries = [(records, moved)] + ([([*sample, sample[0]], False)] if moved else [])
    refused = ""
    for recs, cut in tries:
        try:
            shapes = shapes_of(modules, lambda recs=recs: run(recs), layouts)
        except Exception as exc:  # the model's own refusal is the evidence
            first_line = (str(exc).splitlines() or [""])[0][:200]
            refused = f"{type(exc).__name__}: {first_line}"
            continue
        how = "every record cut to half its length, the first repeated" if cut else (
            "the same records, the first repeated")
        if refused:  # cut records were refused: say why no length moved
            how += f"; shorter records were refused ({refused})"
        found = Pass(len(recs), max(int(symbols(r)) for r in recs), shapes, how)
        cache[key] = found
        return found
    return f"the second probe could not run ({refused})"


# -- the proof ----------------------------------------------------------------
def _roles(a1: int, a2: int, first: Pass, second: Pass, prefix: int, padded: bool) -> set[str]:
    """The letters one axis can hold, from its sizes in the two passes."""
    roles = set()
    if a1 == first.records and a2 == second.records:
        roles.add("n")
    t1, t2 = first.longest + prefix, second.longest + prefix
    if t1 != t2 and not padded:
        if a1 == t1 and a2 == t2:
            roles.add("s")
    elif a1 >= t1 and a2 >= t2 and a2 - a1 in (0, t2 - t1):  # a length the data cannot move
        roles.add("s")
    if a1 == a2:
        roles.add("u")
    return roles


def fitting(shape1: tuple, shape2: tuple, first: Pass, second: Pass, prefix: int,
            padded: bool) -> list[str]:
    """Every reading (one ``n``, at most one ``s``, the rest ``u``) both passes fit."""
    if len(shape1) != len(shape2) or len(shape1) < 3:
        return []
    roles = [_roles(a, b, first, second, prefix, padded)
             for a, b in zip(shape1, shape2, strict=True)]
    out = []
    for letters in itertools.product(*roles):
        if letters.count("n") == 1 and letters.count("s") <= 1:
            out.append(" ".join(letters))
    return sorted(out, key=lambda s: (-s.count("s"), s))


def prove(address: str, first: Pass, second: Pass | str, prefix: int = 0,
          padded: bool = False) -> Proof:
    """``address``'s layout when exactly one reading fits both passes, else a question."""
    shape1 = tuple(first.shapes[address])
    if isinstance(second, str):
        return Proof(address, None, "asked", f"{_seen(first, shape1)}; {second}", (), shape1)
    shape2 = second.shapes.get(address)
    if shape2 is None:
        return Proof(address, None, "asked",
                     f"{_seen(first, shape1)}; no tensor in the second probe", (), shape1)
    fits = fitting(shape1, tuple(shape2), first, second, prefix, padded)
    evidence = f"{_seen(first, shape1)}; {_seen(second, tuple(shape2))} ({second.how})"
    if len(fits) == 1 and "s" not in fits[0] and first.longest > 1:
        # no axis holds the records' symbols: a per-record reading left by elimination is
        # no proof; the model's count and the layer's positions disagree, and say so
        return Proof(address, None, "asked", evidence + _no_symbol_axis(shape1, first, prefix),
                     (), shape1)  # fmt: skip
    if len(fits) == 1:
        return Proof(address, Layout(fits[0]), "probe", evidence, tuple(fits), shape1)
    if not fits and first.longest == second.longest:
        evidence += _unsteady(shape1, tuple(shape2), first, second)
    return Proof(address, None, "asked", evidence, tuple(fits), shape1)


def _unsteady(shape1: tuple, shape2: tuple, first: Pass, second: Pass) -> str:
    """Where the same records gave another shape: a forward that draws at random."""
    moved = [k for k, (a, b) in enumerate(zip(shape1, shape2, strict=True))
             if a != b and not (a == first.records and b == second.records)]  # fmt: skip
    if not moved:
        return ""
    return (f"; axis {moved[0]} changed size ({shape1[moved[0]]} then {shape2[moved[0]]}) "
            "though the records' lengths did not: the model changes shape between two "
            "forwards of the same records (a random crop or resize in encode(), or a "
            "module that draws at random in eval mode). Make encode() and the forward "
            "deterministic (crop the records before reading them); the probe left the "
            "model's train/eval modes as they were")


def _no_symbol_axis(shape: tuple, first: Pass, prefix: int) -> str:
    """What a layer has against what the records have, and the arguments that settle it."""
    sizes = sorted({int(n) for n in shape[1:]})
    extra = f" plus prefix={prefix}" if prefix else ""
    return (f"; no axis is the records' {first.longest:,} symbols{extra} (the layer's axes "
            f"have {', '.join(f'{n:,}' for n in sizes)} positions): the model's symbol count "
            "is not this layer's, so pass Model(..., symbols=fn) and prefix= for the "
            "positions the layer has per record (dl.Model.from_hf(module) for a vision "
            "transformer's patches), or declare a per-record reading")


def contradiction(address: str, layout: Layout, first: Pass, second: Pass | str,
                  prefix: int = 0, padded: bool = False) -> str:  # fmt: skip
    """Why the probes contradict a declared ``layout`` of ``address``, or '' if they do not.

    The declared records axis must be the record count in both passes; a declared
    symbol axis, where the longest record changed length between them, must change
    with it (a units axis that does is no units axis). Nothing else is judged.
    """
    if isinstance(second, str) or address not in second.shapes:
        return ""
    shape1, shape2 = tuple(first.shapes[address]), tuple(second.shapes[address])
    if len(shape1) != len(shape2) or len(shape1) != len(layout.axes):
        return ""
    saw = f"{_seen(first, shape1)}; {_seen(second, shape2)} ({second.how})"
    fits = fitting(shape1, shape2, first, second, prefix, padded)
    better = f"; readings that fit both: {', '.join(map(repr, fits))}" if fits else ""
    moved = first.longest != second.longest and not padded
    order = sorted(range(len(layout.axes)), key=lambda k: "nsu".find(layout.axes[k]))
    for k in order:  # records, then symbols, then units: the first wrong one is shown
        letter = layout.axes[k]
        roles = _roles(shape1[k], shape2[k], first, second, prefix, padded)
        if letter == "n" and "n" not in roles:
            why = "is not the record count in both passes"
        elif letter == "s" and moved and "s" not in roles:
            why = "did not move with the longest record's length"
        elif letter == "u" and moved and shape1[k] != shape2[k]:
            why = "changed size with the records' length, as no units axis does"
        else:
            continue
        return (f"layer {address!r} is declared {layout}, but its axis {k} ({letter!r}) "
                f"{why}: the probes saw {saw}{better}. {_refix(layout, fits)}")
    return ""


def _refix(layout: Layout, fits: Sequence[str]) -> str:
    """What settles a contradicted declaration: another reading, kept on its ``output=``."""
    if layout.output is None:
        return ("Declare the reading that fits, or leave layouts= out for this layer to have it "
                "proved.")
    if fits:  # left out, the first tensor would be read: keep the item, fix the axes
        return (f"Declare the reading that fits for that tensor, e.g. "
                f"dl.Layout({fits[0]!r}, output={layout.output!r}).")
    return (f"No reading of that tensor (output={layout.output!r}) as records, symbols and "
            "units fits both: read another item of the output, or declare each axis (two "
            "'s' axes for a map, 'r' with reduce= for one reduced).")


def _seen(p: Pass, shape: tuple) -> str:
    return f"{p.records} records of at most {p.longest} symbols gave {shape}"


def ask(model_name: str, questions: Sequence[Proof], kinds: Mapping[str, str],
        notes: Mapping[str, str]) -> str:
    """One message for every layout no probe could prove: each tap with its readings,
    what the probes saw, and the one ``layouts=`` argument that settles them all."""
    lines = []
    for q in questions:
        options = ", ".join(repr(r) for r in readings(len(q.shape)))
        if len(q.options) > 1:
            fit = f" Readings that fit both: {', '.join(repr(f) for f in q.options)}."
        else:
            fit = ""
        lines.append(
            f"- layer {q.address!r} ({kinds.get(q.address, 'module')}) returns shape "
            f"{q.shape}, which has more than one reading as (records, symbols, units): "
            f"{options}.{notes.get(q.address, '')} Probed: {q.evidence}.{fit}"
        )
    settle = ", ".join(
        f"{q.address!r}: {(q.options or readings(len(q.shape)))[0]!r}" for q in questions
    )
    one = len(questions) == 1
    head = (f"model {model_name!r}: the layout of {len(questions)} layer{'' if one else 's'} "
            "could not be proved by probing (more records, shorter records: no axis moved "
            f"alone); declare {'it' if one else 'them'} before reading:")
    return "\n".join([
        head, *lines,
        f"Declare, with the reading that is right for each: "
        f"dl.Model(..., layouts={{{settle}}}) with one letter per axis (n records, "
        "s symbols, u units, r reduced with reduce=, f frames), e.g. "
        "dl.Layout('n u r s', reduce='mean').",
    ])
