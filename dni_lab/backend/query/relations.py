"""Relations a query reads, built from the catalog and the namespace it runs in.

``models(mid, epoch, architecture, trained, ...)`` has one row per checkpoint;
``units(mid, uid, layer, unit, layer_index)`` one row per unit of each model
name; ``hypotheses(hid, name, family, kind, source, h, ...)`` one row per
signal; ``inputs(did, rid, seq, length, ...)`` one row per record;
``features(mid, fid, set, hook, latent, ...)`` one row per latent of each feature
set on each model it attaches to (:mod:`.features`). Hidden
``__dl_*`` columns tie rows back to Python objects and never reach the user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch

from ..engine.resolve import is_feature_set as _feature_set
from ..extraction.models import Model, default_symbols
from ..hypothesis.hypotheses import HypothesisFamily, as_family
from .entries import (
    CatalogContents,
    Dataset,
    FeatureEntry,
    HypothesisEntry,
    ModelEntry,
    source_of,
)
from .errors import QueryError
from .features import features_frame, scalar

STANDARD = ("models", "units", "hypotheses", "inputs", "features")
# IPython's own bookkeeping names hold old outputs; never read them as relations.
_SKIP = {"In", "Out", "exit", "quit", "get_ipython"}


@dataclass
class Relation:
    """A named relation: its kind, rows and (for object relations) the objects' indices.

    ``kind`` is one of ``"models"``, ``"units"``, ``"hypotheses"``, ``"inputs"``,
    ``"features"`` or ``"table"``; ``ids`` index :attr:`Scope.models`, :attr:`Scope.hyps`,
    :attr:`Scope.datasets` or :attr:`Scope.feats`. A units or features relation's
    ``frame`` is built on demand (it depends on the models a query chose).
    """

    name: str
    kind: str
    frame: pl.DataFrame | None
    ids: list[int] | None = None


class Scope:
    """The catalog seen through one namespace: every object a query can reach, numbered."""

    def __init__(
        self, catalog: CatalogContents, namespace: Mapping[str, Any] | None = None
    ) -> None:
        self.catalog = catalog
        self.ns = {k: v for k, v in (namespace or {}).items() if not k.startswith("_")}
        self.ns = {k: v for k, v in self.ns.items() if k not in _SKIP}
        self.models: list[ModelEntry] = list(catalog.models)
        self.hyps: list[HypothesisEntry] = list(catalog.hypotheses)
        self.datasets: list[Dataset] = list(catalog.datasets.values())
        self.feats: list[FeatureEntry] = list(getattr(catalog, "features", []))
        self.widths: dict[str, dict[str, int]] = {}  # model name -> layer widths
        for value in self.ns.values():
            # Only lists that start with a model, hypothesis or feature set are scanned:
            # record lists are long.
            many = (
                _is_list(value)
                and len(value)
                and (isinstance(value[0], (Model, HypothesisFamily)) or is_feature_set(value[0]))
            )
            for obj in value if many else [value]:
                if isinstance(obj, Model):
                    self.model_id(obj)
                elif isinstance(obj, HypothesisFamily):
                    self.hyp_id(obj)
                elif is_feature_set(obj):
                    self.feature_id(obj)

    # -- object registry ---------------------------------------------------------
    def model_id(self, model: Model) -> int:
        """Index of ``model``. A namespace model with the name and metadata of a registered
        one replaces it here: a re-run notebook cell made a new object for the same model."""
        for i, e in enumerate(self.models):
            if e.model is model:
                return i
        for i, e in enumerate(self.models):
            if e.mid == model.name and e.meta == {**e.meta, **model.meta}:
                self.models[i] = ModelEntry(model, e.meta)  # the catalog keeps its entry
                return i
        self.models.append(ModelEntry(model, dict(model.meta)))
        return len(self.models) - 1

    def hyp_id(self, obj: Any) -> int:
        """Index of a hypothesis; one named like a registered family replaces it (see
        :meth:`model_id`), keeping the registered source and metadata."""
        for i, e in enumerate(self.hyps):
            if e.family is obj or getattr(e.family, "fn", None) is obj:
                return i
        fam = obj if isinstance(obj, HypothesisFamily) else as_family(obj)
        for i, e in enumerate(self.hyps):
            if e.family.name == fam.name:
                self.hyps[i] = HypothesisEntry(fam, e.source, e.meta)
                return i
        self.hyps.append(HypothesisEntry(fam, source_of(fam), {}))
        return len(self.hyps) - 1

    def feature_id(self, fs: Any) -> int:
        """Index of a feature set; a namespace set not registered attaches to every model
        in scope that has its hook."""
        for i, e in enumerate(self.feats):
            if e.features is fs:
                return i
        self.feats.append(FeatureEntry(fs))
        return len(self.feats) - 1

    def dataset_id(self, did: str, records: Sequence[Any]) -> int:
        for i, d in enumerate(self.datasets):
            if d.records is records:
                return i
        self.datasets.append(Dataset(did, records, {}))
        return len(self.datasets) - 1

    # -- names -------------------------------------------------------------------
    def resolve(self, name: str) -> Relation | None:
        """The relation called ``name``: a standard one, a catalog dataset or table, or a
        namespace variable holding models, hypotheses, records or a Polars frame."""
        if name == "models":
            return Relation(name, "models", None, list(range(len(self.models))))
        if name == "hypotheses":
            return Relation(name, "hypotheses", None, list(range(len(self.hyps))))
        if name == "inputs":
            return Relation(name, "inputs", None, list(range(len(self.catalog.datasets))))
        if name == "units":
            return Relation(name, "units", None)
        if name == "features":
            return Relation(name, "features", None, None)
        if name in self.catalog.tables:
            return Relation(name, "table", self.catalog.tables[name])
        if name in self.catalog.datasets:
            ds = self.catalog.datasets[name]
            return Relation(name, "inputs", None, [self.dataset_id(ds.did, ds.records)])
        if name not in self.ns:
            return None
        value = self.ns[name]
        items = list(value) if _is_list(value) else [value]
        if isinstance(value, pl.DataFrame):
            return Relation(name, "table", value)
        if items and all(isinstance(m, Model) for m in items):
            return Relation(name, "models", None, [self.model_id(m) for m in items])
        if items and all(is_feature_set(f) for f in items):
            return Relation(name, "features", None, [self.feature_id(f) for f in items])
        if items and all(_is_hypothesis(h) for h in items):
            return Relation(name, "hypotheses", None, [self.hyp_id(h) for h in items])
        if _is_list(value) and len(value):
            return Relation(name, "inputs", None, [self.dataset_id(name, value)])
        return None

    def names(self) -> list[str]:
        """Every name :meth:`resolve` accepts (for "did you mean")."""
        ns = [k for k, v in self.ns.items() if _is_list(v) or isinstance(v, (Model, pl.DataFrame))]
        ns += [k for k, v in self.ns.items() if _is_hypothesis(v) or is_feature_set(v)]
        return [*STANDARD, *self.catalog.datasets, *self.catalog.tables, *ns]

    # -- frames ------------------------------------------------------------------
    def frame(self, rel: Relation, mids: set[str] | None = None) -> pl.DataFrame:
        """The rows of ``rel`` (for units and features: of the models named ``mids``, None
        for all)."""
        if rel.frame is not None:
            return rel.frame
        if rel.kind == "features":
            return features_frame(self, rel.ids, mids)
        build = {
            "models": self._models_frame,
            "hypotheses": self._hyps_frame,
            "inputs": self._inputs_frame,
        }
        if rel.kind == "units":
            return self.units_frame(mids)
        rel.frame = build[rel.kind](rel.ids or [])
        return rel.frame

    def _models_frame(self, ids: list[int]) -> pl.DataFrame:
        rows = []
        for i in ids:
            e = self.models[i]
            base = {"mid": e.mid, "epoch": None, "architecture": None, "trained": None}
            base["architecture"] = type(e.model.module).__name__
            rows.append({**base, **{k: scalar(v) for k, v in e.meta.items()}, "__dl_m": i})
        return _frame(rows, {"mid": pl.String, "epoch": pl.Int64, "__dl_m": pl.Int64})

    def _hyps_frame(self, ids: list[int]) -> pl.DataFrame:
        rows = []
        for i in ids:
            e = self.hyps[i]
            fam = e.family
            for hid, sig, info in zip(fam.hids(), fam.signals(), fam.info(), strict=True):
                row = {"hid": hid, "name": sig, "family": fam.name, "kind": info.kind}
                row |= {"source": e.source, "h": hid, **{k: scalar(v) for k, v in e.meta.items()}}
                rows.append({**row, "__dl_h": i, "__dl_sig": sig})
        return _frame(rows, {"hid": pl.String, "name": pl.String, "__dl_h": pl.Int64})

    def _inputs_frame(self, ids: list[int]) -> pl.DataFrame:
        parts = []
        for i in ids:
            ds = self.datasets[i]
            cols: dict[str, Any] = {
                "did": [ds.did] * len(ds.records),
                "rid": np.arange(len(ds.records), dtype=np.int64),
                "seq": [_describe(r) for r in ds.records],
                "length": [_length(r) for r in ds.records],
            }
            cols |= {k: [scalar(v)] * len(ds.records) for k, v in ds.meta.items()}
            cols["__dl_d"] = [i] * len(ds.records)
            parts.append(pl.DataFrame(cols, strict=False))
        if not parts:
            return pl.DataFrame(
                schema={"did": pl.String, "rid": pl.Int64, "seq": pl.String, "__dl_d": pl.Int64}
            )
        return pl.concat(parts, how="diagonal_relaxed")

    def units_frame(self, mids: set[str] | None, samples: Sequence[Any] = ()) -> pl.DataFrame:
        """Units of each model name in ``mids`` (all when None), probing layer widths with
        the first record of ``samples`` or of any dataset in scope."""
        seen: dict[str, ModelEntry] = {}
        for e in self.models:
            if (mids is None or e.mid in mids) and e.mid not in seen:
                seen[e.mid] = e
        parts = [self._units_of(e, samples) for e in seen.values()]
        if not parts:
            return pl.DataFrame(
                schema={
                    "mid": pl.String,
                    "uid": pl.Int64,
                    "layer": pl.String,
                    "unit": pl.Int64,
                    "layer_index": pl.Int64,
                }
            )
        return pl.concat(parts)

    def model_widths(self, e: ModelEntry, samples: Sequence[Any] = ()) -> dict[str, int]:
        """Layer widths of a model name (probed once per scope)."""
        if e.mid not in self.widths:
            self.widths[e.mid] = self._probe(e.model, samples)
        return self.widths[e.mid]

    def _units_of(self, e: ModelEntry, samples: Sequence[Any]) -> pl.DataFrame:
        model = e.model
        widths = self.model_widths(e, samples)
        pos = {a: k for k, a in enumerate(model.positional_layers())}
        addrs = [a for a in model.addresses if widths.get(a, 0)]
        w = np.array([widths[a] for a in addrs], dtype=np.int64)
        offsets = {a: 0 for a in addrs}
        total = 0
        for a in model.addresses:  # uids count every address, as the engine's plan does
            offsets[a] = total
            total += widths.get(a, 0)
        return pl.DataFrame(
            {
                "mid": np.repeat(e.mid, w.sum()),
                "uid": np.concatenate(
                    [offsets[a] + np.arange(n) for a, n in zip(addrs, w, strict=True)]
                ),
                "layer": np.repeat(np.asarray(addrs, dtype=object), w),
                "unit": np.concatenate([np.arange(n) for n in w]),
                "layer_index": pl.Series(
                    [pos.get(a) for a, n in zip(addrs, w, strict=True) for _ in range(n)],
                    dtype=pl.Int64,
                ),
            },
            schema_overrides={"mid": pl.String, "layer": pl.String, "uid": pl.Int64},
        )

    def _probe(self, model: Model, samples: Sequence[Any]) -> dict[str, int]:
        if model.has_widths:
            return model.layer_widths((), "cpu")  # cached on the model: no forward pass
        candidates = [list(samples[:1])] if len(samples) else []
        candidates += [list(d.records[:1]) for d in self.datasets if len(d.records)]
        params = list(model.module.parameters())
        device = params[0].device if params else torch.device("cpu")
        errors = []
        for sample in candidates:
            try:
                return model.layer_widths(sample, device)
            except Exception as exc:  # an incompatible dataset: try the next one
                errors.append(f"{type(exc).__name__}: {exc}")
        raise QueryError(
            f"cannot list the units of model {model.name!r}: its layer widths need one forward "
            "pass on a record, and "
            + ("no dataset is registered" if not errors else f"every dataset failed ({errors[0]})")
            + ". Register inputs the model accepts (catalog.add_inputs(records, name))."
        )


def _is_list(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and not isinstance(value, str)


def is_feature_set(obj: Any) -> bool:
    """Whether a namespace value is a feature set (an object whose attribute lookup
    fails in another way than AttributeError is not one)."""
    try:
        return _feature_set(obj)
    except Exception:
        return False


def _is_hypothesis(obj: Any) -> bool:
    if is_feature_set(obj):  # an nn.Module, so callable, but never a hypothesis
        return False
    return isinstance(obj, HypothesisFamily) or (callable(obj) and not isinstance(obj, type))


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=schema)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {k: [r.get(k) for r in rows] for k in keys}
    return pl.DataFrame(cols, strict=False)


def _describe(record: Any) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, (list, tuple)) and all(isinstance(t, str) for t in record):
        return " ".join(record)
    shape = getattr(record, "shape", None)
    if shape is not None:
        return f"{type(record).__name__}{tuple(shape)}"
    return repr(record)[:80]


def _length(record: Any) -> int | None:
    try:
        return int(default_symbols(record))
    except TypeError:
        return None
