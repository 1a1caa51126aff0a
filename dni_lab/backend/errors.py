"""Errors a user can cause, each naming the offending object and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DNIError(ValueError):
    """Base class of every user-facing dni_lab error."""


class HypothesisError(DNIError):
    """A hypothesis returned something that cannot be aligned to the record's symbols."""


class LayerError(DNIError, KeyError):
    """A unit specification names a layer or unit the model does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MeasureError(DNIError):
    """A measure name is unknown or a measure cannot score the given hypotheses."""


class BehaviorError(DNIError):
    """Unit behaviors are unusable (NaN/inf activations, wrong shapes)."""


class CancelledError(DNIError):
    """Raised by ``Run.result()`` when a run was cancelled and ``partial=False``."""


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choices, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.5)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"
