"""Controls for DNI scores: an untrained copy of the model, and control tasks for probes.

* **Untrained baseline.** Random weights already make units correlate with
  simple hypotheses (a unit can echo the current character). Scoring the same
  query on an untrained copy shows what training added: a finding should beat
  the best score any unit of the untrained copy reaches.
* **Control-task selectivity** (Hewitt & Liang, 2019). A probe may score high
  because it is expressive, not because the units encode the hypothesis. The
  control task gives every symbol *type* a random label drawn from the
  hypothesis' own value distribution; the units can encode that only by
  memorising symbol identities. Selectivity = task score − control score. The types
  are the model's own symbols (:func:`symbol_types`): a transformer's token ids, not
  the characters its tokens span, since a control per character pooled onto tokens
  carries more than token identity (it scored above the task it controls).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from .. import api
from ..engine.levels import decided_for_model
from ..extraction.models import Model
from ..hypothesis.hypotheses import HypothesisFamily, evaluate_family
from ..measures import get_measure
from .common import Verification, single_signal, symbols_of


def untrained_copy(model: Model, seed: int = 0, name: str | None = None) -> Model:
    """A copy of ``model`` with freshly initialised weights (seeded; the original is untouched).

    Every submodule with ``reset_parameters`` re-initialises as at construction;
    parameters of modules without one get Kaiming-uniform weights (matrices) or
    zeros (vectors), so no trained value survives.
    """
    module = copy.deepcopy(model.module)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for mod in module.modules():
            reset = getattr(mod, "reset_parameters", None)
            if callable(reset):
                reset()
                continue
            with torch.no_grad():
                for p in mod.parameters(recurse=False):
                    if p.dim() >= 2:
                        nn.init.kaiming_uniform_(p, a=5**0.5)
                    else:
                        p.zero_()
    # with_module keeps a subclass's own reading of records (HFModel: tokens, alignment)
    base = model.with_module(module)
    base.name = name or f"{model.name}:untrained"
    base.meta = {**model.meta, "trained": False}
    return base


def untrained_baseline(
    model: Model,
    hypotheses: Any,
    records: Sequence[Any],
    units: Any = None,
    measures: Any = ("corr",),
    seed: int = 0,
    **inspect_kw: Any,
) -> Verification:
    """Score ``model`` and an untrained copy with the same query; flag scores above the copy's best.

    Returns
    -------
    Verification
        ``frame``: the trained model's score frame with ``untrained_best`` (the
        copy's best ``|unit_score|`` for the same hypothesis and measure; its best
        ``group_score`` for a probe such as ``logreg`` or ``ridge``) and
        ``above_untrained``. ``summary``: ``by_hypothesis`` (best trained vs best
        untrained per hypothesis and measure) and ``untrained`` (the copy's frame).
    """
    base = untrained_copy(model, seed)
    inspect_kw.setdefault("eps", None)
    measures = [measures] if isinstance(measures, str) else list(measures)
    frame = api.inspect([model, base], hypotheses, measures, records, units=units, **inspect_kw)
    # a probe's score is its group's (F1, R²), not a unit's coefficient
    joint = [m.name for m in map(get_measure, measures) if m.joint]
    score = (
        pl.when(pl.col("measure").is_in(joint))
        .then(pl.col("group_score"))
        .otherwise(pl.col("unit_score"))
        .abs()
    )

    def best(df: pl.DataFrame, col: str) -> pl.DataFrame:
        return df.group_by("hid", "measure").agg(score.max().alias(col))

    trained = frame.filter(pl.col("mid") == model.name)
    untrained = frame.filter(pl.col("mid") == base.name)
    ub = best(untrained, "untrained_best")
    out = trained.join(ub, on=["hid", "measure"], how="left").with_columns(
        above_untrained=score > pl.col("untrained_best")
    )
    by_h = best(trained, "trained_best").join(ub, on=["hid", "measure"], how="left")
    by_h = by_h.with_columns(lift=pl.col("trained_best") - pl.col("untrained_best")).sort(
        "hid", "measure"
    )
    return Verification(out, {"by_hypothesis": by_h, "untrained": untrained})


def symbol_types(model: Model | None, record: Any) -> list[Any]:
    """Each symbol's *type* as ``model`` reads ``record``: what a control task labels.

    A tokenizer's model (``Model.from_hf``): the token ids of its symbols (of a text
    record, its non-special tokens as the model keeps them; of a token-id record or the
    ``TokenRecord`` a hypothesis gets, its ids); with record-level units, the record
    itself. Any other model, or none: the record's own elements (a string's characters).
    """
    ids = getattr(record, "ids", None)
    if ids is not None and not isinstance(record, str):  # a TokenRecord
        return list(ids)
    if model is None or getattr(model, "align", None) is None:
        return symbols_of(record)
    if not isinstance(record, str):
        return list(model.token_record(record).ids)
    n = len(model.offsets(record))  # the symbols kept: truncated or skipped ones are not
    if getattr(model, "record_pool", None) is not None:
        return [record] * n
    enc = model.tokenizer(record, return_special_tokens_mask=True)
    kept = [i for i, sp in zip(enc["input_ids"], enc["special_tokens_mask"], strict=True) if not sp]
    return kept[:n]


class ControlTask(HypothesisFamily):
    """A control hypothesis: a fixed random label per symbol type (Hewitt & Liang).

    Parameters
    ----------
    table : dict
        ``{symbol type: label}`` (see :func:`symbol_types`).
    fallback : float
        Label of symbol types not in ``table``.
    name, kind : str
        Hypothesis id and kind (those of the task it controls).
    n_categories : int, optional
        Categories of a categorical task.
    model : dl.Model, optional
        The model whose symbols are typed; a tokenizer's model makes this a token-level
        hypothesis (one value per token, by token id).
    """

    def __init__(
        self,
        table: dict[Any, float],
        fallback: float,
        name: str,
        kind: str,
        n_categories: int | None = None,
        model: Model | None = None,
    ) -> None:
        self.table = table
        self.fallback = fallback
        self.name = name
        self.kind = kind
        self.n_categories = n_categories
        self.categories = {name: n_categories} if n_categories is not None else None
        self._model = model  # not a parameter: its symbol space (below) is what counts
        tokens = model is not None and getattr(model, "align", None) is not None
        self.space = getattr(model, "symbol_space", None) if tokens else None
        if tokens:
            self.level = "token"

    def signals(self) -> list[str]:
        return [self.name]

    def evaluate(self, record: Any) -> dict[str, list[float]]:
        types = symbol_types(self._model, record)
        return {self.name: [self.table.get(t, self.fallback) for t in types]}


def control_task(
    hypothesis: Any, records: Sequence[Any], seed: int = 0, model: Model | None = None
) -> ControlTask:
    """The control task of ``hypothesis``: labels per symbol type from its value distribution.

    Labels are drawn (seeded) from the hypothesis' values over every symbol of
    ``records``, so the control has the task's label distribution but carries
    only symbol identity. With ``model``, symbols and values are the model's own: a
    transformer's tokens, typed by token id, and the hypothesis as the model reads it
    (character values pooled onto tokens), so the control is at the level the probe is.
    """
    fam = single_signal(hypothesis)
    read = fam if model is None else decided_for_model(model, [fam], records)[0]
    values, types = [], set()
    for i, r in enumerate(records):
        kinds = symbol_types(model, r)
        values.append(evaluate_family(read, r, len(kinds), i)[:, 0])
        types.update(kinds)
    pool = np.concatenate(values)
    rng = np.random.default_rng(seed)
    ordered = sorted(types, key=repr)  # a stable order makes the draw reproducible
    labels = rng.choice(pool, len(ordered) + 1)
    table = {t: float(v) for t, v in zip(ordered, labels[:-1], strict=True)}
    sig = fam.signals()[0]
    n_cat = (fam.categories or {}).get(sig)
    # named after the signal's id, so that two signals of one family get two controls
    hid = fam.hids()[0]
    return ControlTask(table, float(labels[-1]), f"control:{hid}", fam.kind_of(sig), n_cat, model)


def binary_control_table(types: np.ndarray, rate: float, seed: int = 0) -> dict[Any, float]:
    """A 0/1 label per symbol type whose symbols' positive share is closest to ``rate``.

    ``types`` holds one entry per symbol. The types are shuffled (seeded) and labelled 1
    in that order until their symbols' share is as close to ``rate`` as a prefix gets,
    at least one type and never all: the base rate of the task, by symbols, with both
    classes present (drawing each type's label independently leaves a few types all 0
    as often as not).
    """
    kinds, counts = np.unique(np.asarray(types), return_counts=True)
    if len(kinds) < 2:
        return {k: 0.0 for k in kinds.tolist()}
    order = np.random.default_rng(seed).permutation(len(kinds))
    share = np.cumsum(counts[order]) / counts.sum()
    k = int(np.clip(np.argmin(np.abs(share - rate)) + 1, 1, len(kinds) - 1))
    labels = np.zeros(len(kinds))
    labels[order[:k]] = 1.0
    return dict(zip(kinds.tolist(), labels.tolist(), strict=True))


def selectivity(
    model: Model,
    hypotheses: Sequence[Any],
    records: Sequence[Any],
    units: Any = None,
    measure: Any = "ridge",
    seed: int = 0,
    **inspect_kw: Any,
) -> pl.DataFrame:
    """Task score, control-task score and their difference, per hypothesis (and unit group).

    The control task is at ``model``'s own symbol level (:func:`control_task`): per token
    type on a transformer.

    A joint measure (a probe such as ``ridge``) compares ``group_score``s, one row
    per unit group; an independent measure compares ``unit_score``s per unit.

    Returns
    -------
    polars.DataFrame
        ``mid, group, [uid,] measure, hid, task_score, control_score, selectivity``.
    """
    fams = [single_signal(h) for h in hypotheses]
    controls = [control_task(f, records, seed, model) for f in fams]
    meas = get_measure(measure)
    inspect_kw.setdefault("eps", None)
    frame = api.inspect(model, fams + controls, [meas], records, units=units, **inspect_kw)
    col = "group_score" if meas.joint else "unit_score"
    key = ["mid", "group", "measure"] + ([] if meas.joint else ["uid"])
    is_ctrl = pl.col("hid").str.starts_with("control:")
    task = frame.filter(~is_ctrl).select(*key, "hid", pl.col(col).alias("task_score"))
    ctrl = frame.filter(is_ctrl).select(
        *key, pl.col("hid").str.strip_prefix("control:"), pl.col(col).alias("control_score")
    )
    out = task.join(ctrl, on=[*key, "hid"], how="left").unique([*key, "hid"], maintain_order=True)
    return out.with_columns(selectivity=pl.col("task_score") - pl.col("control_score"))
