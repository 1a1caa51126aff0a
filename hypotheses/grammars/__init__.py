"""Grammars of the seed workloads, as NLTK PCFGs, with seedable data generators.

Each module has ``grammar()`` (an ``nltk.PCFG``), ``generate(n, seed=0, ...)``
(deterministic under ``seed``) and ``family()`` (a ready
:class:`~hypotheses.parse_tree.ParseTreeFamily`):

* :mod:`~hypotheses.grammars.parens` — balanced parentheses with nesting digits;
* :mod:`~hypotheses.grammars.arith` — single-digit arithmetic expressions;
* :mod:`~hypotheses.grammars.sql` — SQL SELECT queries in tiers of 95–171 rules,
  plus ``windows()`` for the auto-completion records;
* :mod:`~hypotheses.grammars.boolean` — padded Boolean expressions and ``evaluate()``.
"""

from . import arith, boolean, parens, sql
from .pcfg import Rule, Sampler, build_pcfg, parse_rules

__all__ = ["Rule", "Sampler", "arith", "boolean", "build_pcfg", "parens", "parse_rules", "sql"]
