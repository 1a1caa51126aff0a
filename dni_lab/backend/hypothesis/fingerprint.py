"""Fingerprints of hypotheses: a hash of everything a hypothesis's output depends on.

Fingerprints key the hypothesis cache, and a cache may never change a result,
so a fingerprint covers what a function can read:

- its code: bytecode, constants and nested code objects, names and flags (never
  the source text, which ``exec``, ``python -c`` and a REPL do not keep);
- the globals its code names and the modules it imports, by value: numbers and
  strings as themselves, containers by their items, arrays and tensors by their
  bytes, functions and classes recursively, modules by the attributes it reads;
- closure cells, defaults, a bound ``self`` and ``functools.partial`` arguments
  by the same rules, and any other object by its pickled state (its class's code
  included), so a plain object whose repr is only its type name is still seen;
- installed packages and the standard library by name and version; dni_lab's
  own classes and functions by the text of the module that defines them.

What cannot be hashed (a generator, an open file, an object that refuses to
pickle) raises :class:`NotFingerprintable`, and its family runs uncached.
Global names a module lists in ``__fingerprint_ignore__`` are runtime state a
function's output never depends on (a memo, a call counter): they are skipped.
An object may also define ``__fingerprint__()`` returning a string.

The part that depends only on a code object is computed once per code object
(memoised weakly); values are read again on every call because they can change
in place. Fingerprints hold no memory addresses, so they survive restarts.
"""

from __future__ import annotations

import copyreg
import enum
import functools
import hashlib
import sys
import threading
import types
import warnings
from typing import Any

import numpy as np

from .fingerprint_code import (
    NotFingerprintable,
    code_info,
    digest,
    import_module,
    module_digest,
    origin,
)

FORMAT = f"fp2-py{sys.version_info[0]}.{sys.version_info[1]}"
MAX_OBJECTS = 200_000  # past this a hypothesis is refused rather than slowing every call

_LEAVES = frozenset({type(None), bool, int, float, complex, str, bytes, type(...), range, slice})
# Class attributes that never change what the class computes.
_CLASS_SKIP = frozenset(
    {"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
     "__orig_bases__", "__parameters__", "_abc_impl", "__firstlineno__",
     "__static_attributes__", "__abstractmethods__"}
)  # fmt: skip
_LOCKS = (type(threading.Lock()), type(threading.RLock()), threading.Condition, threading.Event)
_BUILTINS = (
    types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodWrapperType,
    types.MethodDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
    types.MemberDescriptorType,
)  # fmt: skip

_WARNED: set[str] = set()


class FingerprintWarning(UserWarning):
    """A hypothesis runs uncached because it cannot be fingerprinted."""


def fingerprint_of(*objs: Any) -> str:
    """One fingerprint of ``objs`` and everything they depend on.

    Raises
    ------
    NotFingerprintable
        When something reachable cannot be hashed; the message names it and the path to it.
    """
    walk = _Walk()
    try:
        return digest(FORMAT, *(walk.value(o) for o in objs))
    except RecursionError:
        raise walk.refuse("it nests too deeply to be hashed") from None
    except NotFingerprintable:
        raise
    except Exception as exc:  # an object whose pickling state is not what pickle promises
        raise walk.refuse(f"hashing it raised {type(exc).__name__}: {exc}") from None


def family_fingerprint(family: Any, *extra: Any) -> str | None:
    """Fingerprint of a hypothesis family: its class, parameters and ``extra`` (its function).

    Returns None, with one :class:`FingerprintWarning` per family, when something
    it depends on cannot be hashed: such a family runs uncached.
    """
    # A family held inside another (a subset, a control) must be hashable itself; it
    # is known by the __fingerprint__ hook (HypothesisFamily defines it), so this module
    # needs no import of hypotheses. Private attributes are derived state (a lazily
    # built helper family).
    nested = [
        v
        for k, v in vars(family).items()
        if k[:1] != "_" and getattr(type(v), "__fingerprint__", None) is not None
    ]
    try:
        try:
            params = family.get_params()
        except Exception as exc:  # a user's get_params may fail any way
            msg = f"its get_params() raised {type(exc).__name__}: {exc}"
            raise NotFingerprintable(msg) from exc
        return fingerprint_of(type(family), params, *extra, *nested)[:24]
    except NotFingerprintable as exc:
        name = getattr(family, "name", type(family).__qualname__)
        key = f"{type(family).__module__}.{type(family).__qualname__}:{name}"
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"hypothesis {name!r} runs uncached: {exc}. A cached value could go stale when "
                "that changes, so it is recomputed on every run. To cache it, give the object "
                "a __fingerprint__() method or make it picklable; list runtime-only globals "
                "(memos, counters) in the module's __fingerprint_ignore__.",
                FingerprintWarning,
                stacklevel=3,
            )
        return None


def callable_fingerprint(fn: Any) -> str:
    """Fingerprint of a callable: code, referenced globals, closure, defaults, bound args."""
    return fingerprint_of(fn)


def stable_repr(obj: Any) -> str:
    """Fingerprint of a value (kept for callers of the former repr-based API)."""
    return fingerprint_of(obj)


class _Walk:
    """One fingerprinting pass: memo of objects seen, cycle guard, size budget."""

    def __init__(self) -> None:
        self.seen: dict[int, str] = {}
        self.keep: list[Any] = []  # keeps walked objects alive, so ids stay unique
        self.active: set[int] = set()
        self.path: list[str] = []
        self.count = 0

    def refuse(self, what: str) -> NotFingerprintable:
        path = self.path if len(self.path) <= 10 else [*self.path[:8], "...", *self.path[-2:]]
        where = " -> ".join(path)
        return NotFingerprintable(what + (f" (reached through {where})" if where else ""))

    def value(self, obj: Any, names: frozenset[str] | None = None) -> str:
        t = type(obj)
        if t in _LEAVES:
            r = hex(obj) if t is int else repr(obj)  # repr refuses ints past 4300 digits
            return f"{t.__name__}:{r}" if len(r) <= 64 else f"{t.__name__}#{digest(r)}"
        self.count += 1
        if self.count > MAX_OBJECTS:
            raise self.refuse(f"it reaches more than {MAX_OBJECTS} objects")
        key = id(obj)
        if key in self.seen:
            return self.seen[key]
        if key in self.active:  # a cycle: the outer visit hashes the content
            return f"cycle:{t.__qualname__}"
        self.active.add(key)
        try:
            fp = self._compound(obj, names)
        finally:
            self.active.discard(key)
        if not isinstance(obj, types.ModuleType):  # a module's hash depends on `names`
            self.seen[key] = fp
            self.keep.append(obj)
        return fp

    def items(self, label: str, pairs: Any, names: frozenset[str] | None = None) -> list[str]:
        out = []
        for k, v in pairs:
            self.path.append(f"{label} {k!r}")
            out.append(f"{k}={self.value(v, names)}")
            self.path.pop()
        return out

    def _compound(self, obj: Any, names: frozenset[str] | None) -> str:
        t = type(obj)
        if t is tuple or t is list:
            return digest(t.__name__, *(self.value(x) for x in obj))
        if t is dict or t is types.MappingProxyType:
            return digest(
                "dict", *sorted(f"{self.value(k)}={self.value(v)}" for k, v in obj.items())
            )
        if t is set or t is frozenset:
            return digest(t.__name__, *sorted(self.value(x) for x in obj))
        if isinstance(obj, types.FunctionType):
            return self.function(obj)
        if isinstance(obj, type):
            return self.klass(obj)
        if isinstance(obj, types.ModuleType):
            return self.module(obj, names)
        if isinstance(obj, types.MethodType):
            return digest("method", self.value(obj.__self__), self.value(obj.__func__))
        if isinstance(obj, _BUILTINS):
            owner = getattr(obj, "__self__", None)
            name = f"{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))}"
            if owner is None or isinstance(owner, (types.ModuleType, type)):
                mod = getattr(obj, "__module__", None) or getattr(owner, "__name__", "")
                return digest("builtin", str(mod), name, origin(str(mod)))
            return digest("bound builtin", name, self.value(owner))
        if isinstance(obj, functools.partial):
            return digest("partial", *(self.value(x) for x in (obj.func, obj.args, obj.keywords)))
        if isinstance(obj, (staticmethod, classmethod)):
            return digest(t.__name__, self.value(obj.__func__))
        if isinstance(obj, property):
            return digest("property", *(self.value(f) for f in (obj.fget, obj.fset, obj.fdel)))
        if isinstance(obj, types.CodeType):
            return code_info(obj)[0]
        if isinstance(obj, np.ndarray):
            return self.array(obj)
        if isinstance(obj, (np.generic, np.dtype)):
            return digest("np", str(obj.dtype if isinstance(obj, np.generic) else obj), repr(obj))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor):
            return self.tensor(obj)
        if isinstance(obj, enum.Enum):
            return digest("enum", self.klass(t), obj.name)
        if isinstance(obj, _LOCKS):  # a lock's state never changes a computed value
            return "lock"
        custom = getattr(t, "__fingerprint__", None)
        if custom is not None:
            fp = custom(obj)
            if not isinstance(fp, str):
                name = getattr(obj, "name", None)
                what = f"the family {name!r} it depends on" if name else _describe(obj)
                raise self.refuse(f"{what} cannot be fingerprinted")
            return digest("custom", self.klass(t), fp)
        if callable(obj) and hasattr(obj, "__wrapped__") and origin(t.__module__) != "user":
            # functools.lru_cache and other library wrappers: what runs is the wrapped function
            return digest("wrapped", self.klass(t), self.value(obj.__wrapped__))
        return self.reduced(obj)

    def function(self, fn: types.FunctionType) -> str:
        module = fn.__module__ or ""
        where = origin(module)
        code_fp, code_names, imports = code_info(fn.__code__)
        parts = ["fn", module, fn.__qualname__]
        if where != "user":
            parts += [where, module_digest(module) if where == "own" else ""]
        else:
            parts.append(code_fp)
        self.path.append(f"function {fn.__qualname__!r}")
        try:
            parts.append(self.value(fn.__defaults__))
            parts.append(self.value(fn.__kwdefaults__))
            cells = map(_cell, fn.__closure__ or ())
            parts += self.items("closure", zip(fn.__code__.co_freevars, cells, strict=True))
            if where == "user":
                extra = {k: v for k, v in vars(fn).items() if k != "__wrapped__"}
                parts += self.items("attribute", sorted(extra.items()))
                g = fn.__globals__
                skip = g.get("__fingerprint_ignore__", ())
                used = sorted(n for n in code_names if n in g and n not in skip)
                parts += self.items("global", ((n, g[n]) for n in used), code_names)
                for target in imports:
                    mod = import_module(target, g.get("__package__"))
                    if mod is None:
                        raise self.refuse(f"it imports {target!r}, which cannot be found")
                    parts.append(self.value(mod, code_names))
        finally:
            self.path.pop()
        return digest(*parts)

    def klass(self, cls: type) -> str:
        module = cls.__module__ or ""
        where = origin(module)
        if where == "own":
            return digest("own class", module, cls.__qualname__, module_digest(module))
        if where != "user":
            return digest("class", module, cls.__qualname__, where)
        self.path.append(f"class {cls.__qualname__!r}")
        try:
            parts = ["class", module, cls.__qualname__, type(cls).__qualname__]
            parts += [self.value(b) for b in cls.__bases__]
            attrs = ((k, v) for k, v in vars(cls).items() if k not in _CLASS_SKIP)
            parts += self.items("attribute", attrs)
        finally:
            self.path.pop()
        return digest(*parts)

    def module(self, mod: types.ModuleType, names: frozenset[str] | None) -> str:
        where = origin(mod.__name__)
        if where == "own":
            return digest("own module", mod.__name__, module_digest(mod.__name__))
        if where != "user":
            return digest("module", mod.__name__, where)
        if names is None:  # held as a value, not read by code: all of its text
            return digest("module", mod.__name__, module_digest(mod.__name__))
        d = vars(mod)
        skip = d.get("__fingerprint_ignore__", ())
        used = sorted(n for n in names if n in d and n not in skip and not n.startswith("__"))
        self.path.append(f"module {mod.__name__!r}")
        try:
            attrs = self.items("attribute", ((n, d[n]) for n in used), names)
            return digest("module", mod.__name__, *attrs)
        finally:
            self.path.pop()

    def array(self, a: np.ndarray) -> str:
        if a.dtype.hasobject:
            return digest("object array", str(a.shape), self.value(a.tolist()))
        flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        return digest("ndarray", str(a.dtype), str(a.shape), hashlib.sha256(flat).hexdigest())

    def tensor(self, t: Any) -> str:
        torch = sys.modules["torch"]
        flat = t.detach().to("cpu").contiguous().reshape(-1)
        raw = flat.view(torch.uint8) if flat.numel() else flat.to(torch.uint8)
        data = hashlib.sha256(raw.numpy()).hexdigest()
        return digest("tensor", str(t.dtype), str(tuple(t.shape)), data, self.klass(type(t)))

    def reduced(self, obj: Any) -> str:
        try:
            reducer = copyreg.dispatch_table.get(type(obj))  # how pickle sees re.Pattern
            rv = reducer(obj) if reducer is not None else obj.__reduce_ex__(4)
        except Exception as exc:  # any refusal to pickle means "cannot hash"
            raise self.refuse(f"{_describe(obj)} cannot be hashed ({exc})") from None
        if isinstance(rv, str):  # a module-level singleton, pickled by name
            return digest("named", self.klass(type(obj)), rv)
        rv = list(rv) + [None] * (5 - len(rv))
        self.path.append(_describe(obj))
        try:
            head = [self.value(rv[0]), self.value(rv[1]), self.value(rv[2])]
            tail = [self.value(list(it)) for it in rv[3:5] if it is not None]
        finally:
            self.path.pop()
        return digest("object", *head, *tail)


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return "<empty cell>"


def _describe(obj: Any) -> str:
    r = repr(obj)
    return f"{type(obj).__qualname__} object {r[:60] + '...' if len(r) > 60 else r}"
