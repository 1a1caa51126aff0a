"""A hypothesis's level decided once, from a sample of records, before a run reads any.

A hypothesis that declares no level (``level=None``) returns some number of values per
record; on a model whose symbols are not the records' own (a tokenizer's tokens) that
number says whether they stand for characters, words or tokens, but only on a record
where those counts differ. ``'9'`` has one character, one word and one token: its one
value is evidence of nothing. :func:`decide` therefore reads the hypothesis on the first
records of the data whose counts *separate* the levels still open, keeps the levels whose
count equals the output's length on every one of them, and returns a
:class:`LevelDecision`: proved (one level left), undecidable (no record separated them:
a question for ``level=``) or no fit (a record whose length fits none). A run asks every
question at once, before its first block (:func:`ask`); once decided, a record whose
counts coincide is read at the decided level and never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LevelError

#: Records whose output is read to decide (or confirm) a level, at most: the first ones of
#: the data whose counts separate the candidate levels.
SAMPLE = 8
#: Records of the data's start looked at, at most, to find those separating ones.
SCAN = 256
#: The levels a length can tell apart, in the order they are offered.
CANDIDATES = ("char", "word", "token")
_NOUN = {"char": "character", "word": "word", "token": "token"}


@dataclass(frozen=True)
class Seen:
    """One record of the sample: its position, a preview, the output's length (None where
    the record was not read: its counts coincide) and its count per candidate level."""

    index: int
    record: str
    length: int | None
    counts: Mapping[str, int]

    def __str__(self) -> str:
        counts = ", ".join(f"{c} {_NOUN[lv]}{'s' if c != 1 else ''}"
                           for lv, c in self.counts.items())  # fmt: skip
        got = "" if self.length is None else f"{self.length} values; "
        return f"record {self.index:,} {self.record}: {got}{counts}"


@dataclass(frozen=True)
class LevelDecision:
    """The level one hypothesis is read at by one model, and how it was decided.

    Attributes
    ----------
    hypothesis, model : str
        The hypothesis's name and the model (or models sharing its symbols) reading it.
    level : str or None
        The level, one of :data:`~.hypotheses.LEVELS`; None where it was not decided.
    how : str
        ``"declared"``, ``"proved"`` (from ``seen``), ``"symbols"`` (a model whose symbols
        are the records' own reads every level alike), ``"token ids"`` (records that are
        token ids have tokens only), ``"undecidable"``, ``"no fit"`` or ``"no characters"``
        (a character or word level declared over token ids: asked up front).
    options : tuple of str
        The levels still possible where it was not decided.
    seen : tuple of Seen
        The records read as evidence, and (length None) one whose counts coincided.
    scanned : int
        Records looked at for evidence.
    declared : str or None
        The level declared, where it cannot be read (``"no characters"``).
    """

    hypothesis: str
    model: str
    level: str | None
    how: str
    options: tuple[str, ...] = ()
    seen: tuple[Seen, ...] = ()
    scanned: int = 0
    declared: str | None = None

    @property
    def decided(self) -> bool:
        return self.level is not None

    @property
    def proof(self) -> int:
        """Records whose output's length proved (or confirmed) the level."""
        return sum(1 for s in self.seen if s.length is not None) if self.how == "proved" else 0

    def how_text(self) -> str:
        """How the level was decided, in words (the check frame's ``decided_by``)."""
        if self.how == "proved":
            n = self.proof
            return f"proved from {n} record{'s' if n != 1 else ''}"
        return self.how

    def evidence(self, most: int = 3) -> str:
        """The records behind the decision, at most ``most`` of them, in words."""
        if self.how == "declared":
            return f"level={self.level!r} on the hypothesis"
        if self.how in ("symbols", "token ids"):
            return "one value per symbol of the model, whatever the level"
        if self.how == "no characters":
            return "the records are token ids: they have no characters or words to read"
        read = [s for s in self.seen if s.length is not None][:most]
        parts = [str(s) for s in read]
        if self.how == "undecidable":
            same = next((s for s in self.seen if s.length is None), None)
            nouns = [f"{_NOUN[o]}s" for o in self.options]
            opts = ", ".join(nouns[:-1]) + " and " + nouns[-1] if len(nouns) > 1 else nouns[0]
            parts.append(f"none of the first {self.scanned:,} records has different counts of "
                         f"{opts}" + (f" (e.g. {same})" if same is not None else ""))  # fmt: skip
        return "; ".join(parts)

    def settle(self) -> str:
        """The argument that settles the question: ``level='char'`` or ``level='token'``..."""
        if self.options:
            return " or ".join(f"level={o!r}" for o in self.options)
        if self.seen and all(s.length == 0 for s in self.seen):  # one value, no sequence
            return "level='record' for one value per record"
        return "level='char', 'word' or 'token' with one value per such unit"

    def question(self) -> str:
        """The question this decision leaves, as one item of a :class:`LevelError`."""
        if self.how == "no characters":
            return (f"- {self.hypothesis!r} on model {self.model!r} is {self.declared}-level, "
                    f"but {self.evidence()}. Pass the texts as data "
                    "(tokenizer.batch_decode(ids)), or return one value per token of the "
                    "TokenRecord it gets (record.tokens) and declare it: "
                    f"{self.settle()}.")  # fmt: skip
        if self.how == "no fit":
            return (f"- {self.hypothesis!r} on model {self.model!r}: its lengths fit no one "
                    f"level. Seen: {self.evidence()}. Return one value per character, word or "
                    f"token of every record and declare which: {self.settle()}.")  # fmt: skip
        return (f"- {self.hypothesis!r} on model {self.model!r}: one value per "
                f"{' or per '.join(_NOUN[o] for o in self.options)}? Seen: {self.evidence()}. "
                f"Declare it: @dl.hypothesis(..., {self.settle()}), or level= on the "
                "hypothesis family.")  # fmt: skip

    def row(self) -> dict[str, Any]:
        """The check frame's row (:func:`dni_lab.check`) and the provenance's entry."""
        return {"hypothesis": self.hypothesis, "model": self.model, "level": self.level,
                "decided_by": self.how_text(), "records": self.proof,
                "options": list(self.options), "evidence": self.evidence()}  # fmt: skip


def decide(
    hypothesis: str,
    model: str,
    records: Iterable[tuple[int, Any]],
    counts_of: Callable[[Any], Mapping[str, int] | None],
    length_of: Callable[[int, Any], int],
    sample: int = SAMPLE,
    scan: int = SCAN,
) -> LevelDecision:
    """Decide an undeclared hypothesis's level from its output over the data's first records.

    Parameters
    ----------
    hypothesis, model : str
        Names for the decision and its messages.
    records : iterable of (int, record)
        The data's first records with their positions; at most ``scan`` are looked at.
    counts_of : callable
        A record's count per candidate level (``{"char": 3, "word": 1, "token": 2}``), or
        None for a record with no symbols (skipped).
    length_of : callable
        ``(position, record) -> `` the number of values the hypothesis returns for it.
    sample : int
        Records read at most: only those whose counts separate the levels still open
        (or, once one is left, separate it from another), so a record whose counts
        coincide is never read as evidence.

    Returns
    -------
    LevelDecision
        ``"proved"``, ``"undecidable"`` or ``"no fit"``.
    """
    open_ = list(CANDIDATES)
    seen: list[Seen] = []
    same: Seen | None = None  # a record that separated nothing, shown in a question
    scanned = read = 0
    repeats: set[Any] = set()  # a record read again says nothing new
    for index, record in records:
        if scanned >= scan or read >= sample:
            break
        counts = counts_of(record)
        if counts is None:
            continue
        scanned += 1
        if isinstance(record, str):
            if record in repeats:
                continue
            repeats.add(record)
        if not _separates(counts, open_):  # equal counts are evidence of nothing
            same = same or Seen(index, _preview(record), None, dict(counts))
            continue
        n = length_of(index, record)
        read += 1
        seen.append(Seen(index, _preview(record), n, dict(counts)))
        fits = [lv for lv in open_ if counts[lv] == n]
        if not fits:
            return LevelDecision(hypothesis, model, None, "no fit", (), tuple(seen), scanned)
        open_ = fits
    if len(open_) == 1 and seen:
        return LevelDecision(hypothesis, model, open_[0], "proved", (), tuple(seen), scanned)
    extra = (same,) if same is not None else ()
    return LevelDecision(hypothesis, model, None, "undecidable", tuple(open_),
                         (*seen, *extra), scanned)  # fmt: skip


def ask(decisions: Iterable[LevelDecision]) -> None:
    """Raise one :class:`~dni_lab.backend.errors.LevelError` naming every undecided level."""
    questions = tuple(d for d in decisions if not d.decided)
    if not questions:
        return
    n = len(questions)
    head = (f"{n} hypothes{'es' if n != 1 else 'is'} need{'s' if n == 1 else ''} level= "
            "before any record is read (what one value stands for: the data's first records "
            "cannot tell):")  # fmt: skip
    err = LevelError("\n".join([head, *(q.question() for q in questions)]))
    err.questions = questions
    raise err


def _separates(counts: Mapping[str, int], open_: list[str]) -> bool:
    """Whether a record with ``counts`` is evidence: it tells two open levels apart or,
    once one is left, tells it from another candidate (a length that fits it confirms)."""
    if len(open_) > 1:
        return len({counts[lv] for lv in open_}) > 1
    return any(c != counts[open_[0]] for c in counts.values())


def _preview(record: Any) -> str:
    text = repr(record)
    return text if len(text) <= 42 else text[:39] + "..."
