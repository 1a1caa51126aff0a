"""Compile a regular expression into a minimal DFA over a finite alphabet.

A regex hypothesis usually asks "is this character inside a match"; an FSM
hypothesis asks "in which state of the matcher is the reader now" (DeepBase
Appendix B), which needs the automaton itself. Python's own regex parser
(``re._parser``, ``sre_parse`` before 3.11) reads the pattern; this module
builds a Thompson NFA from its tree, determinises it over the alphabet plus
one "any other character" symbol, and minimises the result (Moore's
partition refinement), so equal behaviours share one state and the state
signals are not duplicated.

Supported: literals, ``.``, character classes (ranges, ``\\d \\w \\s`` and their
negations, negated classes), alternation, groups and all repeat forms.
Anchors, look-arounds and back-references have no finite automaton here and
raise :class:`ValueError`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

try:  # Python >= 3.11
    import re._parser as _sre
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

__all__ = ["DFA", "OTHER", "compile_regex"]

#: Stands for every symbol outside the alphabet in transition tables.
OTHER = "<other>"

Pred = Callable[[str | None], bool]  # None = a character outside the alphabet
_CATEGORIES: dict[str, Pred] = {
    "CATEGORY_DIGIT": lambda c: c is not None and c.isdigit(),
    "CATEGORY_WORD": lambda c: c is not None and (c.isalnum() or c == "_"),
    "CATEGORY_SPACE": lambda c: c is not None and c.isspace(),
    "CATEGORY_LINEBREAK": lambda c: c == "\n",
}


@dataclass(frozen=True)
class DFA:
    """A deterministic automaton with named states.

    Attributes
    ----------
    states : tuple of str
        State names; ``states[0]`` is the start state.
    table : dict
        ``table[state][symbol] -> state``; the key :data:`OTHER`, when
        present, covers every symbol not listed.
    accepting : frozenset of str
        States in which a match has just ended.
    """

    states: tuple[str, ...]
    table: dict[str, dict[str, str]]
    accepting: frozenset[str]


class _NFA:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.moves: list[list[tuple[Pred, int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1

    def closure(self, states) -> frozenset[int]:
        seen, todo = set(states), list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)


def _char_pred(op: str, av, ignore_case: bool) -> Pred:
    """Predicate of one LITERAL / NOT_LITERAL / ANY / IN item."""
    if op in ("LITERAL", "NOT_LITERAL"):
        ch = chr(av)
        chars = {ch, ch.lower(), ch.upper()} if ignore_case else {ch}
        hit: Pred = lambda c: c in chars  # noqa: E731
        return hit if op == "LITERAL" else (lambda c: not hit(c))
    if op == "ANY":
        return lambda c: c != "\n"
    if op == "IN":
        negate = False
        parts: list[Pred] = []
        for iop, iav in av:
            name = str(iop)
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                parts.append(_char_pred("LITERAL", iav, ignore_case))
            elif name == "RANGE":
                lo, hi = iav
                parts.append(_range_pred(lo, hi, ignore_case))
            elif name == "CATEGORY":
                parts.append(_category(str(iav)))
            else:
                raise ValueError(f"unsupported character-class item {name} in regex.")
        return lambda c: negate != any(p(c) for p in parts)
    raise ValueError(f"unsupported regex construct {op}.")


def _range_pred(lo: int, hi: int, ignore_case: bool) -> Pred:
    def pred(c: str | None) -> bool:
        if c is None:
            return False
        cands = {c, c.lower(), c.upper()} if ignore_case else {c}
        return any(len(x) == 1 and lo <= ord(x) <= hi for x in cands)

    return pred


def _category(name: str) -> Pred:
    base = name.replace("UNI_", "").replace("LOC_", "").replace("NOT_", "")
    if base not in _CATEGORIES:
        raise ValueError(f"unsupported character category {name} in regex.")
    pred = _CATEGORIES[base]
    return (lambda c: c is not None and not pred(c)) if "NOT_" in name else pred


def _build(nfa: _NFA, items, ignore_case: bool) -> tuple[int, int]:
    """Thompson construction of a sequence of sre items; returns (entry, exit)."""
    entry = cur = nfa.state()
    for op, av in items:
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            nxt = nfa.state()
            nfa.moves[cur].append((_char_pred(name, av, ignore_case), nxt))
        elif name == "SUBPATTERN":
            sub_in, nxt = _build(nfa, av[-1], ignore_case)
            nfa.eps[cur].append(sub_in)
        elif name == "BRANCH":
            nxt = nfa.state()
            for alt in av[1]:
                a_in, a_out = _build(nfa, alt, ignore_case)
                nfa.eps[cur].append(a_in)
                nfa.eps[a_out].append(nxt)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            nxt = _repeat(nfa, cur, av, ignore_case)
        elif name == "ATOMIC_GROUP":
            sub_in, nxt = _build(nfa, av, ignore_case)
            nfa.eps[cur].append(sub_in)
        else:
            raise ValueError(
                f"regex construct {name} (anchor, look-around or back-reference) has no "
                "finite automaton here; express it with characters and repeats."
            )
        cur = nxt
    return entry, cur


def _repeat(nfa: _NFA, cur: int, av, ignore_case: bool) -> int:
    lo, hi, sub = av
    unbounded = hi is _sre.MAXREPEAT or str(hi) == "MAXREPEAT"
    if (hi if not unbounded else lo) > 200:
        raise ValueError(f"regex repeat {{{lo},{hi}}} is too large for a state machine.")
    for _ in range(lo):
        s_in, s_out = _build(nfa, sub, ignore_case)
        nfa.eps[cur].append(s_in)
        cur = s_out
    if unbounded:  # a loop: cur -> sub -> cur, leave through end
        s_in, s_out = _build(nfa, sub, ignore_case)
        end = nfa.state()
        nfa.eps[cur] += [s_in, end]
        nfa.eps[s_out].append(cur)
        return end
    end = nfa.state()
    for _ in range(hi - lo):  # optional copies, each may be skipped to the end
        s_in, s_out = _build(nfa, sub, ignore_case)
        nfa.eps[cur] += [s_in, end]
        cur = s_out
    nfa.eps[cur].append(end)
    return end


def compile_regex(
    pattern: str, alphabet: str = string.printable, search: bool = True, flags: int = 0
) -> DFA:
    """The minimal DFA of ``pattern``.

    Parameters
    ----------
    pattern : str
        A regular expression (see the module docstring for what is supported).
    alphabet : str
        Symbols that get their own transitions; every other symbol behaves
        like one unlisted character (:data:`OTHER`).
    search : bool
        True: a match may start at any symbol (the automaton of ``.*(pattern)``),
        so accepting states mark the ends of matches anywhere. False: matches
        start at the first symbol and a ``dead`` state absorbs failures.
    flags : int
        ``re.IGNORECASE`` is honoured; other flags are ignored.
    """
    tree = _sre.parse(pattern, flags)
    ignore_case = bool((flags | tree.state.flags) & re.IGNORECASE)
    nfa = _NFA()
    entry, final = _build(nfa, list(tree), ignore_case)
    symbols: list[str | None] = [*dict.fromkeys(alphabet), None]
    start = nfa.closure([entry])
    # Subset construction; in search mode the start closure rejoins every step.
    sets, index, edges = [start], {start: 0}, []
    for cur in sets:
        row = []
        for sym in symbols:
            nxt = {t for s in cur for pred, t in nfa.moves[s] if pred(sym)}
            key = nfa.closure(nxt | (start if search else set()))
            if key not in index:
                index[key] = len(sets)
                sets.append(key)
            row.append(index[key])
        edges.append(row)
    accepting = [final in s for s in sets]
    blocks = _minimize(edges, accepting)
    return _named(edges, blocks, accepting, symbols, [not s for s in sets])


def _minimize(edges: list[list[int]], accepting: list[bool]) -> list[int]:
    """Moore's refinement: block id of every DFA state."""
    block = [int(a) for a in accepting]
    while True:
        sigs = {}
        new = [
            sigs.setdefault((block[s], *(block[t] for t in row)), len(sigs))
            for s, row in enumerate(edges)
        ]
        if len(sigs) == len(set(block)):
            return new
        block = new


def _named(edges, blocks, accepting, symbols, empty) -> DFA:
    # Name blocks q0, q1, ... in breadth-first order from the start; an empty
    # (failed) subset is the "dead" state.
    order, seen = [], {blocks[0]}
    queue = [0]
    rep = {}
    while queue:
        s = queue.pop(0)
        order.append(blocks[s])
        rep[blocks[s]] = s
        for t in edges[s]:
            if blocks[t] not in seen:
                seen.add(blocks[t])
                queue.append(t)
    dead = {blocks[s] for s, e in enumerate(empty) if e}
    names, k = {}, 0
    for b in order:
        if b in dead:
            names[b] = "dead"
        else:
            names[b] = f"q{k}"
            k += 1
    table = {}
    for b in order:
        row = edges[rep[b]]
        table[names[b]] = {
            (OTHER if sym is None else sym): names[blocks[t]]
            for sym, t in zip(symbols, row, strict=True)
        }
    acc = frozenset(names[blocks[s]] for s, a in enumerate(accepting) if a)
    states = [names[b] for b in order if b not in dead] + ["dead"] * bool(dead)
    return DFA(tuple(states), table, acc)
