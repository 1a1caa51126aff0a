"""The curated hypothesis library: grammars, parse trees, FSMs, iterative parsers, generic.

Other parts of the library (code, language, images, workloads) add their
exports below; keep this a flat list of imports (re-exports, hence the noqa).
"""

# ruff: noqa: F401

from . import grammars
from .fsm import (
    OTHER,
    FSMFamily,
    boolean_eval_fsm,
    boolean_fsms,
    boolean_operator_fsm,
    boolean_role_fsm,
)
from .generic import (
    CharClassFamily,
    InsideFamily,
    KeywordFamily,
    NgramFamily,
    PositionFamily,
    RegexFamily,
    frequent_ngrams,
    keyword_family,
    regex,
)
from .parse_tree import ParseTreeFamily
from .parsing import GrammarError, GrammarParser, char_tokens
from .regex_dfa import DFA, compile_regex
from .shift_reduce import ShiftReduceFamily
from .windows import SourceFamily, Window, sliding_windows
