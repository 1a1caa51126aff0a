"""Some signals of a hypothesis family: what a query's WHERE or the query builder picked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..hypothesis.hypotheses import HypothesisFamily


class SubsetFamily(HypothesisFamily):
    """The chosen signals of a family; evaluates the whole family once per record.

    Parameters
    ----------
    parent : HypothesisFamily
        The family the signals come from.
    signals : list of str
        The signals kept, in the order the score frame lists them.
    """

    def __init__(self, parent: HypothesisFamily, signals: list[str]) -> None:
        self.parent = parent
        self.subset = list(signals)
        self.name = parent.name
        self.kind = parent.kind
        self.categories = parent.categories
        self._hid = dict(zip(parent.signals(), parent.hids(), strict=True))
        self._col = {s: k for k, s in enumerate(parent.signals())}
        unknown = [s for s in self.subset if s not in self._col]
        if unknown:
            raise ValueError(
                f"family {parent.name!r} has no signals {unknown}; its signals: "
                f"{', '.join(parent.signals())}."
            )

    def signals(self) -> list[str]:
        return list(self.subset)

    def hids(self) -> list[str]:
        return [self._hid[s] for s in self.subset]

    def evaluate(self, record: Any) -> Any:
        out = self.parent.evaluate(record)
        if isinstance(out, Mapping) or hasattr(out, "keys"):
            return {s: out[s] for s in self.subset}
        return np.asarray(out)[:, [self._col[s] for s in self.subset]]

    def get_params(self) -> dict[str, Any]:
        # The parent's fingerprint keys the cache: same family, same signals, same values.
        return {"parent": self.parent.fingerprint(), "signals": self.subset}


def select_signals(family: HypothesisFamily, signals: list[str]) -> HypothesisFamily:
    """``family`` itself when ``signals`` are all of its signals in order, else a subset.

    Parameters
    ----------
    family : HypothesisFamily
    signals : list of str
        Signal names of ``family``.

    Returns
    -------
    HypothesisFamily
    """
    return family if list(signals) == family.signals() else SubsetFamily(family, signals)
