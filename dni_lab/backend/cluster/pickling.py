"""Will a run's objects travel to Ray workers? Checked before Ray starts, culprit named.

Ray pickles what it sends (cloudpickle). When that fails deep inside a model, Ray's
own error prints the whole object (a plan holds a block of records) and comes after
Ray's start-up; :func:`check_picklable` instead pickles each named part into a sink
that keeps nothing, and on failure walks into the part (attributes, submodules,
closure variables, referenced globals, items) to the innermost object that does not
pickle, e.g. ``hypothesis 'locked': closure variable lock is a _thread.lock``.
"""

from __future__ import annotations

import functools
import io
import types
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import DNIError

#: How deep the search for the culprit goes (model → submodule → attribute → ...).
DEPTH = 8


class _Sink(io.RawIOBase):
    """A file that only counts what is written: pickling checks cost no memory."""

    def __init__(self) -> None:
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = memoryview(b).nbytes
        self.size += n
        return n


def pickled_size(obj: Any) -> int:
    """Bytes ``obj`` pickles to with cloudpickle (raises what pickling raises)."""
    from ray import cloudpickle  # what Ray itself pickles with

    sink = _Sink()
    cloudpickle.CloudPickler(sink, protocol=5).dump(obj)
    return sink.size


def check_picklable(parts: Iterable[tuple[str, Any]], what: str) -> None:
    """Raise a short :class:`DNIError` naming the first part (and attribute) that does not pickle.

    Parameters
    ----------
    parts : iterable of (str, object)
        Each part with the name the message uses (``"model 'lm'"``).
    what : str
        What is being sent ("the inspection"), for the message.
    """
    for label, obj in parts:
        try:
            pickled_size(obj)
        except Exception as exc:  # cloudpickle raises TypeError, PicklingError, ...
            path, culprit, cause = _culprit(obj, "", exc, DEPTH, set())
            where = f"{path.lstrip('. ')} is " if path else "it is "
            raise DNIError(
                f"cannot send {what} to Ray workers: {label} does not pickle: {where}"
                f"{_describe(culprit)} ({_first_line(cause)}). Workers receive models, "
                "encode functions, hypotheses and measures pickled: keep locks, open files, "
                "sockets and threads out of them (create such objects inside the function "
                "that uses them), or drop cluster= to run in this process."
            ) from None


def _culprit(obj: Any, path: str, exc: BaseException, depth: int,
             seen: set[int]) -> tuple[str, Any, BaseException]:  # fmt: skip
    """The deepest (path, object, error) under ``obj`` that fails to pickle."""
    if depth > 0 and id(obj) not in seen:
        seen.add(id(obj))
        for name, child in _children(obj):
            try:
                pickled_size(child)
            except Exception as inner:
                step = f"'s{name}" if name.startswith(" ") and path else name
                return _culprit(child, path + step, inner, depth - 1, seen)
            except RecursionError:  # pragma: no cover - a cycle pickle cannot follow
                continue
    return path, obj, exc


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """(path step, child) pairs that pickling ``obj`` pickles too."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            yield f"[{i}]", v
    elif isinstance(obj, functools.partial):
        yield ".func", obj.func
        yield from ((f".args[{i}]", a) for i, a in enumerate(obj.args))
        yield from ((f".keywords[{k!r}]", v) for k, v in obj.keywords.items())
    elif isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__
        yield ".__func__", obj.__func__
    elif isinstance(obj, types.FunctionType):
        yield from _function_children(obj)
    else:
        state = getattr(obj, "__dict__", None)
        if isinstance(state, dict):
            for k, v in state.items():
                if k in ("_modules", "_parameters", "_buffers") and isinstance(v, dict):
                    yield from ((f".{n}", m) for n, m in v.items())  # torch: its attributes
                else:
                    yield f".{k}", v
        slots = getattr(type(obj), "__slots__", ())
        for k in (slots,) if isinstance(slots, str) else slots:
            if hasattr(obj, k):
                yield f".{k}", getattr(obj, k)


def _function_children(fn: types.FunctionType) -> Iterator[tuple[str, Any]]:
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
        try:
            yield f" closure variable {name}", cell.cell_contents
        except ValueError:  # an empty cell
            continue
    # cloudpickle pickles by value the globals a function (or its nested code) names,
    # when the function lives in __main__ or another module it cannot import by name
    names = set(_code_names(fn.__code__))
    for name in sorted(names & set(fn.__globals__)):
        value = fn.__globals__[name]
        if not isinstance(value, types.ModuleType):
            yield f" global {name}", value
    for i, d in enumerate(fn.__defaults__ or ()):
        yield f" default [{i}]", d
    wrapped = getattr(fn, "__wrapped__", None)
    if wrapped is not None:
        yield ".__wrapped__", wrapped


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _describe(obj: Any) -> str:
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")
    return f"a {name}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
