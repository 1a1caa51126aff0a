"""Tokens whose character span is empty take no character's value.

A byte-level BPE splits ``"a 1"`` into ``a | Ġ | 1`` and trims the lone ``Ġ``'s
offset to ``(2, 2)``. Pooled, it must not read the next character (the ``1``):
binary *any* over nothing is 0, and the other poolings repeat the nearest
preceding token (the first covered token when the record opens with one).
Checked with the project's byte-level BPE and a RoBERTa-style tokenizer trained here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dni_lab as dl

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import AlignedFamily, HFModel, pool_spans  # noqa: E402
from dni_lab.backend.hypothesis.hypotheses import evaluate_family  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

CORPUS = ["select a from tab", "where x = b", "insert into tab values a b"] * 4
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def roberta_style(corpus: list[str], vocab_size: int = 280):
    """RoBERTa's recipe: byte-level BPE, ``<s> text </s>``, offsets trimmed."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=ROBERTA_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")),
        ("<s>", tok.token_to_id("<s>")),
        trim_offsets=True,
        add_prefix_space=False,
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
    )


def tiny(tok) -> HFModel:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=len(tok), n_positions=32, n_embd=8, n_layer=1, n_head=2
    )
    return HFModel(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="tiny")


@dl.hypothesis(kind="binary", level="char")
def is_digit(record: str) -> list[bool]:
    return [c.isdigit() for c in record]


@dl.hypothesis(kind="continuous", level="char")
def position(record: str) -> np.ndarray:
    return np.arange(len(record), dtype=float)


@dl.hypothesis(kind="categorical", categories=3, level="char")
def char_class(record: str) -> list[int]:
    return [1 if c.isdigit() else 2 if c.isspace() else 0 for c in record]


@dl.hypothesis(kind="categorical", categories=4, level="word")
def word_index(record: str) -> list[int]:
    return list(range(len(record.split())))


HYPS = {"digit": is_digit, "position": position, "class": char_class, "word": word_index}
# record -> (token spans, then per hypothesis the pooled value of each token);
# binary any, continuous mean, categorical first (the defaults)
SAME = {
    "a 1": ([(0, 1), (2, 2), (2, 3)], [0, 0, 1], [0, 0, 2], [0, 0, 1], [0, 0, 1]),
    "b  7": (
        [(0, 1), (2, 2), (3, 3), (3, 4)],
        [0, 0, 0, 1],
        [0, 0, 0, 3],
        [0, 0, 0, 1],
        [0, 0, 0, 1],
    ),
}
EXPECTED = {
    "bpe": {
        **SAME,
        " 1 a": ([(0, 0), (1, 2), (3, 4)], [0, 1, 0], [1, 1, 3], [1, 1, 0], [0, 0, 1]),
        "tab 1 x": (
            [(0, 3), (4, 4), (4, 5), (6, 7)],
            [0, 0, 1, 0],
            [1, 1, 4, 6],
            [0, 0, 1, 0],
            [0, 0, 1, 2],
        ),
    },
    "roberta": {
        **SAME,
        " 1 a": ([(1, 1), (1, 2), (3, 4)], [0, 1, 0], [1, 1, 3], [1, 1, 0], [0, 0, 1]),
        "tab 1 x": (
            [(0, 3), (4, 4), (4, 5), (6, 6), (6, 7)],
            [0, 0, 1, 0, 0],
            [1, 1, 4, 4, 6],
            [0, 0, 1, 1, 0],
            [0, 0, 1, 1, 2],
        ),
    },
}


@pytest.fixture(scope="module", params=["bpe", "roberta"])
def model(request) -> HFModel:
    make = bpe if request.param == "bpe" else roberta_style
    m = tiny(make(CORPUS, vocab_size=280))
    m.meta["which"] = request.param
    return m


def test_empty_span_tokens_take_no_characters_value(model):
    for record, (spans, *values) in EXPECTED[model.meta["which"]].items():
        assert model.offsets(record) == spans, record  # the empty spans are really there
        for (name, hyp), want in zip(HYPS.items(), values, strict=True):
            # as the engine reads it: validated (finite, one value per symbol)
            got = evaluate_family(AlignedFamily(hyp, model), record, len(spans), 0)[:, 0]
            assert got.tolist() == want, (record, name)


def test_pool_spans_edge_cases():
    v = np.asarray([[1.0], [5.0], [3.0]], dtype=np.float32)
    spans = [(0, 0), (0, 2), (2, 2), (2, 3), (3, 3)]
    assert pool_spans(v, spans, "any")[:, 0].tolist() == [0, 5, 0, 3, 0]
    assert pool_spans(v, spans, "first")[:, 0].tolist() == [1, 1, 1, 3, 3]
    assert pool_spans(v, spans, "last")[:, 0].tolist() == [5, 5, 5, 3, 3]
    assert pool_spans(v, spans, "mean")[:, 0].tolist() == [3, 3, 3, 3, 3]
    # a record no token covers (all spans empty, or no characters at all): 0
    assert pool_spans(v, [(1, 1), (2, 2)], "mean")[:, 0].tolist() == [0, 0]
    assert pool_spans(np.zeros((0, 2), np.float32), [(0, 0)], "first").tolist() == [[0, 0]]
