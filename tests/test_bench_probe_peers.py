"""``bench_probe_peers.py``'s side process on a small cached matrix: our fit and
scikit-learn's solve one objective (the peers' sides run only where
``.dni_cache/probe-peers-venv`` exists)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from benchmarks import probe_peers_side as side


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe-peers")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(900, 8)).astype(np.float32)
    y = (X[:, 0] - 0.5 * X[:, 1] + rng.normal(size=900) > 0.3)
    np.savez(path / "data.npz", X_train=X[:600], y_train=y[:600], X_test=X[600:], y_test=y[600:])
    (path / "config.json").write_text(json.dumps({"C": 1.0, "repeats": 1}))
    return path, y[600:]


@pytest.mark.parametrize("penalty", ["l2", "l1"])
def test_ours_and_scikit_learn_fit_one_objective(where, penalty):
    path, y_test = where
    for tool in (f"ours_{penalty}", f"sklearn_{penalty}"):
        got = side.main(tool, path)
        assert len(got["fit_s"]) == len(got["cpu_s"]) == 1 and got["fit_s"][0] > 0
    ours = np.load(path / f"ours_{penalty}.npy")
    theirs = np.load(path / f"sklearn_{penalty}.npy")
    assert ours.shape == theirs.shape == y_test.shape
    # scikit-learn keeps the float32 rows in float32: agreement to its rounding
    np.testing.assert_allclose(ours, theirs, atol=1e-3)
    assert roc_auc_score(y_test, ours) > 0.75


def test_the_whole_fit_path_keeps_the_fit_on_every_row(where):
    # ours_l2_fit_path adds the threshold and five warm-started fold fits to ours_l2's fit:
    # the probe it scores with is still the fit on every row
    path, _ = where
    side.main("ours_l2", path)
    side.main("ours_l2_fit_path", path)
    np.testing.assert_allclose(
        np.load(path / "ours_l2_fit_path.npy"), np.load(path / "ours_l2.npy"), atol=1e-12
    )
