"""The PostgreSQL baseline of the benchmarks (DeepBase §5.1) against numpy.

The server tests need Debian's PostgreSQL server binaries and psycopg; they
are skipped, with the reason, where either is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# benchmarks/ is not an installed package: import it from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import pg_baseline as pgb


def _pg_missing() -> str | None:
    try:
        pgb.find_pg_bin()
    except pgb.PostgresUnavailable as exc:
        return str(exc)
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'psycopg[binary]')"
    return None


_MISSING = _pg_missing()
needs_pg = pytest.mark.skipif(_MISSING is not None, reason=f"PostgreSQL baseline: {_MISSING}")


@pytest.fixture(scope="module")
def server():
    with pgb.PostgresServer() as srv:
        yield srv


def _data(n: int = 3000, n_units: int = 37, n_hyps: int = 9, seed: int = 0):
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n, n_units)).astype(np.float32)
    H = (rng.random((n, n_hyps)) < 0.3).astype(np.float32)
    U[:, 5] += 2 * H[:, 2]  # one strong pair, so the test is not only about noise
    H[:, 4] = 1.0  # a constant hypothesis: correlation undefined
    return U, H


def test_plan_batches_respects_tables_and_limits():
    parts_u = [pgb.TablePart("u_0", "u", 0, 10), pgb.TablePart("u_1", "u", 10, 3)]
    parts_h = [pgb.TablePart("h_0", "h", 0, 4)]
    pairs = np.stack(np.meshgrid(np.arange(13), np.arange(4), indexing="ij"), -1).reshape(-1, 2)
    batches = pgb.plan_batches(pairs, parts_u, parts_h, max_exprs=7)
    seen = np.concatenate([b for _, _, b in batches])
    assert sorted(map(tuple, seen)) == sorted(map(tuple, pairs))  # every pair exactly once
    for a, _, b in batches:
        assert len(b) <= 7
        part = parts_u[a]
        assert ((b[:, 0] >= part.start) & (b[:, 0] < part.start + part.width)).all()
    with pytest.raises(ValueError):
        pgb.plan_batches(pairs, parts_u, parts_h, max_exprs=pgb.MAX_TARGET_ENTRIES + 1)


def test_binary_copy_rows_layout():
    X = np.array([[1.5, -2.0]], dtype=np.float32)
    raw = pgb._binary_copy_rows(np.array([7], dtype=np.int32), X)
    assert raw[:2] == (3).to_bytes(2, "big")  # three fields: symbolid and two values
    assert raw[2:10] == (4).to_bytes(4, "big") + (7).to_bytes(4, "big")
    assert raw[14:18] == np.array([1.5], dtype=">f4").tobytes()  # big-endian float4
    assert len(raw) == 2 + 3 * 8


@pytest.mark.postgres
@needs_pg
def test_pg_corr_matches_numpy_with_split_tables_and_batches(server):
    U, H = _data()
    # Narrow tables and small batches exercise the splitting the full size needs.
    res = pgb.pg_corr(U, H, server=server, max_exprs=50, max_columns=16)
    ref = pgb.numpy_corr(U, H)
    assert res.corr.shape == (37, 9)
    assert res.complete and res.n_batches_total == len(res.batches) > 3
    assert np.isnan(res.corr[:, 4]).all()  # NULL from PostgreSQL, never 0
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(res.corr[ok], ref[ok], atol=1e-6)
    assert res.corr[5, 2] > 0.5
    assert res.load_s > 0 and res.query_s > 0


@pytest.mark.postgres
@needs_pg
def test_subset_of_batches_and_pairs(server):
    U, H = _data(n=500, n_units=20, n_hyps=5, seed=1)
    res = pgb.pg_corr(U, H, server=server, max_exprs=10, max_batches=2)
    assert not res.complete and len(res.batches) == 2
    assert sum(b["n_exprs"] for b in res.batches) == 20  # two batches of ten pairs
    assert np.isfinite(res.corr[:4, :4]).all()  # unit-major: units 0-3; column 4 is constant
    assert np.isnan(res.corr[4:]).all()
    pairs = np.array([[3, 1], [19, 0]])
    res = pgb.pg_corr(U, H, server=server, pairs=pairs)
    ref = pgb.numpy_corr(U, H)
    np.testing.assert_allclose(res.corr[pairs[:, 0], pairs[:, 1]], ref[pairs[:, 0], pairs[:, 1]])
    assert np.isfinite(res.corr).sum() == 2


@pytest.mark.postgres
@needs_pg
def test_server_is_local_and_removed_on_error():
    srv = pgb.PostgresServer()
    with pytest.raises(RuntimeError, match="boom"), srv:
        with srv.connect() as conn:
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
            assert conn.execute("SHOW jit").fetchone()[0] == "off"
        root = srv.root
        assert root is not None and root.exists()
        raise RuntimeError("boom")
    assert not root.exists()
    assert srv.root is None
