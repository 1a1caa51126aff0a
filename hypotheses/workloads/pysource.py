"""Char-LSTM on Python source from the standard library (after Karpathy et al., 2015).

The corpus is a fixed, sorted list of pure-Python stdlib modules read from the
running interpreter's library directory, so it is offline and needs no
download. Files missing from this Python version are skipped (their names go
into ``meta["missing"]``); the corpus's hash is part of the store key, so
another Python version trains (and caches) its own model rather than loading
one trained on different text. Records are chunks of 100 characters; the last
tenth of every file is held out. The code hypotheses of :mod:`hypotheses.code`
(inside comment / string, bracket depth, indentation, keywords) apply.
"""

from __future__ import annotations

import inspect
import os
import sysconfig
from pathlib import Path

from .recipe import Recipe, Records

NAME = "pysource-lstm"
SEQ = 100

#: Modules read, in this order, until the corpus reaches its size. Plain
#: algorithmic code that has been in the stdlib for many versions.
MODULES = (
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "cmd", "code", "codeop",
    "colorsys", "contextlib", "copy", "csv", "dataclasses", "filecmp", "fileinput",
    "fnmatch", "fractions", "functools", "genericpath", "getopt", "glob", "graphlib",
    "gzip", "heapq", "hmac", "keyword", "linecache", "netrc", "numbers", "operator",
    "posixpath", "pprint", "queue", "random", "reprlib", "sched", "secrets", "selectors",
    "shlex", "shutil", "statistics", "string", "tempfile", "textwrap", "threading",
    "timeit", "tokenize", "traceback", "types", "uuid", "weakref",
)  # fmt: skip


def stdlib_dir() -> Path:
    """The directory of the running interpreter's pure-Python standard library."""
    path = sysconfig.get_paths().get("stdlib")
    if path and (Path(path) / "os.py").exists():
        return Path(path)
    return Path(inspect.getfile(os)).parent  # e.g. relocated or embedded interpreters


def corpus(max_chars: int) -> tuple[str, str, list[str], list[str]]:
    """Train text, held-out text, files used and modules missing.

    Files are read in the (sorted) order of :data:`MODULES` until ``max_chars``
    characters are collected; the last 10% of each file is held out.

    Raises
    ------
    FileNotFoundError
        If none of the modules exists (no readable standard library).
    """
    root = stdlib_dir()
    train, test, used, missing, size = [], [], [], [], 0
    for name in sorted(MODULES):
        path = root / f"{name}.py"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            missing.append(name)
            continue
        text = text[: max_chars - size]
        cut = int(len(text) * 0.9)
        train.append(text[:cut])
        test.append(text[cut:])
        used.append(name)
        size += len(text)
        if size >= max_chars:
            break
    if not used:
        raise FileNotFoundError(f"no stdlib source found in {root}; looked for {MODULES[:3]}...")
    return "\n".join(train), "\n".join(test), used, missing


def chunks(text: str, width: int = SEQ) -> list[str]:
    """Consecutive non-overlapping chunks of ``width`` characters (the tail is dropped)."""
    return [text[i : i + width] for i in range(0, len(text) - width + 1, width)]


def records(quick: bool = False, width: int = SEQ) -> list[str]:
    """Held-out chunks of the corpus the model of the same ``quick`` setting was trained on."""
    return chunks(corpus(_max_chars(quick))[1], width)


def _max_chars(quick: bool) -> int:
    return 80_000 if quick else 500_000


def _records(quick: bool, _seed: int) -> Records:
    train_text, test_text, used, missing = corpus(_max_chars(quick))
    notes = {"files": used, "missing": missing, "chars": len(train_text)}
    return Records(chunks(train_text), chunks(test_text), notes)


#: Quick: an 80k-character corpus and 5 epochs, full: 500k and 10; the seed does not
#: change the corpus. ``meta`` adds the ``files`` read, those ``missing`` and ``chars``.
RECIPE = Recipe(
    NAME, _records, hidden=128, embed=32, epochs=(5, 10), batch_size=32, settings={"seq": SEQ}
)
load = RECIPE.load
