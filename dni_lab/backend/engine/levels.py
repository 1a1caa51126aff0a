"""Every hypothesis's level decided before a run reads its first block, and ``dl.check``.

A run hands the data's first records to :func:`decide_levels` before the probe pass or
any hypothesis block: each family, as each symbol space reads it, gets one
:class:`~..hypothesis.levels.LevelDecision` (declared, proved from the records whose
counts differ, or, on a model whose symbols are the records' own, its symbols). Every
level that stays undecided is asked in one
:class:`~dni_lab.backend.errors.LevelError`, so nothing about a level raises once reading
has started. :func:`check` is the same decision as a dry run: a Polars frame with one row
per hypothesis and model, its level, how it was decided and the evidence; a run's
provenance keeps the same rows under ``"levels"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

import polars as pl

from ..hypothesis.hypotheses import as_family, for_model
from ..hypothesis.levels import SCAN, LevelDecision, ask
from .declarations import layout_rows
from .folding import _Space, _symbol_spaces
from .provenance import attach
from .resolve import as_models
from .sources import as_source

#: The check frame's columns, in order (``LevelDecision.row``).
SCHEMA = {
    "hypothesis": pl.Utf8,
    "model": pl.Utf8,
    "level": pl.Utf8,
    "decided_by": pl.Utf8,
    "records": pl.Int64,
    "options": pl.List(pl.Utf8),
    "evidence": pl.Utf8,
}


def decide_levels(
    spaces: Mapping[str, _Space], sample: Sequence[Any], first: int = 0, ask_now: bool = True
) -> list[LevelDecision]:
    """Each family's level in each symbol space, from ``sample`` (the data's first records).

    Parameters
    ----------
    spaces : mapping
        The run's symbol spaces (:func:`.folding._symbol_spaces`); a decided level is kept
        on its family and the space's cache fingerprints are taken again, since what a
        record whose counts coincide reads depends on it.
    sample : sequence
        The first records of the data; at most :data:`~..hypothesis.levels.SCAN` are
        looked at, and only those whose counts differ are read.
    first : int
        The position of ``sample[0]`` in the data, for the messages.
    ask_now : bool
        Raise the ``LevelError`` here; False leaves the questions in the decisions, for
        :func:`.declarations.ask_declarations` to ask with the layouts in one error.

    Returns
    -------
    list of LevelDecision
        One per (symbol space, family), in the run's order.

    Raises
    ------
    LevelError
        Once, listing every family whose level the sample could not decide.
    """
    decisions = _decisions(spaces, sample, first)
    if ask_now:
        ask(decisions)
    return decisions


def _decisions(spaces: Mapping[str, _Space], sample: Sequence[Any],
               first: int) -> list[LevelDecision]:  # fmt: skip
    records = list(enumerate(list(sample[:SCAN]), start=first))
    out: list[LevelDecision] = []
    for sp in spaces.values():
        model = ", ".join(m.name for m in sp.models)
        for fam in sp.families:
            decide = getattr(fam, "decide", None)  # a family aligned to a tokenizer's tokens
            out.append(decide(records) if decide is not None else _own_symbols(fam, model))
        if sp.fingerprints is not None:
            sp.fingerprints = [f.fingerprint() for f in sp.families]
    return out


def _own_symbols(family: Any, model: str) -> LevelDecision:
    """A model whose symbols are the records' own reads every level alike (but a record's).

    Its hypotheses are not read here: a count the model's layers do not have (a vision
    transformer's patches against an image's pixels) is the layer's question, asked with
    what the layer has and what the records have (:mod:`..extraction.layouts.proof`).
    """
    declared = getattr(family, "level", None)
    if declared is not None:
        return LevelDecision(family.name, model, declared, "declared")
    return LevelDecision(family.name, model, "symbol", "symbols")


def frame_of(decisions: Iterable[LevelDecision]) -> pl.DataFrame:
    """The decisions as a frame: one row per hypothesis and model (:data:`SCHEMA`)."""
    return pl.DataFrame([d.row() for d in decisions], schema=SCHEMA)


def check(
    model: Any,
    records: Any,
    hypotheses: Any,
    column: str | None = None,
    sample: int = SCAN,
    units: Any = None,
) -> pl.DataFrame:
    """A dry run: how ``model`` would read each of ``hypotheses`` over ``records``.

    Nothing runs the model; each hypothesis runs on at most a few of the first
    ``sample`` records (those whose character, word and token counts differ). Where a
    run would stop before its first block with a ``LevelError``, the row says
    ``"undecidable"`` (or ``"no fit"``) with the options and the evidence instead.

    Parameters
    ----------
    model : dl.Model or list of them
        The model(s) that would read the hypotheses.
    records : any ``data=`` of :func:`dni_lab.inspect`
        The data; only its first ``sample`` records are read.
    hypotheses : hypothesis, family, callable or list of them
        What would be scored.
    column : str, optional
        The column of a table that holds the records, as in ``dl.inspect``.
    sample : int
        Records of the data's start looked at, at most.
    units : any ``units=`` of :func:`dni_lab.inspect`, or True, optional
        Also check how each layer these name (True: the model's default units) would be
        read: one row per layer after the hypotheses' rows, with ``layer`` and
        ``layout`` columns. This runs the model's probe pass on two records.

    Returns
    -------
    polars.DataFrame
        One row per hypothesis and model: ``level`` (None where undecided),
        ``decided_by`` (``"declared"``, ``"proved from N records"``, ``"symbols"``,
        ``"token ids"``, ``"undecidable"``, ``"no fit"``), ``records`` (the N),
        ``options`` (the levels still possible) and ``evidence``. Its provenance
        (``dl.provenance(frame)["levels"]``) holds the same rows. With ``units``, one
        row per model and layer too: ``layout`` (None where asked), ``decided_by``
        (``"declared"``, ``"rule"``, ``"probe"``, ``"model"``, ``"asked"``,
        ``"contradicted"``) and the ``evidence`` (what the probes saw, or the question);
        provenance ``"layouts"``.

    Examples
    --------
    >>> dl.check(model, ["9", "12 34"], [is_digit])     # doctest: +SKIP
    """
    models = as_models(model)
    if not isinstance(hypotheses, (list, tuple)):
        hypotheses = [hypotheses]
    families = [as_family(h) for h in hypotheses]
    source = as_source(records, column)
    part = next(source.parts(sample, sample), None)
    recs = part.read() if part is not None else []
    decisions = _decisions(_symbol_spaces(models, families, cached=False), recs, 0)
    frame = frame_of(decisions)
    record: dict[str, Any] = {"levels": [d.row() for d in decisions],
                              "records_checked": len(recs)}  # fmt: skip
    if units is not None:
        rows = [r for m in models for r in layout_rows(m, None if units is True else units,
                                                         recs)]  # fmt: skip
        schema = {**SCHEMA, "layer": pl.Utf8, "layout": pl.Utf8}
        frame = pl.concat([frame.with_columns(pl.lit(None, pl.Utf8).alias("layer"),
                                              pl.lit(None, pl.Utf8).alias("layout")),
                           pl.DataFrame(rows, schema=schema)])  # fmt: skip
        record["layouts"] = rows
    return attach(frame, record)


def decided_for_model(model: Any, families: Sequence[Any], records: Sequence[Any],
                      first: int = 0) -> list[Any]:  # fmt: skip
    """``families`` as ``model`` reads them outside a run, each level decided once.

    ``dl.verify`` and feature summaries read hypotheses without ``dl.inspect``; a level
    decided per record would stop at a record whose character and token counts coincide
    (``'9'``), which is evidence of nothing. This is the run's decision
    (:func:`decide_levels`): from the first records whose counts differ, kept on each
    aligned family, so such a record is then read at the decided level.

    Parameters
    ----------
    model : dl.Model
        The model whose symbols the families are read at.
    families : sequence of HypothesisFamily
        The families as given (not yet aligned).
    records : sequence
        The records the families will be read on; at most
        :data:`~..hypothesis.levels.SCAN` of the first are looked at (a sequence: the
        caller reads them again).
    first : int
        The position of the first record, for the messages.

    Returns
    -------
    list of HypothesisFamily
        One per family, as :func:`~..hypothesis.hypotheses.for_model` gives it, with its
        level decided.

    Raises
    ------
    LevelError
        Once, listing every family whose level these records cannot decide.
    """
    if iter(records) is records:  # a generator would lose the records looked at here
        raise TypeError("decided_for_model needs the records as a sequence (a list).")
    fams = for_model(list(families), model)
    sample = list(enumerate(islice(records, SCAN), start=first))
    ask([f.decide(sample) for f in fams if getattr(f, "decide", None) is not None])
    return fams
