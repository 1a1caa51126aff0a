"""Finite-state-machine hypotheses (DeepBase Appendix B, Luigi).

An FSM reads a record symbol by symbol; after each symbol it is in one
state. :class:`FSMFamily` turns the state sequence into one one-hot signal
per state (``state:NAME``), and optionally a ``match`` signal (in an
accepting state), a ``value`` signal (a number per state) and a categorical
``state`` signal. The machine is a transition table or a regular expression
(compiled by :mod:`hypotheses.regex_dfa`).

The Luigi paper checks whether an LSTM that evaluates padded Boolean
expressions (:mod:`hypotheses.grammars.boolean`) follows hand-written FSMs;
:func:`boolean_eval_fsm`, :func:`boolean_operator_fsm` and
:func:`boolean_role_fsm` are those machines, ready to use.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dni_lab.backend.errors import HypothesisError

from .regex_dfa import DFA, OTHER, compile_regex
from .windows import SourceFamily

__all__ = [
    "OTHER",
    "FSMFamily",
    "boolean_eval_fsm",
    "boolean_fsms",
    "boolean_operator_fsm",
    "boolean_role_fsm",
]


class FSMFamily(SourceFamily):
    """One-hot state signals of a finite-state machine run over each record.

    Give either ``transitions`` or ``regex``.

    Parameters
    ----------
    transitions : mapping, optional
        ``{state: {symbol: next_state}}``. The symbol key :data:`OTHER`
        covers every symbol a state does not list. States that only appear
        as targets are states too.
    start : str, optional
        Start state (the first key of ``transitions`` by default).
    regex : str, optional
        Build the minimal DFA of this pattern instead; its states are named
        ``q0, q1, ...`` (``q0`` the start) and ``match`` marks the ends of matches.
    alphabet : str
        Symbols the regex DFA distinguishes (others behave alike).
    search : bool
        Regex matches may start anywhere (True) or only at the record's start.
    flags : int
        Regex flags (``re.IGNORECASE``).
    accepting : sequence of str, optional
        Accepting states of a transition table; adds the ``match`` signal.
    outputs : mapping, optional
        ``{state: number}``; adds a continuous ``value`` signal (0 for unlisted states).
    categorical : bool
        Also emit ``state``, the state's index as a categorical signal.
    on_missing : str
        What a symbol without a transition does: ``"error"``, ``"stay"``,
        ``"start"``, or the name of a state to go to.
    name : str
        Family name.

    Examples
    --------
    >>> fam = FSMFamily({"out": {"'": "in", OTHER: "out"}, "in": {"'": "out", OTHER: "in"}})
    >>> fam.evaluate("a'b'c")[:, 1].tolist()
    [0.0, 1.0, 1.0, 0.0, 0.0]
    """

    def __init__(
        self,
        transitions: Mapping[str, Mapping[Any, str]] | None = None,
        start: str | None = None,
        *,
        regex: str | None = None,
        alphabet: str = string.printable,
        search: bool = True,
        flags: int = 0,
        accepting: Sequence[str] | None = None,
        outputs: Mapping[str, float] | None = None,
        categorical: bool = False,
        on_missing: str = "error",
        name: str = "fsm",
    ) -> None:
        self.transitions = transitions
        self.start = start
        self.regex = regex
        self.alphabet = alphabet
        self.search = search
        self.flags = flags
        self.accepting = list(accepting) if accepting is not None else None
        self.outputs = dict(outputs) if outputs is not None else None
        self.categorical = categorical
        self.on_missing = on_missing
        self.name = name

    # -- the machine -----------------------------------------------------------------
    def machine(self) -> DFA:
        """The machine as a :class:`~hypotheses.regex_dfa.DFA` (start state first)."""
        if "_dfa" not in self.__dict__:
            self._dfa = self._build()
        return self._dfa

    def _build(self) -> DFA:
        if (self.transitions is None) == (self.regex is None):
            raise HypothesisError(f"FSM {self.name!r}: give exactly one of transitions= or regex=.")
        if self.regex is not None:
            try:
                return compile_regex(self.regex, self.alphabet, self.search, self.flags)
            except (ValueError, re.error) as exc:
                raise HypothesisError(f"FSM {self.name!r}: regex {self.regex!r}: {exc}") from exc
        table = {str(s): {k: str(t) for k, t in row.items()} for s, row in self.transitions.items()}
        if not table:
            raise HypothesisError(f"FSM {self.name!r} has no transitions.")
        start = self.start if self.start is not None else next(iter(table))
        states = list(
            dict.fromkeys([start, *table, *(t for row in table.values() for t in row.values())])
        )
        for t in states:
            table.setdefault(t, {})
        acc = frozenset(self.accepting or ())
        for label, given in (
            ("start", [start]),
            ("accepting", acc),
            ("outputs", self.outputs or {}),
        ):
            unknown = [s for s in given if s not in table]
            if unknown:
                raise HypothesisError(
                    f"FSM {self.name!r}: {label} states {unknown} are not states {states}."
                )
        return DFA(tuple(states), table, acc)

    # -- protocol ----------------------------------------------------------------------
    def signals(self) -> list[str]:
        dfa = self.machine()
        sigs = [f"state:{s}" for s in dfa.states]
        if self.regex is not None or self.accepting is not None:
            sigs.append("match")
        if self.outputs is not None:
            sigs.append("value")
        if self.categorical:
            sigs.append("state")
        return sigs

    @property
    def kind(self) -> dict[str, str]:
        return {
            s: ("binary" if s.startswith("state:") or s == "match" else "continuous")
            for s in self.signals()
        } | ({"state": "categorical"} if self.categorical else {})

    @property
    def categories(self) -> dict[str, int] | None:
        return {"state": len(self.machine().states)} if self.categorical else None

    def run(self, record: Sequence[Any]) -> list[str]:
        """The state after reading each symbol of ``record``."""
        dfa = self.machine()
        state = dfa.states[0]
        out = []
        for i, sym in enumerate(record):
            row = dfa.table[state]
            nxt = row.get(sym, row.get(OTHER))
            if nxt is None:
                nxt = self._missing(state, sym, i, record)
            state = nxt
            out.append(state)
        return out

    def _missing(self, state: str, sym: Any, i: int, record: Sequence[Any]) -> str:
        dfa = self.machine()
        if self.on_missing == "stay":
            return state
        if self.on_missing == "start":
            return dfa.states[0]
        if self.on_missing in dfa.table:
            return self.on_missing
        if self.on_missing != "error":
            raise HypothesisError(
                f"FSM {self.name!r}: on_missing={self.on_missing!r} is not 'error', 'stay', "
                f"'start' or a state."
            )
        shown = record if len(record) <= 60 else record[:57]
        raise HypothesisError(
            f"FSM {self.name!r} has no transition from state {state!r} on symbol {sym!r} "
            f"(position {i} of {shown!r}); add it, an OTHER entry, or pass on_missing=."
        )

    def evaluate_source(self, source: Sequence[Any]) -> np.ndarray:
        dfa = self.machine()
        index = {s: i for i, s in enumerate(dfa.states)}
        codes = np.array([index[s] for s in self.run(source)], dtype=np.int64)
        n, k = len(codes), len(dfa.states)
        cols = [np.eye(k, dtype=np.float32)[codes].reshape(n, k)]
        if self.regex is not None or self.accepting is not None:
            acc = np.array([s in dfa.accepting for s in dfa.states], dtype=np.float32)
            cols.append(acc[codes][:, None])
        if self.outputs is not None:
            val = np.array([float(self.outputs.get(s, 0.0)) for s in dfa.states], dtype=np.float32)
            cols.append(val[codes][:, None])
        if self.categorical:
            cols.append(codes.astype(np.float32)[:, None])
        return np.concatenate(cols, axis=1)


# -- Luigi's Boolean-expression machines -----------------------------------------------
def boolean_eval_fsm(name: str = "bool_eval") -> FSMFamily:
    """Left-to-right evaluation of a padded Boolean expression.

    States: ``pad`` (reading ``X``), ``T``/``F`` (the value so far, after an
    operand) and ``T&``, ``T|``, ``F&``, ``F|`` (value so far and pending
    operator). ``value`` is the current value of the evaluation (1 for true).
    """
    table = {
        "pad": {"X": "pad", "T": "T", "F": "F"},
        "T": {"&": "T&", "|": "T|"},
        "F": {"&": "F&", "|": "F|"},
        "T&": {"T": "T", "F": "F"},
        "T|": {"T": "T", "F": "T"},
        "F&": {"T": "F", "F": "F"},
        "F|": {"T": "T", "F": "F"},
    }
    return FSMFamily(table, outputs={"T": 1, "T&": 1, "T|": 1}, name=name)


def boolean_operator_fsm(name: str = "bool_operator") -> FSMFamily:
    """The last operator read: ``none``, ``and`` or ``or``."""
    table = {s: {"&": "and", "|": "or", OTHER: s} for s in ("none", "and", "or")}
    return FSMFamily(table, name=name)


def boolean_role_fsm(name: str = "bool_role") -> FSMFamily:
    """The syntactic role of the symbol just read: ``pad``, ``operand`` or ``operator``."""
    table = {
        "pad": {"X": "pad", "T": "operand", "F": "operand"},
        "operand": {"&": "operator", "|": "operator"},
        "operator": {"T": "operand", "F": "operand"},
    }
    return FSMFamily(table, name=name)


def boolean_fsms() -> list[FSMFamily]:
    """All the Boolean-expression machines above."""
    return [boolean_eval_fsm(), boolean_operator_fsm(), boolean_role_fsm()]
