"""Fingerprints cover what a hypothesis depends on, or refuse: a cache never changes a result."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import dni_lab as dl
import dni_lab.backend.hypothesis.fingerprint_code as fpc
from dni_lab.backend.hypothesis.fingerprint import (
    FingerprintWarning,
    NotFingerprintable,
    fingerprint_of,
)
from dni_lab.backend.hypothesis.hypotheses import as_family

REPO = Path(__file__).resolve().parents[1]
THRESHOLD = 0.5  # read by `above`: a module global the fingerprint must cover
WEIGHTS = {"a": 1.0, "b": 0.0}  # mutated in place by a test
CALL_COUNT = [0]  # bookkeeping only, so listed below
__fingerprint_ignore__ = ("CALL_COUNT",)


def vowel_weight(c: str) -> float:
    return 1.0 if c in "aeiou" else 0.0


def above(r: str) -> list[float]:
    return [float((ord(c) % 7) / 7 > THRESHOLD) for c in r]


def weighted(r: str) -> list[float]:
    return [WEIGHTS.get(c, 0.5) for c in r]


def uses_helper(r: str) -> list[float]:
    return [vowel_weight(c) for c in r]


def fp(obj) -> str | None:
    return as_family(obj).fingerprint()


def scores(model, hyp, records, cache) -> np.ndarray:
    frame = dl.inspect(
        [model], [hyp], ["corr"], records, units=[("lstm", "*")], eps=None, cache=cache
    )
    return frame.sort("uid")["unit_score"].to_numpy()


def test_module_global_changes_cached_scores(char_model, records, tmp_path, monkeypatch):
    cache = dl.HypothesisCache(tmp_path / "c")
    first = scores(char_model, above, records, cache)
    monkeypatch.setattr(sys.modules[__name__], "THRESHOLD", 0.2)
    second = scores(char_model, above, records, cache)
    assert np.abs(first - second).max() > 0.01
    np.testing.assert_allclose(second, scores(char_model, above, records, False), atol=1e-6)


def test_global_mutated_in_place_changes_fingerprint():
    before = fp(weighted)
    WEIGHTS["b"] = 1.0
    try:
        assert fp(weighted) != before
    finally:
        WEIGHTS["b"] = 0.0
    assert fp(weighted) == before


def test_helper_function_changes_cached_scores(char_model, records, tmp_path, monkeypatch):
    cache = dl.HypothesisCache(tmp_path / "c")
    first = scores(char_model, uses_helper, records, cache)

    def vowel_weight(c: str) -> float:  # the helper, "edited"
        return 1.0 if c in "abc" else 0.0

    monkeypatch.setattr(sys.modules[__name__], "vowel_weight", vowel_weight)
    second = scores(char_model, uses_helper, records, cache)
    assert np.abs(first - second).max() > 0.01
    np.testing.assert_allclose(second, scores(char_model, uses_helper, records, False), atol=1e-6)


def _exec_hypothesis(const: str):
    ns: dict = {}
    exec(f"def h(r):\n    return [float(c == {const!r}) for c in r]\n", ns)  # no source to read
    return ns["h"]


def test_exec_functions_differ_by_constants_and_agree_when_equal():
    a, b = _exec_hypothesis("a"), _exec_hypothesis("b")
    assert fp(a) != fp(b)
    assert fp(a) == fp(_exec_hypothesis("a"))


def test_nested_code_constants_are_covered():
    def outer(k):
        def h(r):
            return [float(sum(1 for _ in range(k)) > 2) for c in r]

        return h

    ns_a, ns_b = {}, {}
    exec("def f(r):\n    g = lambda c: c == 'x'\n    return [g(c) for c in r]\n", ns_a)
    exec("def f(r):\n    g = lambda c: c == 'y'\n    return [g(c) for c in r]\n", ns_b)
    assert fp(ns_a["f"]) != fp(ns_b["f"])  # the constant sits in the lambda's code object
    assert fp(outer(2)) != fp(outer(3))


class Config:  # repr is "<...Config object at 0x...>": its state must count
    def __init__(self, char: str) -> None:
        self.char = char


def test_closure_over_plain_object_is_hashed_by_state():
    def make(cfg):
        return lambda r: [float(c == cfg.char) for c in r]

    assert fp(make(Config("a"))) != fp(make(Config("b")))
    assert fp(make(Config("a"))) == fp(make(Config("a")))


@pytest.mark.parametrize("kind", ["tensor", "array"])
def test_closure_over_large_tensor_is_hashed_by_bytes(kind):
    big = torch.zeros(100_000) if kind == "tensor" else np.zeros(100_000)
    h = (lambda t: lambda r: [float(t[0]) for _ in r])(big)
    before = fp(h)
    big[54_321] = 1.0  # the repr of either summarises this away
    assert fp(h) != before


def test_family_class_covers_the_modules_it_uses(monkeypatch):
    import hypotheses.parsing as parsing
    from hypotheses.grammars import parens

    fam = parens.family()
    before = fam.fingerprint()
    assert before is not None and fam.fingerprint() == before

    def patched(self, t0, t1):  # a "fix" in hypotheses/parsing.py
        return (0, 0)

    monkeypatch.setattr(parsing._TreeReader, "_char_span", patched)
    assert fam.fingerprint() != before


def test_recursive_function_and_cycles_are_stable():
    ns: dict = {}
    exec("def depth(r, i=0):\n    return [] if i >= len(r) else [float(i)] + depth(r, i + 1)\n", ns)
    assert fp(ns["depth"]) is not None and fp(ns["depth"]) == fp(ns["depth"])
    a: list = []
    a.append(a)
    assert fingerprint_of(a) == fingerprint_of(a)


def test_unhashable_dependency_runs_uncached_with_one_warning(char_model, records, tmp_path):
    with open(os.devnull) as handle:

        def reads_handle(r):
            return [float(c == "a" and not handle.closed) for c in r]

        h = dl.hypothesis(reads_handle)
        cache = dl.HypothesisCache(tmp_path / "c")
        with pytest.warns(FingerprintWarning, match=r"'reads_handle' runs uncached.*handle"):
            first = scores(char_model, h, records, cache)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once per hypothesis, not per run
            second = scores(char_model, h, records, cache)
    np.testing.assert_array_equal(first, second)
    assert cache.hits == 0 and not list((tmp_path / "c").glob("*/*.npy"))


def test_subset_of_an_unhashable_family_is_unhashable_too():
    from dni_lab.backend.query.subset import SubsetFamily

    gen = (i for i in range(3))
    fam = dl.hypothesis_family(signals=["a", "b"], name="g")(
        lambda r: {"a": [next(gen, 0)] * len(r), "b": [0] * len(r)}
    )
    with pytest.warns(FingerprintWarning):
        assert fam.fingerprint() is None
    with pytest.warns(FingerprintWarning, match="family 'g' it depends on"):
        assert SubsetFamily(fam, ["a"]).fingerprint() is None


def test_errors_name_the_path_to_the_unhashable_object():
    gen = (i for i in range(3))

    def h(r):
        return [next(gen, 0) for _ in r]

    with pytest.raises(NotFingerprintable, match=r"generator.*closure 'gen'"):
        fingerprint_of(h)


def counted(r: str) -> list[float]:
    CALL_COUNT[0] += 1
    return [0.0] * len(r)


class Node:
    def __init__(self, nxt) -> None:
        self.nxt = nxt


class BadParams(dl.HypothesisFamily):
    name = "bad"

    def signals(self) -> list[str]:
        return ["bad"]

    def get_params(self) -> dict:
        raise RuntimeError("no parameters today")


def test_what_cannot_be_walked_is_refused_not_raised():
    chain = None
    for _ in range(50_000):  # deeper than the interpreter's recursion limit
        chain = Node(chain)
    h = (lambda c: lambda r: [float(c is None)] * len(r))(chain)
    with pytest.warns(FingerprintWarning, match="nests too deeply"):
        assert fp(h) is None
    with pytest.warns(FingerprintWarning, match="get_params.*no parameters today"):
        assert BadParams().fingerprint() is None
    huge = 10**5000
    assert fingerprint_of(huge) != fingerprint_of(huge + 1)


def test_locks_and_ignored_globals_do_not_unsettle_fingerprints():
    lock = threading.Lock()

    def h(r):
        with lock:
            return [0.0] * len(r)

    before = fp(h)
    with lock:
        assert fp(h) == before
    first = fp(counted)
    counted("abc")
    assert fp(counted) == first


def test_code_part_is_computed_once_per_function(monkeypatch):
    calls = []
    real = fpc.dis.get_instructions
    monkeypatch.setattr(fpc.dis, "get_instructions", lambda c: calls.append(c) or real(c))
    ns: dict = {}
    exec("def once(r):\n    return [1.0] * len(r)\n", ns)
    fp(ns["once"])
    n = len(calls)
    assert n >= 1
    for _ in range(3):
        fp(ns["once"])
    assert len(calls) == n


def test_fingerprints_survive_a_restart(tmp_path):
    script = textwrap.dedent(
        """
        import sys
        sys.path.insert(0, sys.argv[1])
        from dni_lab.backend.hypothesis.hypotheses import as_family
        from hypotheses.grammars import sql
        ns = {}
        exec("def h(r):\\n    return [float(c in S) for c in r]\\n", ns)
        ns["S"] = {"a", "b", "c", "d"}
        print(as_family(ns["h"]).fingerprint(), sql.family(n_rules=95).fingerprint())
        """
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", script, str(REPO)], capture_output=True, text=True, env=env
        )
        assert run.returncode == 0, run.stderr
        outs.add(run.stdout.strip())
    assert len(outs) == 1 and "None" not in outs.pop()


def test_library_families_keep_their_fingerprint_after_evaluating():
    from hypotheses import CodeFamily
    from hypotheses.grammars import sql
    from hypotheses.shift_reduce import ShiftReduceFamily

    windows = sql.windows(sql.generate(4, n_rules=95))[:8]
    families = [
        (sql.family(n_rules=95), windows),  # memoised parsers live in a module global
        (ShiftReduceFamily(sql.grammar(95), name="sr", tokenizer=sql.tokenize), windows),
        (CodeFamily(), ["def f(x):\n    return (x + 1)  # one\n"]),
    ]
    for fam, records in families:
        before = fam.fingerprint()
        for r in records:
            fam.evaluate(r)
        assert before is not None and fam.fingerprint() == before, fam.name
