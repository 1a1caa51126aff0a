"""Everything a run needs declared, asked in one error before any block is read.

Two things can stop a run before its first block: a hypothesis whose level the data
cannot decide (:mod:`.levels`, a ``LevelError``) and a layer whose layout no probe could
prove (:mod:`..extraction.layouts.proof`, a ``LayerError``). Asked one after the other, a
user fixes one, runs again and meets the next. :func:`layout_questions` asks a model the
layout of the layers a run reads (a model whose capture returns symbols itself is not
probed for it), and :func:`ask_declarations` raises one error for both kinds:
:class:`DeclarationError`, which is a ``LevelError`` and a ``LayerError`` at once, so a
caller that catches either still catches it. :func:`layout_rows` are ``dl.check``'s rows
for the layers: the reading chosen and how it was proved, or the question; a tap on a
tuple/dict output says which tensor it reads, and a declared ``output=`` is proved by
the probes like any declaration (:mod:`..extraction.output_probe`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ..errors import LayerError, LevelError
from ..extraction.output_probe import declares_output, probe_outputs
from ..hypothesis.levels import LevelDecision
from ..hypothesis.levels import ask as ask_levels
from .resolve import normalize_units, units_of


class DeclarationError(LevelError, LayerError):
    """Levels and layouts that need declaring, asked together before any block.

    ``questions`` holds the undecided levels (as a ``LevelError``'s), ``layouts`` the
    layout questions' text, one per model.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def named_layers(model: Any, units: Any) -> list[str]:
    """The addresses ``units`` names on ``model`` (its default units when it names none).

    ``units`` is what ``dl.inspect(units=...)`` takes (or its normalized groups); feature
    sets have no layout of their own and are left out.
    """
    groups = units_of(normalize_units(units, [model]) if units is not None else [], model)
    out: dict[str, None] = {}
    for group in groups:
        for layer, _sel in group:
            if isinstance(layer, (str, int)) and not isinstance(layer, bool):
                out[model.resolve_layer(layer)] = None
    if not groups:
        out.update(dict.fromkeys(model.positional_layers()))
    return list(out)


def layout_questions(model: Any, units: Any, sample: Sequence[Any],
                     device: torch.device | str = "cpu") -> str:  # fmt: skip
    """The one message asking every layout ``units`` would read on ``model`` ('' if none).

    Runs the model's probe pass (:meth:`~..extraction.readings.Readings.layer_widths`,
    cached on the model) on two records of ``sample``; a model that reads no layouts (a
    Hugging Face text model returns symbols itself) is not run.
    """
    if not getattr(model, "reads_layouts", False) or not sample:
        return ""
    for layer in _named_now(units, model):  # a computed address exists once named
        model.resolve_layer(layer)
    model.layer_widths(list(sample[:2]), device)
    wanted = named_layers(model, units)
    unreadable = getattr(model, "_unreadable", {})
    # a declared output= is proved like any declaration; what the probes contradict is
    # refused with what they saw, in place of the probe pass's narrower complaint
    wrong = (probe_outputs(model, wanted, sample, device).contradicted
             if declares_output(model, wanted) else {})  # fmt: skip
    own = [wrong.get(a) or unreadable[a] for a in wanted
           if a in wrong or unreadable.get(a)]  # a shared module, ...  # fmt: skip
    asked = model.layout_question([a for a in wanted if a in unreadable and not unreadable[a]])
    return "\n".join(dict.fromkeys([*([asked] if asked else []), *own]))


def _named_now(units: Any, model: Any) -> list[Any]:
    groups = units_of(normalize_units(units, [model]) if units is not None else [], model)
    return [layer for g in groups for layer, _ in g if isinstance(layer, str)]


def ask_declarations(decisions: Iterable[LevelDecision], layouts: Iterable[str]) -> None:
    """Raise one error for every undecided level and every layout question, if any.

    Only levels: :func:`..hypothesis.levels.ask`'s ``LevelError``; only layouts: a
    ``LayerError`` with each model's question; both: a :class:`DeclarationError`
    listing all of them, so one round of declarations settles the run.
    """
    decisions = list(decisions)
    layouts = [q for q in layouts if q]
    undecided = [d for d in decisions if not d.decided]
    if not layouts:
        ask_levels(decisions)
        return
    if not undecided:
        raise LayerError("\n".join(layouts))
    try:
        ask_levels(decisions)
    except LevelError as exc:
        levels_text = str(exc)
    n = len(undecided) + len(layouts)
    err = DeclarationError(
        f"{n} declarations are needed before any record is read; settle them all, "
        f"then run again:\n{levels_text}\n" + "\n".join(layouts)
    )
    err.questions = tuple(undecided)
    err.layouts = tuple(layouts)
    raise err


def layout_rows(model: Any, units: Any, sample: Sequence[Any]) -> list[dict[str, Any]]:
    """``dl.check``'s rows for the layers ``units`` names on ``model`` (default units
    when None): one per layer, the reading chosen and how, or the question (``"asked"``).

    A layer whose chosen layout does not read one row per record on the probe's sample
    (frames on the batch axis, a position table) is a question too, with the fix a run
    would name: ``dl.check`` marks read only what ``dl.inspect`` reads.
    """
    if sample:
        for layer in _named_now(units, model):
            model.resolve_layer(layer)
        model.layer_widths(list(sample[:2]), _device(model))
    rows = []
    wanted = named_layers(model, units)
    report = model.layout_report(wanted)
    # which tensor a tap on a tuple/dict output reads, and a declared output= proved
    outputs = (probe_outputs(model, wanted, sample, _device(model)) if sample
               and getattr(model, "reads_layouts", False) else None)  # fmt: skip
    for a in wanted:
        r = report.get(a) or {"layout": None, "how": "no output",
                              "evidence": "the probe pass saw no tensor from it"}  # fmt: skip
        if r["layout"] is not None or r["how"] == "no output":
            refused = _refusal(model, a)  # the run's own refusal, with its fix
            if refused is not None:
                r = refused if r["layout"] is not None else {**r, "evidence": refused["evidence"]}
        if outputs is not None and a in outputs.contradicted:
            r = {"layout": None, "how": "contradicted", "evidence": outputs.contradicted[a]}
        elif outputs is not None and a in outputs.readings and r["layout"] is not None:
            said, seen = r["evidence"], outputs.readings[a]  # "reads output=0" said in full
            r = {**r, "evidence": seen if seen.startswith(said) else f"{seen}; {said}"}
        rows.append({"hypothesis": None, "model": model.name, "level": None,
                     "decided_by": r["how"], "records": 0, "options": [],
                     "evidence": r["evidence"], "layer": a, "layout": r["layout"]})  # fmt: skip
    return rows


def _refusal(model: Any, address: str) -> dict[str, Any] | None:
    """The question ``dl.inspect`` would ask of a layer whose layout a rule or probe chose.

    The probe pass also reads every layer on its own sample (the record-count check of
    :meth:`~..extraction.readings.Readings.symbol_view`): a layer that puts frames (or no
    records at all) on its first axis has a layout, but no one row per record, and a run
    refuses it before any block with the one-line fix. ``dl.check`` must say the same.
    """
    try:
        model.check_readable(address)
    except LayerError as exc:
        return {"layout": None, "how": "asked", "evidence": str(exc)}
    return None


def _device(model: Any) -> torch.device:
    for p in model.module.parameters():
        return p.device
    return torch.device("cpu")
