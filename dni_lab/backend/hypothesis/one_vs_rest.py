"""Categorical hypotheses read one category at a time: a binary indicator per code.

A categorical hypothesis holds integer codes (pitch class 0..11). Its codes are no
quantity: a correlation, a regression or a difference of means on them would depend
on how the categories happen to be numbered. Measures that read quantities
(``corr``, ``ridge``, ``diffmeans``: ``Measure.one_vs_rest``) score instead one
binary hypothesis per category, ``h == code``, named ``"{hid}={code}"`` in the score
frame (``pitch_class=1``); :class:`OneVsRest` adds those signals to the family, so
they come from the same pass and the same cache entry. The categorical hypothesis
keeps its own rows for the measures that read categories (``logreg`` fits one output
per category, ``mi`` bins the codes); those measures leave the indicator rows null,
with a reason, or score them as the binary hypotheses they are.

Only hypotheses that declare their categories (``categories=N``) can be split before
any record is read; the others keep a null row saying so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .hypotheses import HypothesisFamily, HypothesisInfo, wrapped_fingerprint


class OneVsRest(HypothesisFamily):
    """``family`` plus one 0/1 signal per category of each of its categorical signals.

    The indicator of code ``c`` is 1 where the signal's value rounds to ``c``, 0 where
    it is another code, and undefined (NaN) where the signal is.
    """

    def __init__(self, family: HypothesisFamily) -> None:
        self.family = family
        self.name = family.name
        self.categories = family.categories
        self.level = getattr(family, "level", None)
        base = family.signals()
        self._split = {
            s: int(n)
            for s in base
            if family.kind_of(s) == "categorical" and (n := (family.categories or {}).get(s))
        }
        self._parent = {f"{s}={c}": s for s, n in self._split.items() for c in range(n)}
        self.kind = {s: family.kind_of(s) for s in base} | dict.fromkeys(self._parent, "binary")

    def signals(self) -> list[str]:
        return [*self.family.signals(), *self._parent]

    def hids(self) -> list[str]:
        own = dict(zip(self.family.signals(), self.family.hids(), strict=True))
        return [*own.values(), *(f"{own[p]}={s.split('=')[-1]}" for s, p in self._parent.items())]

    def pool_kind(self, signal: str) -> str:
        """How a tokenizer's model pools ``signal``: an indicator as its categorical parent."""
        return self.family.kind_of(self._parent.get(signal, signal))

    def info(self) -> list[HypothesisInfo]:
        base = self.family.info()
        by_signal = dict(zip(self.family.signals(), base, strict=True))
        extra = [
            HypothesisInfo(hid, "binary", parent=by_signal[p].name, value=int(s.split("=")[-1]))
            for hid, (s, p) in zip(self.hids()[len(base) :], self._parent.items(), strict=True)
        ]
        return [*base, *extra]

    def evaluate(self, record: Any) -> dict[str, Any]:
        out = _by_signal(self.family.evaluate(record), self.family.signals())
        for s, p in self._parent.items():
            if p not in out:
                continue  # the missing signal is named when the output is validated
            v = np.asarray(out[p], dtype=np.float32)
            code = float(s.split("=")[-1])
            out[s] = np.where(np.isnan(v), np.nan, np.round(v) == code).astype(np.float32)
        return out

    def get_params(self) -> dict[str, Any]:
        return {"family": self.family.get_params(), "one_vs_rest": self._split}

    def fingerprint(self) -> str | None:
        return wrapped_fingerprint(self.family, f"one_vs_rest|{sorted(self._split.items())}")

    def __repr__(self) -> str:
        return f"<OneVsRest {self.name!r}: {len(self._parent)} category indicators>"


def _by_signal(out: Any, signals: Sequence[str]) -> dict[str, Any]:
    """A family's output as ``{signal: values}`` (a mapping, or an array with a column each)."""
    if isinstance(out, Mapping):
        return dict(out)
    if hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    arr = np.asarray(out, dtype=np.float32)
    if len(signals) == 1:
        return {signals[0]: arr}
    # (symbols, signals), or (signals,) from a family of level "record"
    return {s: arr[..., k] for k, s in enumerate(signals)}


def with_indicators(families: list[HypothesisFamily], measures: Sequence[Any]) -> list:
    """``families`` with category indicators where a measure of the run reads them.

    A family gains them (:class:`OneVsRest`) when one of ``measures`` has
    ``one_vs_rest`` and the family has a categorical signal with declared categories.
    """
    if not any(getattr(m, "one_vs_rest", False) for m in measures):
        return families
    out = []
    for f in families:
        wrapped = OneVsRest(f)
        out.append(wrapped if wrapped._split else f)
    return out
