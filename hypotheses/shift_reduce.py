"""Hypotheses from an iterative program: a shift-reduce parser (DNI paper §4, DeepBase App. B).

The papers' loop::

    initialize stack
    until done
        if can_reduce using A -> B:  pop |B| items, push A     # reduce
        else:                        push next symbol          # shift

labels each input symbol with what happens between its shift and the next
shift (a multi-character token is shifted at its last character): here the
stack depth after the reductions (``stack_depth``), how many reductions ran
(``reductions``), and for each rule whether it was reduced (``reduce:RULE``).
Reductions that run before the first shift (empty productions at the start)
change the depth but label no symbol.

"can_reduce" is answered by the record's parse tree (shared with
:class:`~hypotheses.parse_tree.ParseTreeFamily`): a rule is reduced exactly
when its children are complete on top of the stack. That is the action
sequence of an LR parser for the chosen tree, without building LR tables,
and it works for any context-free grammar NLTK can parse, ambiguous or not.
Other characters (a token's first characters, spaces between SQL tokens)
keep the depth reached before them and have no reductions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from nltk.grammar import CFG

from dni_lab.backend.errors import HypothesisError

from .parse_tree import ParseTreeFamily, grammar_units, resolve_grammar
from .parsing import Parse, Tokenizer
from .windows import SourceFamily

__all__ = ["ShiftReduceFamily", "shift_reduce_trace"]


def shift_reduce_trace(parse: Parse) -> list[tuple[str, int]]:
    """The parser's actions for ``parse``: ``("shift", token)`` and ``("reduce", node)``.

    Runs the loop with an explicit stack; no recursion, so deep trees are fine.
    """
    actions: list[tuple[str, int]] = []
    root = len(parse.nodes) - 1
    # Post-order walk: each frame is (node, index of its next child).
    frames = [(root, 0)]
    while frames:
        node, k = frames.pop()
        children = parse.nodes[node].children
        if k == len(children):
            actions.append(("reduce", node))
            continue
        frames.append((node, k + 1))
        child = children[k]
        if child < 0:
            actions.append(("shift", ~child))
        else:
            frames.append((child, 0))
    return actions


class ShiftReduceFamily(SourceFamily):
    """Stack depth and per-rule reductions of a shift-reduce parse, per symbol.

    Parameters
    ----------
    grammar : nltk.CFG or str
        The grammar (see :class:`~hypotheses.parse_tree.ParseTreeFamily`).
    name : str
        Family name.
    tokenizer : callable, optional
        ``str -> [(terminal, start, end), ...]``; characters when None.
    by : {"rule", "label"}
        One ``reduce:`` signal per production (the papers' "rule reduced
        here") or per nonterminal.
    max_time : float or None
        Per-parse time limit handed to NLTK's chart parser.

    Examples
    --------
    >>> from hypotheses.grammars import arith
    >>> fam = ShiftReduceFamily(arith.grammar(), name="sr")
    >>> fam.evaluate("1+2")[:, fam.signals().index("stack_depth")].tolist()
    [1.0, 2.0, 1.0]
    """

    def __init__(
        self,
        grammar: CFG | str,
        name: str = "shift_reduce",
        tokenizer: Tokenizer | None = None,
        by: str = "rule",
        max_time: float | None = 5.0,
    ) -> None:
        self.grammar = grammar
        self.name = name
        self.tokenizer = tokenizer
        self.by = by
        self.max_time = max_time

    def _tree_family(self) -> ParseTreeFamily:
        # The parse-tree family owns parsing and its cache; reuse it.
        if "_trees" not in self.__dict__:
            self._trees = ParseTreeFamily(
                self.grammar,
                name=self.name,
                tokenizer=self.tokenizer,
                by=self.by,
                max_time=self.max_time,
            )
        return self._trees

    def units(self) -> list[str]:
        """Rules (or labels) that get a ``reduce:`` signal."""
        if "_units" not in self.__dict__:
            self._units = grammar_units(resolve_grammar(self.grammar), self.by)
        return list(self._units)

    def signals(self) -> list[str]:
        return ["stack_depth", "reductions", *(f"reduce:{u}" for u in self.units())]

    @property
    def kind(self) -> dict[str, str]:
        return {s: ("binary" if s.startswith("reduce:") else "continuous") for s in self.signals()}

    def get_params(self) -> dict[str, Any]:
        return {**self._tree_family().get_params(), "name": self.name}

    def evaluate_source(self, source: str) -> np.ndarray:
        if self.by not in ("rule", "label"):
            raise HypothesisError(f"by={self.by!r}: use 'rule' or 'label'.")
        parse = self._tree_family().parse(source)
        col = {u: i for i, u in enumerate(self.units())}
        n = len(source)
        out = np.zeros((n, 2 + len(col)), dtype=np.float32)
        stack: list[int] = []  # token (~i) and node ids, as the parser's stack
        current = -1  # the symbol being labelled: the last token shifted
        for action, item in shift_reduce_trace(parse):
            if action == "shift":
                # A character-level reader has shifted a token once it read its last character.
                current = parse.tokens[item][2] - 1
                stack.append(~item)
                out[current, 0] = len(stack)
                continue
            node = parse.nodes[item]
            del stack[len(stack) - len(node.children) :]
            stack.append(item)
            if current >= 0:
                out[current, 0] = len(stack)
                out[current, 1] += 1
                out[current, 2 + col[node.label if self.by == "label" else node.rule]] = 1.0
        self._spread(out, parse)
        return out

    @staticmethod
    def _spread(out: np.ndarray, parse: Parse) -> None:
        """Characters before a token's last, and gaps, carry the depth forward."""
        labelled = np.zeros(len(out), dtype=bool)
        labelled[[e - 1 for _, _, e in parse.tokens]] = True
        depth = 0.0
        for i in range(len(out)):
            if labelled[i]:
                depth = out[i, 0]
            else:
                out[i, 0] = depth
