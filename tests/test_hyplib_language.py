"""Natural-language helpers: alignment, and taggers that are never downloaded."""

from __future__ import annotations

import nltk
import numpy as np
import pytest
from nltk.tag import RegexpTagger

from dni_lab.backend.errors import HypothesisError
from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import language as L
from hypotheses.language import (
    UNIVERSAL,
    PhraseFamily,
    PosFamily,
    TaggerNotInstalled,
    find_spans,
    pool,
    spans_from_word_ids,
    spread,
    word_spans,
)

# A data-free tagger: lets the happy path run on any machine.
TOY = RegexpTagger(
    [
        (r"^(the|a)$", "DT"),
        (r"^(big|red)$", "JJ"),
        (r"^(sat|runs)$", "VBD"),
        (r"^(on|in)$", "IN"),
        (r"^\W$", "."),
        (r".*", "NN"),
    ]
)
TEXT = "the big dog sat on a red mat ."


def _digits(values: np.ndarray) -> str:
    return "".join(str(int(v)) for v in values)


def test_word_spans_and_find_spans() -> None:
    assert word_spans("I don't go.") == [(0, 1), (2, 7), (8, 10), (10, 11)]
    assert find_spans("a cat, a hat", ["cat", "a", "hat"]) == [(2, 5), (7, 8), (9, 12)]
    assert find_spans("a cat, a hat", ["a"], start=5) == [(7, 8)]
    with pytest.raises(ValueError, match="not found"):
        find_spans("abc", ["x"])


def test_spans_from_word_ids() -> None:
    assert spans_from_word_ids([None, 0, 0, 1, 2, 2, 2, None]) == [(1, 3), (3, 4), (4, 7)]
    with pytest.raises(ValueError, match="non-contiguous"):
        spans_from_word_ids([0, 1, 0])


def test_spread_by_hand() -> None:
    offsets = [(0, 2), (3, 6)]  # "ab cde"
    assert spread([5, 7], offsets, "any").tolist() == [5, 5, 0, 7, 7, 7]
    assert spread([5, 7], offsets, "mean").tolist() == [5, 5, 0, 7, 7, 7]
    assert spread([5, 7], offsets, "first").tolist() == [5, 0, 0, 7, 0, 0]
    assert spread([5, 7], offsets, "last", n_symbols=7, fill=-1).tolist() == [
        -1,
        5,
        -1,
        -1,
        -1,
        7,
        -1,
    ]
    two_d = spread([[1, 2], [3, 4]], offsets, "first")
    assert two_d.shape == (6, 2) and two_d[3].tolist() == [3, 4]
    with pytest.raises(ValueError, match="unknown how"):
        spread([1, 2], offsets, "median")
    with pytest.raises(ValueError, match="2 word spans"):
        spread([1], offsets)


def test_pool_by_hand_and_round_trip() -> None:
    offsets = [(0, 2), (3, 6)]
    sym = [1, 3, 9, 0, 0, 6]
    assert pool(sym, offsets, "mean").tolist() == [2, 2]
    assert pool(sym, offsets, "first").tolist() == [1, 0]
    assert pool(sym, offsets, "last").tolist() == [3, 6]
    assert pool(sym, offsets, "any").tolist() == [1, 1]
    assert pool([0, 0, 1, 0, 0, 0], offsets, "any").tolist() == [0, 0]
    assert pool(sym, offsets, "max").tolist() == [3, 6]
    assert pool(sym, offsets, "sum").tolist() == [4, 6]
    for how in ("first", "last", "mean"):
        np.testing.assert_array_equal(pool(spread([5, -2], offsets, how), offsets, how), [5, -2])
    assert pool(spread([1, 0], offsets, "any"), offsets, "any").tolist() == [1, 0]
    with pytest.raises(ValueError, match="empty span"):
        pool(sym, [(2, 2)])


def test_subword_to_character_alignment_through_words() -> None:
    # "unhappy cat": subwords [un, happy, cat]; a value per subword → per character
    text = "unhappy cat"
    chars, subs = word_spans(text), spans_from_word_ids([0, 0, 1])
    per_word = pool(np.array([0.2, 0.6, 1.0]), subs, "mean")
    assert spread(per_word, chars, "any", n_symbols=len(text)).tolist() == pytest.approx(
        [0.4] * 7 + [0] + [1.0] * 3
    )


def test_missing_tagger_raises_with_install_instructions(monkeypatch) -> None:
    monkeypatch.setattr(L, "available_taggers", lambda: [])
    monkeypatch.setattr(nltk, "download", _no_download)
    with pytest.raises(TaggerNotInstalled) as err:
        PosFamily().evaluate("hello world")
    msg = str(err.value)
    assert "python -m nltk.downloader" in msg and "averaged_perceptron_tagger_eng" in msg
    assert "pip install spacy" in msg and "en_core_web_sm" in msg
    assert "never downloads" in msg and "tagger=" in msg
    # a backend named explicitly gets only its own instructions
    with pytest.raises(TaggerNotInstalled) as err:
        PhraseFamily(backend="nltk").check()
    assert "nltk.downloader" in str(err.value) and "spacy" not in str(err.value)
    with pytest.raises(TaggerNotInstalled, match="spacy download"):
        PosFamily(backend="spacy").check()
    # through the engine's validation the message survives unchanged
    with pytest.raises(HypothesisError, match="averaged_perceptron_tagger_eng"):
        evaluate_family(PosFamily(), "hi", 2, 0)


def _no_download(*args, **kwargs):
    raise AssertionError("dni_lab must never download at run time")


def test_pos_with_a_given_tagger_by_hand() -> None:
    fam = PosFamily(tagger=TOY)
    out = fam.evaluate(TEXT)
    # the/DET big/ADJ dog/NOUN sat/VERB on/ADP a/DET red/ADJ mat/NOUN ./PUNCT
    codes = [6, 3, 1, 2, 7, 6, 3, 1, 11]  # 1 + UNIVERSAL.index(tag)
    expected = spread(codes, word_spans(TEXT), "any", n_symbols=len(TEXT))
    assert expected[:8].tolist() == [6, 6, 6, 0, 3, 3, 3, 0]
    assert out["tag"].tolist() == expected.tolist()
    assert _digits(out["NOUN"]) == "000000001110000000000000011100"
    assert out["PUNCT"][-1] == 1
    assert fam.categories == {"tag": len(UNIVERSAL) + 1}
    tokens = fam.evaluate(TEXT.split())
    assert tokens["tag"].tolist() == codes  # a token list: one value per token
    first = PosFamily(tagger=TOY, how="first").evaluate("the dog")["tag"]
    assert first.tolist() == [6, 0, 0, 0, 1, 0, 0]
    arr = evaluate_family(fam, TEXT, len(TEXT), 0)
    assert arr.shape == (len(TEXT), len(UNIVERSAL) + 1)


def test_phrases_with_a_given_tagger_by_hand() -> None:
    fam = PhraseFamily(tagger=TOY)
    assert fam.signals() == ["NP", "PP", "VP"]
    out = fam.evaluate(TEXT)
    assert _digits(out["NP"]) == "111111111110000000011111111100"
    assert _digits(out["PP"]) == "000000000000000011111111111100"
    assert _digits(out["VP"]) == "000000000000111111111111111100"
    assert fam.evaluate("")["NP"].shape == (0,)


def test_universal_mapping() -> None:
    assert [L.universal(t) for t in ("NNS", "VBZ", "PROPN", "AUX", "CCONJ", ".", "??")] == [
        "NOUN",
        "VERB",
        "NOUN",
        "VERB",
        "CONJ",
        "PUNCT",
        "X",
    ]


@pytest.mark.skipif(
    not L.available_taggers(),
    reason="no NLTK tagger data or spaCy model installed locally (never downloaded)",
)
def test_installed_tagger_happy_path() -> None:
    out = PosFamily().evaluate("The dog runs.")
    assert out["NOUN"][4:7].tolist() == [1, 1, 1]
    assert out["DET"][0] == 1
