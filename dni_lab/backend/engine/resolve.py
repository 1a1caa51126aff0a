"""Resolve what an inspection names into objects the engine runs.

Models, hypotheses and measures given by name, object or function become
:class:`Model`, hypothesis families and :class:`Measure` objects with unique ids;
unit specifications become each model's :class:`ModelUnits`: the addresses and
unit indices to extract, stable uids, and the unit groups of joint measures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

from ..errors import DNIError, HypothesisError, LayerError, MeasureError, did_you_mean
from ..extraction.extract import as_indices
from ..extraction.models import Model
from ..hypothesis.cache import HypothesisCache, cache_at
from ..hypothesis.hypotheses import HypothesisFamily, HypothesisInfo, as_family
from ..hypothesis.one_vs_rest import with_indicators
from ..measures import Measure, get_measure
from .frames import UnitLabels
from .token_ids import token_id_records


@dataclass
class UnitGroup:
    """A set of units of one model, scored together by joint measures."""

    name: str
    cols: np.ndarray  # positions in the model's union of units


@dataclass
class ModelUnits:
    """Which units of one model to extract and how they are grouped.

    The model's *union of units* is every unit some group names, layer by layer;
    ``uids``, ``layers`` and ``units`` label its columns and a group's ``cols``
    index into it.
    """

    model: Model
    layer_units: dict[str, np.ndarray]  # address -> unit indices, in extraction order
    uids: np.ndarray
    layers: np.ndarray
    units: np.ndarray
    groups: list[UnitGroup] = field(default_factory=list)
    #: feature-set layers: ``{"{hook}:{name}": (hook address, feature set)}``
    features: dict[str, tuple[str, Any]] = field(default_factory=dict)

    @property
    def n_units(self) -> int:
        return len(self.uids)

    def labels(self, cols: np.ndarray | None = None, group: str = "") -> UnitLabels:
        """Row labels of the units at ``cols`` (all by default) for a score frame.

        ``group`` names a joint measure's unit group; without one each unit's
        group is its layer.
        """
        cols = np.arange(self.n_units) if cols is None else cols
        return UnitLabels(
            mid=self.model.name,
            uids=self.uids[cols],
            layers=self.layers[cols],
            units=self.units[cols],
            group=group or self.layers[cols],
        )


def as_models(models: Any) -> list[Model]:
    """Accept one or many :class:`Model` (or bare modules of float input)."""
    if isinstance(models, (Model, nn.Module)):
        models = [models]
    out = [m if isinstance(m, Model) else Model(m) for m in models]
    if not out:
        raise DNIError("no models given; pass models=[dl.Model(module, encode=...)].")
    names = [m.name for m in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DNIError(f"several models are named {sorted(dup)}; give each a distinct name=.")
    return out


def as_families(
    hypotheses: Any, measures: Sequence[Measure] = ()
) -> tuple[list[HypothesisFamily], list[HypothesisInfo]]:
    """Families and the per-column info of every signal, with unique hypothesis ids.

    Where one of ``measures`` reads categories one-vs-rest (``corr``, ``ridge``,
    ``diffmeans``), a categorical signal with declared categories brings one binary
    indicator per category (``"{hid}={code}"``, :mod:`~..hypothesis.one_vs_rest`).
    """
    if isinstance(hypotheses, HypothesisFamily) or callable(hypotheses):
        hypotheses = [hypotheses]
    fams = with_indicators([as_family(h) for h in hypotheses], measures)
    if not fams:
        raise HypothesisError("no hypotheses given; pass hypotheses=[fn, ...].")
    info = [i for f in fams for i in f.info()]
    hids = [i.name for i in info]
    dup = sorted({h for h in hids if hids.count(h) > 1})
    if dup:
        raise HypothesisError(
            f"hypothesis ids {dup} appear more than once; give them distinct names with "
            "@dl.hypothesis(name=...)."
        )
    return fams, info


def as_measures(measures: Any) -> list[Measure]:
    """Measure objects for names, objects and ``f(u, h)`` functions, with unique names."""
    if isinstance(measures, (str, Measure)) or callable(measures):
        measures = [measures]
    out = [get_measure(m) for m in measures]
    if not out:  # an empty frame would look like "no unit matched"
        raise MeasureError("no measures given; pass measures=['corr'] (or other names).")
    names = [m.name for m in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DNIError(f"measures {dup} are listed twice; give custom measures distinct names.")
    return out


def normalize_units(units: Any, models: Sequence[Model] = ()) -> Any:
    """``[(layer, sel), ...]`` → one group per entry; an entry may be a list of pairs.

    A mapping ``{model name: units}`` gives each model its own units (architectures
    with different layer names in one call); a model it leaves out gets the defaults.
    """
    if isinstance(units, Mapping):
        known = [m.name for m in models]
        unknown = [k for k in units if k not in known]
        if unknown:
            raise LayerError(
                f"units name models {unknown} that are not in this inspection; "
                f"its models are {known}.{did_you_mean(str(unknown[0]), known)}"
            )
        return {name: normalize_units(spec) for name, spec in units.items()}
    if units is None:
        return []
    if is_feature_set(units):
        units = [units]
    if isinstance(units, tuple) and len(units) == 2 and not isinstance(units[0], (tuple, list)):
        units = [units]
    groups = []
    for entry in units:
        if isinstance(entry, tuple) and len(entry) == 2 and not isinstance(entry[0], (tuple, list)):
            groups.append([entry])
        elif isinstance(entry, (list, tuple)) and all(
            isinstance(p, tuple) and len(p) == 2 for p in entry
        ):
            groups.append(list(entry))
        elif isinstance(entry, (str, int)) or is_feature_set(entry):
            groups.append([(entry, "*")])
        else:
            raise LayerError(
                f"cannot read unit specification {entry!r}; use (layer, '*'), "
                "(layer, [indices]), a feature set (dl.features) or a list of such pairs "
                "for a multi-layer group."
            )
    return groups


def is_feature_set(obj: Any) -> bool:
    """A unit set of learned features (``dl.features``): it encodes one hook's activations.

    Recognised by its interface, not its class: the backend never imports ``dni_lab.features``.
    """
    return all(hasattr(obj, a) for a in ("encode", "hook", "d_in", "d_sae", "address"))


def _attach(
    model: Model, fs: Any, widths: dict[str, int], features: dict[str, tuple[str, Any]]
) -> str:
    """Check a feature set against its model and register it; returns its layer name."""
    try:
        hook = model.resolve_layer(fs.hook)
    except LayerError as exc:
        raise LayerError(
            f"feature set {fs.name!r} reads hook {fs.hook!r}, which model {model.name!r} lacks: "
            f"{exc} Set its hook (load(path, hook=...) or fs.hook = ...) to a model address."
        ) from None
    if widths.get(hook) != fs.d_in:
        raise LayerError(
            f"feature set {fs.name!r} encodes {fs.d_in}-wide activations, but hook {fs.hook!r} "
            f"of model {model.name!r} is {widths.get(hook)} wide; attach it to the model and "
            "hook it was trained on."
        )
    known = features.get(fs.address)
    if known is not None and known[1] is not fs:
        raise LayerError(
            f"two feature sets on model {model.name!r} are both named {fs.address!r}; give "
            "them distinct names (fs.name = ...)."
        )
    features[fs.address] = (hook, fs)
    return fs.address


def units_of(units: Any, model: Model) -> list[list[tuple[Any, Any]]]:
    """The unit groups of ``model`` from :func:`normalize_units`' result."""
    return units.get(model.name, []) if isinstance(units, Mapping) else units


def resolve_units(
    model: Model,
    groups_spec: list[list[tuple[Any, Any]]],
    sample: Sequence[Any],
    device: torch.device,
) -> ModelUnits:
    """Resolve layer names/positions and unit indices; assign stable uids.

    Parameters
    ----------
    model : Model
        The model whose units are named.
    groups_spec : list of list of (layer, selection)
        One entry per unit group (see :func:`normalize_units`); empty means every
        layer with parameters, one group each.
    sample : sequence
        A record or two, for the model's one probe pass that measures layer widths.
    device : torch.device
        Where the model lives.

    Returns
    -------
    ModelUnits
        The union of the groups' units in extraction order, and the groups.
    """
    for spec in groups_spec:  # names first: a computed address exists once named (hf.computed)
        for layer, _sel in spec:
            if not is_feature_set(layer):
                model.resolve_layer(layer)
    widths = model.layer_widths(list(sample[:2]), device)
    offsets: dict[str, int] = {}
    total = 0
    for addr in model.addresses:
        offsets[addr] = total
        total += widths.get(addr, 0)
    if not groups_spec:
        # Defaults skip layers the forward pass never calls (a wrapper that keeps the
        # original module but runs its own code): only a requested layer must produce output.
        groups_spec = [[(a, "*")] for a in model.positional_layers() if a in widths]
        if not groups_spec:
            raise LayerError(
                f"no layer of model {model.name!r} with parameters produced a tensor in a probe "
                f"pass; name the units, e.g. units=[(address, '*')] with an address from "
                f"model.addresses."
            )
    cols: dict[tuple[str, int], int] = {}
    layer_units: dict[str, list[int]] = {}
    features: dict[str, tuple[str, Any]] = {}
    groups = []
    for spec in groups_spec:
        members = []
        names = []
        for layer, sel in spec:
            if is_feature_set(layer):  # latents: units of a layer of their own, after the model's
                addr = _attach(model, layer, widths, features)
                if addr not in offsets:
                    offsets[addr] = total
                    total += layer.d_sae
                width = layer.d_sae
            else:
                addr = model.resolve_layer(layer)
                model.check_readable(addr)  # several readings: say so before any data
                if addr not in widths:
                    raise LayerError(
                        f"layer {addr!r} of model {model.name!r} produced no tensor in a probe "
                        f"pass.{did_you_mean(addr, widths)}"
                    )
                width = widths[addr]
            idx = as_indices(sel, width, addr, model.name)
            names.append(f"{addr}[{sel if isinstance(sel, str) else ','.join(map(str, idx))}]")
            for i in idx.tolist():
                if (addr, i) not in cols:
                    cols[(addr, i)] = -1
                    layer_units.setdefault(addr, []).append(i)
                members.append((addr, i))
        groups.append((" + ".join(names), members))
    # extraction order: layer by layer, so a union column is a slice of one address
    order = [(a, i) for a, idx in layer_units.items() for i in idx]
    for pos, key in enumerate(order):
        cols[key] = pos
    return ModelUnits(
        model=model,
        layer_units={a: np.asarray(idx, dtype=np.int64) for a, idx in layer_units.items()},
        uids=np.asarray([offsets[a] + i for a, i in order], dtype=np.int64),
        layers=np.asarray([a for a, _ in order], dtype=object),
        units=np.asarray([i for _, i in order], dtype=np.int64),
        groups=[UnitGroup(n, np.asarray([cols[m] for m in mem])) for n, mem in groups],
        features=features,
    )


def as_records(data: Any) -> Any:
    """Records from a sequence, an iterable, or one column of a table.

    Accepts Polars frames and series, anything with ``__arrow_c_stream__`` or
    ``__arrow_c_array__`` (pyarrow tables, arrays and chunked arrays), pandas
    series and frames, Hugging Face ``Dataset`` objects and mappings of columns
    (``{"text": [...]}``); a table must hold exactly one column. Token ids (a 2-D
    integer tensor, a ``BatchEncoding``) become one id list per record
    (:mod:`.token_ids`).
    """
    if data is None:
        raise DNIError("data is None; pass the records: a list, an iterable or one column.")
    ids = token_id_records(data)  # before Mapping: a BatchEncoding is a mapping of columns
    if ids is not None:
        return ids
    if isinstance(data, Mapping):  # {"text": [...]}: a table of one column, as a frame
        _one_column([str(c) for c in data])
        return as_records(next(iter(data.values())))
    if hasattr(data, "column_names") and hasattr(data, "select_columns"):  # a HF Dataset
        _one_column(list(data.column_names))
        return data[data.column_names[0]]
    if hasattr(data, "to_frame") and hasattr(data, "dtype") and hasattr(data, "tolist"):
        return data.tolist()  # a pandas Series
    if hasattr(data, "columns") and hasattr(data, "iloc"):  # a pandas DataFrame
        _one_column([str(c) for c in data.columns])
        return data.iloc[:, 0].tolist()
    if isinstance(data, pl.Series):
        return data.to_list()
    if isinstance(data, pl.DataFrame) or hasattr(data, "__arrow_c_stream__"):
        if not isinstance(data, pl.DataFrame) and not hasattr(data, "column_names"):
            return pl.Series(data).to_list()  # a pyarrow (chunked) array: one column already
        table = data if isinstance(data, pl.DataFrame) else pl.DataFrame(data)
        _one_column(table.columns)
        return table.to_series().to_list()
    if hasattr(data, "__arrow_c_array__"):
        return pl.Series(data).to_list()
    return data


def _one_column(columns: list[str]) -> None:
    if not columns:
        raise DNIError("data is a table with no columns.")
    if len(columns) != 1:
        raise DNIError(
            f"data is a table with columns {columns}; pass column= naming the one column "
            f"that holds the records, e.g. column={columns[0]!r} (or data=table[{columns[0]!r}])."
        )


def as_cache(cache: Any) -> HypothesisCache | None:
    """The hypothesis cache a ``cache=`` value names: None/True the process-wide default,
    False none, a directory a cache stored there."""
    if cache is False:
        return None
    if isinstance(cache, HypothesisCache):
        return cache
    if cache is None or cache is True:
        from ..hypothesis import cache as cache_mod

        if cache_mod.DEFAULT is None:
            cache_mod.DEFAULT = HypothesisCache()
        return cache_mod.DEFAULT
    return cache_at(cache)
