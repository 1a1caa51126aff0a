"""What a fingerprint knows about code: bytecode hashes, where a module comes from, file hashes.

Helpers of :mod:`~dni_lab.backend.hypothesis.fingerprint`. A code object's hash leaves out
its file name and line numbers (moving a function does not change what it
computes) and is memoised weakly per code object: it cannot change. A module is
*own* (dni_lab: hashed by its file's text, read once per process), *library*
(the standard library and installed packages: hashed by name and version) or
*user* (everything else: hashed by content, recursively).
"""

from __future__ import annotations

import dis
import functools
import hashlib
import importlib
import importlib.util
import site
import sys
import sysconfig
import types
import weakref
from pathlib import Path
from typing import Any

_CODE_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ORIGIN_MEMO: dict[str, str] = {}
_FILE_MEMO: dict[str, str] = {}


class NotFingerprintable(Exception):
    """Something a hypothesis depends on whose content cannot be hashed."""


def digest(*parts: str) -> str:
    """A short SHA-256 of ``parts``, kept apart by a separator no text contains."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def code_info(code: types.CodeType) -> tuple[str, frozenset[str], tuple[str, ...]]:
    """Hash of a code object (bytecode, constants, names; not file or line numbers),
    the names it and its nested code read, and the modules they import."""
    memo = _CODE_MEMO.get(code)
    if memo is not None:
        return memo
    names = set(code.co_names)
    imports: list[str] = []
    level = 0
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
            level = ins.argval
        elif ins.opname == "IMPORT_NAME":
            imports.append("." * level + ins.argval)
    parts = [
        code.co_name, code.co_code.hex(), repr(code.co_names), repr(code.co_varnames),
        repr(code.co_freevars), repr(code.co_cellvars),
        repr(getattr(code, "co_exceptiontable", b"")),
        f"{code.co_argcount},{code.co_posonlyargcount},{code.co_kwonlyargcount},{code.co_flags}",
    ]  # fmt: skip
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            sub = code_info(c)
            parts.append(sub[0])
            names |= sub[1]
            imports += sub[2]
        else:
            parts.append(_const(c))
    memo = (digest(*parts), frozenset(names), tuple(dict.fromkeys(imports)))
    _CODE_MEMO[code] = memo
    return memo


def _const(c: Any) -> str:
    if isinstance(c, (tuple, frozenset)):
        items = [_const(x) for x in c]
        items = sorted(items) if isinstance(c, frozenset) else items
        return f"{type(c).__name__}({','.join(items)})"
    return f"{type(c).__name__}:{c!r}"


def import_module(target: str, package: str | None) -> types.ModuleType | None:
    try:
        name = importlib.util.resolve_name(target, package) if target.startswith(".") else target
        return sys.modules.get(name) or importlib.import_module(name)
    except (ImportError, ValueError):
        return None


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site.getsitepackages()) | {site.getusersitepackages()}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(str(Path(p).resolve()) + "/" for p in paths if p)


def origin(module: str) -> str:
    """``"own"`` (dni_lab), ``"user"`` (hashed by content) or ``"lib:<version>"``."""
    top = module.partition(".")[0]
    if top in _ORIGIN_MEMO:
        return _ORIGIN_MEMO[top]
    mod = sys.modules.get(top)
    if top == "dni_lab":
        origin = "own"
    elif top in sys.builtin_module_names or top == "builtins":
        origin = f"lib:python{sys.version_info[:3]}"
    elif mod is None or top == "__main__":
        origin = "user"
    else:
        files = [getattr(mod, "__file__", None) or "", *getattr(mod, "__path__", [])]
        where = [str(Path(f).resolve()) for f in files if f]
        lib = where and all(w.startswith(_library_roots()) for w in where)
        version = getattr(mod, "__version__", "")
        origin = f"lib:{top}{version}:python{sys.version_info[:2]}" if lib else "user"
    if origin != "user" or mod is not None:  # an unimported name may be imported later
        _ORIGIN_MEMO[top] = origin
    return origin


def module_digest(module: str) -> str:
    """Hash of a module's source file, read once per process (when first fingerprinted)."""
    if module not in _FILE_MEMO:
        mod = sys.modules.get(module)
        path = getattr(mod, "__file__", None)
        try:
            _FILE_MEMO[module] = hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else ""
        except OSError as exc:
            raise NotFingerprintable(f"module {module!r} has no readable source ({exc})") from None
        if not _FILE_MEMO[module]:
            raise NotFingerprintable(f"module {module!r} has no source file")
    return _FILE_MEMO[module]
