"""The ``features`` relation: the latents of feature sets (``dl.features``) as units.

``features(mid, fid, set, hook, latent, architecture, d_sae, ...)`` has one row per
latent of each feature set on each model it attaches to. ``fid`` is the latent's
``uid`` in score frames: after the model's neurons, the model's sets in
registration order (what ``dl.inspect(units=[fs1, fs2])`` numbers), so a query's
``S.uid`` joins ``F.fid``. Hidden columns tie a row to its set (``__dl_f``) and to
the ``layer`` the engine gives it (``__dl_layer``, ``"{hook}:{name}"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import polars as pl

from ..errors import LayerError
from .entries import FeatureEntry, ModelEntry
from .errors import QueryError


class Scope(Protocol):
    """What this module reads of a query's scope (``relations.Scope``, which imports
    this module: a protocol keeps the two out of a cycle)."""

    models: list[ModelEntry]
    feats: list[FeatureEntry]

    def model_widths(self, e: ModelEntry, samples: Sequence[Any] = ()) -> dict[str, int]: ...

FEATURE_COLUMNS = ("mid", "fid", "set", "hook", "latent", "architecture", "d_sae")
SCHEMA = {
    "mid": pl.String,
    "fid": pl.Int64,
    "set": pl.String,
    "hook": pl.String,
    "latent": pl.Int64,
    "architecture": pl.String,
    "d_sae": pl.Int64,
    "__dl_f": pl.Int64,
    "__dl_layer": pl.String,
}


def feature_columns(entries: Sequence[FeatureEntry]) -> list[str]:
    """The columns a query may name: the fixed ones, then every entry's metadata."""
    meta = dict.fromkeys(k for e in entries for k in e.meta)
    return [*FEATURE_COLUMNS, *[k for k in meta if k not in FEATURE_COLUMNS]]


def _hook_width(model: Any, fs: Any, widths: dict[str, int]) -> int | None:
    """The width of ``fs.hook`` on ``model``; None when the model has no such address."""
    try:
        return widths.get(model.resolve_layer(fs.hook))
    except LayerError:
        return None


def _has(model: Any, hook: str) -> bool:
    try:
        model.resolve_layer(hook)
    except LayerError:
        return False
    return True


def features_frame(
    scope: Scope, ids: list[int] | None, mids: set[str] | None, samples: Sequence[Any] = ()
) -> pl.DataFrame:
    """Rows of the feature entries ``ids`` (all when None) on the model names ``mids``.

    A set registered for a model must fit it (its hook exists and is ``d_in`` wide); a
    set without one joins every model in scope where it fits.
    """
    models: dict[str, ModelEntry] = {}
    for e in scope.models:
        models.setdefault(e.mid, e)
    wanted = set(range(len(scope.feats))) if ids is None else set(ids)
    parts = []
    for mid, me in models.items():
        if mids is not None and mid not in mids:
            continue
        on = [(i, e) for i, e in enumerate(scope.feats) if e.mid in (None, mid)]
        if not any(e.mid == mid or _has(me.model, e.features.hook) for _, e in on):
            continue  # no set can attach: spare the model its probe pass
        widths = scope.model_widths(me, samples)
        offset = sum(widths.get(a, 0) for a in me.model.addresses)
        seen: dict[str, int] = {}
        for i, e in on:
            fs = e.features
            width = _hook_width(me.model, fs, widths)
            if width != fs.d_in:
                if e.mid is None:
                    continue  # a set for another model's hook
                raise QueryError(
                    f"feature set {fs.name!r} is registered for model {mid!r}, but "
                    + (
                        f"the model has no address {fs.hook!r}"
                        if width is None
                        else f"its hook {fs.hook!r} is {width} wide and the set encodes {fs.d_in}"
                    )
                    + "; register it for the model and hook it was trained on."
                )
            if fs.address in seen and seen[fs.address] != i:
                raise QueryError(
                    f"two feature sets on model {mid!r} are both named {fs.address!r}; give "
                    "them distinct names (fs.name = ...)."
                )
            seen[fs.address] = i
            if i in wanted:
                parts.append(_rows(mid, i, e, offset))
            offset += fs.d_sae
    if not parts:
        return pl.DataFrame(schema=SCHEMA)
    return pl.concat(parts, how="diagonal_relaxed")


def _rows(mid: str, i: int, e: FeatureEntry, offset: int) -> pl.DataFrame:
    fs = e.features
    n = fs.d_sae
    cols: dict[str, Any] = {
        "mid": [mid] * n,
        "fid": offset + np.arange(n, dtype=np.int64),
        "set": [fs.name] * n,
        "hook": [str(fs.hook)] * n,
        "latent": np.arange(n, dtype=np.int64),
        "architecture": [getattr(fs, "architecture", "") or type(fs).__name__] * n,
        "d_sae": [n] * n,
    }
    cols |= {k: [scalar(v)] * n for k, v in e.meta.items() if k not in cols}
    cols |= {"__dl_f": [i] * n, "__dl_layer": [fs.address] * n}
    return pl.DataFrame(cols, schema_overrides=SCHEMA, strict=False)  # type: ignore[arg-type]


def scalar(v: Any) -> Any:
    """A metadata value as a table cell: plain scalars kept, numpy scalars unwrapped,
    anything else as its text."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


def unit_spec(frame: pl.DataFrame, scope: Scope) -> list[Any]:
    """One unit group of latents, ``[[(feature set, "*" | [latents]), ...]]``, sets in
    registration order, from the features rows a group chose for one model."""
    pairs = []
    for (i,), rows in frame.sort("__dl_f").partition_by("__dl_f", as_dict=True).items():
        fs = scope.feats[int(i)].features
        idx = sorted(rows["latent"].unique().to_list())
        pairs.append((fs, "*" if len(idx) == fs.d_sae else idx))
    return [pairs]
