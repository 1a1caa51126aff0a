"""Stable fingerprints of hypotheses: qualified name, source, parameters, closures.

Fingerprints key the hypothesis cache, so they must not change across
interpreter restarts (no memory addresses) and must change whenever the
function's code or parameters do.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np


def source_of(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        return code.co_code.hex() if code is not None else ""


def callable_fingerprint(fn: Callable) -> str:
    """Qualified name, source, bound arguments and closure values of a callable."""
    parts: list[str] = []
    if isinstance(fn, functools.partial):
        parts.append(stable_repr((fn.args, fn.keywords)))
        fn = fn.func
    parts.append(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(type(fn)))}")
    parts.append(source_of(fn))
    closure = getattr(fn, "__closure__", None) or ()
    for cell in closure:
        try:
            parts.append(stable_repr(cell.cell_contents))
        except ValueError:  # empty cell
            parts.append("<empty>")
    defaults = getattr(fn, "__defaults__", None)
    if defaults:
        parts.append(stable_repr(defaults))
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def stable_repr(obj: Any) -> str:
    """A repr without memory addresses, so fingerprints survive restarts."""
    if isinstance(obj, dict):
        return (
            "{"
            + ",".join(
                f"{stable_repr(k)}:{stable_repr(v)}"
                for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))
            )
            + "}"
        )
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return type(obj).__name__ + "[" + ",".join(stable_repr(x) for x in items) + "]"
    if isinstance(obj, np.ndarray):
        return (
            f"ndarray{obj.shape}{obj.dtype}:"
            + hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()[:16]
        )
    if isinstance(obj, (str, int, float, bool, type(None), bytes)):
        return repr(obj)
    if callable(obj):
        return callable_fingerprint(obj)
    if hasattr(obj, "fingerprint") and callable(obj.fingerprint):
        return obj.fingerprint()
    if hasattr(obj, "get_params"):
        return type(obj).__qualname__ + stable_repr(obj.get_params())
    r = repr(obj)
    return r if " at 0x" not in r else type(obj).__qualname__
