"""Hypothesis protocol, fingerprints and the behavior cache."""

from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import pytest

import dni_lab as dl
from dni_lab.backend.hypothesis.cache import HypothesisCache, block_key
from dni_lab.backend.hypothesis.hypotheses import as_family, evaluate_family, hypothesis_block


def test_decorator_bare_and_with_arguments():
    @dl.hypothesis
    def a(r):
        return [1] * len(r)

    @dl.hypothesis(name="depth", kind="continuous")
    def b(r):
        return [0.5] * len(r)

    assert a.name == "a" and a.kind == "binary" and a("xy") == [1, 1]
    assert b.name == "depth" and b.info()[0].kind == "continuous"
    with pytest.raises(dl.HypothesisError, match="kind"):
        dl.hypothesis(kind="ordinal")(lambda r: r)


def test_family_runs_once_per_record_for_all_signals():
    calls = []

    @dl.hypothesis_family(signals=["open", "close"], name="br")
    def brackets(r):
        calls.append(r)
        return {"open": [c == "(" for c in r], "close": [c == ")" for c in r]}

    out = hypothesis_block([brackets], ["(a)", "b("], [3, 2], 0, None)
    assert out.shape == (2, 3, 2) and len(calls) == 2
    assert out[0, :, 0].tolist() == [1, 0, 0] and out[0, :, 1].tolist() == [0, 0, 1]
    assert out[1, 2].tolist() == [0, 0]  # padding
    assert brackets.hids() == ["br.open", "br.close"]


def test_family_missing_signal_and_array_shape_errors():
    fam = dl.hypothesis_family(signals=["x", "y"], name="f")(lambda r: {"x": [0] * len(r)})
    with pytest.raises(dl.HypothesisError, match=r"no values for signals \['y'\]"):
        evaluate_family(fam, "ab", 2, 7)
    arr = dl.hypothesis_family(signals=["x", "y"], name="g")(lambda r: np.zeros((len(r), 3)))
    with pytest.raises(dl.HypothesisError, match=r"shape \(2, 3\) on record 4"):
        evaluate_family(arr, "ab", 2, 4)


def test_fingerprint_tracks_source_parameters_and_closures():
    def make(word):
        def kw(r):
            return [word in r] * len(r)

        return kw

    fa, fb = as_family(make("SELECT")), as_family(make("FROM"))
    assert fa.fingerprint() != fb.fingerprint()
    assert fa.fingerprint() == as_family(make("SELECT")).fingerprint()

    def p(r, k=1):
        return [k] * len(r)

    assert (
        as_family(functools.partial(p, k=1)).fingerprint()
        != as_family(functools.partial(p, k=2)).fingerprint()
    )
    h1 = dl.hypothesis(kind="binary")(lambda r: [0] * len(r))
    h2 = dl.hypothesis(kind="continuous")(lambda r: [0] * len(r))
    assert h1.fingerprint() != h2.fingerprint()


def test_block_key_sees_content_and_window_source():
    class Window(str):
        pass

    a, b = Window("abc"), Window("abc")
    a.source, b.source = "xxabc", "abcyy"
    assert block_key(["abc", "d"]) == block_key(["abc", "d"])
    assert block_key(["abc", "d"]) != block_key(["abd", "d"])
    assert block_key([a]) != block_key([b])
    img = np.zeros((2, 3))
    assert block_key([img]) != block_key([img.T.copy()])


def test_block_key_hashes_a_shared_source_once_and_still_tells_sources_apart():
    class Window(str):
        pass

    def windows(source: str, ids: range) -> list:
        out = []
        for i in ids:
            w = Window(source[i : i + 3])
            w.source, w.start = source, i
            out.append(w)
        return out

    q1, q2 = "SELECT a FROM t", "SELECT a FROM u"
    assert block_key(windows(q1, range(4))) == block_key(windows(q1, range(4)))
    # the same windows of another query: only the shared source differs
    assert block_key(windows(q1, range(4))) != block_key(windows(q2, range(4)))
    # the back-reference points at the right earlier string
    mixed = windows(q1, range(2)) + windows(q2, range(2))
    swapped = windows(q1, range(2)) + windows(q1, range(2))
    assert block_key(mixed) != block_key(swapped)


def test_memory_lru_is_bounded_in_bytes(tmp_path):
    c = HypothesisCache(directory=False, max_bytes=10_000)
    for i in range(10):
        c.put("fp", str(i), np.zeros((500, 1), np.float32))  # 2000 bytes each
    assert c.nbytes <= 10_000
    assert c.get("fp", "0") is None and c.get("fp", "9") is not None


def _disk_bytes(directory) -> int:
    return sum(p.stat().st_size for p in directory.glob("*/*") if p.suffix in (".npy", ".json"))


def test_disk_store_keeps_to_its_budget_dropping_least_recently_used(tmp_path):
    entry = np.zeros((1000, 1), np.float32)  # 4,000 bytes of data, about 4.2 kB on disk
    c = HypothesisCache(tmp_path, max_bytes=0, max_disk_bytes=30_000)  # every read from disk
    for i in range(5):
        c.put("fp", f"k{i}", entry)
    for i in range(5):  # k0 oldest ... k4 newest, a second apart whatever the clock's grain
        os.utime(tmp_path / "fp" / f"k{i}.npy", (1_000_000 + i, 1_000_000 + i))
    assert c.get("fp", "k0") is not None  # a read makes k0 the most recently used
    for i in range(5, 9):
        c.put("fp", f"k{i}", entry)
        assert _disk_bytes(tmp_path) <= 30_000
    kept = {p.stem for p in tmp_path.glob("fp/*.npy")}
    assert "k0" in kept and "k1" not in kept and "k8" in kept
    assert {p.stem for p in tmp_path.glob("fp/*.json")} == kept  # no orphan sidecars
    assert c.get("fp", "k1") is None  # an evicted entry is a miss, recomputed by its run


def test_a_cache_directory_named_twice_is_one_cache(tmp_path):
    from dni_lab.backend.engine.resolve import as_cache

    first = as_cache(tmp_path / "c")
    assert as_cache(str(tmp_path / "c")) is first  # its memory layer serves the next call
    assert as_cache(tmp_path / "other") is not first


def test_corrupt_disk_entry_is_recomputed_with_warning(tmp_path):
    c = HypothesisCache(tmp_path)
    c.put("fp", "k", np.arange(6, dtype=np.float32).reshape(3, 2))
    npy = next(tmp_path.glob("fp/*.npy"))
    npy.write_bytes(npy.read_bytes()[:-4] + b"\x00\x00\x80\x7f")
    fresh = HypothesisCache(tmp_path)
    with pytest.warns(UserWarning, match="corrupt"):
        assert fresh.get("fp", "k") is None
    assert not npy.exists()  # dropped, so the next run rewrites it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fresh.put("fp", "k", np.ones((3, 2), np.float32))
        assert HypothesisCache(tmp_path).get("fp", "k").sum() == 6


def test_disk_store_never_pickles(tmp_path):
    c = HypothesisCache(tmp_path)
    c.put("fp", "k", np.ones((2, 2), np.float32))
    npy = next(tmp_path.glob("fp/*.npy"))
    arr = np.load(npy, allow_pickle=False)
    assert arr.dtype == np.float32 and not list(tmp_path.glob("**/*.pkl"))


def test_block_key_sees_array_subclass_attributes():
    class Frame(np.ndarray):
        pass

    a = np.zeros((2, 2)).view(Frame)
    b = np.zeros((2, 2)).view(Frame)
    a.t, b.t = 1, 2
    assert block_key([a]) != block_key([b])
    assert block_key([np.zeros((2, 2))]) != block_key([a])
