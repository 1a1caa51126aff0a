"""Selection glue: the widgets read a unit's behavior through the backend's behaviors service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..backend.extraction.behaviors import (
    BehaviorSource,
    as_family,
    as_model_map,
    as_signal_map,
    feature_sets_in,
)

__all__ = [
    "BehaviorSource",
    "as_family",
    "as_model_map",
    "as_signal_map",
    "feature_sets_in",
    "unit_ready",
]


def unit_ready(sel: Mapping[str, Any] | None) -> bool:
    """True when a selection names a unit completely enough to extract it."""
    return bool(sel) and all(sel.get(k) is not None for k in ("mid", "layer", "unit"))
