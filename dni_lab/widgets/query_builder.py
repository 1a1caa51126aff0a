"""Query builder: pick models, units, hypotheses, measures, data and eps; run; stream."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import traitlets

from ..backend.api import inspect
from ..backend.engine.run import Run
from ..backend.measures import REGISTRY
from ..backend.query.subset import select_signals
from ._base import Panel, esm
from ._behavior import as_family, as_model_map
from .table import ScoreTable

# Every built-in measure, as the registry names them (a new measure appears in the form).
MEASURES = tuple(REGISTRY)


def _quote(values: Sequence[Any]) -> str:
    return ", ".join("'" + str(v).replace("'", "''") + "'" for v in values)


def units_spec(text: str) -> str | list[int]:
    """``"*"`` or ``"0-3, 7"`` → ``"*"`` or ``[0, 1, 2, 3, 7]``."""
    text = (text or "*").strip()
    if text == "*":
        return "*"
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"cannot read units {text!r}; write '*' or e.g. '0-3, 7'.")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def default_layer(model: Any) -> str:
    """The layer a new query starts from: the first hidden layer, not the input embedding
    (a lookup table, not a learned computation over the record) nor, when there is a
    choice, the output head."""
    import torch.nn as nn

    layers = model.positional_layers()
    hidden = [n for n in layers if not isinstance(model._module(n), nn.Embedding)]
    if len(hidden) > 1:
        hidden = hidden[:-1]  # the last layer with parameters maps to the outputs
    return (hidden or layers)[0]


class QueryBuilder(Panel):
    """A form for an inspection; shows the equivalent ``%%inspect`` query; runs it.

    Parameters
    ----------
    models : Model, list or mapping
    hypotheses : list
        Hypotheses and families; the form groups signals by family.
    data : sequence or mapping
        One dataset, or ``{name: records}``.
    measures : sequence of str
        Measures offered (default: all built-in measures).
    cluster, workers : optional
        Run on a Ray cluster, as in :func:`dl.inspect`; the query shows them in ``WITH``.

    Attributes
    ----------
    table : ScoreTable
        Where results stream; displaying the builder shows the form and the table.
    run : Run or None
        The current (or last) run.
    data : polars.DataFrame
        The current score frame (the table's).
    """

    _esm = esm("query_builder")
    _catalog = traitlets.Dict().tag(sync=True)
    _query = traitlets.Dict().tag(sync=True)  # the form's state, written by the browser
    _browser_sets = ("_query",)
    _sql = traitlets.Unicode("").tag(sync=True)
    _error = traitlets.Unicode("").tag(sync=True)
    _running = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        models: Any,
        hypotheses: Any,
        data: Any,
        measures: Sequence[str] = MEASURES,
        table: ScoreTable | None = None,
        cluster: str | int | bool | None = None,
        workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Where it runs is the notebook's choice, not the form's: fixed per builder.
        self.run_on = {k: v for k, v in (("cluster", cluster), ("workers", workers)) if v}
        self.models = as_model_map(models)
        hyps = hypotheses if isinstance(hypotheses, (list, tuple)) else [hypotheses]
        self.families = [as_family(h) for h in hyps]
        self.datasets = dict(data) if isinstance(data, Mapping) else {"data": list(data)}
        self.table = table or ScoreTable()
        self.run: Run | None = None
        first = next(iter(self.models))
        default = {
            "models": [first],
            "units": {first: [{"layer": default_layer(self.models[first]), "units": "*"}]},
            "hypotheses": [h for f in self.families for h in f.hids()],
            "measures": ["corr"],
            "dataset": next(iter(self.datasets)),
            "eps": 0.025,
            "block_size": 256,
        }
        super().__init__(_catalog=self._make_catalog(measures), _query=default, **kwargs)
        self.observe(self._on_query, names=["_query"])
        self.on_msg(self._on_message)
        self._on_query(None)

    @property
    def data(self) -> pl.DataFrame:
        return self.table.frame

    @property
    def sql(self) -> str:
        """The ``%%inspect`` cell equivalent to the form."""
        return self._sql

    def _make_catalog(self, measures: Sequence[str]) -> dict[str, Any]:
        return {
            "models": [{"mid": k, "layers": m.addresses} for k, m in self.models.items()],
            "families": [
                {"name": f.name, "hids": f.hids(), "kinds": [f.kind_of(s) for s in f.signals()]}
                for f in self.families
            ],
            "measures": list(measures),
            "datasets": [{"name": k, "n": len(v)} for k, v in self.datasets.items()],
        }

    # -- the query ------------------------------------------------------------------
    def _on_query(self, _change: Any) -> None:
        try:
            self.arguments()
            self._sql = self.to_sql()
            self._error = ""
        except Exception as exc:  # shown under the form
            self._error = str(exc)

    def arguments(self) -> dict[str, Any]:
        """The form as ``dl.inspect`` keyword arguments (without ``background``)."""
        q = self._query
        if not q.get("models"):
            raise ValueError("pick at least one model.")
        if not q.get("hypotheses"):
            raise ValueError("pick at least one hypothesis.")
        if not q.get("measures"):
            raise ValueError("pick at least one measure.")
        chosen = set(q["hypotheses"])
        fams = []
        for f in self.families:
            sigs = [s for s, hid in zip(f.signals(), f.hids(), strict=True) if hid in chosen]
            if sigs:
                fams.append(select_signals(f, sigs))
        units = []
        for mid in q["models"]:
            for u in q.get("units", {}).get(mid, []):
                units.append((u["layer"], units_spec(u.get("units", "*"))))
        eps = q.get("eps")
        return {
            "models": [self.models[m] for m in q["models"]],
            "hypotheses": fams,
            "measures": list(q["measures"]),
            "data": self.datasets[q["dataset"]],
            "units": units or None,
            "eps": None if eps in (None, "", 0) else float(eps),
            "block_size": int(q.get("block_size") or 256),
            **self.run_on,
        }

    def to_sql(self) -> str:
        """The ``%%inspect`` cell for the form (DeepBase's INSPECT syntax)."""
        q = self._query
        where = ["M.mid = U.mid", f"M.mid IN ({_quote(q['models'])})"]
        layers = []
        for mid in q["models"]:
            for u in q.get("units", {}).get(mid, []):
                spec = units_spec(u.get("units", "*"))
                cond = f"U.layer = {_quote([u['layer']])}"
                if spec != "*":
                    cond = f"({cond} AND U.unit IN ({', '.join(map(str, spec))}))"
                layers.append(cond)
        if layers:
            where.append(layers[0] if len(layers) == 1 else "(" + " OR ".join(layers) + ")")
        where.append(f"H.hid IN ({_quote(q['hypotheses'])})")
        where.append(f"D.did = {_quote([q['dataset']])}")
        eps = q.get("eps")
        opts = (
            f"eps = {'NULL' if eps in (None, '', 0) else eps}, block_size = {q.get('block_size')}"
        )
        for k, v in self.run_on.items():
            opts += f", {k} = {_quote([v]) if isinstance(v, str) else v}"
        return "\n".join(
            [
                "%%inspect",
                "SELECT S.mid, S.layer, S.unit, S.hid, S.measure, S.unit_score",
                f"INSPECT U.uid AND H.h USING {', '.join(q['measures'])} OVER D.seq AS S",
                "FROM models M, units U, hypotheses H, inputs D",
                "WHERE " + "\n  AND ".join(where),
                f"WITH ({opts})",
            ]
        )

    # -- run / stop -----------------------------------------------------------------
    def start(self) -> Run:
        """Start the inspection in the background; results stream into :attr:`table`."""
        if self.run is not None and not self.run.done:
            self.run.cancel()
        self.run = inspect(**self.arguments(), background=True, on_block=self._on_block)
        self.table.watch(self.run)
        self._running = True
        return self.run

    def stop(self) -> None:
        self.table.stop()

    def _on_block(self, run: Run) -> None:
        if run.done:
            self._running = False

    def _on_message(self, _w: Any, content: dict[str, Any], _b: list) -> None:
        try:
            if content.get("type") == "run":
                self.start()
            elif content.get("type") == "stop":
                self.stop()
        except Exception as exc:
            self._error = f"{type(exc).__name__}: {exc}"

    def _describe(self) -> str:
        q = self._query
        state = "running" if self._running else "idle"
        return (
            f"{len(q.get('models', []))} models, {len(q.get('hypotheses', []))} hypotheses, "
            f"measures {','.join(q.get('measures', []))}, {state}"
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # the form and its result table as one output; the text stays this panel's repr
        import ipywidgets

        box = ipywidgets.VBox([self, self.table])
        data = box._repr_mimebundle_(**kwargs)
        if isinstance(data, tuple):
            data = data[0]
        data["text/plain"] = repr(self)
        return data
