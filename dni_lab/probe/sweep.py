"""``Probe.sweep``: one probe per layer, its held-out AUROC against depth, with the nulls.

Each layer gets the same probe (``Probe(layer, **params)``), fitted on the training
records and scored on held-out ones: the AUROC with a percentile bootstrap interval over
records (:func:`~dni_lab.probe.metrics.bootstrap`, as ``Probe.report``), and
``Probe.nulls`` beside it (a control task per symbol type, random directions of the
probe's norm, and an untrained copy when one is passed). The result keeps every fitted
probe, a Polars frame with a row per layer and an Altair chart of AUROC against depth.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..backend.engine.resolve import as_records
from ..backend.errors import DNIError
from . import evaluation, metrics
from .reading import as_model, binary_targets, read_layers

COLUMNS = {
    "layer": pl.String,
    "depth": pl.Int64,
    "n_units": pl.Int64,
    "auroc": pl.Float64,
    "lo": pl.Float64,
    "hi": pl.Float64,
    "train_auroc": pl.Float64,
    "control_auroc": pl.Float64,
    "selectivity": pl.Float64,
    "random_auroc": pl.Float64,
    "random_max": pl.Float64,
    "untrained_auroc": pl.Float64,
}


@dataclass
class LayerSweep:
    """What :meth:`Probe.sweep` returns.

    Attributes
    ----------
    probes : dict of str to Probe
        The fitted probe of each layer, in the sweep's order (save, apply, report each).
    frame : pl.DataFrame
        One row per layer: ``layer, depth`` (its position in the sweep), ``n_units``,
        ``auroc, lo, hi`` (held out, percentile bootstrap over records), ``train_auroc``,
        ``control_auroc`` and ``selectivity`` (the AUROC less the control's),
        ``random_auroc`` (mean over random directions) and ``random_max``, and
        ``untrained_auroc`` (null without ``untrained=``).
    """

    probes: dict[str, Any]
    frame: pl.DataFrame

    def best(self) -> Any:
        """The probe of the layer with the highest held-out AUROC."""
        row = self.frame.sort("auroc", descending=True, nulls_last=True).row(0, named=True)
        return self.probes[row["layer"]]

    def chart(self, title: str | None = None) -> Any:
        """An Altair chart: held-out AUROC against depth with its interval, the nulls as
        dashed lines, chance (0.5) as a rule. Render it in a notebook, or save it."""
        import altair as alt

        df = self.frame
        order = df["layer"].to_list()
        x = alt.X("layer:N", sort=order, title="layer (by depth)")
        low = df["lo"].min()
        y = alt.Y("value:Q", title="held-out AUROC",
                  scale=alt.Scale(domain=[min(0.4, float(low) if low is not None else 0.4), 1.0]))
        named = {"auroc": "probe", "control_auroc": "control task",
                 "random_auroc": "random direction", "untrained_auroc": "untrained model"}
        lines = (
            df.select("layer", "depth", *named)
            .unpivot(index=["layer", "depth"], variable_name="series", value_name="value")
            .drop_nulls("value")
            .with_columns(pl.col("series").replace_strict(named),
                          kind=pl.when(pl.col("series") == "auroc").then(pl.lit("probe"))
                          .otherwise(pl.lit("null")))
        )  # fmt: skip
        band = alt.Chart(df.rename({"lo": "value"})).mark_errorbar(ticks=True).encode(
            x=x, y=y, y2="hi:Q"
        )
        line = alt.Chart(lines).mark_line(point=True).encode(
            x=x, y=y, color=alt.Color("series:N", sort=list(named.values()), title=None),
            strokeDash=alt.StrokeDash("kind:N", legend=None),
            tooltip=["layer", "depth", "series", "value"],
        )  # fmt: skip
        chance = alt.Chart(pl.DataFrame({"value": [0.5]})).mark_rule(color="gray").encode(y=y)
        return (band + line + chance).properties(
            title=title or "probe AUROC by layer", width=max(240, 48 * len(order)), height=220
        )


def _split(records: list, labels: Sequence[Any] | None, holdout: int) -> tuple:
    """Every ``holdout``-th record (``i % holdout == holdout - 1``) held out."""
    test = [i % holdout == holdout - 1 for i in range(len(records))]
    pick = lambda xs, want: [x for x, t in zip(xs, test, strict=True) if t == want]  # noqa: E731
    lab = (None, None) if labels is None else (pick(list(labels), False), pick(list(labels), True))
    return pick(records, False), pick(records, True), lab[0], lab[1]


def sweep(
    cls: type,
    model: Any,
    records: Iterable[Any],
    hypothesis: Any = None,
    *,
    layers: Sequence[str] | None = None,
    labels: Sequence[Any] | None = None,
    test: Iterable[Any] | None = None,
    test_labels: Sequence[Any] | None = None,
    holdout: int = 4,
    untrained: Any = None,
    n_boot: int = 200,
    n_controls: int = 1,
    n_directions: int = 5,
    seed: int = 0,
    level: float = 0.95,
    **params: Any,
) -> LayerSweep:
    """:meth:`Probe.sweep`: fit ``cls(layer, **params)`` on each layer and score it held out.

    Every layer is read in one pass over the records: the training records, then the
    held-out ones, are one :func:`~.reading.read_layers` call each (one forward pass per
    block of records for all layers, the labels evaluated once), and so are the untrained
    copy's. Each layer's probe is then fitted from its columns (``Probe._fit_reading``,
    what ``fit`` runs after reading) and its nulls computed from the same readings
    (:func:`~.evaluation.null_rows`): the probes and AUROCs are those of fitting
    ``cls(layer)`` layer by layer.

    Memory: every layer's float32 rows (symbols × units) of the training and held-out
    records are held at once (twice with ``untrained=``); the float64 copies the nulls fit
    on are made for one layer at a time, and a layer's rows are let go once it is done.
    """
    evaluation._one_of(hypothesis, labels, "Probe.sweep")
    if (test is None) != (test_labels is None) and labels is not None:
        raise DNIError("with labels= and test=, pass test_labels= for the test records.")
    if not (isinstance(holdout, int) and holdout >= 2):
        raise DNIError(f"holdout={holdout!r}: hold out one record in `holdout` (at least 2).")
    if not (isinstance(n_boot, int) and n_boot >= 1):  # refused before any fit
        raise DNIError(f"n_boot={n_boot!r}: pass a positive number of bootstrap replicates.")
    for name, n in (("n_controls", n_controls), ("n_directions", n_directions)):
        if not (isinstance(n, int) and n >= 1):
            raise DNIError(f"{name}={n!r}: pass a positive count.")
    m = as_model(model)
    names = list(dict.fromkeys(m.layers if layers is None else layers))
    if not names:
        raise DNIError(f"model {m.name!r} has no layers to sweep; pass layers=[...].")
    proto = cls(names[0], **{"folds": None, **params})
    proto._check_params()  # bad parameters refused before any forward pass
    recs = list(as_records(records))
    if test is None:
        train, held, train_labels, held_labels = _split(recs, labels, holdout)
    else:
        train, held, train_labels, held_labels = recs, list(as_records(test)), labels, test_labels
    readings = _Readings(m, train, held, names, proto, hypothesis, train_labels, held_labels)
    base = None
    if untrained is not None:
        base = _Readings(as_model(untrained), train, held, names, proto, hypothesis,
                         train_labels, held_labels, types=False)  # fmt: skip
    what = "labels" if hypothesis is None else "the hypothesis"
    probes: dict[str, Any] = {}
    rows = []
    for depth, layer in enumerate(names):
        p = cls(layer, **{"folds": None, **params})._fit_reading(
            m, readings.train[layer], hypothesis
        )
        r = readings.held[layer]
        at, y = binary_targets(r.y, what)
        z, groups = p._logits(r.X)[at], r.record[at]
        auc, lo, hi, _ = metrics.bootstrap(
            lambda w, z=z, y=y: metrics.auroc(z, y, w), groups, n_boot, seed, level
        )
        # this layer's float64 copies, made now and let go with the loop's next turn
        split = readings.split(p, layer)
        nulls = evaluation.null_rows(p, split, None if base is None else base.split(p, layer),
                                     p.folds or evaluation.DEFAULT_FOLDS, n_controls,
                                     n_directions, seed)  # fmt: skip
        del split
        got = {r["null"]: r for r in nulls.iter_rows(named=True)}
        ctrl, rand = got["control_task"], got["random_direction"]
        rows.append({
            "layer": layer, "depth": depth, "n_units": int(p.coef_.shape[1]),
            "auroc": auc, "lo": lo, "hi": hi, "train_auroc": p.train_auroc_,
            "control_auroc": ctrl["auroc"], "selectivity": auc - ctrl["auroc"],
            "random_auroc": rand["auroc"], "random_max": rand["hi"],
            "untrained_auroc": got.get("untrained_model", {}).get("auroc"),
        })  # fmt: skip
        probes[layer] = p
    return LayerSweep(probes, pl.DataFrame(rows, schema=COLUMNS))


class _Readings:
    """One model's readings of every swept layer over the training and held-out records,
    each one :func:`~.reading.read_layers` call, and the symbol types the control task
    labels (one per symbol, read once for all layers)."""

    def __init__(self, model: Any, train: list, held: list, layers: list[str], proto: Any,
                 hypothesis: Any, train_labels: Any, held_labels: Any,
                 types: bool = True) -> None:  # fmt: skip
        self.model = model
        how = (proto.units, proto.block_size, proto.device, hypothesis)
        self.train = read_layers(model, train, layers, *how, train_labels)
        self.held = read_layers(model, held, layers, *how, held_labels)
        self.what = "labels" if hypothesis is None else "the hypothesis"
        self.types = {"train": None, "held": None}
        if types:
            self.types = {"train": evaluation.record_types(model, train),
                          "held": evaluation.record_types(model, held)}  # fmt: skip

    def split(self, probe: Any, layer: str) -> evaluation._Split:
        """``layer``'s split for the nulls (its float64 copies); the layer's float32 rows
        are let go: the sweep reads each layer once."""
        width = probe.coef_.shape[1]

        def part(which: str) -> dict[str, Any]:
            r = getattr(self, which).pop(layer)
            return evaluation.split_part(self.model, r, self.types[which], self.what, width,
                                         layer)  # fmt: skip

        return evaluation._Split(part("held"), part("train"))
