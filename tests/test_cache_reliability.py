"""The hypothesis cache under faults: unwritable directories, corrupt entries, other processes.

A cache fault never fails a run and never changes a result: it falls back to
memory (one warning) or recomputes the entry (one warning per corrupt entry).
Tests run as root, where ``chmod`` stops nothing, so unwritable and unreadable
directories are simulated: a path under a regular file, or ``os.replace`` and
reads that raise ``PermissionError``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import dni_lab as dl
import dni_lab.backend.hypothesis.cache as cache_mod
from dni_lab.backend.hypothesis.cache import CacheWarning, HypothesisCache

REPO = Path(__file__).resolve().parents[1]
VALUES = np.arange(12, dtype=np.float32).reshape(6, 2)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_mod, "_WARNED_DIRS", set())


def vowels(r: str) -> list[float]:
    return [float(c in "aeiou") for c in r]


def scores(model, records, cache) -> np.ndarray:
    units = [("lstm", "*")]
    frame = dl.inspect([model], [vowels], ["corr"], records, units=units, eps=None, cache=cache)
    return frame.sort("uid")["unit_score"].to_numpy()


def under_a_file(tmp_path: Path) -> Path:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a regular file")
    return blocker / "cache"


# -- unwritable or unreadable directories -------------------------------------------------
def test_directory_under_a_file_falls_back_to_memory_once(char_model, records, tmp_path):
    cache = HypothesisCache(under_a_file(tmp_path))
    with pytest.warns(CacheWarning, match="cannot be written.*memory only") as rec:
        first = scores(char_model, records, cache)
    assert len([w for w in rec if w.category is CacheWarning]) == 1
    assert cache.directory is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = scores(char_model, records, cache)
    assert cache.hits > 0
    np.testing.assert_allclose(first, scores(char_model, records, False), atol=1e-6)
    np.testing.assert_array_equal(first, second)


def test_unwritable_env_cache_warns_once_across_runs(char_model, records, tmp_path, monkeypatch):
    monkeypatch.setenv("DNI_LAB_CACHE", str(under_a_file(tmp_path)))
    with pytest.warns(CacheWarning, match="DNI_LAB_CACHE"):
        scores(char_model, records, None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores(char_model, records, None)
        scores(char_model, records, str(under_a_file(tmp_path)))  # same place, said already


def test_replace_refused_falls_back(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache_mod.os, "replace", refuse)
    cache = HypothesisCache(tmp_path / "c")
    with pytest.warns(CacheWarning, match="PermissionError"):
        cache.put("fp", "k", VALUES)
    np.testing.assert_array_equal(cache.get("fp", "k"), VALUES)  # memory still serves
    assert not list((tmp_path / "c").glob("*/*.tmp"))  # no debris left behind


def test_entries_another_user_owns_fall_back(tmp_path, monkeypatch):
    HypothesisCache(tmp_path).put("fp", "k", VALUES)
    real = Path.read_bytes

    def read_bytes(self):  # mode 0600, another owner
        if tmp_path in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    cache = HypothesisCache(tmp_path)
    with pytest.warns(CacheWarning, match="cannot be read"):
        assert cache.get("fp", "k") is None
    assert (tmp_path / "fp" / "k.npy").exists()  # not ours to delete
    cache.put("fp", "k", VALUES)
    np.testing.assert_array_equal(cache.get("fp", "k"), VALUES)


def test_read_only_directory_with_a_corrupt_entry(char_model, records, tmp_path, monkeypatch):
    warm = HypothesisCache(tmp_path / "c")
    expected = scores(char_model, records, warm)
    for npy in (tmp_path / "c").glob("*/*.npy"):
        npy.write_bytes(b"\x93NUMPY garbage")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(Path, "unlink", refuse)
    monkeypatch.setattr(cache_mod.tempfile, "mkstemp", refuse)
    cold = HypothesisCache(tmp_path / "c")
    with pytest.warns(CacheWarning) as rec:
        got = scores(char_model, records, cold)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    messages = " ".join(str(w.message) for w in rec)
    assert "corrupt" in messages and "memory only" in messages


def test_clear_on_an_unwritable_directory_does_not_raise(tmp_path, monkeypatch):
    cache = HypothesisCache(tmp_path)
    cache.put("fp", "k", VALUES)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache_mod, "_remove", refuse)
    with pytest.warns(CacheWarning, match="cannot be cleared"):
        cache.clear(disk=True)
    assert cache.nbytes == 0 and cache.get("fp", "k") is None


# -- corrupt entries ---------------------------------------------------------------------
def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    return buf.getvalue()


def _consistent(blob: bytes, shape: list) -> str:
    import hashlib

    return json.dumps({"sha256": hashlib.sha256(blob).hexdigest(), "shape": shape})


CORRUPTIONS = {
    "sidecar []": lambda npy, meta: meta.write_text("[]"),
    "sidecar string": lambda npy, meta: meta.write_text('"x"'),
    "sidecar {}": lambda npy, meta: meta.write_text("{}"),
    "sidecar wrong types": lambda npy, meta: meta.write_text('{"sha256": 1, "shape": 2}'),
    "sidecar not json": lambda npy, meta: meta.write_text("{nope"),
    "sidecar empty": lambda npy, meta: meta.write_bytes(b""),
    "sidecar not utf-8": lambda npy, meta: meta.write_bytes(b"\xff\xfe\x00"),
    "sidecar huge": lambda npy, meta: meta.write_bytes(b" " * (1 << 20)),
    "npy truncated": lambda npy, meta: npy.write_bytes(npy.read_bytes()[:20]),
    "npy flipped byte": lambda npy, meta: npy.write_bytes(npy.read_bytes()[:-1] + b"\x00"),
    "npy empty": lambda npy, meta: npy.write_bytes(b""),
}
REWRITTEN = {  # the sidecar agrees, the content is still wrong
    "float64": (VALUES.astype(np.float64), [6, 2]),
    "3-D": (VALUES.reshape(6, 2, 1), [6, 2, 1]),
    # NaN is a stored value ("undefined here"); inf never is
    "inf": (np.full((6, 2), np.inf, np.float32), [6, 2]),
    "object dtype": (np.array([[{"a": 1}]], dtype=object), [1, 1]),
    "shape disagrees": (VALUES, [2, 6]),
}


def _entry(tmp_path: Path) -> tuple[Path, Path]:
    HypothesisCache(tmp_path).put("fp", "k", VALUES)
    return tmp_path / "fp" / "k.npy", tmp_path / "fp" / "k.json"


def _recovers(tmp_path: Path, npy: Path, meta: Path) -> None:
    cache = HypothesisCache(tmp_path)
    with pytest.warns(CacheWarning, match=r"k\.npy is corrupt"):
        assert cache.get("fp", "k") is None
    assert not npy.exists() and not meta.exists()  # removed: the next run is clean
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache.put("fp", "k", VALUES)
        np.testing.assert_array_equal(HypothesisCache(tmp_path).get("fp", "k"), VALUES)


@pytest.mark.parametrize("form", sorted(CORRUPTIONS))
def test_corrupt_entry_is_dropped_and_recomputed(tmp_path, form):
    npy, meta = _entry(tmp_path)
    CORRUPTIONS[form](npy, meta)
    _recovers(tmp_path, npy, meta)


@pytest.mark.parametrize("form", sorted(REWRITTEN))
def test_consistent_but_wrong_entry_is_dropped(tmp_path, form):
    npy, meta = _entry(tmp_path)
    arr, shape = REWRITTEN[form]
    blob = _npy(arr)
    npy.write_bytes(blob)
    meta.write_text(_consistent(blob, shape))
    _recovers(tmp_path, npy, meta)


@pytest.mark.parametrize("which", ["npy", "json"])
def test_directory_or_link_in_place_of_a_file(tmp_path, which):
    npy, meta = _entry(tmp_path)
    target = npy if which == "npy" else meta
    target.unlink()
    target.mkdir()
    (target / "inside").write_text("x")
    _recovers(tmp_path, npy, meta)
    npy.unlink()
    npy.symlink_to("/dev/zero")  # a link: never followed
    _recovers(tmp_path, npy, meta)


def test_corrupt_entry_in_a_run_gives_the_uncached_scores(char_model, records, tmp_path):
    expected = scores(char_model, records, HypothesisCache(tmp_path / "c"))
    for meta in (tmp_path / "c").glob("*/*.json"):
        meta.write_text("[]")
    with pytest.warns(CacheWarning, match="corrupt"):
        got = scores(char_model, records, HypothesisCache(tmp_path / "c"))
    np.testing.assert_allclose(got, expected, atol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten: the third run is clean
        scores(char_model, records, HypothesisCache(tmp_path / "c"))


def test_cached_arrays_are_read_only(tmp_path):
    cache = HypothesisCache(tmp_path)
    cache.put("fp", "k", VALUES.copy())
    for got in (cache.get("fp", "k"), HypothesisCache(tmp_path).get("fp", "k")):
        with pytest.raises(ValueError, match="read-only"):
            got[0, 0] = 99.0


# -- other processes -----------------------------------------------------------------------
def test_clear_leaves_other_writers_files_in_flight(tmp_path):
    cache = HypothesisCache(tmp_path)
    cache.put("fp", "k", VALUES)
    in_flight = tmp_path / "fp" / "abc123.tmp"
    in_flight.write_bytes(b"half an entry")
    dead = tmp_path / "fp" / "dead99.tmp"
    dead.write_bytes(b"left by a crashed writer")
    old = time.time() - 2 * cache_mod.STALE_TMP_S
    os.utime(dead, (old, old))
    code = "import sys; from dni_lab.backend.hypothesis.cache import HypothesisCache as C; "
    code += "C(sys.argv[1]).clear(disk=True)"
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, timeout=120)
    assert run.returncode == 0
    assert in_flight.exists() and not dead.exists()
    assert not list(tmp_path.glob("*/*.npy")) and not list(tmp_path.glob("*/*.json"))


WRITER = """
import sys
import numpy as np
from dni_lab.backend.hypothesis.cache import HypothesisCache
c = HypothesisCache(sys.argv[1])
for i in range(int(sys.argv[2])):
    c.put("fp", str(i % 7), np.full((64, 3), i, np.float32))
    got = HypothesisCache(sys.argv[1]).get("fp", str(i % 7))
    assert got is None or got.shape == (64, 3)
print("ok")
"""
CLEARER = """
import sys, time
from dni_lab.backend.hypothesis.cache import HypothesisCache
c = HypothesisCache(sys.argv[1])
end = time.time() + float(sys.argv[2])
while time.time() < end:
    c.clear(disk=True)
print("ok")
"""


def test_clear_in_one_process_never_aborts_anothers_run(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-c"]
    clearer = subprocess.Popen([*cmd, CLEARER, str(tmp_path), "4"], cwd=REPO, env=env)
    writer = subprocess.run(
        [*cmd, WRITER, str(tmp_path), "400"], cwd=REPO, env=env, capture_output=True, text=True
    )
    clearer.wait(timeout=120)
    assert writer.returncode == 0, writer.stderr[-2000:]
    assert clearer.returncode == 0


# -- memory ------------------------------------------------------------------------------
def test_default_memory_budget_is_bounded():
    cache = HypothesisCache(directory=False)
    assert cache.max_bytes <= 64 << 20
    block = np.zeros((1 << 20, 4), np.float32)  # 16 MiB
    for i in range(12):
        cache.put("fp", str(i), block)
    assert cache.nbytes <= cache.max_bytes
    assert cache.get("fp", "11") is not None and cache.get("fp", "0") is None


def test_undefined_values_are_stored_and_served(tmp_path):
    values = VALUES.copy()
    values[1, 0] = np.nan  # "undefined here": a hypothesis value, not a corruption
    cache = HypothesisCache(tmp_path)
    cache.put("fp", "nan", values)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(HypothesisCache(tmp_path).get("fp", "nan"), values)
