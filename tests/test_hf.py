"""Hugging Face transformers as models: GPT-2 and BERT built from tiny configs (no download)
with tokenizers trained here; padding sides, defaults, alignment, placement, hook names."""

from __future__ import annotations

import contextlib

import numpy as np
import polars as pl
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import LayerError
from dni_lab.backend.extraction.extract import on_device

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import corpus, keyword, padded_tok, tiny_bert, tiny_gpt2  # noqa: E402

from dni_lab.backend.hf import AlignedFamily, HFModel  # noqa: E402


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(corpus(200, seed=1), n_layer=3)


@pytest.fixture(scope="module")
def bert():
    return tiny_bert(corpus(200, seed=1))


@pytest.fixture(scope="module")
def roberta(bert):
    """Positions derived from the padding (offset by padding_idx): no position_ids passed."""
    tok = bert[1]
    torch.manual_seed(0)
    cfg = transformers.RobertaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=66,
        pad_token_id=tok.pad_token_id,
    )
    return transformers.RobertaModel(cfg).eval(), tok


@dl.hypothesis(kind="continuous", level="char")
def position(record: str) -> np.ndarray:
    return np.arange(len(record), dtype=float)


@pytest.mark.parametrize("which", ["gpt2", "bert", "roberta"])
def test_left_and_right_padding_give_identical_scores(which, request):
    module, tok = request.getfixturevalue(which)
    data = corpus(48, seed=3)  # lengths vary a lot inside a block: padding matters
    frames = []
    for side in ("right", "left"):
        model = HFModel(module, padded_tok(tok, side), name=which)
        f = dl.inspect(model, [keyword, position], data=data, eps=None, block_size=16, cache=False)
        frames.append(f.sort("uid", "hid")["unit_score"].to_numpy())
    assert np.isfinite(frames[0]).sum() > 0.9 * len(frames[0])
    np.testing.assert_allclose(frames[0], frames[1], atol=1e-4, equal_nan=True)


def test_symbols_skip_special_tokens_and_keep_offsets(bert, gpt2):
    bm = HFModel(*bert, name="bert")
    # [CLS] select a from tab [SEP]: special tokens run but are not symbols
    assert bm.offsets("select a from tab") == [(0, 6), (7, 8), (9, 13), (14, 17)]
    assert bm.symbols("select a from tab") == 4
    gm = HFModel(*gpt2, name="gpt2")
    spans = gm.offsets("select a")
    assert spans[0] == (0, 6) and spans[-1][1] == 8


def test_behaviors_of_a_symbol_do_not_depend_on_batch_or_padding(gpt2):
    module, tok = gpt2
    left = HFModel(module, padded_tok(tok, "left"), name="g")
    recs = ["select a from tab where x1 = 1", "a b"]
    outs = []
    for model, batch in ((left, recs), (left, recs[1:])):
        with model.capture(["transformer.h.1"]) as store, torch.inference_mode():
            model.forward(model.encode(batch))
        outs.append(store["transformer.h.1"][-1, : model.symbols("a b")])
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)


def test_defaults_are_the_blocks_on_both_architectures_in_one_call(gpt2, bert):
    gm, bm = HFModel(*gpt2, name="gpt2"), HFModel(*bert, name="bert")
    f = dl.inspect([gm, bm], [keyword], data=corpus(40), eps=None, block_size=20, cache=False)
    layers = f.group_by("mid").agg(pl.col("layer").unique().sort()).sort("mid")
    assert layers["layer"].to_list() == [
        ["encoder.layer.0", "encoder.layer.1"],
        ["transformer.h.0", "transformer.h.1", "transformer.h.2"],
    ]
    assert f.filter(pl.col("mid") == "gpt2").height == 3 * 32
    assert not f["layer"].str.contains("wpe|lm_head|pooler").any()
    # positions count blocks
    assert gm.resolve_layer(2) == "transformer.h.2" and bm.resolve_layer(-1) == "encoder.layer.1"


def test_units_per_model_and_addressable_parts(gpt2, bert):
    gm, bm = HFModel(*gpt2, name="gpt2"), HFModel(*bert, name="bert")
    units = {
        "gpt2": [
            ("blocks.0.attn.hook_z", [0, 8]),  # head 0 dim 0, head 1 dim 0
            "blocks.1.mlp.hook_post",  # MLP neurons
            "blocks.2.hook_attn_out",
            ("transformer.wpe", [0]),  # broadcast (1, T, D): on request it still works
        ],
        "bert": ["blocks.0.hook_mlp_out", 1],
    }
    f = dl.inspect([gm, bm], [keyword], data=corpus(24), eps=None, units=units, cache=False)
    widths = dict(f.group_by("layer").len().iter_rows())
    assert widths == {
        "transformer.h.0.attn.hook_z": 2,
        "transformer.h.1.mlp.act": 128,
        "transformer.h.2.attn": 32,
        "transformer.wpe": 1,
        "encoder.layer.0.output.dense": 32,
        "encoder.layer.1": 32,
    }
    with pytest.raises(LayerError, match="not in this inspection"):
        dl.inspect([gm], [keyword], data=corpus(4), units={"gtp2": [0]})


def test_transformerlens_and_nnsight_names(gpt2, bert):
    gm, bm = HFModel(*gpt2, name="gpt2"), HFModel(*bert, name="bert")
    assert gm.resolve_layer("blocks.1.hook_resid_post") == "transformer.h.1"
    assert gm.resolve_layer("blocks.1.hook_resid_pre") == "transformer.h.0"
    assert gm.resolve_layer("blocks.0.hook_resid_pre") == "transformer.drop"
    assert gm.resolve_layer("blocks.0.hook_mlp_out") == "transformer.h.0.mlp"
    assert gm.resolve_layer("blocks.2.attn.hook_z") == "transformer.h.2.attn.hook_z"
    assert bm.resolve_layer("blocks.0.hook_attn_out") == "encoder.layer.0.attention.output.dense"
    assert bm.resolve_layer("blocks.1.mlp.hook_post") == (
        "encoder.layer.1.intermediate.intermediate_act_fn"
    )
    assert bm.resolve_layer("blocks.0.hook_resid_pre") == "embeddings"
    assert gm.resolve_layer("model.transformer.h[1].mlp.output") == "transformer.h.1.mlp"
    assert gm.resolve_layer("transformer.h[0].attn") == "transformer.h.0.attn"
    with pytest.raises(LayerError, match="has 3 blocks"):
        gm.resolve_layer("blocks.7.hook_resid_post")
    with pytest.raises(LayerError, match="not supported"):
        gm.resolve_layer("blocks.0.hook_q_input")
    # nnsight's .input: the module's first positional input (tests/test_tl_meanings.py)
    assert gm.resolve_layer("model.transformer.h[0].mlp.input") == "transformer.h.0.mlp.input"
    with pytest.raises(LayerError, match="first positional input"):
        gm.resolve_layer("model.transformer.h[0].mlp.inputs")


def test_heads_are_the_out_projection_input(gpt2):
    module, tok = gpt2
    gm = HFModel(module, tok, name="gpt2")
    seen = {}
    h = module.transformer.h[0].attn.c_proj.register_forward_pre_hook(
        lambda _m, a: seen.setdefault("z", a[0].detach().clone())
    )
    try:
        with gm.capture(["transformer.h.0.attn.hook_z"]) as store, torch.inference_mode():
            gm.forward(gm.encode(["select a", "from tab where"]))
    finally:
        h.remove()
    z = store["transformer.h.0.attn.hook_z"]
    torch.testing.assert_close(z[1], seen["z"][1, : z.shape[1]])  # right padding: same slots


def test_character_hypothesis_aligns_to_tokens(bert):
    bm = HFModel(*bert, name="bert", pool={"continuous": "last"})
    rec = "select a from tab"  # tokens: select | a | from | tab
    fam = AlignedFamily(
        dl.hypothesis(kind="binary", level="char")(lambda r: [c == "a" for c in r]), bm
    )
    assert fam.evaluate(rec)[:, 0].tolist() == [0, 1, 0, 1]  # "any": 'tab' holds an a
    cont = AlignedFamily(position, bm)
    assert cont.evaluate(rec)[:, 0].tolist() == [5, 7, 12, 16]  # "last" character's index
    mean = AlignedFamily(position, HFModel(*bert, name="b2"))
    assert mean.evaluate(rec)[:, 0].tolist() == [2.5, 7, 10.5, 15]

    @dl.hypothesis(kind="categorical", categories=5)
    def word_index(r):  # one value per word
        return list(range(len(r.split())))

    # "ab" is two word pieces (a, ##b): both belong to word 1
    assert bm.offsets("select  ab tab") == [(0, 6), (8, 9), (9, 10), (11, 14)]
    assert AlignedFamily(word_index, bm).evaluate("select  ab tab")[:, 0].tolist() == [0, 1, 1, 2]
    tokens = AlignedFamily(dl.hypothesis(lambda r: [3, 1, 4, 1], level="token"), bm)
    assert tokens.evaluate(rec)[:, 0].tolist() == [3, 1, 4, 1]
    # 4 words and 4 tokens: undeclared, the length cannot say which it is
    with pytest.raises(dl.HypothesisError, match="per word or per token.*level="):
        AlignedFamily(dl.hypothesis(lambda r: [3, 1, 4, 1]), bm).evaluate(rec)
    # NaN is "undefined": a token whose characters are all undefined is undefined
    nan = AlignedFamily(dl.hypothesis(lambda r: [float("nan")] * len(r)), bm)
    assert np.isnan(nan.evaluate(rec)).all()
    inf = AlignedFamily(dl.hypothesis(lambda r: [float("inf")] * len(r)), bm)
    with pytest.raises(dl.HypothesisError, match="record 'select a from tab'"):
        inf.evaluate(rec)
    bad = AlignedFamily(dl.hypothesis(lambda r: [0, 1, 0, 1, 0, 1, 1]), bm)
    with pytest.raises(dl.HypothesisError, match="one value per character, word or token"):
        bad.evaluate(rec)


def test_alignment_is_part_of_the_cache_key(bert, gpt2):
    bm = HFModel(*bert, name="bert")
    other = HFModel(*bert, name="bert2", pool={"binary": "first"})
    gm = HFModel(*gpt2, name="gpt2")
    fps = {
        keyword.fingerprint(),
        AlignedFamily(keyword, bm).fingerprint(),
        AlignedFamily(keyword, other).fingerprint(),
        AlignedFamily(keyword, gm).fingerprint(),
    }
    assert None not in fps and len(fps) == 4
    assert AlignedFamily(keyword, bm).fingerprint() == AlignedFamily(keyword, bm).fingerprint()


def test_cached_run_matches_uncached_with_an_lstm_alongside(gpt2, tmp_path):
    """A char model and a token model in one call read the same hypothesis library."""
    from tests.conftest import CharLM

    data = [r.replace(" ", "") for r in corpus(30)]
    vocab = sorted(set("".join(data)))
    lstm = dl.Model(
        CharLM(hidden=8),
        encode=lambda rs: torch.nn.utils.rnn.pad_sequence(
            [torch.tensor([vocab.index(c) % 14 + 1 for c in r]) for r in rs], batch_first=True
        ),
        name="lstm",
    )
    gm = HFModel(*gpt2, name="gpt2")
    kw = {"data": data, "eps": None, "units": {"lstm": [("lstm", "*")]}}
    first = dl.inspect([lstm, gm], [keyword, position], cache=tmp_path / "c", **kw)
    again = dl.inspect([lstm, gm], [keyword, position], cache=tmp_path / "c", **kw)
    plain = dl.inspect([lstm, gm], [keyword, position], cache=False, **kw)
    for f in (again, plain):
        np.testing.assert_allclose(
            first.sort("mid", "uid", "hid")["unit_score"].to_numpy(),
            f.sort("mid", "uid", "hid")["unit_score"].to_numpy(),
            atol=1e-6,
        )
    assert set(first["mid"]) == {"lstm", "gpt2"}


def test_a_placed_model_is_not_moved(gpt2, monkeypatch):
    module, tok = gpt2
    calls = []
    monkeypatch.setattr(module, "hf_device_map", {"": "cpu"}, raising=False)
    monkeypatch.setattr(module, "to", lambda *a, **k: calls.append(a) or module)
    gm = HFModel(module, tok, name="gpt2")
    with on_device(gm, torch.device("cuda")):  # placed: never moved, whatever the target
        pass
    dl.inspect(gm, [keyword], data=corpus(20), eps=None, device="cpu", block_size=8)
    assert calls == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_model_on_the_gpu_stays_there(gpt2):
    import copy

    module = copy.deepcopy(gpt2[0]).cuda()
    ptr = module.transformer.h[0].mlp.c_fc.weight.data_ptr()
    for device in ("auto", "cpu"):  # also when the inspection itself runs on the CPU
        model = HFModel(module, gpt2[1], name="g")
        f = dl.inspect(model, [keyword], data=corpus(20), eps=None, device=device)
        assert module.transformer.h[0].mlp.c_fc.weight.data_ptr() == ptr and f.height == 3 * 32


def test_bad_tokenizers_are_named(gpt2):
    module, tok = gpt2
    with pytest.raises(TypeError, match="fast tokenizer"):
        HFModel(module, object())
    import copy

    nopad = copy.deepcopy(tok)
    nopad.pad_token = None
    with pytest.raises(ValueError, match="pad token"):
        dl.Model.from_hf(module, nopad)
    with pytest.raises(ValueError, match="more than model"):
        HFModel(module, tok).symbols("select " * 80)


def test_gradient_behavior_reads_symbols_not_positions(gpt2):
    module, tok = gpt2
    data = corpus(12, seed=5)
    scores = []
    for side in ("right", "left"):
        model = HFModel(module, padded_tok(tok, side), name="g")
        f = dl.inspect(
            model,
            [keyword],
            data=data,
            eps=None,
            units=[("blocks.0.hook_resid_post", [0, 1])],
            behavior="gradient",
            cache=False,
        )
        scores.append(f.sort("uid")["unit_score"].to_numpy())
    assert np.isfinite(scores[0]).all()
    np.testing.assert_allclose(scores[0], scores[1], atol=1e-4)


def test_behavior_source_reads_tokens_and_aligned_signals(gpt2):
    from dni_lab.backend.extraction.behaviors import BehaviorSource

    module, tok = gpt2
    gm = HFModel(module, padded_tok(tok, "left"), name="gpt2")
    recs = corpus(6, seed=9)
    src = BehaviorSource(gm, recs, [keyword])
    sel = {"mid": "gpt2", "layer": "transformer.h.1", "unit": 3}
    acts = src.activations(sel, range(len(recs)))
    sig = src.signal("keyword", range(len(recs)), gm)
    assert [len(a) for a in acts] == [gm.symbols(r) for r in recs] == [len(s) for s in sig]
    assert sig[0].tolist() == AlignedFamily(keyword, gm).evaluate(recs[0])[:, 0].tolist()
    with gm.capture(["transformer.h.1"]) as store, torch.inference_mode():
        gm.forward(gm.encode(recs))
    np.testing.assert_allclose(acts[2], store["transformer.h.1"][2, : len(acts[2]), 3], atol=1e-5)


@pytest.mark.slow
def test_parens_gpt2_workload_trains_caches_and_beats_majority(tmp_path):
    from hypotheses.workloads import parens_gpt2

    module, tok, meta = parens_gpt2.load(quick=True, directory=tmp_path)
    assert meta["accuracy"] > meta["majority"] + 0.3
    assert tok.convert_ids_to_tokens(tok("0()")["input_ids"])[0] == tok.eos_token  # BOS
    again, _, meta2 = parens_gpt2.load(quick=True, directory=tmp_path)  # from the store
    assert meta2["sha256"] == meta["sha256"]
    for a, b in zip(module.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    model = dl.Model.from_hf(module, tok, name="parens-gpt2")
    f = dl.inspect(model, [parens_depth()], data=parens_gpt2.parens.records(100, seed=3), eps=None)
    assert f["unit_score"].abs().max() > 0.5  # some unit of the residual stream tracks depth


def parens_depth():
    from hypotheses.workloads import parens

    return dl.hypothesis(parens.depth, name="depth", kind="continuous")


def test_permutation_test_aligns_character_hypotheses_to_tokens(gpt2):
    model = HFModel(*gpt2, name="gpt2")
    data = corpus(40, seed=5)
    units = [("transformer.h.1", list(range(8)))]
    perm = dl.verify.permutation_test(model, [keyword], data, units=units, n_permutations=19)
    scan = dl.inspect(model, [keyword], ["corr"], data, units=units, eps=None, cache=False)
    np.testing.assert_allclose(
        perm.sort("unit")["unit_score"].to_numpy(),
        scan.sort("unit")["unit_score"].to_numpy(),
        atol=1e-5,
    )
    assert perm["p_value"].is_between(0.05, 1.0).all()



def test_untrained_copy_of_a_transformer_reads_tokens(gpt2):
    model = HFModel(*gpt2, name="gpt2")
    copy = dl.verify.untrained_copy(model)
    assert isinstance(copy, HFModel) and copy.name == "gpt2:untrained"
    assert copy.module is not model.module and not copy.meta["trained"]
    v = dl.verify.untrained_baseline(model, [keyword], corpus(24, seed=6),
                                     units=[("transformer.h.0", list(range(8)))])  # fmt: skip
    assert v.summary["untrained"]["mid"].unique().to_list() == ["gpt2:untrained"]
    assert v.summary["by_hypothesis"]["untrained_best"].is_not_null().all()


def test_forcing_a_transformer_writes_each_symbol_and_leaves_padding(gpt2):
    from dni_lab.backend.verify.common import forward_output
    from dni_lab.backend.verify.force import force_units

    module, tok = gpt2
    model = HFModel(module, padded_tok(tok, "left"), name="gpt2-left")
    data = ["select a from tab", "x1", "insert into tab values 1 = b"]
    n = [model.symbols(r) for r in data]
    pattern = torch.arange(len(data) * max(n) * 2, dtype=torch.float32).reshape(len(data), -1, 2)
    seen = {}

    def keep(_mod, _args, out):
        seen["out"] = (out[0] if isinstance(out, tuple) else out).detach().clone()

    def output(*forcing):
        with contextlib.ExitStack() as stack, torch.inference_mode():
            if forcing:
                stack.enter_context(force_units(model, "transformer.h.0", *forcing))
            # registered after the forcing hook, so it sees the forced output
            stack.callback(model._module("transformer.h.0").register_forward_hook(keep).remove)
            forward_output(model, data, torch.device("cpu"))
        return seen["out"]

    plain, forced = output(), output([3, 5], pattern)
    sym = model.gather_symbols(forced)
    for r, k in enumerate(n):
        np.testing.assert_array_equal(sym[r, :k][:, [3, 5]].numpy(), pattern[r, :k].numpy())
        pads = forced.shape[1] - k  # left padding: the first positions are not symbols
        np.testing.assert_array_equal(forced[r, :pads].numpy(), plain[r, :pads].numpy())
        others = [u for u in range(forced.shape[-1]) if u not in (3, 5)]
        before = model.gather_symbols(plain)[r, :k][:, others]
        np.testing.assert_array_equal(sym[r, :k][:, others].numpy(), before.numpy())


def test_next_token_accuracy_of_a_transformer_matches_one_record_at_a_time(gpt2):
    from dni_lab.backend.verify.ablate import next_symbol_accuracy
    from dni_lab.backend.verify.common import forward_output

    module, tok = gpt2
    model = HFModel(module, tok, name="gpt2")
    data = corpus(12, seed=8)
    with torch.inference_mode():
        out = forward_output(model, data, torch.device("cpu"))
        got, items = next_symbol_accuracy(model)(data, out, torch.device("cpu"))
        hits = total = 0
        for r in data:
            ids = tok(r, return_tensors="pt")["input_ids"]
            pred = module(input_ids=ids).logits[0].argmax(-1)
            hits += int((pred[:-1] == ids[0, 1:]).sum())
            total += ids.shape[1] - 1
    assert items == total and got == pytest.approx(hits)
    with pytest.raises(dl.DNIError, match="among= names characters"):
        next_symbol_accuracy(model, among="ab")


def test_oracle_on_a_transformer_reads_the_character_hypothesis_per_token(gpt2):
    from dni_lab.backend.verify.ablate import next_symbol_accuracy

    model = HFModel(*gpt2, name="gpt2")
    v = dl.verify.oracle(model, corpus(24, seed=9), "transformer.h.1", [0, 1, 2], keyword,
                         ks=[1, 3], n_random=3, seed=0,
                         evaluate=next_symbol_accuracy(model, score="log_likelihood"))  # fmt: skip
    assert v.frame["k"].unique().sort().to_list() == [1, 3]
    assert v.frame["score"].is_finite().all()
    assert (v.frame["drop"].abs() > 0).all()  # forcing the pattern changed every prediction
