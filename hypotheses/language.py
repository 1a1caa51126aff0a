"""Natural-language hypotheses: word alignment, part-of-speech tags and phrases.

Models read characters or subwords while linguistic annotations are per word,
so the first half of this module moves values between the two:
:func:`spread` copies word values onto symbols and :func:`pool` folds symbol
values back into words, both driven by ``offsets``: one ``(start, end)`` span
of symbols per word (end exclusive). :func:`word_spans` finds words in a
string, :func:`find_spans` locates given words, :func:`spans_from_word_ids`
turns a subword tokenizer's ``word_ids()`` into spans.

The second half tags words. :class:`PosFamily` (one signal per universal
part-of-speech tag) and :class:`PhraseFamily` (noun, verb and prepositional
phrase ranges) use NLTK's perceptron tagger when its data is installed
locally, else a spaCy model when one is installed, else a tagger object the
caller passes. Nothing is ever downloaded: without a tagger they raise
:class:`TaggerNotInstalled`, whose message says exactly what to install.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from dni_lab.backend.errors import HypothesisError
from dni_lab.backend.hypothesis.hypotheses import HypothesisFamily

Spans = Sequence[tuple[int, int]]
_WORD = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
NLTK_RESOURCE = "taggers/averaged_perceptron_tagger_eng/"


# -- alignment -------------------------------------------------------------------
def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words and punctuation marks of ``text``.

    A word is a run of letters/digits/underscores, optionally joined by
    apostrophes ("don't"); every other non-space character is a word of its own.
    """
    return [m.span() for m in _WORD.finditer(text)]


def find_spans(text: str, words: Sequence[str], start: int = 0) -> list[tuple[int, int]]:
    """Spans of ``words`` found left to right in ``text`` (for a given tokenization)."""
    out, pos = [], start
    for w in words:
        i = text.find(w, pos)
        if i < 0:
            raise ValueError(f"word {w!r} not found in the text after position {pos}.")
        out.append((i, i + len(w)))
        pos = i + len(w)
    return out


def spans_from_word_ids(word_ids: Sequence[int | None]) -> list[tuple[int, int]]:
    """Subword spans per word from a tokenizer's ``word_ids()`` (None: special token).

    ``[None, 0, 0, 1, None]`` → ``[(1, 3), (3, 4)]``: word ``w`` covers the
    subwords whose id is ``w``, which must be contiguous.
    """
    spans: dict[int, list[int]] = {}
    for pos, w in enumerate(word_ids):
        if w is not None:
            spans.setdefault(w, []).append(pos)
    out = []
    for w in range(max(spans, default=-1) + 1):
        pos = spans.get(w)
        if not pos or pos[-1] - pos[0] + 1 != len(pos):
            raise ValueError(f"word {w} has no subwords or non-contiguous ones: {pos}.")
        out.append((pos[0], pos[-1] + 1))
    return out


def spread(
    word_values: Sequence[float] | np.ndarray,
    offsets: Spans,
    how: str = "any",
    n_symbols: int | None = None,
    fill: float = 0.0,
) -> np.ndarray:
    """Copy one value per word onto the word's symbols.

    Parameters
    ----------
    word_values : array of shape (n_words,) or (n_words, k)
    offsets : sequence of (start, end)
        Symbol span of each word, end exclusive.
    how : {"any", "mean", "first", "last"}
        Which symbols get the value: every symbol of the word ("any" and "mean",
        the inverses of those poolings), only its first or only its last symbol.
        For every ``how``, ``pool(spread(v, o, how), o, how) == v``.
    n_symbols : int, optional
        Record length; defaults to the end of the last span.
    fill : float
        Value of the symbols outside every word (or not chosen by ``how``).

    Examples
    --------
    >>> spread([1, 2], [(0, 2), (3, 4)], how="first").tolist()
    [1.0, 0.0, 0.0, 2.0]
    """
    vals = np.asarray(word_values, dtype=np.float32)
    if len(vals) != len(offsets):
        raise ValueError(f"{len(vals)} word values for {len(offsets)} word spans.")
    n = max((e for _, e in offsets), default=0) if n_symbols is None else n_symbols
    out = np.full((n, *vals.shape[1:]), fill, dtype=np.float32)
    for v, (a, b) in zip(vals, offsets, strict=True):
        if b <= a:
            continue
        if how in ("any", "mean"):
            out[a:b] = v
        elif how in ("first", "last"):
            out[a if how == "first" else b - 1] = v
        else:
            raise ValueError(f"spread: unknown how={how!r}; use any, mean, first or last.")
    return out


def pool(
    symbol_values: Sequence[float] | np.ndarray, offsets: Spans, how: str = "mean"
) -> np.ndarray:
    """Fold symbol values into one value per word (the reverse of :func:`spread`).

    ``how`` is "mean", "first" (the word's first symbol), "last", "any" (1.0 if
    any symbol is non-zero, else 0.0), "max" or "sum".

    Examples
    --------
    >>> pool([1, 3, 0, 4], [(0, 2), (3, 4)]).tolist()
    [2.0, 4.0]
    """
    vals = np.asarray(symbol_values, dtype=np.float32)
    reducers: dict[str, Callable[[np.ndarray], Any]] = {
        "mean": lambda x: x.mean(0),
        "first": lambda x: x[0],
        "last": lambda x: x[-1],
        "any": lambda x: (x != 0).any(0).astype(np.float32),
        "max": lambda x: x.max(0),
        "sum": lambda x: x.sum(0),
    }
    if how not in reducers:
        raise ValueError(f"pool: unknown how={how!r}; use one of {sorted(reducers)}.")
    if any(b <= a for a, b in offsets):
        raise ValueError("pool: every word needs at least one symbol (found an empty span).")
    return np.array([reducers[how](vals[a:b]) for a, b in offsets], dtype=np.float32).reshape(
        len(offsets), *vals.shape[1:]
    )


# -- taggers ---------------------------------------------------------------------
UNIVERSAL = ("NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", "PUNCT", "X")
# Penn Treebank and Universal Dependencies tags onto the 12 universal tags above.
_TO_UNIVERSAL = {
    **dict.fromkeys(("NN", "NNS", "NNP", "NNPS", "PROPN"), "NOUN"),
    **dict.fromkeys(("VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "MD", "AUX"), "VERB"),
    **dict.fromkeys(("JJ", "JJR", "JJS"), "ADJ"),
    **dict.fromkeys(("RB", "RBR", "RBS", "WRB"), "ADV"),
    **dict.fromkeys(("PRP", "PRP$", "WP", "WP$"), "PRON"),
    **dict.fromkeys(("DT", "PDT", "WDT", "EX"), "DET"),
    **dict.fromkeys(("IN",), "ADP"),
    **dict.fromkeys(("CD",), "NUM"),
    **dict.fromkeys(("CC", "CCONJ", "SCONJ"), "CONJ"),
    **dict.fromkeys(("RP", "TO", "POS", "PART"), "PRT"),
    **dict.fromkeys((".", ",", ":", "``", "''", "-LRB-", "-RRB-", "(", ")", "#", "$"), "PUNCT"),
    **dict.fromkeys(("HYPH", "NFP", "SYM"), "PUNCT"),
    **dict.fromkeys(("FW", "LS", "UH", "INTJ", "ADD", "AFX", "XX", "_SP", "SPACE"), "X"),
}


class TaggerNotInstalled(HypothesisError, LookupError):
    """No part-of-speech tagger is installed locally (nothing is downloaded at run time)."""


def universal(tag: str) -> str:
    """Map a PTB, UD or universal tag onto :data:`UNIVERSAL` (unknown tags → ``"X"``)."""
    return tag if tag in UNIVERSAL else _TO_UNIVERSAL.get(tag, "X")


def _install_help(backend: str) -> str:
    import nltk

    lines = [
        "part-of-speech hypotheses need a tagger, and none is installed on this machine "
        "(dni_lab never downloads at run time). Install one of:"
    ]
    if backend in ("auto", "nltk"):
        lines += [
            "  * NLTK's tagger data: on a machine with internet run",
            "      python -m nltk.downloader -d ~/nltk_data averaged_perceptron_tagger_eng",
            "    then copy that nltk_data folder to this machine (or set NLTK_DATA to it).",
            f"    NLTK looked for {NLTK_RESOURCE!r} in: {', '.join(map(str, nltk.data.path))}",
        ]
    if backend in ("auto", "spacy"):
        lines += [
            "  * spaCy and an English model: pip install spacy, then on a machine with internet",
            "      python -m spacy download en_core_web_sm",
            "    (it pip-installs a model wheel: copy that wheel here and pip install it).",
        ]
    lines.append(
        "  * or pass tagger=...: any object with .tag(tokens) -> [(token, tag), ...] "
        "(a trained nltk tagger) or a function tokens -> tags."
    )
    return "\n".join(lines)


def available_taggers() -> list[str]:
    """Backends usable here without any download: a subset of ``["nltk", "spacy"]``."""
    found = []
    try:
        import nltk

        nltk.data.find(NLTK_RESOURCE)
        found.append("nltk")
    except LookupError:
        pass
    if _spacy_model() is not None:
        found.append("spacy")
    return found


def _spacy_model() -> str | None:
    try:
        import spacy
    except ImportError:
        return None
    names = sorted(spacy.util.get_installed_models())
    english = [m for m in names if m.startswith("en_")]
    return (english or [None])[0]


def load_tagger(backend: str = "auto", tagger: Any = None) -> Callable[[list[str]], list[str]]:
    """A function ``tokens -> universal tags`` from ``tagger`` or an installed backend.

    Raises
    ------
    TaggerNotInstalled
        When ``tagger`` is None and no backend has local data.
    """
    if tagger is not None:
        return lambda toks: [universal(t) for t in _tags_of(tagger, toks)]
    if backend not in ("auto", "nltk", "spacy"):
        raise ValueError(f"unknown tagger backend {backend!r}; use auto, nltk or spacy.")
    found = available_taggers()
    if backend in ("auto", "nltk") and "nltk" in found:
        from nltk.tag.perceptron import PerceptronTagger

        ptb = PerceptronTagger()
        return lambda toks: [universal(t) for _, t in ptb.tag(list(toks))]
    if backend in ("auto", "spacy") and "spacy" in found:
        import spacy
        from spacy.tokens import Doc

        nlp = spacy.load(_spacy_model())

        def tag(toks: list[str]) -> list[str]:
            doc = Doc(nlp.vocab, words=list(toks))
            for _, proc in nlp.pipeline:  # our tokenization, the model's tagger
                doc = proc(doc)
            return [universal(t.pos_ or t.tag_) for t in doc]

        return tag
    raise TaggerNotInstalled(_install_help(backend))


def _tags_of(tagger: Any, toks: list[str]) -> list[str]:
    out = tagger.tag(list(toks)) if hasattr(tagger, "tag") else tagger(list(toks))
    return [t[1] if isinstance(t, tuple) else t for t in out]


class _TaggedFamily(HypothesisFamily):
    """Shared plumbing: words of a record, their tags, and spreading onto symbols.

    A ``str`` record's symbols are its characters (words from :func:`word_spans`);
    a list of tokens' symbols are the tokens.
    """

    def _tagged(self, record: Any) -> tuple[list[tuple[int, int]], list[str], int]:
        if isinstance(record, str):
            spans = word_spans(record)
            words = [record[a:b] for a, b in spans]
            n = len(record)
        else:
            words = [str(w) for w in record]
            spans = [(i, i + 1) for i in range(len(words))]
            n = len(words)
        if "_tag" not in self.__dict__:  # load the model once, on first use
            self.__dict__["_tag"] = load_tagger(self.backend, self.tagger)
        tags = self.__dict__["_tag"](words) if words else []
        return spans, tags, n

    def check(self) -> None:
        """Load the tagger now (raises :class:`TaggerNotInstalled` early)."""
        self._tagged("check")


class PosFamily(_TaggedFamily):
    """One binary signal per universal part-of-speech tag, plus a categorical ``tag``.

    Parameters
    ----------
    name : str
        Family name.
    how : {"any", "first", "last"}
        Which characters of a word carry its tag (see :func:`spread`).
    backend : {"auto", "nltk", "spacy"}
        Where to find an installed tagger.
    tagger : object, optional
        A tagger to use instead: ``.tag(tokens) -> [(token, tag)]`` or ``tokens -> tags``.

    Notes
    -----
    ``tag`` holds ``1 + UNIVERSAL.index(tag)`` on a word's symbols and 0 elsewhere.
    """

    def __init__(
        self, name: str = "pos", how: str = "any", backend: str = "auto", tagger: Any = None
    ) -> None:
        self.name, self.how, self.backend, self.tagger = name, how, backend, tagger

    kind: ClassVar[dict[str, str]] = {**dict.fromkeys(UNIVERSAL, "binary"), "tag": "categorical"}
    categories: ClassVar[dict[str, int]] = {"tag": len(UNIVERSAL) + 1}

    def signals(self) -> list[str]:
        return [*UNIVERSAL, "tag"]

    def evaluate(self, record: Any) -> dict[str, np.ndarray]:
        spans, tags, n = self._tagged(record)
        code = np.array([1 + UNIVERSAL.index(t) for t in tags], np.float32)
        out = {"tag": spread(code, spans, self.how, n)}
        for i, t in enumerate(UNIVERSAL):
            out[t] = (out["tag"] == i + 1).astype(np.float32)
        return out


DEFAULT_CHUNKS = r"""
NP: {<DET|PRON>?<ADJ|NUM>*<NOUN>+}
    {<PRON>}
PP: {<ADP><NP>}
VP: {<PRT>?<VERB>+<PRT|ADV>*<NP|PP>*}
"""


class PhraseFamily(_TaggedFamily):
    """Phrase ranges (1 on every symbol of a chunk) from a regular chunk grammar.

    Chunks come from :class:`nltk.RegexpParser` over universal tags (no data
    needed beyond the tagger). A chunk's span runs from its first word's first
    symbol to its last word's last symbol, spaces included.

    Parameters
    ----------
    name : str
        Family name.
    grammar : str
        A :class:`nltk.RegexpParser` grammar; one signal per chunk label.
    backend, tagger
        As for :class:`PosFamily`.
    """

    kind = "binary"

    def __init__(
        self,
        name: str = "phrase",
        grammar: str = DEFAULT_CHUNKS,
        backend: str = "auto",
        tagger: Any = None,
    ) -> None:
        self.name, self.grammar, self.backend, self.tagger = name, grammar, backend, tagger

    def signals(self) -> list[str]:
        return list(dict.fromkeys(re.findall(r"^\s*(\w+)\s*:", self.grammar, re.MULTILINE)))

    def evaluate(self, record: Any) -> dict[str, np.ndarray]:
        from nltk.chunk import RegexpParser
        from nltk.tree import Tree

        spans, tags, n = self._tagged(record)
        out = {s: np.zeros(n, np.float32) for s in self.signals()}
        if not spans:
            return out
        tree = RegexpParser(self.grammar).parse([(i, t) for i, t in enumerate(tags)])
        for sub in tree.subtrees(lambda t: isinstance(t, Tree) and t.label() in out):
            idx = [i for i, _ in sub.leaves()]
            out[sub.label()][spans[min(idx)][0] : spans[max(idx)][1]] = 1
        return out
