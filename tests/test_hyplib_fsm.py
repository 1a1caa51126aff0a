"""FSM hypotheses: transition tables, regex automata, and Luigi's Boolean machines."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import (
    OTHER,
    FSMFamily,
    Window,
    boolean_eval_fsm,
    boolean_operator_fsm,
    boolean_role_fsm,
    compile_regex,
)
from hypotheses.grammars import boolean

QUOTES = {"out": {"'": "in", OTHER: "out"}, "in": {"'": "out", OTHER: "in"}}


def test_transition_table_state_sequence_and_one_hot():
    fam = FSMFamily(QUOTES, name="quote")
    assert fam.signals() == ["state:out", "state:in"]
    assert fam.run("a'bc'd") == ["out", "in", "in", "in", "out", "out"]
    out = fam.evaluate("a'bc'd")
    assert out.tolist() == [[1, 0], [0, 1], [0, 1], [0, 1], [1, 0], [1, 0]]
    assert fam.kind_of("state:in") == "binary"
    assert evaluate_family(fam, "a'b", 3, 0).shape == (3, 2)


def test_targets_start_accepting_outputs_categorical():
    table = {"a": {"x": "b"}, "b": {"x": "c", "y": "a"}}  # "c" only appears as a target
    fam = FSMFamily(
        table, start="b", accepting=["c"], outputs={"c": 2.5}, categorical=True, on_missing="stay"
    )
    assert fam.signals() == ["state:b", "state:a", "state:c", "match", "value", "state"]
    out = fam.evaluate("yxxq")  # b -y-> a -x-> b -x-> c -q-> (missing: stay) c
    assert fam.run("yxxq") == ["a", "b", "c", "c"]
    assert out[:, 3].tolist() == [0, 0, 1, 1]
    assert out[:, 4].tolist() == [0, 0, 2.5, 2.5]
    assert out[:, 5].tolist() == [1, 0, 2, 2]
    assert fam.kind_of("state") == "categorical" and fam.categories == {"state": 3}
    assert [i.n_categories for i in fam.info()][-1] == 3


def test_missing_transitions():
    table = {"s": {"a": "t"}, "t": {"a": "s"}}
    assert FSMFamily(table, on_missing="start").run("aab") == ["t", "s", "s"]
    assert FSMFamily(table, on_missing="t").run("ab") == ["t", "t"]
    with pytest.raises(
        ValueError, match=r"no transition from state 't' on symbol 'b' \(position 1"
    ):
        FSMFamily(table, name="m").evaluate("ab")
    with pytest.raises(ValueError, match="exactly one of"):
        FSMFamily().signals()
    with pytest.raises(ValueError, match=r"accepting states \['z'\]"):
        FSMFamily(table, accepting=["z"]).signals()


def test_token_records():
    fam = FSMFamily({"k": {"SELECT": "sel", OTHER: "k"}, "sel": {OTHER: "k"}})
    assert fam.run(["SELECT", "a", "FROM"]) == ["sel", "k", "k"]


# -- regular expressions -----------------------------------------------------------------
def test_regex_states_track_partial_matches():
    fam = FSMFamily(regex="SELECT", name="select")
    assert fam.signals() == [f"state:q{i}" for i in range(7)] + ["match"]
    assert fam.run("a SELECT SEL") == ["q0", "q0"] + [f"q{i}" for i in range(1, 7)] + [
        "q0",
        "q1",
        "q2",
        "q3",
    ]
    assert np.flatnonzero(fam.evaluate("SELECT x SELECT")[:, -1]).tolist() == [5, 14]


def test_regex_anchored_has_dead_state():
    dfa = compile_regex("ab+", search=False)
    assert dfa.states == ("q0", "q1", "q2", "dead")
    fam = FSMFamily(regex="ab+", search=False)
    assert fam.run("abbx") == ["q1", "q2", "q2", "dead"]


@pytest.mark.parametrize(
    "pattern", ["ab*c", "a(b|c)*d", r"\d\d", "[^a]b", "x.y", "(ab)+", "a{2,3}"]
)
def test_regex_match_signal_agrees_with_re(pattern):
    rng = random.Random(0)
    for flags in (0, re.IGNORECASE):
        fam = FSMFamily(regex=pattern, alphabet="abcdxy01AB", flags=flags)
        for _ in range(60):
            s = "".join(rng.choice("abcdxy01AB!") for _ in range(rng.randint(0, 10)))
            got = fam.evaluate(s)[:, -1].astype(bool).tolist() if s else []
            want = [
                any(re.fullmatch(pattern, s[i : j + 1], flags) for i in range(j + 1))
                for j in range(len(s))
            ]
            assert got == want, (pattern, flags, s)


def test_regex_minimal_and_unsupported():
    # (a|a)* and a* have the same minimal automaton.
    assert compile_regex("x(a|a)*").states == compile_regex("xa*").states
    for bad in (r"^ab", r"(a)\1", r"a(?=b)"):
        with pytest.raises(ValueError, match="no finite automaton"):
            FSMFamily(regex=bad).signals()


# -- Luigi's Boolean machines ----------------------------------------------------------
def test_boolean_eval_fsm_tracks_left_to_right_value():
    fam = boolean_eval_fsm()
    assert fam.run("XXT|F&F") == ["pad", "pad", "T", "T|", "T", "T&", "F"]
    value = fam.signals().index("value")
    assert fam.evaluate("XXT|F&F")[:, value].tolist() == [0, 0, 1, 1, 1, 1, 0]
    for x in boolean.generate(200, seed=3, length=11):
        assert fam.evaluate(x)[-1, value] == boolean.evaluate(x), x


def test_boolean_operator_and_role_fsms():
    x = "XT&F|T"
    assert boolean_operator_fsm().run(x) == ["none", "none", "and", "and", "or", "or"]
    assert boolean_role_fsm().run(x) == [
        "pad",
        "operand",
        "operator",
        "operand",
        "operator",
        "operand",
    ]


def test_fsm_on_windows_uses_the_full_record():
    fam = FSMFamily(QUOTES)
    text = "x = 'abc' + 'd'"
    w = Window(text, 6, 6)  # "bc' + " starts inside a quote
    assert np.array_equal(fam.evaluate(w), fam.evaluate(text)[6:12])
    assert fam.evaluate(w)[0, 1] == 1
