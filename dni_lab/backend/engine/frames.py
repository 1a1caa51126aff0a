"""The score frame: schema, construction from measure results, and export."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..measures.base import MeasureResult
from .params import InspectParams

SCHEMA: dict[str, pl.DataType] = {
    "mid": pl.String(),
    "uid": pl.Int64(),
    "layer": pl.String(),
    "unit": pl.Int64(),
    "hid": pl.String(),
    "measure": pl.String(),
    "unit_score": pl.Float64(),
    "group_score": pl.Float64(),
    "err": pl.Float64(),
    "n_records": pl.Int64(),
    "converged": pl.Boolean(),
    "group": pl.String(),
    "reason": pl.String(),
    # real symbols of the records read where the hypothesis was undefined (NaN/None) and
    # left out of the score; null where the measure does not say
    "n_undefined": pl.Int64(),
}

#: Columns a frame gains with ``fdr=`` (:mod:`.fdr`): a pair's p-value against its
#: measure's ``null_score``, its Benjamini–Hochberg q-value, and whether ``q <= fdr``.
FDR_SCHEMA: dict[str, pl.DataType] = {
    "p_value": pl.Float64(),
    "q_value": pl.Float64(),
    "significant": pl.Boolean(),
}


def empty_frame() -> pl.DataFrame:
    """A score frame with no rows and the full schema."""
    return pl.DataFrame(schema=SCHEMA)


@dataclass(frozen=True)
class UnitLabels:
    """Who a measure state's rows are about: units of one model, and their group.

    Parameters
    ----------
    mid : str
        The model id.
    uids, layers, units : np.ndarray
        One entry per unit: uid within the model, layer address, index in the layer.
    group : str or np.ndarray
        The unit group's name, or one name per unit (independent measures use
        each unit's layer).
    """

    mid: str
    uids: np.ndarray
    layers: np.ndarray
    units: np.ndarray
    group: str | np.ndarray


def score_rows(
    labels: UnitLabels,
    hids: Sequence[str],
    measure: str,
    result: MeasureResult,
    n_records: int | np.ndarray,
    converged: bool | np.ndarray,
) -> pl.DataFrame:
    """Score-frame rows of one measure's result over one unit set.

    Parameters
    ----------
    labels : UnitLabels
        The ``n_units`` units the result's rows describe.
    hids : sequence of str
        The ``n_hyps`` hypothesis ids of the result's columns.
    measure : str
        The measure's name.
    result : MeasureResult
        Arrays of shape ``(n_units, n_hyps)``; NaN scores become nulls, so a sort
        never meets a NaN and a null always comes with its ``reason``. Its
        ``n_undefined`` fills the column of that name (null where it is None).
    n_records, converged : int/bool or array of shape ``(n_units, n_hyps)``
        Records read for each pair, and whether the pair converged.

    Returns
    -------
    polars.DataFrame
        ``n_units * n_hyps`` rows with the :data:`SCHEMA` columns, unit-major.
    """
    shape = result.unit_score.shape
    nu, nh = shape

    def per_unit(a: Any) -> np.ndarray:  # unit-major rows: a unit's value once per hypothesis
        return np.repeat(np.asarray(a), nh)

    def flat(a: Any, dtype: Any) -> np.ndarray:  # scalars stand for every pair
        return np.broadcast_to(np.asarray(a), shape).reshape(-1).astype(dtype)

    group = labels.group
    und = result.n_undefined
    n_undefined = [None] * (nu * nh) if und is None else flat(und, np.int64)
    return pl.DataFrame(
        {
            "mid": np.repeat(labels.mid, nu * nh),
            "uid": per_unit(labels.uids).astype(np.int64),
            "layer": per_unit(labels.layers),
            "unit": per_unit(labels.units).astype(np.int64),
            "hid": np.tile(np.asarray(list(hids), dtype=object), nu),
            "measure": np.repeat(measure, nu * nh),
            "unit_score": flat(result.unit_score, np.float64),
            "group_score": flat(result.group_score, np.float64),
            "err": flat(result.err, np.float64),
            "n_records": flat(n_records, np.int64),
            "converged": flat(converged, bool),
            "group": np.repeat(group, nu * nh) if isinstance(group, str) else per_unit(group),
            # a list, not an object array: polars refuses to cast an all-None object column
            "reason": [None if r is None else str(r) for r in result.reason.reshape(-1)],
            "n_undefined": n_undefined,
        },
        schema=SCHEMA,
        nan_to_null=True,
    )


def export(
    frame: pl.DataFrame,
    path: str | Path,
    params: InspectParams | Mapping[str, Any] | None = None,
) -> Path:
    """Write a score frame as Parquet, CSV, Arrow IPC (``.arrow``/``.feather``) or JSON.

    Parquet files carry ``params`` (the query's parameters: an
    :class:`InspectParams`, a run's ``metadata()`` or any mapping) as file
    metadata under the key ``dni_lab``; other formats write them to
    ``<path>.meta.json``. Without ``params``, a frame returned by ``dl.inspect``
    brings its own provenance: parameters, versions, weights and data hashes.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if params is None:
        from .provenance import provenance

        params = provenance(frame)
    if isinstance(params, InspectParams):
        params = params.to_metadata()
    meta = json.dumps(dict(params or {}), default=str)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = frame.to_arrow()
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"dni_lab": meta})
        pq.write_table(table, path)
        return path
    if suffix == ".csv":
        frame.write_csv(path)
    elif suffix in (".arrow", ".feather", ".ipc"):
        frame.write_ipc(path)
    elif suffix == ".json":
        frame.write_json(path)
    else:
        raise ValueError(
            f"cannot export to {path.name!r}: use a .parquet, .csv, .arrow or .json file name."
        )
    if params:
        path.with_name(path.name + ".meta.json").write_text(meta)
    return path


def read_params(path: str | Path) -> dict[str, Any]:
    """The query parameters stored with an exported Parquet score frame."""
    import pyarrow.parquet as pq

    md = pq.read_schema(path).metadata or {}
    return json.loads(md.get(b"dni_lab", b"{}"))
