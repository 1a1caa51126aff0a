"""One tool's probe fit on the cached activations ``bench_probe_peers.py`` wrote.

    python benchmarks/probe_peers_side.py TOOL DIR

Reads ``DIR/data.npz`` (``X_train, y_train, X_test``; float32 activations, 0/1 labels),
fits ``repeats`` times, and prints one ``RESULT {json}`` line: the fit times (wall and
this process's CPU time) and the
held-out logits' file (``DIR/<tool>.npy``), which the parent scores with one AUROC for
every tool. Tolerances: ``ours_*`` and ``sklearn_*`` stop at a largest gradient entry of
``1e-8`` of the same objective (``*_tol1e-4``: ``1e-4``, scikit-learn's default). Runs
under the main venv (``ours_*``, ``sklearn_*``) or the peers' venv
(``probelab``, ``hprobes_l1``); it imports only what its tool needs.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def standardized(X: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    return (X - mean) / np.where(sd > 0, sd, 1.0)


def ours(penalty: str, C: float, tol: float = 1e-8) -> Any:
    """dl.Probe's fit on a matrix as ``Probe.fit`` hands it on (``Probe._learn`` on the float32
    rows read: standardise, then its solver; ``tol=1e-8`` is ``dl.Probe``'s default)."""
    import torch

    import dni_lab as dl

    def fit(X, y, Xt, record=None):
        p = dl.Probe("cached", C=C, penalty=penalty, folds=None, max_iter=1000, tol=tol)
        p._learn(torch.from_numpy(X), y.astype(np.float64))
        return lambda: p._logits(torch.from_numpy(Xt))

    return fit


def ours_fit_path(C: float) -> Any:
    """Everything ``Probe.fit`` does after reading the layer (its defaults: L2, ``folds=5``):
    standardise and solve, the training logits, the F1 threshold, the training AUROC and
    the out-of-fold AUROC (five more fits, each warm-started from the full one)."""
    import torch
    from scipy.special import expit

    import dni_lab as dl
    from dni_lab.probe import solver

    def fit(X, y, Xt, record=None):
        p = dl.Probe("cached", C=C, folds=5)
        Xr, yf = torch.from_numpy(X), y.astype(np.float64)
        p._learn(Xr, yf)
        z = p._logits(Xr)
        p.threshold_, p.train_f1_ = solver.f1_threshold(expit(z), yf)
        p.train_auroc_ = solver.auroc(z, yf)
        p.cv_auroc_ = p._cv_auroc(Xr, yf, record)
        return lambda: p._logits(torch.from_numpy(Xt))

    return fit


def sklearn_lr(penalty: str, C: float, tol: float = 1e-8) -> Any:
    from sklearn.linear_model import LogisticRegression

    def fit(X, y, Xt, record=None):
        mean, sd = X.mean(0), X.std(0)
        kw = {"l1_ratio": 1.0, "solver": "liblinear", "intercept_scaling": 100.0} \
            if penalty == "l1" else {"solver": "lbfgs"}  # fmt: skip
        clf = LogisticRegression(C=C, max_iter=1000, tol=tol, **kw)
        clf.fit(standardized(X, mean, sd), y)
        return lambda: clf.decision_function(standardized(Xt, mean, sd))

    return fit


def probelab_logistic(C: float) -> Any:
    """probelab's L2 ``Logistic`` (its LBFGS; its own standardisation) on tensors: its
    bundled datasets need the hub, so it is fed the cached activations, one row a symbol."""
    import torch
    from probelab import Activations
    from probelab.probes import Logistic

    def fit(X, y, Xt, record=None):
        probe = Logistic(C=C, max_iter=500, seed=0, device="cpu")
        probe.fit(Activations.from_tensor(torch.from_numpy(X)), torch.from_numpy(y).float())
        return lambda: probe.predict_logits(Activations.from_tensor(torch.from_numpy(Xt)))

    return fit


def hprobes_l1(C: float) -> Any:
    """hprobes' probe: ``HProbes.fit`` reads a Hugging Face model and multiple-choice
    samples only (its features are CETT scores it computes), so its Phase-3 classifier is
    run as it configures it (``hprobes/probe.py``: liblinear, ``l1_ratio=1``, ``C``,
    ``max_iter=1000``, the seed; unstandardised features) on the cached activations."""
    import hprobes  # noqa: F401  (the installed package whose configuration this is)
    from sklearn.linear_model import LogisticRegression

    def fit(X, y, Xt, record=None):
        clf = LogisticRegression(solver="liblinear", l1_ratio=1, C=C, max_iter=1000,
                                 random_state=42)  # fmt: skip
        clf.fit(X, y)
        return lambda: clf.decision_function(Xt)

    return fit


def main(tool: str, where: Path) -> dict:
    """Fit ``tool`` on ``where``'s rows; write its held-out logits; return its fit times."""
    cfg = json.loads((where / "config.json").read_text())
    C, repeats = float(cfg["C"]), int(cfg["repeats"])
    data = np.load(where / "data.npz")
    X, y, Xt = data["X_train"], data["y_train"].astype(np.int64), data["X_test"]
    record = data["r_train"] if "r_train" in data else np.arange(len(y))
    make = {
        "ours_l2": lambda: ours("l2", C), "ours_l1": lambda: ours("l1", C),
        "ours_l2_tol1e-4": lambda: ours("l2", C, 1e-4),
        "ours_l2_fit_path": lambda: ours_fit_path(C),
        "sklearn_l2": lambda: sklearn_lr("l2", C), "sklearn_l1": lambda: sklearn_lr("l1", C),
        "sklearn_l2_tol1e-4": lambda: sklearn_lr("l2", C, 1e-4),
        "probelab": lambda: probelab_logistic(C), "hprobes_l1": lambda: hprobes_l1(C),
    }[tool]  # fmt: skip
    fit = make()
    times, cpu, scores = [], [], None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        scorer = fit(X, y, Xt, record)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)  # less moved than wall time by a busy machine
        scores = scorer()
    s = np.asarray(scores.detach().numpy() if hasattr(scores, "detach") else scores, np.float64)
    np.save(where / f"{tool}.npy", s.ravel())
    return {"fit_s": times, "cpu_s": cpu}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2]))), flush=True)
