"""Token ids as data: a 2-D id tensor, a list of id lists and a BatchEncoding are records.

A tiny GPT-2 and BERT built from configs (tokenizers trained here, nothing downloaded):
a text and its ids give the same frame, activations equal a hand-written hook on the ids,
hypotheses get a TokenRecord (decoded tokens and ids), special tokens and padding are no
symbols, a plain ``dl.Model`` gets id lists; token ids that cannot be records raise a
``TokenIdsError`` before the model runs. Also ``dl.activations(names=...)`` as a glob or
a callable (TransformerLens's ``names_filter``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab.backend.engine.resolve import as_records
from dni_lab.backend.errors import LayerError, RecordError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import corpus, keyword, padded_tok, tiny_bert, tiny_gpt2  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

TEXTS = corpus(24, seed=5)
#: the tiny models' longest dot product (GPT-2's 4 x 32 MLP): float32 tolerances scale with it
FFN = 128


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(corpus(200, seed=1), n_layer=2)


@pytest.fixture(scope="module")
def bert():
    return tiny_bert(corpus(200, seed=1))


def tokens_of(tok, record) -> list[str]:
    """A record's symbols' texts: its TokenRecord's, or the text's non-special tokens."""
    if isinstance(record, dl.TokenRecord):
        return list(record.tokens)
    ids = tok(record, add_special_tokens=False)["input_ids"]
    return tok.batch_decode([[i] for i in ids])


def hypotheses(tok):
    """A token-level and a record-level hypothesis that read text and token ids alike."""

    @dl.hypothesis(kind="binary", level="token")
    def is_from(record):
        return [t.strip() == "from" for t in tokens_of(tok, record)]

    @dl.hypothesis(kind="continuous", level="record")
    def n_tokens(record):
        return float(len(tokens_of(tok, record)))

    return [is_from, n_tokens]


@contextlib.contextmanager
def counting_forwards(module: nn.Module):
    calls = []
    h = module.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        yield calls
    finally:
        h.remove()


# -- the same frame from text and from its ids -----------------------------------------
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_batch_encoding_gives_the_frame_of_its_texts(gpt2, side):
    module, tok = gpt2
    tok = padded_tok(tok, side)
    model = dl.Model.from_hf(module, tok, name="g")
    hyps = hypotheses(tok)
    kw = dict(eps=None, block_size=8, cache=False)
    from_text = dl.inspect(model, hyps, data=TEXTS, **kw).sort("uid", "hid")
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    assert (enc["attention_mask"] == 0).any()  # padding is there, and must be dropped
    from_ids = dl.inspect(model, hyps, data=enc, **kw).sort("uid", "hid")
    assert from_ids["hid"].to_list() == from_text["hid"].to_list()
    a, b = from_text["unit_score"].to_numpy(), from_ids["unit_score"].to_numpy()
    assert np.isfinite(a).sum() > 0.9 * len(a)
    # the same ids, padding and blocks: the same forward passes
    np.testing.assert_array_equal(a, b)


def test_id_lists_and_an_id_tensor_are_the_same_records(gpt2):
    module, tok = gpt2
    ids = [tok(t)["input_ids"] for t in TEXTS[:6]]
    n = min(len(i) for i in ids)
    square = torch.tensor([i[:n] for i in ids])
    assert as_records(square) == [i[:n] for i in ids]
    enc = tok(TEXTS[:6], return_tensors="pt", padding=True)
    assert as_records(enc) == ids
    assert as_records(tok(TEXTS[:6])) == ids  # unpadded lists of ids
    assert as_records(tok(TEXTS[0])) == [ids[0]]  # tokenizer(text): one record
    model = dl.Model.from_hf(module, tok, name="g")
    kw = dict(eps=None, cache=False)
    f1 = dl.inspect(model, hypotheses(tok), data=ids, **kw)
    f2 = dl.inspect(model, hypotheses(tok), data=enc, **kw)
    np.testing.assert_array_equal(f1["unit_score"].to_numpy(), f2["unit_score"].to_numpy())


def test_bert_special_tokens_run_but_are_no_symbols(bert):
    module, tok = bert
    model = dl.Model.from_hf(module, tok, name="b")
    enc = tok(TEXTS, return_tensors="pt", padding=True)
    assert enc["input_ids"][0, 0] == tok.cls_token_id  # [CLS] ... [SEP] fed as they are
    cache = dl.activations(model, enc, ["blocks.1.hook_resid_post"])
    text = dl.activations(model, TEXTS, ["blocks.1.hook_resid_post"])
    assert cache.lengths.tolist() == [len(tokens_of(tok, t)) for t in TEXTS]
    torch.testing.assert_close(cache["blocks.1.hook_resid_post"], text["blocks.1.hook_resid_post"])
    hyps = hypotheses(tok)
    f1 = dl.inspect(model, hyps, data=TEXTS, eps=None, cache=False)
    f2 = dl.inspect(model, hyps, data=enc, eps=None, cache=False)
    np.testing.assert_allclose(
        f1["unit_score"].to_numpy(), f2["unit_score"].to_numpy(), atol=1e-6, equal_nan=True
    )


@pytest.mark.parametrize("pool", ["last", "mean"])
def test_record_level_units_read_ids_as_they_read_text(gpt2, pool):
    module, tok = gpt2
    model = dl.Model.from_hf(module, padded_tok(tok, "left"), name="p", pool=pool)
    enc = model.tokenizer(TEXTS[:9], return_tensors="pt", padding=True)
    cache = dl.activations(model, enc, ["blocks.1.hook_resid_post"])
    text = dl.activations(model, TEXTS[:9], ["blocks.1.hook_resid_post"])
    assert cache.lengths.tolist() == [1] * 9
    assert_close_f32(cache["blocks.1.hook_resid_post"], text["blocks.1.hook_resid_post"],
                     reduction=FFN)  # fmt: skip


# -- activations equal a hand-written hook on the ids ----------------------------------
def test_activations_of_an_id_tensor_equal_a_hand_hook(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, len(tok), (5, 9), generator=g)
    ids[ids == tok.eos_token_id] = 7  # no special token: every id is a symbol
    cache = dl.activations(model, ids, ["blocks.1.hook_resid_post", "blocks.0.attn.hook_z"])
    assert cache.lengths.tolist() == [9] * 5
    seen = {}
    hooks = [
        module.transformer.h[1].register_forward_hook(
            lambda _m, _a, out: seen.setdefault(
                "post", (out[0] if isinstance(out, tuple) else out).detach().clone()
            )
        ),
        module.transformer.h[0].attn.c_proj.register_forward_pre_hook(
            lambda _m, a: seen.setdefault("z", a[0].detach().clone())
        ),
    ]
    try:
        with torch.inference_mode():
            module(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    assert_close_f32(cache["blocks.1.hook_resid_post"], seen["post"], reduction=FFN)
    assert_close_f32(cache["blocks.0.attn.hook_z"], seen["z"], reduction=FFN)


# -- what hypotheses get ----------------------------------------------------------------
def test_hypotheses_get_the_decoded_tokens_and_ids(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    got = []

    @dl.hypothesis(kind="continuous", level="token")
    def first_id(record):
        got.append(record)
        return np.asarray(record.ids, dtype=float)

    bos = tok.eos_token_id  # TransformerLens's to_tokens prepends it: fed, not a symbol
    ids = [[bos, *tok(t)["input_ids"]] for t in TEXTS[:4]]
    dl.inspect(model, first_id, data=ids, eps=None, cache=False, units=[("transformer.h.0", [0])])
    assert len(got) == 4
    for rec, row, text in zip(got, ids, TEXTS[:4], strict=True):
        assert isinstance(rec, dl.TokenRecord)
        assert rec.ids == tuple(row[1:])
        assert list(rec) == tok.batch_decode([[i] for i in row[1:]])
        assert len(rec) == len(row) - 1 and rec[0] == rec.tokens[0]
        assert rec.text == text
    lengths = dl.activations(model, ids, ["blocks.0.hook_resid_post"]).lengths
    assert lengths.tolist() == [len(r) - 1 for r in ids]


def test_a_character_level_hypothesis_on_token_ids_is_refused(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    ids = tok(TEXTS[:3], return_tensors="pt", padding=True)
    with pytest.raises(dl.HypothesisError, match="char-level.*token ids.*batch_decode"):
        dl.inspect(model, keyword, data=ids, eps=None, cache=False)


# -- a plain dl.Model ----------------------------------------------------------------------
class Tagger(nn.Module):
    def __init__(self, vocab: int = 50):
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.lstm = nn.LSTM(8, 6, batch_first=True)

    def forward(self, x):
        return self.lstm(self.embed(x))[0]


def pad_ids(records):
    assert all(isinstance(r, list) for r in records)  # id lists, whatever data= was
    out = torch.zeros(len(records), max(len(r) for r in records), dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor(r)
    return out


@dl.hypothesis(kind="binary")
def even(record):
    return [i % 2 == 0 for i in record]


def test_a_plain_model_reads_every_form_as_id_lists():
    torch.manual_seed(0)
    model = dl.Model(Tagger(), encode=pad_ids, name="t")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (12, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[::2, 5:] = 0  # every other record is 5 ids long
    enc = transformers.BatchEncoding({"input_ids": ids, "attention_mask": mask})
    lists = [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]
    frames = [
        dl.inspect(model, even, data=d, eps=None, cache=False)["unit_score"].to_numpy()
        for d in (lists, enc)
    ]
    np.testing.assert_array_equal(frames[0], frames[1])
    whole = dl.inspect(model, even, data=ids, eps=None, cache=False)["unit_score"].to_numpy()
    assert np.isfinite(whole).all() and not np.array_equal(whole, frames[0])
    cache = dl.activations(model, enc, ["lstm"])
    assert cache.lengths.tolist() == [5, 7] * 6


# -- bad input: named before the model runs ---------------------------------------------
def bad_inputs(tok, vocab):
    ids = tok(TEXTS[:4], return_tensors="pt", padding=True)
    return [
        (torch.zeros(2, 3, 4, dtype=torch.long), r"3-D tensor of integers \(2, 3, 4\)"),
        (torch.zeros(5, dtype=torch.long), r"1-D tensor is one record: pass ids\[None\]"),
        ({"input_ids": ids["input_ids"].float()}, r"holds float32 values; token ids"),
        (
            {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"][:, :-1]},
            r"attention_mask'\] has \d+ positions in row 0 but its input_ids \d+",
        ),
        (
            {"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"] * 2},
            "values other than 0 and 1",
        ),
        ([[1, 2, 3], [4, vocab + 5]], rf"token id {vocab + 5} of record .*outside model 'g'"),
        (torch.rand(3, 4), r"got a 1-D float32 Tensor \(4,\) as one record.*ids\.long\(\)"),
    ]


def test_token_ids_that_cannot_be_records_are_named_before_the_model_runs(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    vocab = module.get_input_embeddings().num_embeddings
    for data, message in bad_inputs(tok, vocab):
        with counting_forwards(module) as calls:
            with pytest.raises(dl.TokenIdsError, match=message):
                dl.inspect(model, hypotheses(tok), data=data, eps=None, cache=False)
            with pytest.raises(dl.TokenIdsError, match=message):
                dl.activations(model, data, ["blocks.0.hook_resid_post"])
        assert not calls, message


def test_out_of_vocabulary_ids_in_a_stream_fail_at_their_block(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")

    def stream():
        yield from (tok(t)["input_ids"] for t in TEXTS[:8])
        yield [3, -1]

    with pytest.raises(dl.TokenIdsError, match=r"token id -1 of record \[3, -1\]"):
        dl.inspect(model, hypotheses(tok), data=stream(), eps=None, cache=False, block_size=4)


def test_text_and_ids_in_one_block_are_refused(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    with pytest.raises(RecordError, match="mixes text and token-id records"):
        dl.activations(model, [TEXTS[0], tok(TEXTS[1])["input_ids"]], ["transformer.h.0"])
    with pytest.raises(RecordError, match="record 1 of the data"):
        dl.inspect(model, hypotheses(tok), data=[TEXTS[0], [3, 4]], eps=None, cache=False)


def test_long_id_records_are_cut_skipped_or_refused(gpt2):
    module, tok = gpt2
    long = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    cut = dl.Model.from_hf(module, tok, name="c", max_length=6, truncate=True)
    assert cut.symbols(long) == 6 and cut.token_record(long).ids == tuple(long[:6])
    skip = dl.Model.from_hf(module, tok, name="s", max_length=6, skip_long=True)
    assert skip.skips(long) and not skip.skips(long[:6]) and skip.symbols(long) == 0
    strict = dl.Model.from_hf(module, tok, name="r", max_length=6)
    with pytest.raises(dl.DNIError, match="holds 10 ids, more than model 'r' reads"):
        strict.symbols(long)


# -- names as a glob or a callable ---------------------------------------------------------
def test_names_as_a_callable_or_a_glob(gpt2):
    module, tok = gpt2
    model = dl.Model.from_hf(module, tok, name="g")
    enc = tok(TEXTS[:5], return_tensors="pt", padding=True)
    by_fn = dl.activations(model, enc, lambda name: name.endswith("hook_z"))
    assert by_fn.names == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    by_list = dl.activations(model, enc, ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"])
    for n in by_list.names:
        assert torch.equal(by_fn[n], by_list[n])
    by_glob = dl.activations(model, enc, "blocks.*.hook_resid_post")
    assert by_glob.names == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    mixed = dl.activations(model, enc, ["transformer.h.*.mlp.c_fc", "blocks.0.hook_mlp_out"])
    assert mixed.names == ["transformer.h.0.mlp.c_fc", "transformer.h.1.mlp.c_fc",
                           "blocks.0.hook_mlp_out"]  # fmt: skip
    with pytest.raises(LayerError, match="names filter '<lambda>' selects none of model 'g'"):
        dl.activations(model, enc, lambda name: name.endswith("hook_nothing"))
    with pytest.raises(LayerError, match="glob 'blocks.*.hook_resid_pots' selects none.*Did you"):
        dl.activations(model, enc, "blocks.*.hook_resid_pots")


def test_a_plain_model_filters_its_addresses():
    model = dl.Model(Tagger(), encode=pad_ids, name="t")
    cache = dl.activations(model, [[1, 2, 3], [4, 5]], lambda name: name.startswith("ls"))
    assert cache.names == [a for a in model.addresses if a.startswith("ls")]
    assert cache.names[:2] == ["lstm", "lstm.l0"]  # the stack, its layer, its cells
    by_list = dl.activations(model, [[1, 2, 3], [4, 5]], ["lstm"])
    assert torch.equal(cache["lstm"], by_list["lstm"])
