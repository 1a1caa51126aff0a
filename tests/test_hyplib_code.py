"""Source-code hypotheses: hand-worked signals, windows and incomplete code."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import code as C
from hypotheses.code import SIGNALS, CodeFamily, code_signals, lex
from hypotheses.windows import sliding_windows

LINES = ("def f(a, b=[1]):\n", '    """doc"""\n', "    return (a + b)  # sum\n")
SRC = "".join(LINES)
# Worked by hand: one digit per character, line by line (each newline is a line's last digit).
# fmt: off
EXPECTED_LINES = {
    "comment":       ("00000000000000000", "00000000000000", "00000000000000000000111110"),
    "string":        ("00000000000000000", "00001111111110", "00000000000000000000000000"),
    "bracket_depth": ("00000111111222100", "00000000000000", "00000000000111111100000000"),
    "indent":        ("00000000000000000", "11111111111111", "11111111111111111111111111"),
    "keyword":       ("11100000000000000", "00000000000000", "00001111110000000000000000"),
    "identifier":    ("00001010010000000", "00000000000000", "00000000000010001000000000"),
    # from `def` to the end of the last statement: the trailing comment is outside
    "def":           ("11111111111111111", "11111111111111", "11111111111111111100000000"),
    "class":         ("00000000000000000", "00000000000000", "00000000000000000000000000"),
}
# fmt: on
EXPECTED = {k: "".join(v) for k, v in EXPECTED_LINES.items()}


def _digits(values: np.ndarray) -> str:
    return "".join(str(int(v)) for v in values)


@pytest.mark.parametrize("signal", SIGNALS)
def test_hand_worked_signals(signal: str) -> None:
    for line, digits in zip(LINES, EXPECTED_LINES[signal], strict=True):
        assert len(line) == len(digits)
    assert _digits(code_signals(SRC)[signal]) == EXPECTED[signal]


def test_family_protocol_and_kinds() -> None:
    fam = CodeFamily(keywords=["return"])
    assert fam.hids()[:2] == ["code.comment", "code.string"]
    assert fam.hids()[-1] == "code.kw_return"
    assert fam.kind_of("indent") == "continuous" and fam.kind_of("def") == "binary"
    arr = evaluate_family(fam, SRC, len(SRC), 0)
    assert arr.shape == (len(SRC), len(SIGNALS) + 1)
    assert _digits(arr[:, -1]) == "0" * 35 + "111111" + "0" * 16
    assert CodeFamily(select=["comment"]).signals() == ["comment"]
    fps = {CodeFamily().fingerprint(), CodeFamily(select=["comment"]).fingerprint()}
    fps.add(CodeFamily(keywords=["if"]).fingerprint())
    assert len(fps) == 3
    assert CodeFamily().fingerprint() == CodeFamily().fingerprint()
    with pytest.raises(ValueError, match="unknown signals"):
        CodeFamily(select=["nope"]).signals()


def test_brackets_in_strings_and_comments_do_not_count() -> None:
    s = code_signals('x = "(" + f"{(1)}"  # )\n')
    assert s["bracket_depth"].max() == 0
    assert _digits(s["string"]) == "0000111000111111110" + "00000"


def test_windows_take_signals_from_the_full_source() -> None:
    src = 'a = """long\ntext ( here"""\nb = (1,\n     2)\n'
    full = code_signals(src)
    fam = CodeFamily()
    windows = sliding_windows(src, width=10, stride=3)
    assert [w.start for w in windows[:3]] == [0, 3, 6]
    for w in windows:
        assert w == src[w.start : w.start + 10]
        got = fam.evaluate(w)
        for sig in SIGNALS:
            np.testing.assert_array_equal(got[sig], full[sig][w.start : w.start + len(w)])
    # the window that opens inside the docstring knows it; the bare text does not
    inside = next(w for w in windows if w.startswith("text"))
    assert fam.evaluate(inside)["string"][0] == 1
    assert fam.evaluate(str(inside))["string"][0] == 0
    # any str carrying .source and .start is a window
    duck = _Duck(src[12:20])
    duck.source, duck.start = src, 12
    np.testing.assert_array_equal(fam.evaluate(duck)["string"], full["string"][12:20])
    # the family pickles without its cache (to worker processes)
    assert pickle.loads(pickle.dumps(fam)).fingerprint() == fam.fingerprint()


class _Duck(str):
    source: str
    start: int


def test_incomplete_code_falls_back_gracefully() -> None:
    # an unterminated string runs to the end of its line; lexing resumes after it
    s = code_signals('x = "abc\ny = (1,\n')
    assert _digits(s["string"]) == "0000111100000000" + "0"
    assert s["identifier"][9] == 1  # `y`
    assert _digits(s["bracket_depth"][13:]) == "1111"  # unclosed: open to the end
    # unterminated triple-quoted string: to the end of the text
    s = code_signals("x = 1\ny = '''doc\nmore")
    assert s["string"][10:].all() and not s["string"][:10].any()
    # an unmatched closer (a window opened mid-expression) opens nothing
    assert code_signals("1) + (2)")["bracket_depth"].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    # a dedent that matches no outer level: nearest outer level, no error
    s = code_signals("if x:\n    y\n  z\n")
    assert s["indent"].tolist() == [0] * 6 + [1] * 6 + [0] * 4


def test_definition_spans_without_ast_match_ast() -> None:
    src = (
        "import os\n"
        "@decorator\n"
        "class A(Base):\n"
        "    x = 1  # c\n"
        "\n"
        "    def m(self,\n"
        "          y):\n"
        "        if y:\n"
        "            return lambda: y\n"
        "        # trailing comment\n"
        "    async def n(self): pass\n"
        "def g(): return 2\n"
        "z = g()\n"
    )
    toks = lex(src)
    depth = code_signals(src)["bracket_depth"]
    lines = C.line_levels(src, toks, depth)
    by_ast = C.definition_spans(src, toks, lines)
    by_indent = C._spans_by_indent(toks, lines)
    for kind in ("def", "class"):
        assert sorted(by_ast[kind]) == sorted(by_indent[kind])
    assert len(by_ast["def"]) == 3 and len(by_ast["class"]) == 1
    # a truncated file does not parse, and still gets its definition spans
    cut = src[: src.index("async")] + "def broken(:\n"
    s = code_signals(cut)
    assert s["class"][src.index("class")] == 1 and s["def"][src.index("return")] == 1


def test_unicode_columns() -> None:
    # ast counts UTF-8 bytes in columns; the signals count characters
    src = "é = 'ü'; def_ = 1\ndef f(): return 'ö'\n"
    s = code_signals(src)
    start = src.index("def f")
    assert _digits(s["def"]) == "0" * start + "1" * 19 + "0"
    assert s["string"][4:7].tolist() == [1, 1, 1]
