"""The score frame: schema, construction from measure results, and export."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

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
}


def empty_frame() -> pl.DataFrame:
    """A score frame with no rows and the full schema."""
    return pl.DataFrame(schema=SCHEMA)


def block_frame(
    mid: str,
    uids: np.ndarray,
    layers: np.ndarray,
    units: np.ndarray,
    hids: list[str],
    measure: str,
    group: str | np.ndarray,
    unit_score: np.ndarray,
    group_score: np.ndarray,
    err: np.ndarray,
    n_records: np.ndarray,
    converged: np.ndarray,
    reason: np.ndarray,
) -> pl.DataFrame:
    """Rows for one (model, unit group, measure): arrays of shape ``(n_units, n_hyps)``.

    NaN scores become nulls, so a sort never meets a NaN and a null always
    comes with its ``reason``.
    """
    nu, nh = unit_score.shape
    rep = lambda a: np.repeat(np.asarray(a), nh)  # noqa: E731
    grp = np.repeat(group, nu * nh) if isinstance(group, str) else rep(group)
    reason_flat = reason.reshape(-1)
    df = pl.DataFrame(
        {
            "mid": np.repeat(mid, nu * nh),
            "uid": rep(uids).astype(np.int64),
            "layer": rep(layers),
            "unit": rep(units).astype(np.int64),
            "hid": np.tile(np.asarray(hids, dtype=object), nu),
            "measure": np.repeat(measure, nu * nh),
            "unit_score": unit_score.reshape(-1).astype(np.float64),
            "group_score": group_score.reshape(-1).astype(np.float64),
            "err": err.reshape(-1).astype(np.float64),
            "n_records": n_records.reshape(-1).astype(np.int64),
            "converged": converged.reshape(-1).astype(bool),
            "group": grp,
            # a list, not an object array: polars refuses to cast an all-None object column
            "reason": [None if r is None else str(r) for r in reason_flat],
        },
        schema=SCHEMA,
        nan_to_null=True,
    )
    return df


def export(frame: pl.DataFrame, path: str | Path, params: Mapping[str, Any] | None = None) -> Path:
    """Write a score frame as Parquet, CSV, Arrow IPC (``.arrow``/``.feather``) or JSON.

    Parquet files carry ``params`` (the query's parameters) as file metadata
    under the key ``dni_lab``; other formats write them to ``<path>.meta.json``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
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
