"""The curated hypothesis library: grammars, parse trees, FSMs, iterative parsers, generic.

Other parts of the library (code, language, images, workloads) add their
exports below; keep this a flat list of imports (re-exports, hence the noqa).
"""

# ruff: noqa: F401

from . import grammars, gridworld
from .code import SIGNALS as CODE_SIGNALS
from .code import CodeFamily, code_signals, lex
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
from .gridworld import GhostInNSteps, ghost, ghost_in_n_steps
from .images import (
    Box,
    BoxAround,
    CellEquals,
    MaskHypothesis,
    bounding_box,
    box_mask,
    cells_equal,
    dilate,
    n_pixels,
)
from .language import (
    UNIVERSAL,
    PhraseFamily,
    PosFamily,
    TaggerNotInstalled,
    available_taggers,
    find_spans,
    pool,
    spans_from_word_ids,
    spread,
    word_spans,
)
from .parse_tree import ParseTreeFamily
from .parsing import GrammarError, GrammarParser, char_tokens
from .regex_dfa import DFA, compile_regex
from .shift_reduce import ShiftReduceFamily
from .windows import SourceFamily, Window, sliding_windows
