"""Generic hypotheses: keywords, regexes, character classes, positions, n-grams, inside."""

from __future__ import annotations

import numpy as np
import pytest

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import (
    CharClassFamily,
    InsideFamily,
    NgramFamily,
    PositionFamily,
    Window,
    frequent_ngrams,
    keyword_family,
    regex,
)


def _bits(values) -> str:
    return "".join(str(int(v)) for v in values)


def test_keyword_spans_whole_words_and_case():
    fam = keyword_family(["SELECT", "FROM"], name="kw")
    x = "SELECT a FROM FROMAGE"
    out = fam.evaluate(x)
    assert fam.hids() == ["kw.SELECT", "kw.FROM"]
    assert _bits(out[:, 0]) == "111111" + "0" * 15
    assert _bits(out[:, 1]) == "0" * 9 + "1111" + "0" * 8  # not inside FROMAGE
    loose = keyword_family(["from"], whole_word=False, case_sensitive=False)
    assert _bits(loose.evaluate(x)[:, 0]) == "0" * 9 + "1111" + "0" + "1111" + "000"


def test_keyword_on_tokens():
    fam = keyword_family(["if", "for"])
    assert fam.evaluate(["if", "x", "for", "if"]).tolist() == [[1, 0], [0, 0], [0, 1], [1, 0]]


def test_regex_spans_and_group():
    assert _bits(regex(r"\d+").evaluate("a12b3")[:, 0]) == "01101"
    fam = regex(r"'([^']*)'", name="string_body", group=1)
    assert fam.signals() == ["string_body"] and fam.hids() == ["string_body"]
    assert _bits(fam.evaluate("x='ab' y")[:, 0]) == "00011000"
    assert evaluate_family(fam, "x='ab'", 6, 0).shape == (6, 1)


def test_char_classes():
    fam = CharClassFamily()
    assert fam.signals() == ["letter", "digit", "space", "upper", "lower", "punct"]
    out = fam.evaluate("aB 3(")
    assert out.tolist() == [
        [1, 0, 0, 0, 1, 0],
        [1, 0, 0, 1, 0, 0],
        [0, 0, 1, 0, 0, 0],
        [0, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 1],
    ]
    custom = CharClassFamily({"vowel": "aeiou", "op": lambda c: c in "+-"}, name="cc")
    assert custom.evaluate("a+b").tolist() == [[1, 0], [0, 1], [0, 0]]
    assert custom.evaluate("").shape == (0, 2)


def test_position_counters_record_and_source():
    fam = PositionFamily()
    assert fam.evaluate("abcde").tolist() == [
        [0, 0, 4],
        [1, 0.25, 3],
        [2, 0.5, 2],
        [3, 0.75, 1],
        [4, 1, 0],
    ]
    w = Window("0123456789", 4, 3)
    assert fam.evaluate(w)[:, 0].tolist() == [0, 1, 2]
    assert PositionFamily(of="source").evaluate(w)[:, 0].tolist() == [4, 5, 6]
    assert fam.kind_of("relative") == "continuous"


def test_ngram_detector_marks():
    x = "abcabxab"
    assert _bits(NgramFamily(["ab"]).evaluate(x)[:, 0]) == "01001001"
    assert _bits(NgramFamily(["ab"], mark="start").evaluate(x)[:, 0]) == "10010010"
    assert _bits(NgramFamily(["ab"], mark="span").evaluate(x)[:, 0]) == "11011011"
    toks = NgramFamily([("GROUP", "BY")], name="g")
    assert toks.signals() == ["GROUP BY"]
    assert _bits(toks.evaluate(["a", "GROUP", "BY", "GROUP"])[:, 0]) == "0010"
    with pytest.raises(ValueError, match="mark='middle'"):
        NgramFamily(["ab"], mark="middle").evaluate("ab")


def test_frequent_ngrams():
    assert frequent_ngrams(["abab", "bab"], n=2, top=2) == ["ab", "ba"]
    assert frequent_ngrams([["a", "b", "a", "b"]], n=2, top=1) == [("a", "b")]


def test_inside_quotes_and_brackets_with_depth():
    fam = InsideFamily()
    sig = fam.signals()
    assert sig[:5] == [
        "in:double_quotes",
        "in:single_quotes",
        "in:parens",
        "in:brackets",
        "in:braces",
    ]
    x = 'f(a[1], \'(x\') + "q\\""'
    out = fam.evaluate(x)
    col = {s: out[:, i] for i, s in enumerate(sig)}
    assert len(x) == 21
    assert _bits(col["in:parens"]) == "0" + "1" * 12 + "0" * 8  # the ( inside quotes is text
    assert col["depth:parens"][:3].tolist() == [0, 1, 1]
    assert _bits(col["in:brackets"]) == "000111" + "0" * 15
    assert _bits(col["in:single_quotes"]) == "0" * 8 + "1111" + "0" * 9
    assert _bits(col["in:double_quotes"]) == "0" * 16 + "11111"  # escaped quote stays inside
    assert fam.kind_of("depth:parens") == "continuous"
    nested = InsideFamily({"p": ("(", ")")}).evaluate("(())")
    assert nested[:, 1].tolist() == [1, 2, 2, 1]


def test_generic_families_see_a_windows_source():
    text = "SELECT name FROM users"
    w = Window(text, 9, 6)  # "me FRO": keyword cut by the window edge
    kw = keyword_family(["FROM"])
    assert _bits(kw.evaluate(w)[:, 0]) == "000111"
    for fam in (kw, regex(r"[a-z]+"), CharClassFamily(), InsideFamily(), NgramFamily(["FR"])):
        assert np.array_equal(fam.evaluate(w), fam.evaluate(text)[9:15])


def test_regex_family_reads_strings_only():
    with pytest.raises(ValueError, match="reads strings"):
        regex("a").evaluate(["a", "b"])
