"""Errors a user can cause, each naming the offending object and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DNIError(ValueError):
    """Base class of every user-facing dni_lab error.

    An error a run meets after some blocks were read, before the block at fault touched
    any measure state (a record of the wrong kind, a hypothesis failing on a record),
    carries the frame of the records read before it as ``partial_frame`` (marked partial
    in ``dl.provenance``); None otherwise.
    """

    partial_frame: object | None = None


class HypothesisError(DNIError):
    """A hypothesis returned something that cannot be aligned to the record's symbols."""


class LevelError(HypothesisError):
    """Hypotheses whose level (per character, word or token) the data could not decide.

    Raised before a run reads its first block, once for all of them: ``questions`` holds
    one :class:`~dni_lab.backend.hypothesis.levels.LevelDecision` per hypothesis, each
    with its options, the evidence and the ``level=`` argument that settles it.
    """

    questions: tuple = ()


class LayerError(DNIError, KeyError):
    """A unit specification names a layer or unit the model does not have."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class MeasureError(DNIError):
    """A measure name is unknown or a measure cannot score the given hypotheses."""


class BehaviorError(DNIError):
    """Unit behaviors are unusable (NaN/inf activations, wrong shapes)."""


class RecordError(DNIError):
    """A record of another kind than the records before it (a stream gone wrong).

    Raised by a run when it meets the record; the message names its position in the data
    and ``partial_frame`` holds the frame of the records read before it.
    """


class TokenIdsError(DNIError):
    """Token ids that cannot be records: a tensor of another shape or dtype, a mask that
    does not fit its ids, ids outside the model's vocabulary. Raised before any record
    of the data is read."""


class CancelledError(DNIError):
    """Raised by ``Run.result()`` when a run was cancelled and ``partial=False``."""


def did_you_mean(name: str, choices: Iterable[str], n: int = 3) -> str:
    """Return ``" Did you mean 'x'?"`` for the closest choices, or ``""``."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=n, cutoff=0.5)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"
