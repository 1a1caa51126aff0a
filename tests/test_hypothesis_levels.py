"""A hypothesis's level is declared, or proved where only one level fits; equal counts never decide.

``'🤖xy'`` has 3 characters, 2 words... and, with the byte-level BPE trained below,
3 tokens ``ðŁ | ¤ĸ | xy`` whose character spans are ``(0, 1), (0, 1), (1, 3)``. A
per-token hypothesis ``[10, 20, 30]`` used to be read per character there and came
back ``[10, 10, 25]``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, random_records

import dni_lab as dl
from dni_lab.backend.hypothesis.hypotheses import evaluate_family, hypothesis_family

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from dni_lab.backend.hf import AlignedFamily, HFModel  # noqa: E402
from hypotheses.workloads.hf_tokenizers import bpe  # noqa: E402

ROBOT = "🤖xy"


@pytest.fixture(scope="module")
def robot_model() -> HFModel:
    """A tiny GPT-2 whose tokenizer splits '🤖xy' into 3 tokens over 3 characters."""
    emoji = [chr(c) for c in range(0x1F600, 0x1F640)]  # share the bytes 'ðŁ' with 🤖
    tok = bpe([e + " xy" for e in emoji] + ["🤖"], vocab_size=262)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=8, n_layer=1,
                                  n_head=2)  # fmt: skip
    return HFModel(transformers.GPT2LMHeadModel(cfg).eval(), tok, name="robot")


def test_the_tokenizer_makes_counts_coincide(robot_model):
    assert robot_model.offsets(ROBOT) == [(0, 1), (0, 1), (1, 3)]
    assert len(ROBOT) == robot_model.symbols(ROBOT) == 3


def test_undeclared_level_is_proved_before_reading_and_coinciding_counts_follow_it(robot_model):
    # one value per token: proved on '🤖xy xy' (6 characters, 2 words, 4 tokens); the
    # block's last record, '🤖xy', has as many characters as tokens and is no evidence:
    # it used to stop the run, it is now read per token as decided (issue 47)
    per_token = dl.hypothesis(lambda r: [10.0 * (i + 1) for i in range(robot_model.symbols(r))],
                              name="per_token", kind="continuous")  # fmt: skip
    data = ["🤖xy xy"] * 40 + [ROBOT]
    frame = dl.inspect(robot_model, [per_token], data=data, units=[("transformer.h.0", "*")],
                       eps=None, cache=False)  # fmt: skip
    (level,) = dl.provenance(frame)["levels"]
    assert dl.provenance(frame)["records_read"] == len(data)
    # a repeat says nothing new; '🤖xy' confirms the tokens against its one word
    assert (level["level"], level["decided_by"]) == ("token", "proved from 2 records")
    decided = AlignedFamily(per_token, robot_model)
    decided.decide(list(enumerate(data)))
    assert evaluate_family(decided, ROBOT, 3, 40)[:, 0].tolist() == [10, 20, 30]
    # read outside a run (no decision), the record alone still cannot say: it asks
    with pytest.raises(dl.HypothesisError) as err:
        evaluate_family(AlignedFamily(per_token, robot_model), ROBOT, 3, 40)
    msg = str(err.value)
    for part in ("per_token", repr(ROBOT), "3 characters", "3 tokens", "level=", "'char'",
                 "'token'"):  # fmt: skip
        assert part in msg, (part, msg)


def test_a_declared_level_decides(robot_model):
    def values(level):
        h = dl.hypothesis(lambda r: [10.0, 20.0, 30.0], kind="continuous", level=level)
        return evaluate_family(AlignedFamily(h, robot_model), ROBOT, 3, 0)[:, 0].tolist()

    assert values("token") == [10, 20, 30]
    assert values("symbol") == [10, 20, 30]
    assert values("char") == [10, 10, 25]  # both emoji tokens read character 0; 'xy' the mean


def test_an_unambiguous_length_is_read_at_its_level(robot_model):
    rec = "🤖xy xy"  # 6 characters, 2 words, 4 tokens
    n_tok = robot_model.symbols(rec)
    assert len({6, 2, n_tok}) == 3
    per_word = dl.hypothesis(lambda r: [1.0, 5.0], kind="continuous")
    got = evaluate_family(AlignedFamily(per_word, robot_model), rec, n_tok, 0)[:, 0]
    assert got[0] == 1 and got[-1] == 5
    wrong = dl.hypothesis(lambda r: [1.0] * 99, name="wrong_len", kind="continuous")
    with pytest.raises(dl.HypothesisError, match="wrong_len.*99 values"):
        evaluate_family(AlignedFamily(wrong, robot_model), rec, n_tok, 0)


def test_record_level_is_read_at_every_symbol(robot_model):
    length = dl.hypothesis(lambda r: float(len(r)), kind="continuous", level="record")
    got = evaluate_family(AlignedFamily(length, robot_model), ROBOT, 3, 0)[:, 0]
    assert got.tolist() == [3, 3, 3]
    fam = hypothesis_family(signals=["n", "odd"], name="rec", kind="continuous",
                            level="record")(lambda r: {"n": len(r), "odd": len(r) % 2})  # fmt: skip
    assert evaluate_family(fam, "abcde", 4, 0).tolist() == [[5, 1]] * 4
    many = dl.hypothesis(lambda r: [1.0, 2.0], name="not_one", level="record")
    with pytest.raises(dl.HypothesisError, match="not_one.*level='record'.*2 values"):
        evaluate_family(many, "ab", 2, 0)


def test_record_level_scores_as_its_broadcast_on_a_plain_model():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=5), encode_chars, name="toy")
    recs = random_records(40, seed=1)
    rec_level = dl.hypothesis(lambda r: float(r.count("(")), name="opens", kind="continuous",
                              level="record")  # fmt: skip
    spread = dl.hypothesis(lambda r: [float(r.count("("))] * len(r), name="opens",
                           kind="continuous")  # fmt: skip
    kw = {"data": recs, "units": [("lstm", "*")], "eps": None, "cache": False}
    a = dl.inspect(model, [rec_level], **kw)
    b = dl.inspect(model, [spread], **kw)
    np.testing.assert_array_equal(a["unit_score"].to_numpy(), b["unit_score"].to_numpy())
    assert a["unit_score"].null_count() == 0


def test_plain_models_read_every_other_level_as_their_symbols():
    torch.manual_seed(0)
    model = dl.Model(CharLM(hidden=4), encode_chars, name="toy")
    recs = random_records(20, seed=2)
    kw = {"data": recs, "units": [("lstm", "*")], "eps": None, "cache": False}
    scores = []
    for lv in (None, "char", "symbol"):
        h = dl.hypothesis(lambda r: [c == "(" for c in r], name="p", level=lv)
        scores.append(dl.inspect(model, [h], **kw)["unit_score"].to_numpy())
    np.testing.assert_array_equal(scores[0], scores[1])
    np.testing.assert_array_equal(scores[0], scores[2])


def test_a_level_is_checked_and_keys_the_cache():
    with pytest.raises(dl.HypothesisError, match="level 'chars'.*'char'"):
        dl.hypothesis(lambda r: [0] * len(r), name="h", level="chars")
    fp = {lv: dl.hypothesis(lambda r: [0] * len(r), name="h", level=lv).fingerprint()
          for lv in (None, "char", "token")}  # fmt: skip
    assert len(set(fp.values())) == 3
