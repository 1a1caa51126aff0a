"""Hypotheses read per patch of a vision transformer: per-patch values as they are,
per-pixel values pooled onto each patch's pixels.

A hypothesis over an image returns one value per patch (``rows * cols`` values, the
patches row-major), one per pixel (``H * W`` values row-major, or an ``H x W`` array)
or, declared ``level="record"``, one value per image. Undeclared, a run decides which
once, before its first block, from the data's first image (:meth:`PatchFamily.decide`):
the count the output's length equals. A length that is neither is asked before any
block, with both counts of the model and the argument that settles it; it is never
blamed on the hypothesis after reading started. Pixel values are pooled per kind with
the model's ``pool`` (:func:`pooled`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import HypothesisError
from ..hypothesis import levels
from ..hypothesis.hypotheses import HypothesisFamily, evaluate_family, wrapped_fingerprint
from .align import AlignedFamily, _Given, _length

_PATCH = ("symbol", "token")  # what one value per patch is declared as


@dataclass(frozen=True)
class PatchDecision(levels.LevelDecision):
    """A level decided (or asked) on a vision model: ``"symbol"`` (patch) or ``"pixel"``."""

    said: str = ""

    def how_text(self) -> str:
        return "proved from 1 record" if self.how == "proved" else self.how

    def evidence(self, most: int = 3) -> str:
        return self.said or super().evidence(most)

    @property
    def proof(self) -> int:
        return 1 if self.how == "proved" else 0

    def question(self) -> str:
        return (f"- {self.hypothesis!r} on model {self.model!r}: {self.said}. Return one "
                "value per patch or per pixel (pooled onto patches), or declare "
                "@dl.hypothesis(..., level='record') for one value per image.")  # fmt: skip


class PatchFamily(AlignedFamily):
    """``family`` read per patch of vision ``model`` (see the module docstring).

    It shares :class:`.align.AlignedFamily`'s wrapping (signals, parameters) and reads
    images instead of characters: :meth:`decide` and :meth:`evaluate` are its own.
    """

    def __init__(self, family: HypothesisFamily, model: Any) -> None:
        super().__init__(family, model)
        self.level = "symbol"  # what it returns; the family's own level is read in evaluate
        self.decision: PatchDecision | None = None

    def _counts(self, record: Any) -> tuple[int, tuple[int, int]]:
        return self.model.symbols(record), pixels(self.model, record)

    def _said(self, n: int | None, record: Any, index: Any) -> str:
        p, (h, w) = self._counts(record)
        rows, cols = self.model.grid(record)
        ph, pw = self.model.patch
        got = f"; it returned {n:,} values" if n is not None else ""
        return (f"record {index} is a {h} x {w} image, which model {self.model.name!r} reads "
                f"as {p:,} patches ({rows} x {cols} of {ph} x {pw} pixels) and "
                f"{h * w:,} pixels{got}")  # fmt: skip

    def _level_of(self, n: int, record: Any) -> str | None:
        p, (h, w) = self._counts(record)
        return "symbol" if n == p else "pixel" if n == h * w else None

    def decide(self, records: list[tuple[int, Any]]) -> levels.LevelDecision:
        """The family's level from the data's first image: per patch, per pixel or asked."""
        declared = getattr(self.family, "level", None)
        mname = self.model.name
        if declared in ("char", "word"):
            self.decision = None
            return PatchDecision(self.name, mname, None, "no fit", declared=declared,
                                 said=f"it is declared {declared}-level, and an image has "
                                      f"no {declared}s")  # fmt: skip
        if declared is not None or not records:
            self.decision = None
            return PatchDecision(self.name, mname, declared or "symbol", "declared"
                                 if declared else "symbols")  # fmt: skip
        index, record = records[0]
        n = _length(self._raw(record))
        level = self._level_of(n, record)
        if level is None:
            self.decision = None
            return PatchDecision(self.name, mname, None, "no fit", ("symbol", "pixel"),
                                 said=self._said(n, record, index))  # fmt: skip
        self.decision = PatchDecision(self.name, mname, level, "proved",
                                      said=self._said(n, record, index))  # fmt: skip
        return self.decision

    def _raw(self, record: Any) -> Any:
        """The family's output, an ``H x W`` array per signal flattened row-major."""
        try:
            raw = self.family.evaluate(record)
        except HypothesisError:
            raise
        except Exception as exc:
            raise HypothesisError(f"hypothesis {self.name!r} raised {type(exc).__name__} on "
                                  f"an image record: {exc}") from exc  # fmt: skip
        hw = pixels(self.model, record)

        def flat(v: Any) -> Any:
            return np.asarray(v).reshape(-1) if np.shape(v) == hw else v

        if isinstance(raw, Mapping):
            return {k: flat(v) for k, v in raw.items()}
        return flat(raw) if len(self.signals()) == 1 else raw

    def evaluate(self, record: Any) -> np.ndarray:
        p = self.model.symbols(record)
        declared = getattr(self.family, "level", None)
        if declared == "record":
            return evaluate_family(self.family, record, p, -1)
        raw = self._raw(record)
        n = _length(raw)
        if declared in _PATCH:
            level = "symbol"
        elif self.decision is not None:
            level = self.decision.level
        else:  # read outside a run: this record's counts alone
            level = self._level_of(n, record)
        h, w = pixels(self.model, record)
        want = p if level == "symbol" else h * w
        if level is None or n != want:
            why = ("declared" if declared else f"decided from {self.decision.said}"
                   if self.decision is not None else "")  # fmt: skip
            raise HypothesisError(
                f"hypothesis {self.name!r}: {self._said(n, record, 'at hand')}. Return "
                f"{p:,} values (one per patch) or {h * w:,} (one per pixel, pooled onto "
                f"patches){'; its level is ' + repr(level) + ' (' + why + ')' if why else ''}."
            )
        values = evaluate_family(_Given(self.family, raw), record, want, -1)
        if level == "symbol":
            return values
        kind_of = getattr(self.family, "pool_kind", self.family.kind_of)
        how = [self.model.pool[kind_of(s)] for s in self.signals()]
        return pooled(values, (h, w), self.model.patch, how)

    def fingerprint(self) -> str | None:
        decided = f"|level={self.decision.level}" if self.decision is not None else ""
        return wrapped_fingerprint(self.family, f"patches|{self.model.symbol_space}{decided}")

    def __repr__(self) -> str:
        return f"<PatchFamily {self.name!r} -> patches of {self.model.name!r}>"


def pixels(model: Any, record: Any) -> tuple[int, int]:
    """An image record's height and width as ``model`` reads it."""
    _c, h, w = model.image(record).shape
    return h, w


def pooled(values: np.ndarray, hw: tuple[int, int], patch: tuple[int, int],
           how: Sequence[str]) -> np.ndarray:  # fmt: skip
    """``(H * W, k)`` per-pixel values pooled onto patches: ``(rows * cols, k)``.

    Column ``j`` is pooled with ``how[j]`` over each patch's pixels (``"first"``: its
    top-left pixel, ``"last"``: its bottom-right one, ``"mean"``, ``"any"``: the
    maximum); NaN ("undefined here") is left out, a patch with no defined pixel is NaN.
    Pixels past the last whole patch are left out, as the patch convolution leaves them.
    """
    (h, w), (ph, pw) = hw, patch
    rows, cols = h // ph, w // pw
    k = values.shape[1]
    grid = values.reshape(h, w, k)[: rows * ph, : cols * pw]
    cells = grid.reshape(rows, ph, cols, pw, k).transpose(0, 2, 1, 3, 4)
    cells = cells.reshape(rows * cols, ph * pw, k)
    out = np.empty((rows * cols, k), np.float32)
    for j, h_ in enumerate(how):
        col = cells[:, :, j]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN patch is NaN
            if h_ == "mean":
                out[:, j] = np.nanmean(col, axis=1)
            elif h_ == "any":
                out[:, j] = np.nanmax(col, axis=1)
            else:
                out[:, j] = _first_defined(col if h_ == "first" else col[:, ::-1])
    return out


def _first_defined(col: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(col)
    at = np.argmax(ok, axis=1)
    out = col[np.arange(len(col)), at]
    out[~ok.any(axis=1)] = np.nan
    return out

