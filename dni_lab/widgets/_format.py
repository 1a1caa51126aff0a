"""How the panels write values and counts: one rule for the live table and the snapshots.

The live table draws the cell texts Python sends (``js/table.js`` formats no cell), and a
snapshot writes its cells with the same :func:`cell_text`, so a saved notebook reads
"3,621" where the live table did.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

#: Decimals of a float cell (the full values stay in the kernel).
DECIMALS = 3


def cell_text(v: Any) -> str:
    """A cell as a person reads it: ``—`` for null, NaN or infinity, ``✓``/``·`` for a
    boolean, thousands separated integers (``3,621``), floats with :data:`DECIMALS`
    decimals (``-0.412``), anything else as its text."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "✓" if v else "·"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.{DECIMALS}f}" if math.isfinite(v) else "—"
    return str(v)


def column_texts(values: pl.Series) -> list[str]:
    """The cell texts of a column (see :func:`cell_text`)."""
    return [cell_text(v) for v in values.to_list()]


def counted(n: int, word: str, words: str | None = None) -> str:
    """``n`` and the word in its number: ``"1 unit"``, ``"3,621 rows"`` (``words``: the
    plural where it is not ``word + "s"``)."""
    return f"{n:,} {word if n == 1 else words or word + 's'}"
