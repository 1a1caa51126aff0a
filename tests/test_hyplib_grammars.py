"""Grammars and generators of the hypothesis library: in-language, deterministic, sized."""

from __future__ import annotations

import random
import re

import pytest
from nltk.grammar import Nonterminal

from hypotheses.grammars import arith, boolean, parens, sql
from hypotheses.grammars.pcfg import Sampler, build_pcfg, parse_rules
from hypotheses.parsing import GrammarParser, rule_name
from hypotheses.windows import Window


def _parses_all(grammar, records, tokenizer=None):
    parser = GrammarParser(grammar, tokenizer)
    for r in records:
        parser.parse(r)  # raises GrammarError naming the record


# -- the weighted rule format and the sampler ------------------------------------------
def test_rule_format_weights_empty_and_quoted_bar():
    rules = parse_rules("A -> 'x' A [3] | '' | '|' B\nB -> 'y'")
    assert [(r.lhs, r.rhs, r.weight) for r in rules] == [
        ("A", ("'x'", "A"), 3.0),
        ("A", (), 1.0),
        ("A", ("'|'", "B"), 1.0),
        ("B", ("'y'",), 1.0),
    ]
    g = build_pcfg(rules)
    assert g.start() == Nonterminal("A")
    assert sorted(round(p.prob(), 3) for p in g.productions(lhs=Nonterminal("A"))) == [
        0.2,
        0.2,
        0.6,
    ]


def test_rule_format_errors_name_the_line():
    with pytest.raises(ValueError, match="no 'LHS ->'"):
        parse_rules("A 'x'")
    with pytest.raises(ValueError, match="Typo"):
        build_pcfg(parse_rules("A -> Typo"))


def test_sampler_depth_limit():
    g = build_pcfg(parse_rules("E -> 'd' | '(' E ')' [5]"))
    draws = [Sampler(g, max_depth=3).draw(random.Random(s)) for s in range(50)]
    assert max(d.count("(") for d in draws) == 2  # three nested E at most
    with pytest.raises(ValueError, match="too small"):
        Sampler(g, max_depth=0)


# -- parentheses -------------------------------------------------------------------------
def test_parens_generate_in_language_and_bounded():
    xs = parens.generate(200, seed=3)
    assert all(0 < len(x) <= 40 for x in xs)
    assert max(int(c) for x in xs for c in x if c.isdigit()) == 4
    _parses_all(parens.grammar(), xs[:60])
    short = parens.generate(50, seed=1, max_depth=2, max_len=12)
    assert all(len(x) <= 12 and set(x) <= set("012()") for x in short)


def test_parens_deterministic_under_seed():
    assert parens.generate(30, seed=5) == parens.generate(30, seed=5)
    assert parens.generate(30, seed=5) != parens.generate(30, seed=6)


def test_parens_digit_is_the_nesting_level():
    fam = parens.family()
    depth = fam.signals().index("depth")
    for x in parens.generate(40, seed=2):
        d = fam.evaluate(x)[:, depth]
        assert all(d[i] == int(c) for i, c in enumerate(x) if c.isdigit()), x


def test_parens_grammar_and_errors():
    assert len(parens.grammar(4).productions()) == 18
    _parses_all(parens.grammar(), ["0(1()1(2()))0()", "0(1(2(3(44))))"])
    with pytest.raises(ValueError, match="max_len"):
        parens.generate(1, max_len=2)
    with pytest.raises(ValueError, match="1 to 9"):
        parens.grammar(10)


# -- arithmetic --------------------------------------------------------------------------
def test_arith_generate_in_language_and_deterministic():
    xs = arith.generate(150, seed=0)
    assert xs == arith.generate(150, seed=0)
    assert all(set(x) <= set("0123456789()+-*/") and len(x) > 1 for x in xs)
    assert {"+", "-", "*", "/", "("} <= set("".join(xs))
    _parses_all(arith.grammar(), xs[:60])


def test_arith_depth_bounds_nesting():
    assert all(x.isdigit() for x in arith.generate(20, seed=1, max_depth=0))
    assert all(len(x) <= 3 for x in arith.generate(50, seed=1, max_depth=1))
    deep = arith.generate(100, seed=1, max_depth=3)
    assert max(_paren_depth(x) for x in deep) <= 3


def _paren_depth(x: str) -> int:
    depth = best = 0
    for c in x:
        depth += (c == "(") - (c == ")")
        best = max(best, depth)
    return best


# -- SQL ---------------------------------------------------------------------------------
def test_sql_rule_counts_are_real_and_nested():
    sizes = sql.rule_counts()
    assert sizes == [95, 118, 142, 171]
    previous: set[str] = set()
    for n in sizes:
        g = sql.grammar(n)
        rules = {rule_name(p.lhs(), p.rhs()) for p in g.productions()}
        assert len(g.productions()) == len(rules) == n
        assert previous <= rules
        previous = rules
        _check_reachable(g)
    assert len(sql.grammar().productions()) == 171


def _check_reachable(g):
    seen, todo = {g.start()}, [g.start()]
    while todo:
        for p in g.productions(lhs=todo.pop()):
            for s in p.rhs():
                if isinstance(s, Nonterminal) and s not in seen:
                    seen.add(s)
                    todo.append(s)
    assert seen == {p.lhs() for p in g.productions()}


def test_sql_bad_size_names_the_choices():
    with pytest.raises(ValueError, match=r"\[95, 118, 142, 171\]"):
        sql.grammar(100)


@pytest.mark.parametrize("n_rules", [95, 142, 171])
def test_sql_generate_parses_with_its_grammar(n_rules):
    qs = sql.generate(25, seed=n_rules, n_rules=n_rules)
    assert all(q.startswith("SELECT ") and len(q) <= 160 for q in qs)
    _parses_all(sql.grammar(n_rules), qs, sql.tokenize)


def test_sql_small_tier_uses_only_its_features():
    text = " ".join(sql.generate(200, seed=0, n_rules=95))
    assert not re.search(r"\b(JOIN|GROUP|ORDER|LIMIT|DISTINCT|IN|LIKE)\b", text)
    full = " ".join(sql.generate(300, seed=0))
    for kw in ("JOIN", "GROUP BY", "ORDER BY", "LIMIT", "HAVING", "IN (SELECT"):
        assert kw in full


def test_sql_deterministic_and_tokens_round_trip():
    qs = sql.generate(40, seed=9)
    assert qs == sql.generate(40, seed=9)
    for q in qs:
        toks = sql.tokenize(q)
        assert all(q[s:e] == t for t, s, e in toks)
        assert sql.detokenize([t for t, _, _ in toks]) == q
    with pytest.raises(ValueError, match="'@' at offset 7"):
        sql.tokenize("SELECT @ FROM t")


def test_sql_windows():
    q = "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name"
    ws = sql.windows([q, "SELECT id FROM t"], width=30, stride=5)
    full = [w for w in ws if w.source == q]
    assert [w.start for w in full] == list(range(0, len(q) - 30 + 1, 5))
    assert all(
        isinstance(w, Window) and len(w) == 30 and w == q[w.start : w.start + 30] for w in full
    )
    short = [w for w in ws if w.source != q]
    assert len(short) == 1 and short[0] == "SELECT id FROM t" and short[0].start == 0


# -- Boolean -----------------------------------------------------------------------------
def test_boolean_generate_padded_and_in_language():
    xs = boolean.generate(300, seed=4, length=11)
    assert xs == boolean.generate(300, seed=4, length=11)
    assert all(len(x) == 11 and re.fullmatch(r"X*[TF]([&|][TF])*", x) for x in xs)
    assert {x.count("X") for x in xs} >= {0, 10}
    _parses_all(boolean.grammar(), xs[:60])
    values = [boolean.evaluate(x) for x in xs]
    assert 0.3 < sum(values) / len(values) < 0.7


def test_boolean_evaluate_left_to_right():
    # Left-to-right differs from the usual precedence: T|F&F is (T|F)&F.
    assert boolean.evaluate("T|F&F") is False
    assert boolean.evaluate("XXXF&T|T") is True
    assert boolean.evaluate("XXXXT") is True
    for x in boolean.generate(100, seed=1, length=9):
        body = x.lstrip("X")
        value = body[0] == "T"
        for i in range(1, len(body), 2):
            expr = f"{value} {'and' if body[i] == '&' else 'or'} {body[i + 1] == 'T'}"
            value = eval(expr)  # the reference, one operator at a time
        assert boolean.evaluate(x) is value
    with pytest.raises(ValueError, match="not a padded Boolean"):
        boolean.evaluate("XT&&F")
