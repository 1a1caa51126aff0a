"""The seed models' figures for ``docs/models.md``, read from the model store's sidecars.

Usage::

    DNI_LAB_MODELS=$PWD/.dni_cache/models python benchmarks/model_figures.py

Each seed model the page describes is loaded through its own ``load()`` (seed 0), which
reads the store (``$DNI_LAB_MODELS``) or, on a miss, trains the model and stores it. From
the sidecar (``meta``) come the sizes that decided the weights (its ``config``: units,
epochs, queries, episodes) and what the training run measured (held-out accuracy, the
baselines, the number of training records); a few figures the page quotes are computed
here from the loaded model (the Boolean model's answer on ``F|F|...``, the quick grid-world
model's accuracy with the ghost erased). Training times are not gathered: the sidecars hold
the wall and CPU seconds of whichever run trained the model, on a shared machine, without
its load. Results go to ``benchmarks/results/models.json`` through ``write_results``, with
the store entries this run had to train (``trained_now``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: make the benchmarks package importable
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import RESULTS, write_results  # noqa: E402

# the specialized model's settings the page's table lists (quick variant, seed 0), by id
SPECIALIZED = {
    "depth_s8": {"n_units_s": 8},
    "depth_w02": {"weight": 0.2},
    "inside": {"hypothesis": "inside"},
    "paren": {"hypothesis": "paren"},
    "paren_w0": {"hypothesis": "paren", "weight": 0.0},
}
# the Boolean input the generator almost never draws (docs/models.md, "A curiosity")
ALL_FALSE = "F|F|F|F|F|F|F|F"


def _entry(meta: dict[str, Any]) -> dict[str, Any]:
    """Which store entry a model's figures come from (its file stem in the store)."""
    from hypotheses.workloads.store import config_key

    return {"store_key": config_key(meta["name"], meta["config"])}


def _charlm(meta: dict[str, Any]) -> dict[str, Any]:
    """A char-LSTM's sizes and measured figures, as its sidecar holds them."""
    keys = ("accuracy", "baseline_majority", "baseline_bigram", "n_train", "n_test")
    out = {**_entry(meta), **{k: meta[k] for k in keys}}
    out.update(hidden=meta["config"]["hidden"], epochs=meta["config"]["epochs"])
    for extra in ("last_char_accuracy", "type_accuracy"):
        if extra in meta:
            out[extra] = meta[extra]
    return out


def _specialized(meta: dict[str, Any]) -> dict[str, Any]:
    """|r| of the units in S (lowest, highest, each) and of the best unit outside S."""
    s = meta["specialized_units"]
    r = [abs(x) for x in meta["unit_r"]]
    inside = [r[u] for u in s]
    outside = max(x for u, x in enumerate(r) if u not in s)
    return {
        **_charlm(meta),
        "units": s,
        "n_units_s": len(s),
        "weight": meta["weight"],
        "hypothesis": meta["hypothesis"],
        "r_in_s": inside,
        "r_in_s_min": min(inside),
        "r_in_s_max": max(inside),
        "r_outside_max": outside,
    }


def _boolean(quick: bool) -> dict[str, Any]:
    import torch

    from hypotheses.workloads import boolean

    module, encode, meta = boolean.load(quick=quick)
    out = {**_charlm(meta), "length": meta["length"]}
    with torch.no_grad():
        probs = module(encode([ALL_FALSE]))[:, -1].softmax(-1)
    out["p_true_all_false"] = round(float(probs[0, boolean.TRUE]), 4)
    return out


def _grid(flee: bool, quick: bool) -> dict[str, Any]:
    from hypotheses.workloads import gridworld_cnn, gridworld_flee

    mod = gridworld_flee if flee else gridworld_cnn
    module, _, meta = mod.load(quick=quick)
    c = meta["config"]
    out = {
        **_entry(meta),
        "accuracy": meta["accuracy"],
        "majority": meta["majority_rate"],
        "train_episodes": c["train_episodes"],
        "epochs": c["epochs"],
        "channels": c["width"],
        "n_train": meta["n_train"],
    }
    if flee:
        out["blind_accuracy"] = gridworld_flee.load(quick=quick, blind=True)[2]["accuracy"]
        frames = gridworld_flee.data(quick=quick).frames
        out["ghost_erased_accuracy"] = round(gridworld_flee.accuracy(module, frames, True), 4)
    return out


def _gpt2(quick: bool) -> dict[str, Any]:
    from hypotheses.workloads import parens_gpt2

    _, _, meta = parens_gpt2.load(quick=quick)
    c = meta["config"]
    keys = ("n_layer", "n_embd", "n_head", "n_train", "epochs")
    measured = {"accuracy": meta["accuracy"], "majority": meta["majority"]}
    return {**_entry(meta), **measured, **{k: c[k] for k in keys}}


def models() -> dict[str, Callable[[], dict[str, Any]]]:
    """Each seed model of the page, by id, and how to gather its figures."""
    from hypotheses.workloads import arith, parens, pysource, sql

    def sql_model(quick: bool, hidden: int) -> dict[str, Any]:
        _, _, meta = sql.load(quick=quick, hidden=hidden)
        return {**_charlm(meta), "n_queries": meta["config"]["n_queries"]}

    def pysource_model(quick: bool) -> dict[str, Any]:
        _, _, meta = pysource.load(quick=quick)
        files = {"files": len(meta["files"]), "max_chars": pysource._max_chars(quick)}
        return {**_charlm(meta), **files}

    out: dict[str, Callable[[], dict[str, Any]]] = {}
    for variant, quick in (("quick", True), ("full", False)):
        out[f"sql_{variant}"] = lambda q=quick: sql_model(q, 128)
        out[f"sql512_{variant}"] = lambda q=quick: sql_model(q, 512)
        out[f"parens_{variant}"] = lambda q=quick: _charlm(parens.load(quick=q)[2])
        out[f"specialized_{variant}"] = lambda q=quick: _specialized(
            parens.load_specialized(quick=q)[2]
        )
        out[f"boolean_{variant}"] = lambda q=quick: _boolean(q)
        out[f"arith_{variant}"] = lambda q=quick: _charlm(arith.load(quick=q)[2])
        out[f"pysource_{variant}"] = lambda q=quick: pysource_model(q)
        out[f"gridworld_{variant}"] = lambda q=quick: _grid(False, q)
        out[f"flee_{variant}"] = lambda q=quick: _grid(True, q)
        out[f"gpt2_{variant}"] = lambda q=quick: _gpt2(q)
    for seed in (1, 2):
        out[f"specialized_seed{seed}"] = lambda s=seed: _specialized(
            parens.load_specialized(quick=True, seed=s)[2]
        )
    for name, kwargs in SPECIALIZED.items():
        out[f"specialized_{name}"] = lambda k=kwargs: _specialized(
            parens.load_specialized(quick=True, **k)[2]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Gather every model's figures (training the missing ones) and write the results file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULTS / "models.json")
    ap.add_argument("--only", nargs="*", help="model ids to gather and print, no file written")
    args = ap.parse_args(argv)
    from hypotheses.workloads.store import model_dir

    store = model_dir()
    before = {p.stem for p in store.glob("*.json")}
    todo = models()
    gathered = {}
    for name, gather in todo.items():
        if args.only and name not in args.only:
            continue
        gathered[name] = gather()
        print(name, gathered[name], flush=True)
    trained = sorted({p.stem for p in store.glob("*.json")} - before)
    payload = {"seed": 0, "models": gathered, "trained_now": trained}
    write_results(None if args.only else args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
