"""Measures named in USING and run options from WITH (...) and from the caller."""

from __future__ import annotations

from typing import Any

from ..engine.params import InspectParams, problem
from ..errors import did_you_mean
from ..measures import REGISTRY, Measure, get_measure, measure_class
from .nodes import Query
from .relations import Scope

#: Options a query may set: every inspection parameter but the engine-internal floor.
OPTIONS = tuple(n for n in InspectParams.names() if n != "min_records")


def resolve_options(q: Query, given: dict[str, Any]) -> InspectParams:
    """Options of the query's WITH clause, overridden by ``given`` (the call's or the magic's
    flags: the person running a saved query decides how long it may take).

    A bad WITH value raises here, with the caret under it; a bad ``given`` value
    raises when the :class:`InspectParams` is built.
    """
    out: dict[str, Any] = {}
    for key, (value, tok) in q.options.items():
        if key not in OPTIONS:
            hint = did_you_mean(key, OPTIONS)
            raise q.error(f"unknown option {key!r}.{hint} Options: {', '.join(OPTIONS)}.", tok)
        what = problem(key, value)
        if what is not None:
            raise q.error(f"option {key!r} must be {what}, not {value!r}", tok + 2)
        out[key] = value
    for key, value in given.items():
        if key not in OPTIONS:
            raise TypeError(f"unknown query option {key!r}.{did_you_mean(key, OPTIONS)}")
        out[key] = value
    return InspectParams(**out)


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
