"""Parse-tree and shift-reduce families: the papers' ((1+2)) example, windows, errors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dni_lab.backend.hypothesis.hypotheses import evaluate_family
from hypotheses import GrammarError, ParseTreeFamily, ShiftReduceFamily, Window
from hypotheses.grammars import arith, boolean, parens, sql
from hypotheses.parsing import get_parser
from hypotheses.shift_reduce import shift_reduce_trace


def _bits(fam, record, signal) -> str:
    col = fam.signals().index(signal)
    return "".join(str(int(v)) for v in fam.evaluate(record)[:, col])


# -- the DNI paper's Figure 1: ((1+2)) ---------------------------------------------------
def test_figure_one_range_and_impulse_per_node_type():
    fam = arith.family()
    x = "((1+2))"
    expected = {
        # node type: (range, impulse), symbol by symbol over ( ( 1 + 2 ) )
        "Expr": ("1111111", "1110111"),  # Expr nodes: 0-6, 1-5, 2-4, 2, 4
        "Paren": ("1111111", "1100011"),  # outer (f3/f5) and inner (f2/f4) parentheses
        "Add": ("0011100", "0010100"),
        "Digit": ("0010100", "0010100"),
        "Sub": ("0000000", "0000000"),
        "Mul": ("0000000", "0000000"),
        "Div": ("0000000", "0000000"),
    }
    for label, (rng, imp) in expected.items():
        assert _bits(fam, x, f"range:{label}") == rng, label
        assert _bits(fam, x, f"impulse:{label}") == imp, label
    # f1: the composite nesting depth of the parentheses rule.
    assert fam.evaluate(x)[:, -1].tolist() == [1, 2, 2, 2, 2, 2, 1]
    assert fam.kind_of("depth") == "continuous" and fam.kind_of("range:Add") == "binary"


def test_signals_known_before_reading_and_valid_for_the_engine():
    fam = arith.family()
    assert fam.signals()[:2] == ["range:Expr", "range:Paren"]
    assert len(fam.signals()) == 2 * 7 + 1
    assert fam.hids()[0] == "arith.range:Expr"
    block = evaluate_family(fam, "(1+2)*3", 7, record_index=0)
    assert block.shape == (7, 15) and block.dtype == np.float32


def test_ambiguity_resolved_left_to_right():
    fam = arith.family()
    assert _bits(fam, "1+2*3", "range:Mul") == "11111"
    assert _bits(fam, "1+2*3", "range:Add") == "11100"
    assert _bits(fam, "8/4/2", "impulse:Div") == "10101"  # (8/4)/2: spans 0-2 and 0-4


def test_depth_counts_all_nodes_by_default():
    fam = ParseTreeFamily(arith.grammar(), name="a")
    # '1' in "(1)": Expr > Paren > Expr > Digit.
    assert fam.evaluate("(1)")[:, -1].tolist() == [2, 4, 2]


def test_by_rule_and_label_subset():
    fam = ParseTreeFamily(arith.grammar(), name="r", by="rule")
    assert "range:Paren -> '(' Expr ')'" in fam.signals()
    assert _bits(fam, "((1+2))", "impulse:Expr -> Add") == "0010100"
    assert _bits(fam, "((1+2))", "range:Digit -> '2'") == "0000100"
    sub = ParseTreeFamily(arith.grammar(), labels=["Paren", "Add"])
    assert sub.signals() == ["range:Paren", "range:Add", "impulse:Paren", "impulse:Add", "depth"]
    with pytest.raises(ValueError, match="Did you mean 'Paren'"):
        ParseTreeFamily(arith.grammar(), labels=["Parens"]).signals()
    with pytest.raises(ValueError, match="by='node'"):
        ParseTreeFamily(arith.grammar(), by="node").signals()


def test_grammar_text_is_accepted():
    fam = ParseTreeFamily("S -> 'a' S 'b' | 'a' 'b'", name="anbn")
    assert fam.signals() == ["range:S", "impulse:S", "depth"]
    assert fam.evaluate("aabb")[:, 2].tolist() == [1, 2, 2, 1]


def test_sql_tokens_map_to_characters():
    fam = sql.family()
    q = "SELECT id FROM users WHERE age > 42"
    assert _bits(fam, q, "range:KwSelect") == "1" * 6 + "0" * (len(q) - 6)
    assert _bits(fam, q, "impulse:FromClause") == "0" * 10 + "1" + "0" * 8 + "1" + "0" * 15
    where = _bits(fam, q, "range:WhereClause")
    assert where == "0" * 21 + "1" * 14  # the spaces inside the clause are inside it


# -- windows -------------------------------------------------------------------------------
def test_window_signals_equal_slices_of_the_full_query():
    fam = sql.family(n_rules=142)
    queries = sql.generate(12, seed=1, n_rules=142)
    for w in sql.windows(queries):
        full = fam.evaluate(w.source)
        assert np.array_equal(fam.evaluate(w), full[w.start : w.start + len(w)])
    # A window alone is usually not even a query: it is the source that is parsed.
    w = sql.windows(["SELECT name FROM users WHERE age > 42 ORDER BY name"])[1]
    assert str(w) == "T name FROM users WHERE age > "
    assert _bits(fam, w, "range:SelectStmt") == "1" * 30


def test_one_parse_serves_all_windows_and_families(monkeypatch):
    grammar = sql.grammar(118)
    parser = get_parser(grammar, sql.tokenize)
    calls = []
    real = parser._parse
    monkeypatch.setattr(parser, "_parse", lambda text: calls.append(text) or real(text))
    q = "SELECT name, age FROM users WHERE age > 42 AND city = 'paris' ORDER BY name"
    a = ParseTreeFamily(grammar, name="a", tokenizer=sql.tokenize)
    b = ShiftReduceFamily(grammar, name="b", tokenizer=sql.tokenize)
    for w in sql.windows([q]):
        a.evaluate(w)
        b.evaluate(w)
    assert calls == [q]


def test_families_pickle_and_fingerprint():
    fam = sql.family(n_rules=95)
    w = sql.windows(["SELECT name FROM users WHERE age > 42"])[1]
    fam.evaluate(w)  # fills the private caches, which must not travel
    fam2, w2 = pickle.loads(pickle.dumps((fam, w)))
    assert isinstance(w2, Window) and (w2.source, w2.start) == (w.source, w.start)
    assert np.array_equal(fam2.evaluate(w2), fam.evaluate(w))
    assert fam2.fingerprint() == fam.fingerprint()
    # Same number of productions, different grammar: different fingerprint.
    g1 = ParseTreeFamily("S -> 'a'", name="g")
    g2 = ParseTreeFamily("S -> 'b'", name="g")
    assert g1.fingerprint() != g2.fingerprint()


# -- errors ----------------------------------------------------------------------------------
def test_unparseable_records_are_named():
    fam = arith.family()
    with pytest.raises(GrammarError, match=r"family 'arith'.*record '1\+2\)'.*offset 3"):
        fam.evaluate("1+2)")
    with pytest.raises(GrammarError, match="ends before a derivation is complete"):
        fam.evaluate("(1+2")
    with pytest.raises(GrammarError, match="token 'x' at offset 2 is not a terminal"):
        fam.evaluate("1+x")
    with pytest.raises(GrammarError, match=r"cannot tokenize.*'#' at offset 7"):
        sql.family().evaluate("SELECT #")
    with pytest.raises(GrammarError, match="offset 7"):
        sql.family().evaluate("SELECT FROM users")
    # The engine's validation passes the message through unchanged.
    with pytest.raises(GrammarError, match="record '1\\+2\\)'"):
        evaluate_family(fam, "1+2)", 4, record_index=3)


# -- shift-reduce ------------------------------------------------------------------------------
def test_shift_reduce_on_figure_one():
    fam = ShiftReduceFamily(arith.grammar(), name="sr")
    out = fam.evaluate("((1+2))")
    sig = fam.signals()
    # push ( ( 1, reduce Digit, Expr | push +, push 2, reduce Digit, Expr, Add, Expr | ...
    assert out[:, sig.index("stack_depth")].tolist() == [1, 2, 3, 4, 3, 2, 1]
    assert out[:, sig.index("reductions")].tolist() == [0, 0, 2, 0, 4, 2, 2]
    assert out[:, sig.index("reduce:Add -> Expr '+' Expr")].tolist() == [0, 0, 0, 0, 1, 0, 0]
    assert out[:, sig.index("reduce:Paren -> '(' Expr ')'")].tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert fam.kind_of("stack_depth") == "continuous"


def test_shift_reduce_trace_is_a_valid_parse():
    cases = [(boolean.family(), x) for x in boolean.generate(10, seed=2, length=9)]
    cases += [(parens.family(), x) for x in ("0(1()1(2()))0()", "0(1(2(3(44))))")]
    for fam, x in cases:
        parse = fam.parse(x)
        stack = []
        for action, item in shift_reduce_trace(parse):
            if action == "shift":
                stack.append(~item)
            else:
                children = parse.nodes[item].children
                assert tuple(stack[len(stack) - len(children) :]) == children
                del stack[len(stack) - len(children) :]
                stack.append(item)
        assert stack == [len(parse.nodes) - 1]


def test_shift_reduce_tokens_and_windows():
    fam = ShiftReduceFamily(sql.grammar(95), name="sr", tokenizer=sql.tokenize, by="label")
    q = "SELECT id FROM users"
    out = fam.evaluate(q)
    sig = fam.signals()
    # Tokens are shifted at their last character; gaps keep the depth.
    assert out[:, 0].tolist() == [0] * 5 + [1] * 8 + [2] * 6 + [1]
    assert np.flatnonzero(out[:, 1]).tolist() == [5, 8, 13, 19]
    assert out[19, sig.index("reduce:Query")] == 1
    w = Window(q, 5, 10)
    assert np.array_equal(fam.evaluate(w), out[5:15])
