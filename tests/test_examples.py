"""By-example queries: top-k and kNN vs brute force, the MAI/NPI index on disk, the NTA's cost."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, random_records
from specialized import one_thread, records, specialized
from torch import nn

import dni_lab as dl
from dni_lab.backend.examples.index import pack_ids, unpack_ids
from dni_lab.backend.examples.nta import segments

NeuronIndex = dl.examples.NeuronIndex


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def vectors(n: int, d: int, seed: int, skew: bool = False) -> list[np.ndarray]:
    """Records that are activation vectors themselves (an identity model reads them)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    if skew:  # heavy right tails: a few records dominate, as DeepEverest's skewed case
        X[:, :4] = rng.lognormal(0, 1.5, size=(n, 4))
    return list(X)


IDENTITY = dl.Model(nn.Identity(), symbols=lambda r: 1, name="identity")


def brute_topk(X, units, k, agg):
    s = {"sum": np.sum, "mean": np.mean, "max": np.max}[agg](X[:, units].astype(np.float64), 1)
    order = np.lexsort((np.arange(len(X)), -s))[:k]
    return order, s[order]


def brute_knn(X, units, t, k, metric):
    A, v = X[:, units].astype(np.float64), X[t, units].astype(np.float64)
    if metric == "l2":
        d = np.sqrt(((A - v) ** 2).sum(1))
    else:
        d = 1 - (A @ v) / (np.linalg.norm(A, axis=1) * np.linalg.norm(v))
    order = np.lexsort((np.arange(len(X)), d))[:k]
    return order, d[order]


@pytest.fixture(scope="module")
def random_case():
    recs = vectors(3000, 12, seed=1, skew=True)
    with one_thread():
        index = NeuronIndex("", ratio=0.05, n_partitions=16, device="cpu").fit(IDENTITY, recs)
    return recs, np.stack(recs), index


@pytest.mark.parametrize("agg", ["sum", "mean", "max"])
@pytest.mark.parametrize("units", [[0, 1, 2], [5], [3, 7, 8, 11]])
def test_topk_equals_brute_force_on_random_data(random_case, agg, units):
    recs, X, index = random_case
    ids, vals = brute_topk(X, units, 10, agg)
    for idx in (None, index):
        r = dl.examples.topk(IDENTITY, recs, "", units, k=10, agg=agg, index=idx, device="cpu")
        assert r.frame["record"].to_list() == ids.tolist()
        np.testing.assert_allclose(r.frame["score"].to_numpy(), vals, rtol=1e-6)
        assert r.frame["rank"].to_list() == list(range(1, 11))
    assert r.method == "nta" and r.evaluated <= len(recs)


@pytest.mark.parametrize("units", [[0, 1, 2], [5, 6], [9]])
@pytest.mark.parametrize("target", [0, 77, 2999])
def test_knn_equals_brute_force_on_random_data(random_case, units, target):
    recs, X, index = random_case
    ids, d = brute_knn(X, units, target, 8, "l2")
    for idx in (None, index):
        r = dl.examples.knn(IDENTITY, recs, "", units, target, k=8, index=idx, device="cpu")
        assert r.frame["record"].to_list() == ids.tolist()
        np.testing.assert_allclose(r.frame["distance"].to_numpy(), d, rtol=1e-6, atol=1e-6)
    assert r.frame["record"][0] == target  # a record is its own nearest neighbour
    ids, d = brute_knn(X, [*units, 10], target, 8, "cosine")
    r = dl.examples.knn(IDENTITY, recs, "", [*units, 10], target, 8, "cosine", index, device="cpu")
    assert r.frame["record"].to_list() == ids.tolist() and r.method == "scan"
    assert "cosine" in r.stats["reason"]


def test_knn_of_an_outside_record(random_case):
    recs, X, index = random_case
    probe = np.full(12, 0.5, np.float32)
    r = dl.examples.knn(IDENTITY, recs, "", [0, 1], probe, k=5, index=index, device="cpu")
    d = np.sqrt(((X[:, [0, 1]].astype(np.float64) - 0.5) ** 2).sum(1))
    assert r.frame["record"].to_list() == np.lexsort((np.arange(len(X)), d))[:5].tolist()


def test_nta_reads_a_fraction_of_a_skewed_dataset(random_case):
    recs, _, index = random_case
    r = dl.examples.topk(IDENTITY, recs, "", [0, 1, 2], k=10, index=index, device="cpu")
    scan = dl.examples.topk(IDENTITY, recs, "", [0, 1, 2], k=10, device="cpu")
    assert scan.evaluated == len(recs) and scan.method == "scan"
    assert r.evaluated < 0.2 * len(recs), r.evaluated  # DeepEverest's example: about 21%
    assert r.share_evaluated == r.evaluated / len(recs)
    assert r.frame.equals(scan.frame)


def test_index_structure(random_case):
    _recs, X, index = random_case
    N, D = X.shape
    m = int(np.ceil(0.05 * N))
    assert index.mai_ids_.shape == (D, m) and index.mai_values_.shape == (D, m)
    for u in (0, 7):
        order = np.lexsort((np.arange(N), -X[:, u]))[:m]
        assert index.mai_ids_[u].tolist() == order.tolist()
        assert np.all(np.diff(index.mai_values_[u]) <= 0)  # sorted, highest first
        pid = index.partition_ids(u)
        counts = np.bincount(pid, minlength=16)
        assert counts.sum() == N and counts.max() - counts.min() <= 1  # equal-count partitions
        for p in range(16):
            vals = X[pid == p, u]
            assert vals.min() == index.lower_[u, p] and vals.max() == index.upper_[u, p]
        # the NTA's segments partition the records and descend
        segs = segments(index, u, 50)
        assert sorted(np.concatenate([s.ids for s in segs]).tolist()) == list(range(N))
        his = [s.hi for s in segs]
        assert his == sorted(his, reverse=True)
    assert index.bits_ == 4 and index.partitions_.shape == (D, N * 4 // 8)


@pytest.mark.parametrize("bits", [1, 3, 5, 8, 11])
def test_partition_ids_pack_and_unpack(bits):
    ids = np.random.default_rng(bits).integers(0, 2**bits, 1001)
    packed = pack_ids(ids, bits)
    assert packed.dtype == np.uint8 and len(packed) == -(-1001 * bits // 8)
    assert unpack_ids(packed, 1001, bits).tolist() == ids.tolist()


def test_index_round_trips_through_disk(random_case, tmp_path):
    recs, _, index = random_case
    path = index.save(tmp_path / "layer.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer.npz"]  # no temporary left
    with np.load(path, allow_pickle=False) as z:  # plain arrays only
        assert set(z.files) == {
            "mai_ids_",
            "mai_values_",
            "lower_",
            "upper_",
            "partitions_",
            "meta",
        }
    back = NeuronIndex.load(path)
    for k in ("mai_ids_", "mai_values_", "lower_", "upper_", "partitions_"):
        np.testing.assert_array_equal(getattr(back, k), getattr(index, k))
    learned = ("n_records_", "width_", "bits_", "address_", "digest_", "weights_sha256_")
    for k in (*learned, "model_name_", "ratio", "n_partitions", "symbol_agg", "layer"):
        assert getattr(back, k) == getattr(index, k)
    a = dl.examples.topk(IDENTITY, recs, "", [1, 2], k=5, index=back, device="cpu")
    b = dl.examples.topk(IDENTITY, recs, "", [1, 2], k=5, index=index, device="cpu")
    assert a.frame.equals(b.frame) and a.evaluated == b.evaluated
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(dl.DNIError, match="truncated"):  # never loads silently
        NeuronIndex.load(path)


def test_index_refuses_other_data_or_settings(random_case):
    recs, _, index = random_case
    other = vectors(3000, 12, seed=2)
    with pytest.raises(dl.DNIError, match="records"):
        dl.examples.topk(IDENTITY, other, "", [0], index=index, device="cpu")
    with pytest.raises(dl.DNIError, match="symbol_agg"):
        dl.examples.topk(IDENTITY, recs, "", [0], index=index, symbol_agg="mean", device="cpu")
    with pytest.raises(dl.DNIError, match="not built"):
        dl.examples.topk(IDENTITY, recs, "", [0], index=NeuronIndex(""), device="cpu")
    with pytest.raises(dl.DNIError, match="unknown group aggregation"):
        dl.examples.topk(IDENTITY, recs, "", [0], agg="median", device="cpu")


def test_a_mistyped_option_is_refused_not_defaulted(random_case):
    recs, _, index = random_case
    # options travel as **options; a typo must fail as a named parameter would
    with pytest.raises(TypeError, match=r"topk\(\) .* 'symbol_ag'.*symbol_agg"):
        dl.examples.topk(IDENTITY, recs, "", [0], index=index, symbol_ag="mean")
    with pytest.raises(TypeError, match=r"knn\(\) .* 'batchsize'"):
        dl.examples.knn(IDENTITY, recs, "", [0], 3, batchsize=8)
    with pytest.raises(TypeError):  # options are keyword-only: nothing shifts silently
        dl.examples.topk(IDENTITY, recs, "", [0], 10, "sum", index, "mean")


@pytest.mark.parametrize("symbol_agg", ["max", "mean", "last"])
def test_real_model_top_k_and_knn_equal_brute_force(symbol_agg):
    model, S, _ = specialized("paren")
    recs = records(1500, seed=21, unique=True)
    ev = dl.examples.Activations(model, recs, "lstm", None, symbol_agg, device="cpu")
    X = ev(np.arange(len(recs)))
    # the per-record aggregate is the symbol activations' max / mean / last
    with torch.no_grad():
        _, h = model.module.run(model.encode([recs[3]]))
    ref = {"max": h[0].amax(0), "mean": h[0].mean(0), "last": h[0, -1]}[symbol_agg]
    np.testing.assert_allclose(X[3], ref.numpy(), atol=1e-5)
    index = NeuronIndex("lstm", symbol_agg=symbol_agg, device="cpu").fit(model, recs)
    for agg in ("sum", "max"):
        ids, vals = brute_topk(X, S[:3], 10, agg)
        r = dl.examples.topk(
            model, recs, "lstm", S[:3], 10, agg, index, symbol_agg=symbol_agg, device="cpu"
        )
        np.testing.assert_allclose(r.frame["score"].to_numpy(), vals, atol=1e-5)
        assert r.frame["record"].to_list() == ids.tolist()
        assert r.evaluated < len(recs)
    ids, d = brute_knn(X, S, 5, 10, "l2")
    r = dl.examples.knn(
        model, recs, "lstm", S, 5, 10, "l2", index, symbol_agg=symbol_agg, device="cpu"
    )
    np.testing.assert_allclose(r.frame["distance"].to_numpy(), d, atol=1e-5)
    assert r.frame["record"].to_list() == ids.tolist()


def test_nta_is_exact_across_index_settings_ties_and_sizes():
    """Random small cases: integer data (ties), no MAI or all-MAI, more partitions than records."""
    rng = np.random.default_rng(0)
    for trial in range(25):
        N, D = int(rng.integers(1, 300)), int(rng.integers(1, 5))
        X = rng.normal(size=(N, D)).astype(np.float32)
        if trial % 2:
            X = rng.integers(0, 4, size=(N, D)).astype(np.float32)
        recs = list(X)
        model = dl.Model(nn.Identity(), symbols=lambda r: 1, name="identity")
        ratio, P = float(rng.choice([0, 0.05, 1.0])), int(rng.choice([1, 7, 1000]))
        index = NeuronIndex("", ratio=ratio, n_partitions=P, device="cpu").fit(model, recs)
        units = sorted(set(rng.integers(0, D, int(rng.integers(1, D + 1))).tolist()))
        k, chunk = int(rng.integers(1, N + 3)), int(rng.integers(1, 40))
        for agg in ("sum", "mean", "max"):
            r = dl.examples.topk(model, recs, "", units, k, agg, index, mai_chunk=chunk)
            ids, vals = brute_topk(X, units, k, agg)
            assert r.frame["record"].to_list() == ids.tolist(), (trial, agg)
            np.testing.assert_allclose(r.frame["score"].to_numpy(), vals, rtol=1e-6)
        t = int(rng.integers(0, N))
        r = dl.examples.knn(model, recs, "", units, t, k, "l2", index, mai_chunk=chunk)
        ids, d = brute_knn(X, units, t, k, "l2")
        assert r.frame["record"].to_list() == ids.tolist(), trial
        np.testing.assert_allclose(r.frame["distance"].to_numpy(), d, atol=1e-6)


def _checkpoints():
    """Two checkpoints of one model under one name (the second trained a little further)."""
    torch.manual_seed(0)
    first = dl.Model(CharLM(hidden=8, layers=1), encode_chars, name="lm")
    later = copy.deepcopy(first)
    with torch.no_grad():
        for p in later.module.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return first, later, random_records(400, seed=9)


def test_an_index_of_one_checkpoint_is_refused_for_another(tmp_path):
    first, later, recs = _checkpoints()
    index = NeuronIndex("lstm", device="cpu").fit(first, recs)
    units = [0, 3, 5]
    scan_first = dl.examples.topk(first, recs, "lstm", units, k=10, device="cpu").frame
    scan_later = dl.examples.topk(later, recs, "lstm", units, k=10, device="cpu").frame
    # the danger is real: the checkpoints disagree on the top-10
    assert scan_first["record"].to_list() != scan_later["record"].to_list()
    saved = NeuronIndex.load(index.save(tmp_path / "lm.npz"))
    for idx in (index, saved):
        other = r"(?i)model 'lm' with weights .*another checkpoint.*re-fit"
        with pytest.raises(dl.DNIError, match=other):
            dl.examples.topk(later, recs, "lstm", units, k=10, index=idx, device="cpu")
        with pytest.raises(dl.DNIError, match="other weights"):
            dl.examples.knn(later, recs, "lstm", units, 0, k=10, index=idx, device="cpu")
    # the same weights under another name: refused too, and the message says the weights match
    renamed = dl.Model(first.module, first.encode, name="lm-copy")
    with pytest.raises(dl.DNIError, match=r"'lm-copy'.*same weights"):
        dl.examples.topk(renamed, recs, "lstm", units, k=10, index=index, device="cpu")
    # an identical copy of the fitted checkpoint is accepted and answers as the scan does
    twin = copy.deepcopy(first)
    for idx in (index, saved):
        r = dl.examples.topk(twin, recs, "lstm", units, k=10, index=idx, device="cpu")
        assert r.method == "nta" and r.frame.equals(scan_first)
    # the refit on the later checkpoint answers as its scan does
    refit = NeuronIndex("lstm", device="cpu").fit(later, recs)
    r = dl.examples.topk(later, recs, "lstm", units, k=10, index=refit, device="cpu")
    assert r.frame.equals(scan_later)


def _rewrite(path, meta_change=None, arrays_change=None, resign=True):
    """Rewrite an index file with its meta/arrays changed (and, if ``resign``, a valid checksum)."""
    from dni_lab.backend.examples import index_file

    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        arrays = {k: z[k] for k in z.files if k != "meta"}
    signed = meta.pop("sha256")
    (meta_change or (lambda m: None))(meta)
    (arrays_change or (lambda a: None))(arrays)
    meta["sha256"] = index_file._checksum(meta, arrays) if resign else signed
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


def _tamperings():
    def pickled_meta(path):
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k != "meta"}
        np.savez(path, meta=np.array([{"format": 2}], dtype=object), **arrays)

    def add_key(key, value):
        return lambda path: _rewrite(path, lambda m: m.__setitem__(key, value))

    def set_array(name, fn):
        return lambda path: _rewrite(path, arrays_change=lambda a: a.__setitem__(name, fn(a[name])))

    def flip_a_value(path):
        def flip(a):
            a["mai_values_"] = a["mai_values_"].copy()
            a["mai_values_"][0, 0] += 1.0

        _rewrite(path, arrays_change=flip, resign=False)

    return {
        "truncated to 100 bytes": (lambda p: p.write_bytes(p.read_bytes()[:100]), "truncated"),
        "truncated by half": (
            lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
            "truncated",
        ),
        "not a zip file": (lambda p: p.write_text("layer,ratio\n"), "truncated or corrupt"),
        "pickled meta": (pickled_meta, "pickled data"),
        "a __class__ meta key": (add_key("__class__", "NeuronIndex"), r"unknown meta .*__class__"),
        "a method name as key": (add_key("check", 1), r"unknown meta .*'check'"),
        "an older format": (
            lambda p: _rewrite(p, lambda m: m.__setitem__("format", 1)),
            "format 1; this dni_lab reads 2",
        ),
        "a field of the wrong type": (
            lambda p: _rewrite(p, lambda m: m.__setitem__("width_", "12")),
            "'width_' = '12', not int",
        ),
        "a missing field": (
            lambda p: _rewrite(p, lambda m: m.pop("weights_sha256_")),
            "lacks .*weights_sha256_",
        ),
        "a record id out of range": (set_array("mai_ids_", lambda a: a + 10_000), "record ids"),
        "a wrongly shaped array": (set_array("lower_", lambda a: a[:, :-1]), "array lower_"),
        "a value changed, no new checksum": (flip_a_value, "checksum"),
    }


@pytest.mark.parametrize("tamper", list(_tamperings()), ids=list(_tamperings()))
def test_a_damaged_or_tampered_index_file_is_refused_by_name(random_case, tmp_path, tamper):
    _, _, index = random_case
    path = index.save(tmp_path / "layer.npz")
    change, message = _tamperings()[tamper]
    change(path)
    with pytest.raises(dl.DNIError, match=message) as e:
        NeuronIndex.load(path)
    assert "layer.npz" in str(e.value) and "re-fit" in str(e.value)


def test_saving_an_unbuilt_index_or_into_no_directory_is_refused(random_case, tmp_path):
    with pytest.raises(dl.DNIError, match="not built"):
        NeuronIndex("").save(tmp_path / "i.npz")
    _, _, index = random_case
    with pytest.raises(FileNotFoundError, match=r"missing.*i\.npz.*no directory"):
        index.save(tmp_path / "missing" / "i.npz")
    assert not list(tmp_path.rglob("*.tmp"))
