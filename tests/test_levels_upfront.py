"""A hypothesis's level is decided once, before the first block, from records whose counts
differ; every question is asked in one error up front; ``dl.check`` reports the decisions.

The tokenizer is a byte-level BPE trained here (nothing downloads). On it ``'12 34 ab'`` has
8 characters, 3 words and 6 tokens, so one value per token is proved there; ``'9'`` has one
of each and is no evidence, and ``'the'`` and ``'12'`` are one word and one token each, so
a corpus of such records cannot tell words from tokens.
"""

from __future__ import annotations

import pytest
import torch

import dni_lab as dl
from dni_lab.backend.hypothesis.levels import decide

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

SEPARATING = ["12 34 ab", "the cat", "hello world", "dog"]
ONE_OF_EACH = "9"  # one character, one word, one token
WORD_IS_TOKEN = ["the", "12", "9", "x", "the"]  # words and tokens coincide in every record
UNITS = [("transformer.h.0", "*")]


@pytest.fixture(scope="module")
def model() -> HFModel:
    """A tiny GPT-2 over a BPE that splits most words into several tokens."""
    train = ["the cat sat on the mat", "12 34 56", "hello world", "a dog ran"]
    tok = bpe(train * 20, vocab_size=262)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=8, n_layer=1,
                                  n_head=2, bos_token_id=None, eos_token_id=None)  # fmt: skip
    return HFModel(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="tiny")


def per_token(model: HFModel, name: str = "per_token", **kw) -> dl.Hypothesis:
    return dl.hypothesis(lambda r: [float(i) for i in range(model.symbols(r))], name=name,
                         kind="continuous", **kw)  # fmt: skip


def per_word(name: str = "per_word", **kw) -> dl.Hypothesis:
    return dl.hypothesis(lambda r: [float(len(w)) for w in r.split()], name=name,
                         kind="continuous", **kw)  # fmt: skip


def is_digit(r: str) -> list[bool]:
    return [c.isdigit() for c in r]


class Forwards:
    """Counts the model's forward passes (the probe pass included)."""

    def __init__(self, model: HFModel) -> None:
        self.n = 0
        self._handle = model.module.register_forward_hook(self._seen)

    def _seen(self, *_: object) -> None:
        self.n += 1

    def __enter__(self) -> Forwards:
        return self

    def __exit__(self, *_: object) -> None:
        self._handle.remove()


def test_the_tokenizer_gives_the_counts_the_tests_rely_on(model):
    assert (len(SEPARATING[0]), model.symbols(SEPARATING[0])) == (8, 6)
    assert model.symbols(ONE_OF_EACH) == 1
    assert all(model.symbols(r) == 1 for r in WORD_IS_TOKEN)


def test_a_one_character_record_no_longer_stops_a_token_level_run(model):
    # '9' sits in the third block: it used to raise there, after two blocks were read
    data = SEPARATING * 2 + [ONE_OF_EACH] + SEPARATING
    digit = dl.hypothesis(is_digit, name="digit")
    frame = dl.inspect(model, [per_token(model), digit], data=data, units=UNITS, eps=None,
                       cache=False, block_size=4)  # fmt: skip
    record = dl.provenance(frame)
    assert record["records_read"] == len(data)
    levels = {row["hypothesis"]: row for row in record["levels"]}
    assert levels["per_token"]["level"] == "token"
    # the sample is the first block: each of its records separates (or confirms) the level
    assert levels["per_token"]["decided_by"] == "proved from 4 records"
    assert levels["digit"]["level"] == "char"
    assert levels["digit"]["decided_by"].startswith("proved from")
    assert "'12 34 ab': 6 values; 8 characters, 3 words, 6 tokens" in levels["per_token"][
        "evidence"
    ]
    assert set(frame["hid"]) == {"per_token", "digit"}
    assert frame["unit_score"].null_count() < frame.height


def test_every_undecidable_level_is_asked_at_once_before_any_forward(model):
    hyps = [per_token(model), per_word(), dl.hypothesis(is_digit, name="digit")]
    with Forwards(model) as seen, pytest.raises(dl.LevelError) as err:
        dl.inspect(model, hyps, data=WORD_IS_TOKEN, units=UNITS, eps=None, cache=False)
    assert seen.n == 0, "the model ran before the question was asked"
    assert isinstance(err.value, dl.HypothesisError)
    asked = {q.hypothesis: q for q in err.value.questions}
    assert set(asked) == {"per_token", "per_word"}  # digit is per character: proved
    msg = str(err.value)
    assert msg.startswith("2 hypotheses need level= before any record is read")
    for part in ("'per_token'", "'per_word'", "level='word' or level='token'", "'the'",
                 "1 word, 1 token"):  # fmt: skip
        assert part in msg, (part, msg)
    assert asked["per_word"].options == ("word", "token")


def test_a_declared_level_is_obeyed_without_reading_the_hypothesis(model):
    calls = []

    def counted(r):
        calls.append(r)
        return [1.0] * model.symbols(r)

    declared = dl.hypothesis(counted, name="declared", kind="continuous", level="token")
    checked = dl.check(model, WORD_IS_TOKEN, [declared])
    assert checked.row(0, named=True)["level"] == "token"
    assert checked.row(0, named=True)["decided_by"] == "declared"
    assert calls == []  # a declaration is not second-guessed
    frame = dl.inspect(model, [declared], data=WORD_IS_TOKEN, units=UNITS, eps=None,
                       cache=False)  # fmt: skip
    assert dl.provenance(frame)["levels"][0]["decided_by"] == "declared"
    # word-level on the same corpus: the same lengths, read as words (also obeyed)
    words = per_word(level="word")
    assert dl.check(model, WORD_IS_TOKEN, [words])["level"].to_list() == ["word"]


def test_a_mismatch_on_a_separating_record_names_it_and_the_evidence(model):
    bad = "hello world"  # 11 characters, 2 words, 10 tokens: it separates the levels

    def tokens_but_not_there(r):
        n = len(r) if r == bad else model.symbols(r)
        return [0.0] * n

    h = dl.hypothesis(tokens_but_not_there, name="flaky", kind="continuous")
    data = ["12 34 ab", "the cat", "dog", ONE_OF_EACH, ONE_OF_EACH, bad]
    with pytest.raises(dl.HypothesisError) as err:
        dl.inspect(model, [h], data=data, units=UNITS, eps=None, cache=False, block_size=4)
    assert not isinstance(err.value, dl.LevelError)  # not a question: a wrong value count
    msg = str(err.value)
    for part in ("'flaky'", "11 values", repr(bad), "its level is 'token'", "proved from",
                 "'12 34 ab'", "10 values there"):  # fmt: skip
        assert part in msg, (part, msg)
    partial = err.value.partial_frame  # the first block was read and scored
    assert partial is not None and dl.provenance(partial)["records_read"] == 4


def test_lengths_that_fit_no_level_are_asked_up_front(model):
    five = dl.hypothesis(lambda r: [0.0] * 5, name="five", kind="continuous")
    one = dl.hypothesis(lambda r: 1.0, name="scalar", kind="continuous")
    with Forwards(model) as seen, pytest.raises(dl.LevelError) as err:
        dl.inspect(model, [five, one], data=SEPARATING, units=UNITS, eps=None, cache=False)
    assert seen.n == 0
    msg = str(err.value)
    assert "'five'" in msg and "fit no one level" in msg and "5 values" in msg
    assert "level='record'" in msg  # the scalar one: one value per record


def test_check_is_a_dry_run_with_the_decisions_in_its_provenance(model):
    hyps = [per_token(model), per_word(), dl.hypothesis(is_digit, name="digit")]
    with Forwards(model) as seen:
        frame = dl.check(model, WORD_IS_TOKEN + SEPARATING, hyps)
    assert seen.n == 0
    assert frame.columns == ["hypothesis", "model", "level", "decided_by", "records",
                             "options", "evidence"]  # fmt: skip
    rows = {r["hypothesis"]: r for r in frame.iter_rows(named=True)}
    assert rows["per_token"]["level"] == "token" and rows["per_word"]["level"] == "word"
    assert rows["digit"]["level"] == "char"
    assert dl.provenance(frame)["levels"] == frame.to_dicts()
    # on records that cannot tell words from tokens the frame says so instead of raising
    undecided = dl.check(model, WORD_IS_TOKEN, hyps).filter(
        dl.check(model, WORD_IS_TOKEN, hyps)["level"].is_null()
    )
    assert undecided["decided_by"].to_list() == ["undecidable", "undecidable"]
    assert undecided["options"].to_list() == [["word", "token"], ["word", "token"]]


def test_a_plain_model_reads_every_level_as_its_symbols():
    from conftest import CharLM, encode_chars

    plain = dl.Model(CharLM(hidden=4), encode_chars, name="plain")
    frame = dl.check(plain, ["ab(", "("], [dl.hypothesis(is_digit, name="digit")])
    assert frame.row(0, named=True)["level"] == "symbol"
    assert frame.row(0, named=True)["decided_by"] == "symbols"


def test_records_whose_counts_coincide_are_never_read_as_evidence():
    counts = {"a": {"char": 1, "word": 1, "token": 1}, "ab cd": {"char": 5, "word": 2,
              "token": 3}, "xy": {"char": 2, "word": 1, "token": 2}}  # fmt: skip
    read = []

    def length(i, r):
        read.append(r)
        return counts[r]["token"]

    records = list(enumerate(["a", "a", "ab cd", "xy", "a"]))
    d = decide("h", "m", records, counts.get, length)
    assert d.level == "token" and d.how == "proved"
    assert "a" not in read  # one of each: no evidence
    assert read == ["ab cd", "xy"]  # 'xy' confirms: its tokens differ from its words
    none = decide("h", "m", list(enumerate(["a", "a"])), counts.get, length)
    assert none.how == "undecidable" and none.options == ("char", "word", "token")
    assert read == ["ab cd", "xy"]


def test_token_id_records_are_read_per_token_and_char_levels_asked_up_front(model):
    ids = [model.tokenizer(r)["input_ids"] for r in SEPARATING]
    tokens = dl.hypothesis(lambda rec: [1.0] * len(rec.tokens), name="tokens",
                           kind="continuous")  # fmt: skip
    row = dl.check(model, ids, [tokens]).row(0, named=True)
    assert (row["level"], row["decided_by"]) == ("token", "token ids")
    chars = dl.hypothesis(is_digit, name="chars", level="char")
    with Forwards(model) as seen, pytest.raises(dl.LevelError, match="'chars'.*char-level.*"
                                                "token ids.*batch_decode"):  # fmt: skip
        dl.inspect(model, [tokens, chars], data=ids, units=UNITS, eps=None, cache=False)
    assert seen.n == 0
