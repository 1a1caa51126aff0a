"""Long documents (truncate / stride windows), record-level units, forward_batch and the
errors a transformers user meets first; tiny models built from configs, tokenizers trained here."""

from __future__ import annotations

import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError
from dni_lab.backend.extraction.behaviors import layer_plan, symbol_activations
from dni_lab.backend.extraction.extract import on_device
from dni_lab.backend.extraction.length_batches import length_batches

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import corpus, keyword, tiny_bert, tiny_gpt2  # noqa: E402
from tolerances import assert_close_f32  # noqa: E402

from dni_lab.backend.hf import HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import wordpiece  # noqa: E402

CPU = torch.device("cpu")
#: the longest dot products of the tiny models (their MLPs): float32 tolerances scale with
#: them (tests/tolerances.py)
GPT2_FFN, BERT_FFN = 128, 64


@pytest.fixture(scope="module")
def bert():
    return tiny_bert(corpus(200, seed=1))


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(corpus(200, seed=1))


def acts(model: HFModel, layer: str, records: list[str]) -> torch.Tensor:
    plan = layer_plan(model, layer, records, CPU)
    ((addr, units),) = plan.layer_units.items()
    with on_device(model, CPU):
        ((_, a, _),) = list(symbol_activations(model, records, addr, units, CPU))
    return a


def test_a_long_record_names_truncate_and_stride(gpt2):
    module, tok = gpt2
    long = " ".join(corpus(1, lo=70, hi=71))
    with pytest.raises(DNIError, match="truncate=True.*stride=N"):
        HFModel(module, tok).symbols(long)
    assert HFModel(module, tok, truncate=True).symbols(long) == 64
    with pytest.raises(DNIError, match="stride must be"):
        HFModel(module, tok, stride=64)
    with pytest.raises(DNIError, match="does not combine"):
        HFModel(module, tok, stride=8, truncate=True)


def test_truncated_record_reads_its_first_tokens(bert):
    module, tok = bert
    m = HFModel(module, tok, truncate=True)
    long = " ".join(corpus(1, lo=80, hi=81))
    n = m.symbols(long)
    assert n == 64 - 2  # [CLS] and [SEP] take two positions
    got = acts(m, "blocks.1.hook_resid_post", [long, "select a"])
    with torch.inference_mode():
        enc = tok(long, truncation=True, max_length=64, return_tensors="pt")
        want = module(**enc).last_hidden_state[0, 1:-1]
    assert_close_f32(got[0, :n], want, reduction=BERT_FFN)


@pytest.mark.parametrize("stride", [0, 6])
def test_stride_windows_read_each_token_once_with_left_context(gpt2, stride):
    """Every token of a 3-window record equals a hand-run window that holds it."""
    module, tok = gpt2
    m = HFModel(module, tok, stride=stride)
    long = " ".join(corpus(1, seed=5, lo=140, hi=141))
    ids = tok(long)["input_ids"]
    assert len(ids) > 2 * 64  # three windows at least
    n = m.symbols(long)
    assert n == len(ids)
    got = acts(m, "blocks.0.hook_resid_post", ["select a", long])
    assert got.shape[1] == n
    step = 64 - stride
    with torch.inference_mode():
        for g in range(n):
            k = 0 if g < 64 else (g - 64) // step + 1  # the first window with context
            win = torch.as_tensor(ids[k * step : k * step + 64])[None]
            out = module(input_ids=win, output_hidden_states=True).hidden_states[1][0]
            assert_close_f32(got[1, g], out[g - k * step], reduction=GPT2_FFN)
            assert g - k * step >= (stride if k else 0)
    short = acts(HFModel(module, tok), "blocks.0.hook_resid_post", ["select a"])
    assert_close_f32(got[0, :2], short[0, :2], reduction=GPT2_FFN)


def test_stride_scores_a_long_document_end_to_end(gpt2):
    module, tok = gpt2
    data = [*corpus(6, seed=2), " ".join(corpus(1, seed=3, lo=150, hi=151))]
    f = dl.inspect(HFModel(module, tok, stride=16), [keyword], data=data, eps=None, cache=False)
    assert f.height == 2 * 32 and f["unit_score"].is_not_null().all()


@pytest.mark.parametrize("how", ["cls", "last", "mean"])
def test_record_level_units(bert, how):
    module, tok = bert
    m = HFModel(module, tok, pool=how, name=f"bert-{how}")
    recs = ["select a from tab", "x1", "insert into tab values a b"]
    assert [m.symbols(r) for r in recs] == [1, 1, 1]
    got = acts(m, "blocks.1.hook_resid_post", recs)
    assert got.shape[:2] == (3, 1)
    for r, rec in enumerate(recs):
        with torch.inference_mode():
            h = module(**tok(rec, return_tensors="pt")).last_hidden_state[0]
        want = {"cls": h[0], "last": h[-1], "mean": h.mean(0)}[how]
        assert_close_f32(got[r, 0], want, reduction=BERT_FFN)


def test_record_level_hypotheses_end_to_end(bert):
    module, tok = bert

    @dl.hypothesis(kind="continuous")
    def n_words(record: str) -> list[float]:
        return [float(len(record.split()))]  # one value: the record

    data = corpus(40, seed=4)
    f = dl.inspect(HFModel(module, tok, pool="cls"), [n_words, keyword], data=data,
                   eps=None, cache=False)
    assert f.height == 2 * 32 * 2 and f["unit_score"].is_not_null().any()
    assert set(f["hid"]) == {"n_words", "keyword"}  # the char-level one pooled per record


def test_word_level_hypothesis_pools_over_the_whole_record(bert):
    from dni_lab.backend.hf import AlignedFamily

    m = HFModel(*bert, pool="cls")
    words = dl.hypothesis(kind="continuous")(lambda r: [float(len(w)) for w in r.split()])
    assert AlignedFamily(words, m).evaluate("select a from tab")[:, 0].tolist() == [3.5]  # 6 1 4 3
    any_from = dl.hypothesis(kind="binary")(lambda r: [w == "from" for w in r.split()])
    assert AlignedFamily(any_from, m).evaluate("select a from tab")[:, 0].tolist() == [1.0]


def test_record_level_and_token_level_hypotheses_are_cached_apart(bert):
    module, tok = bert
    assert HFModel(module, tok, pool="cls").symbol_space != HFModel(module, tok).symbol_space
    with pytest.raises(DNIError, match="record-level"):
        HFModel(module, tok, pool="max")


def test_forward_batch_gives_the_same_frame_and_less_padding(gpt2):
    module, tok = gpt2
    data = corpus(64, seed=6, lo=1, hi=30)
    frames, waste = [], []
    for fb in (4, 64):
        m = HFModel(module, tok, name="g")
        f = dl.inspect(m, [keyword], data=data, eps=None, block_size=64, forward_batch=fb,
                       cache=False)
        frames.append(f.sort("uid", "hid"))
        waste.append(dl.provenance(f)["padding_waste"]["g"])
    a, b = frames
    scores = ["unit_score", "group_score", "err"]  # float sums in another order: 1e-8 apart
    assert a.drop(scores).equals(b.drop(scores))
    n_symbols = sum(m.symbols(r) for r in data)  # scores sum over every symbol read
    for c in scores:
        assert_close_f32(a[c], b[c], reduction=n_symbols, equal_nan=True, msg=c)
    assert waste[0] < 0.1 < waste[1]  # sorted by length: little padding
    # the provenance counts the passes length_batches cut, symbol slot by symbol slot
    n = torch.tensor([m.symbols(r) for r in data])
    passes = length_batches(n, 4)
    assert waste[0] == pytest.approx(1 - int(n.sum()) / sum(len(p) * int(n[p].max())
                                                             for p in passes))  # fmt: skip
    with pytest.raises(DNIError, match="forward_batch"):
        dl.inspect(HFModel(module, tok), [keyword], data=data, forward_batch=0)


def test_errors_a_transformers_user_meets(gpt2, bert):
    module, tok = gpt2
    m = HFModel(module, tok)
    # token ids are records (tests/test_token_records.py); a list of words is neither
    with pytest.raises(DNIError, match="reads text or token ids"):
        dl.inspect(m, [keyword], data=[["select", "a"]], cache=False)
    small = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=50, n_positions=64, n_embd=16, n_layer=1, n_head=2)).eval()
    with pytest.raises(DNIError, match="embeds 50 ids.*resize_token_embeddings"):
        dl.inspect(HFModel(small, tok), [keyword], data=corpus(4), cache=False)
    t5 = transformers.T5Model(transformers.T5Config(
        vocab_size=len(bert[1]), d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2))
    with pytest.raises(DNIError, match=r"decoder.*decoder_input='same'"):
        HFModel(t5, bert[1]).resolve_layer("decoder.block.0")  # tests/test_hf_seq2seq.py
    enc = HFModel(t5.get_encoder(), bert[1], name="t5enc")  # the documented way works
    f = dl.inspect(enc, [keyword], data=corpus(8), eps=None, cache=False)
    assert f.height == 16 and f.filter(pl.col("unit_score").is_not_null()).height > 0


def test_wordpiece_training_is_deterministic():
    text = corpus(300, seed=9)
    a, b = wordpiece(text, vocab_size=90), wordpiece(text, vocab_size=90)
    assert a.get_vocab() == b.get_vocab()
    probe = "select  ab tab where insert valuesx"
    assert a(probe)["input_ids"] == b(probe)["input_ids"]


def test_a_device_map_model_is_never_moved_and_reads_the_same(gpt2, tmp_path):
    """A model dispatched by accelerate (block 1 offloaded to disk: meta weights loaded by
    hooks at run time) on the CPU: no .to() call, values equal to the plain model's."""
    import copy

    accelerate = pytest.importorskip("accelerate")
    module, tok = gpt2
    dm = {f"transformer.{n}": "cpu" for n in ("wte", "wpe", "drop", "h.0", "ln_f")}
    dm |= {"transformer.h.1": "disk", "lm_head": "cpu"}
    placed = accelerate.dispatch_model(copy.deepcopy(module), device_map=dm, offload_dir=tmp_path)
    assert placed.hf_device_map == dm
    assert placed.transformer.h[1].mlp.c_fc.weight.device.type == "meta"
    calls = []
    real_to = placed.to
    placed.to = lambda *a, **k: calls.append(a) or real_to(*a, **k)
    m = HFModel(placed, tok, name="placed")
    data = corpus(24, seed=8)
    for layer in ("blocks.1.hook_resid_post", "blocks.1.mlp.hook_post", "blocks.1.attn.hook_z"):
        assert_close_f32(acts(m, layer, data), acts(HFModel(module, tok), layer, data),
                         reduction=GPT2_FFN, msg=layer)
    f = dl.inspect(m, [keyword], data=data, eps=None, device="cpu", cache=False)
    assert f.height == 2 * 32 and calls == []
    # offloaded weights are hashed from where accelerate keeps them
    from dni_lab.backend.engine.provenance import weights_sha256

    assert dl.provenance(f)["weights_sha256"]["placed"] == weights_sha256(module)


def test_skip_long_counts_the_skipped_records(gpt2):
    module, tok = gpt2
    long = " ".join(corpus(1, seed=3, lo=150, hi=151))
    data = corpus(10, seed=2)
    data[3] = data[7] = long
    m = HFModel(module, tok, skip_long=True, name="g")
    assert m.symbols(long) == 0 and m.skips(long) and not m.skips(data[0])
    f = dl.inspect(m, [keyword], data=data, eps=None, block_size=4, cache=False)
    assert dl.provenance(f)["skipped_records"] == {"g": 2}
    kept = [r for r in data if r != long]
    g = dl.inspect(HFModel(module, tok, name="g"), [keyword], data=kept, eps=None, cache=False)
    # as if the long records were not there: scores sum over the symbols of the kept ones
    assert_close_f32(f.sort("uid")["unit_score"], g.sort("uid")["unit_score"],
                     reduction=sum(m.symbols(r) for r in kept), equal_nan=True)
    assert (f["n_records"] == 10).all()  # records read, skipped ones included
    with pytest.raises(DNIError, match="pass one"):
        HFModel(module, tok, skip_long=True, truncate=True)
    assert m.symbol_space != HFModel(module, tok).symbol_space
