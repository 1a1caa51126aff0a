"""Measures named in USING and run options from WITH (...) and from the caller."""

from __future__ import annotations

from typing import Any

from ..errors import did_you_mean
from ..measures import REGISTRY, Measure, get_measure, measure_class
from .nodes import Query
from .relations import Scope

# Option -> (check, what a valid value is). The engine validates again; these checks
# exist to put the caret under the bad value.
OPTIONS: dict[str, tuple[Any, str]] = {
    "eps": (lambda v: v is None or (_number(v) and v > 0), "a positive number or NULL"),
    "confidence": (lambda v: _number(v) and 0 < v < 1, "a number between 0 and 1"),
    "block_size": (lambda v: isinstance(v, int) and v > 0, "a positive whole number"),
    "device": (lambda v: isinstance(v, str), "a device name ('cpu', 'cuda', 'auto')"),
    "behavior": (lambda v: isinstance(v, str), "'activation' or 'gradient'"),
    "max_records": (lambda v: v is None or (isinstance(v, int) and v > 0), "a positive count"),
    "cache": (lambda v: isinstance(v, (bool, str)) or v is None, "TRUE, FALSE or a directory"),
}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def resolve_options(q: Query, given: dict[str, Any]) -> dict[str, Any]:
    """Options of the query's WITH clause, overridden by ``given`` (the call's or the magic's
    flags: the person running a saved query decides how long it may take)."""
    out: dict[str, Any] = {}
    for key, (value, tok) in q.options.items():
        if key not in OPTIONS:
            hint = did_you_mean(key, OPTIONS)
            raise q.error(f"unknown option {key!r}.{hint} Options: {', '.join(OPTIONS)}.", tok)
        check, what = OPTIONS[key]
        if not check(value):
            raise q.error(f"option {key!r} must be {what}, not {value!r}", tok + 2)
        out[key] = value
    for key, value in given.items():
        if key not in OPTIONS:
            raise TypeError(f"unknown query option {key!r}.{did_you_mean(key, OPTIONS)}")
        out[key] = value
    return out


def resolve_measures(q: Query, scope: Scope) -> list[Measure]:
    """Measure objects for USING: registered names, or namespace measures and functions."""
    ins = q.inspect
    assert ins is not None
    if not ins.measures:
        return [get_measure("corr")]  # DeepBase's default
    out: list[Measure] = []
    for spec in ins.measures:
        obj = scope.ns.get(spec.name)
        try:
            if spec.name in REGISTRY:
                out.append(measure_class(spec.name)(**spec.args))
            elif isinstance(obj, type) and issubclass(obj, Measure):
                out.append(obj(**spec.args))
            elif isinstance(obj, Measure) or (callable(obj) and not isinstance(obj, type)):
                if spec.args:
                    raise TypeError(f"{spec.name} is an object, not a class: it takes no arguments")
                out.append(get_measure(obj))
            else:
                ns = [k for k, v in scope.ns.items() if isinstance(v, Measure)]
                hint = did_you_mean(spec.name, [*REGISTRY, *ns])
                raise q.error(
                    f"unknown measure {spec.name!r}.{hint} Measures: {', '.join(REGISTRY)}, or a "
                    "Measure object or function f(u, h) in the namespace.",
                    spec.tok,
                )
        except TypeError as exc:
            raise q.error(f"cannot build measure {spec.name!r}: {exc}", spec.tok) from None
        except ImportError as exc:  # a registered name whose module is not installed yet
            raise q.error(f"measure {spec.name!r} is not available: {exc}", spec.tok) from None
    names = [m.name for m in out]
    for spec, name in zip(ins.measures, names, strict=True):
        if names.count(name) > 1:
            raise q.error(f"measure {name!r} is listed twice", spec.tok)
    return out
