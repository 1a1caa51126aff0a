"""``dl.generate``: reading and steering while generating (issue 49, item 6).

A GPT-2 of 3 blocks, 4 heads, width 32 from a config, weights drawn far from init, with a
byte-level BPE trained here (nothing downloaded). Checked: tokens equal Hugging Face's
``model.generate(do_sample=False)`` on a left-padded batch; the cache read with the KV
cache equals each record's full forward pass without one (and a hand hook for
``attn.hook_z``); a zero steering vector changes nothing, bitwise; a steered name reads
its unsteered value plus the vector; bad input is refused before any forward pass; the
model is left as found (tests/zoo/state.py's snapshot) after an error or a
``KeyboardInterrupt`` at step k; steering vectors from a hypothesis (against a hand
difference of means) and from a probe; the report against the random-direction null.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import dni_lab as dl
from dni_lab.backend.errors import DNIError, LayerError

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_workload import keyword, padded_tok, tiny_bert, tiny_gpt2  # noqa: E402
from zoo.state import differences, snapshot  # noqa: E402

from dni_lab.probe.steering import hypothesis_rates, random_direction  # noqa: E402

WORDS = ["select", "a", "from", "tab", "x1", "=", "1", "insert", "into", "values", "b", "where"]
RECORDS = [" ".join(WORDS[(i * 5 + j) % 12] for j in range(2 + i % 7)) for i in range(12)]
PROMPTS = ["select a from", "insert into tab values 1 = b where x1", "b", "where x1 = 1"]
RESID = ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
Z = "blocks.1.attn.hook_z"
LAST = "blocks.2.hook_resid_post"
TOL = 1e-5


@pytest.fixture(scope="module")
def gpt2():
    module, tok = tiny_gpt2(RECORDS * 3, vocab_size=280, n_layer=3)
    with torch.no_grad():  # weights far from init: each token's choice is clear
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    model = dl.Model.from_hf(module, tok)
    model.layer_widths(PROMPTS[:1], "cpu")  # the probe pass, once, before any count below
    return model


def full_forward(module, ids: list[int]) -> dict[str, torch.Tensor]:
    """One record alone, no KV cache: the residual stream after blocks 0, 1 and block 1's
    heads (the out projection's input, by a hand hook)."""
    kept = {}
    proj = module.transformer.h[1].attn.c_proj
    h = proj.register_forward_pre_hook(lambda _m, a: kept.__setitem__(Z, a[0].detach()))
    try:
        with torch.no_grad():
            out = module(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        h.remove()
    return {RESID[0]: out.hidden_states[1][0], RESID[1]: out.hidden_states[2][0], Z: kept[Z][0]}


def test_tokens_equal_hugging_faces_greedy_generate(gpt2):
    g = dl.generate(gpt2, PROMPTS, 8)
    tok = padded_tok(gpt2.tokenizer, "left")
    enc = tok(PROMPTS, return_tensors="pt", padding=True)
    hf = gpt2.module.generate(**enc, max_new_tokens=8, do_sample=False,
                              pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id)  # fmt: skip
    assert torch.equal(g.sequences, hf)
    assert g.texts == [tok.decode(r, skip_special_tokens=True) for r in g.new_ids]
    assert g.frame()["n_new"].to_list() == [len(r) for r in g.new_ids]
    assert g.cache is None  # nothing asked, nothing read


def test_a_record_stops_at_its_end_token(gpt2):
    # the tiny model writes its favourite token soon after every prompt: make it the end
    plain = dl.generate(gpt2, PROMPTS, 6)
    written = [t for r in plain.new_ids for t in r]
    favourite = max(set(written), key=written.count)
    tok = copy.deepcopy(gpt2.tokenizer)
    tok.eos_token = tok.convert_ids_to_tokens(favourite)
    ends = dl.Model.from_hf(gpt2.module, tok)
    g = dl.generate(ends, PROMPTS, 6, activations=[RESID[0]])
    assert all(r[-1] == favourite and favourite not in r[:-1] for r in g.new_ids)
    assert g.sequences.shape[1] == max(map(len, g.prompt_ids)) + max(map(len, g.new_ids))
    left = padded_tok(tok, "left")
    enc = left(PROMPTS, return_tensors="pt", padding=True)
    hf = gpt2.module.generate(**enc, max_new_tokens=6, do_sample=False,
                              pad_token_id=tok.pad_token_id, eos_token_id=favourite)  # fmt: skip
    assert torch.equal(g.sequences, hf)
    assert g.cache.lengths.tolist() == [len(p) + len(n) for p, n in zip(g.prompt_ids, g.new_ids,
                                                                        strict=True)]  # fmt: skip
    assert all(len(r) == 6 for r in dl.generate(ends, PROMPTS, 6, stop_at_eos=False).new_ids)


def test_cache_with_kv_equals_a_full_forward_per_record(gpt2):
    g = dl.generate(gpt2, PROMPTS, 6, activations=[*RESID, Z])
    assert (g.cache.lengths == g.prompt_lengths + torch.tensor(list(map(len, g.new_ids)))).all()
    for i, (p, n) in enumerate(zip(g.prompt_ids, g.new_ids, strict=True)):
        want = full_forward(gpt2.module, p + n)
        for name in [*RESID, Z]:
            got = g.cache.record(i, name)
            assert got.shape == want[name].shape
            torch.testing.assert_close(got, want[name], atol=TOL, rtol=0)
    frame = g.cache.frame(RESID[0])  # the long frame covers every token of every record
    assert frame.height == int(g.cache.lengths.sum()) * 32


NAMES = ["hook_embed", "blocks.1.hook_resid_mid", "blocks.1.ln2.hook_normalized",
         "blocks.1.mlp.hook_post", "blocks.1.attn.hook_q", "ln_final.hook_normalized"]


def test_every_name_reads_as_dl_activations_reads_it(gpt2):
    g = dl.generate(gpt2, PROMPTS, 4, activations=NAMES)
    ids = [p + n for p, n in zip(g.prompt_ids, g.new_ids, strict=True)]
    assert not {t for r in ids for t in r} & set(gpt2.tokenizer.all_special_ids)  # all symbols
    want = dl.activations(gpt2, ids, NAMES)
    for name in NAMES:
        for i in range(len(PROMPTS)):
            torch.testing.assert_close(g.cache.record(i, name), want.record(i, name),
                                       atol=1e-4, rtol=1e-5)  # fmt: skip


def test_a_unit_selection_reads_those_units(gpt2):
    g = dl.generate(gpt2, PROMPTS[:2], 3, activations=[RESID[0], (RESID[1], [3, 0])])
    whole = dl.generate(gpt2, PROMPTS[:2], 3, activations=[RESID[1]])
    assert torch.equal(g.cache[RESID[1]], whole.cache[RESID[1]][..., [3, 0]])
    assert g.cache.units[RESID[1]].tolist() == [3, 0]


def test_zero_steering_changes_nothing(gpt2):
    plain = dl.generate(gpt2, PROMPTS, 6, activations=RESID)
    for name in (RESID[0], Z):
        zero = dl.generate(gpt2, PROMPTS, 6, activations=RESID, steer={name: torch.zeros(32)})
        assert torch.equal(zero.sequences, plain.sequences)
        for n in RESID:
            assert torch.equal(zero.cache[n], plain.cache[n])


def toward_a_letter(model) -> tuple[str, torch.Tensor]:
    """A letter the final norm and head write when a large vector sits before them, and
    that vector: the head's row of its token through the norm's gain, mean-free (a large
    vector is all the norm sees), the letter the one whose own logit leads by most among
    those the model does not write unsteered."""
    written = set("".join(dl.generate(model, PROMPTS, 6).texts))
    m = model.module
    W, ln = m.lm_head.weight.detach(), m.transformer.ln_f
    u = W * ln.weight.detach()
    u = (u - u.mean(1, keepdim=True)) / (u - u.mean(1, keepdim=True)).norm(dim=1, keepdim=True)
    best = (0.0, "", None)
    for t in range(W.shape[0]):
        s = model.tokenizer.decode([t])
        if len(s) == 1 and s.isascii() and s.isalpha() and s not in written:
            top = (W @ (ln.weight.detach() * u[t] * 32**0.5 + ln.bias.detach())).topk(2)
            margin = float(top.values[0] - top.values[1])
            if int(top.indices[0]) == t and margin > best[0]:
                best = (margin, s, u[t])
    assert best[2] is not None
    return best[1], best[2] * 200


def test_a_steered_name_reads_its_value_plus_the_vector(gpt2):
    _, v = toward_a_letter(gpt2)
    names = [RESID[1], LAST]
    plain = dl.generate(gpt2, PROMPTS, 6, activations=names)
    steered = dl.generate(gpt2, PROMPTS, 6, activations=names, steer={LAST: v}, scale=0.5)
    assert not torch.equal(steered.sequences, plain.sequences)
    P = steered.prompt_lengths
    for i in range(len(PROMPTS)):  # the prompt pass is the same input: value + 0.5 v
        torch.testing.assert_close(steered.cache.record(i, LAST)[: P[i]],
                                   plain.cache.record(i, LAST)[: P[i]] + 0.5 * v,
                                   atol=1e-4, rtol=0)  # fmt: skip
    unsteered = dl.generate(gpt2, PROMPTS, 6, activations=RESID)
    heads = dl.generate(gpt2, PROMPTS, 6, activations=RESID, steer={Z: torch.full((32,), 9.0)})
    first = P.min()  # the prompt pass: upstream of the heads nothing moves, block 1 reads them
    assert torch.equal(heads.cache[RESID[0]][:, :first], unsteered.cache[RESID[0]][:, :first])
    assert not torch.allclose(heads.cache[RESID[1]], unsteered.cache[RESID[1]])
    new_only = dl.generate(gpt2, PROMPTS, 6, activations=names, steer={LAST: v}, positions="new")
    for i in range(len(PROMPTS)):  # prompts unsteered: the first token is the plain one's
        assert torch.equal(new_only.cache.record(i, LAST)[: P[i]],
                           plain.cache.record(i, LAST)[: P[i]])  # fmt: skip
        assert new_only.new_ids[i][0] == plain.new_ids[i][0]
    assert not torch.equal(new_only.sequences, plain.sequences)


def test_sampling_is_deterministic_with_a_seed(gpt2):
    a = dl.generate(gpt2, PROMPTS, 8, do_sample=True, temperature=3.0, seed=7)
    b = dl.generate(gpt2, PROMPTS, 8, do_sample=True, temperature=3.0, seed=7)
    c = dl.generate(gpt2, PROMPTS, 8, do_sample=True, temperature=3.0, seed=8)
    assert torch.equal(a.sequences, b.sequences)
    assert not torch.equal(a.sequences, c.sequences)
    top1 = dl.generate(gpt2, PROMPTS, 5, do_sample=True, top_k=1, seed=3)
    assert torch.equal(top1.sequences, dl.generate(gpt2, PROMPTS, 5).sequences)


def count_calls(module) -> tuple[list[int], object]:
    calls = [0]
    h = module.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls, h


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"steer": {RESID[0]: torch.zeros(31)}}, DNIError, "32 units wide"),
        ({"steer": {RESID[0]: torch.zeros(2, 32)}}, DNIError, "shape (2, 32)"),
        ({"steer": {RESID[0]: [float("nan")] * 32}}, DNIError, "NaN"),
        ({"steer": {"blocks.9.hook_resid_post": torch.zeros(32)}}, LayerError, "blocks.9"),
        ({"steer": {"blocks.0.attn.hook_q": torch.zeros(32)}}, LayerError, "cannot be steered"),
        ({"steer": {"blocks.0.hook_resid_mid": torch.zeros(32)}}, LayerError, "hook_attn_out"),
        ({"steer": {RESID[0]: torch.zeros(32)}, "scale": float("inf")}, DNIError, "scale"),
        ({"activations": ["blocks.1.attn.hook_pattern"]}, DNIError, "attention patterns"),
        ({"max_new_tokens": 0}, DNIError, "max_new_tokens"),
        ({"max_new_tokens": 60}, DNIError, "positions"),
        ({"temperature": 0, "do_sample": True}, DNIError, "temperature"),
        ({"positions": "prompt"}, DNIError, "positions"),
    ],
)
def test_bad_input_is_refused_before_any_forward(gpt2, kwargs, error, says):
    before = snapshot(gpt2.module)
    calls, h = count_calls(gpt2.module)
    try:
        with pytest.raises(error, match=None) as err:
            dl.generate(gpt2, PROMPTS, **{"max_new_tokens": 4, **kwargs})
    finally:
        h.remove()
    assert says in str(err.value)
    assert calls[0] == 0
    assert differences(before, snapshot(gpt2.module)) == []


def test_models_that_cannot_generate_are_refused():
    module, tok = tiny_bert(RECORDS)
    with pytest.raises(DNIError, match="causal language model"):
        dl.generate(dl.Model.from_hf(module, tok), ["select a"], 3)
    with pytest.raises(DNIError, match="from_hf"):
        dl.generate(dl.Model(torch.nn.Linear(3, 3)), ["x"], 3)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_error_at_step_k_leaves_the_model_as_found(gpt2, exc):
    block = gpt2.module.transformer.h[2]
    calls = [0]

    def boom(*_):
        calls[0] += 1
        if calls[0] == 3:  # the prompt pass, step 1, then step 2 raises
            raise exc("stop at step 2")

    handle = block.register_forward_pre_hook(boom)
    gpt2.module.train()  # a user's model left in train mode must come back in it
    gpt2.module.transformer.h[0].eval()
    stale = gpt2.module.transformer.h[1].mlp.c_fc.weight
    stale.grad = torch.ones_like(stale)  # a user's gradient stays, untouched
    before = snapshot(gpt2.module)
    try:
        with pytest.raises(exc, match="stop at step 2"):
            dl.generate(gpt2, PROMPTS, 6, activations=RESID,
                        steer={RESID[0]: torch.ones(32), Z: torch.ones(32)})  # fmt: skip
        assert calls[0] == 3
        assert differences(before, snapshot(gpt2.module)) == []
        assert gpt2.stop_early is True
    finally:
        handle.remove()
        gpt2.module.eval()
        stale.grad = None
    after = dl.generate(gpt2, PROMPTS, 4)  # and it still generates as before
    assert torch.equal(after.sequences, dl.generate(gpt2, PROMPTS, 4).sequences)


def test_steering_vector_is_the_hypothesis_difference_of_means(gpt2):
    v = dl.steering_vector(gpt2, RECORDS, keyword, RESID[1])
    cache = dl.activations(gpt2, RECORDS, [RESID[1]])
    pos, neg = [], []
    for i, r in enumerate(RECORDS):  # a token holds where any of its characters does
        chars = np.asarray(keyword(r))
        for s, (a, b) in enumerate(gpt2.offsets(r)):
            (pos if chars[a:b].any() else neg).append(cache.record(i, RESID[1])[s])
    want = torch.stack(pos).double().mean(0) - torch.stack(neg).double().mean(0)
    torch.testing.assert_close(v, want.float(), atol=TOL, rtol=0)
    with pytest.raises(DNIError, match="both classes"):
        dl.steering_vector(gpt2, ["a b", "1 = 1"], keyword, RESID[1])
    with pytest.raises(DNIError, match="needs records"):
        dl.steering_vector(gpt2, RECORDS, keyword)


def test_a_probes_direction_and_the_random_null(gpt2):
    probe = dl.Probe(RESID[1], folds=None).fit(gpt2, RECORDS, keyword)
    d = dl.steering_vector(gpt2, probe=probe)
    w = torch.as_tensor(probe.coef_[0] / probe.scale_, dtype=torch.float64)
    torch.testing.assert_close(d.double(), w / w.norm(), atol=1e-6, rtol=0)
    with pytest.raises(DNIError, match="not both"):
        dl.steering_vector(gpt2, RECORDS, keyword, probe=probe)
    with pytest.raises(DNIError, match="not fitted"):
        dl.steering_vector(gpt2, probe=dl.Probe(RESID[1]))
    v = torch.arange(32, dtype=torch.float32)
    a, b = random_direction(v, seed=4), random_direction(v, seed=5)
    assert torch.equal(a, random_direction(v, seed=4)) and not torch.equal(a, b)
    torch.testing.assert_close(a.norm(), v.norm())


def writes(letter: str):
    @dl.hypothesis(kind="binary", level="char")
    def writes_letter(record: str) -> list[float]:
        return [float(c == letter) for c in record]

    return writes_letter


def test_the_report_finds_a_vector_that_writes_the_hypothesis(gpt2):
    letter, vector = toward_a_letter(gpt2)
    hyp = writes(letter)
    frame = dl.steering_report(gpt2, PROMPTS, hyp, LAST, vector, max_new_tokens=5, n_null=2)
    assert frame["condition"].to_list() == ["steered", "null", "none"]
    row = {r["condition"]: r for r in frame.iter_rows(named=True)}
    assert row["null"]["diff_vs_null"] == 0.0
    assert row["steered"]["rate"] > 0.9 and row["steered"]["ci_low"] > 0
    assert row["steered"]["n_prompts"] == len(PROMPTS)
    assert row["none"]["rate"] < 0.5
    texts = dl.steering_report(gpt2, PROMPTS, hyp, LAST, vector, max_new_tokens=5, n_null=1,
                               per_prompt=True)  # fmt: skip
    steered = texts.filter(texts["condition"] == "steered")
    assert all(letter in t for t in steered["text"])
    np.testing.assert_allclose(steered["rate"].to_numpy(),
                               hypothesis_rates(gpt2, hyp, steered["text"].to_list()))  # fmt: skip
    with pytest.raises(DNIError, match="32 units wide"):
        dl.steering_report(gpt2, PROMPTS, hyp, LAST, vector[:5])


def test_a_rotary_gqa_model_generates_as_hugging_face_does(gpt2):
    # Mistral: rotary positions from position_ids, 2 key/value heads for 4 query heads
    tok = gpt2.tokenizer
    cfg = transformers.MistralConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    module = transformers.MistralForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)
    model = dl.Model.from_hf(module, tok)
    g = dl.generate(model, PROMPTS, 6, activations=["blocks.0.hook_resid_post"])
    enc = padded_tok(tok, "left")(PROMPTS, return_tensors="pt", padding=True)
    hf = module.generate(**enc, max_new_tokens=6, do_sample=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)  # fmt: skip
    assert torch.equal(g.sequences, hf)
    for i, (p, n) in enumerate(zip(g.prompt_ids, g.new_ids, strict=True)):
        with torch.no_grad():
            out = module(torch.tensor([p + n]), output_hidden_states=True, use_cache=False)
        torch.testing.assert_close(g.cache.record(i, "blocks.0.hook_resid_post"),
                                   out.hidden_states[1][0], atol=TOL, rtol=0)  # fmt: skip
