"""``dni-lab probe fit|apply|report``: a :class:`dl.Probe` from a terminal.

A command line cannot hand over a Python model, so the commands read the shipped SQL
auto-completion LSTM and its grammar's hypotheses (what ``dni-lab demo`` inspects), or a
model given as ``--model module:function``, a function of no arguments returning
``(dl.Model, records)``. ``fit`` records in the sidecar how it got its model and
hypothesis (``training.cli``), so ``apply`` and ``report`` rebuild the same ones
without the flags being repeated.

Every error a user can cause (an unknown hypothesis or layer, a missing or altered file,
another model) is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ..backend.errors import DNIError
from ..backend.extraction.models import Model
from . import storage
from .estimator import Probe

SQL_MODEL = "sql-lstm"  # the name the demo gives the shipped model
FIT_SEED = 20_011  # queries neither the model's training (seed 0) nor report's saw
HELD_OUT_SEED = 10_007  # the demo's held-out queries
EXIT_ERROR = 2


class CLIError(DNIError):
    """A command-line argument that names nothing usable (a hypothesis, a model function)."""


def add_parser(sub: Any) -> None:
    """Register ``probe`` and its ``fit``, ``apply`` and ``report`` under ``dni-lab``.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        ``dni-lab``'s subcommands.
    """
    p = sub.add_parser("probe", help="fit, apply and report a linear probe (dl.Probe)")
    cmds = p.add_subparsers(dest="probe_command", required=True)

    f = cmds.add_parser("fit", help="fit a probe on a layer against a hypothesis and save it")
    f.add_argument("--layer", required=True, help="the layer read, e.g. lstm")
    f.add_argument(
        "--hypothesis",
        required=True,
        help="an SQL grammar signal (sql.range:KwSelect) or module:attribute",
    )
    f.add_argument("--out", type=Path, default=Path("probe.safetensors"))
    f.add_argument(
        "--queries",
        type=int,
        default=200,
        help="SQL queries cut into training windows (the shipped model)",
    )
    f.add_argument("--C", type=float, default=1.0, dest="C")
    f.add_argument("--penalty", choices=("l2", "l1"), default="l2")
    f.add_argument("--folds", type=int, default=5)
    _model_options(f, quick_default=bool(os.environ.get("CI")), hidden_default=128)

    a = cmds.add_parser("apply", help="print a saved probe's per-symbol probabilities")
    a.add_argument("path", type=Path, help="the probe's .safetensors (or .json, or stem)")
    a.add_argument(
        "--text", action="append", required=True, help="a record to score (repeat for several)"
    )
    a.add_argument("--per", choices=("symbol", "record"), default="symbol")
    _model_options(a)

    r = cmds.add_parser("report", help="print a saved probe's statistics on held-out records")
    r.add_argument("path", type=Path, help="the probe's .safetensors (or .json, or stem)")
    r.add_argument("--hypothesis", default=None, help="default: the one it was fitted on")
    r.add_argument(
        "--queries",
        type=int,
        default=100,
        help="held-out SQL queries cut into windows (the shipped model)",
    )
    r.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates over records")
    r.add_argument("--seed", type=int, default=0)
    _model_options(r)


def _model_options(
    p: argparse.ArgumentParser, quick_default: bool | None = None, hidden_default: int | None = None
) -> None:
    # apply/report default to None: "as the sidecar says fit built it"
    p.add_argument(
        "--model",
        default=None,
        metavar="MODULE:FUNCTION",
        help="a function returning (dl.Model, records) instead of the SQL model",
    )
    p.add_argument(
        "--quick",
        action=argparse.BooleanOptionalAction,
        default=quick_default,
        help="the shipped SQL model's quick variant",
    )
    p.add_argument("--hidden", type=int, default=hidden_default, help="the SQL model's units")
    if quick_default is None:
        p.add_argument(
            "--allow-other-model",
            action="store_true",
            help="apply the probe to a model with other weights (a transfer)",
        )


def run(args: argparse.Namespace) -> int:
    """Run ``dni-lab probe <command>``; a user's error is one line on stderr, exit code 2."""
    commands = {"fit": fit, "apply": apply, "report": report}
    try:
        return commands[args.probe_command](args)
    except (DNIError, OSError) as exc:
        # one line: the messages name the object and the fix; a traceback would bury them
        msg = " ".join(str(exc).split())
        # the library's fix is a keyword; here it is the flag that passes it
        msg = msg.replace("allow_other_model=True", "--allow-other-model")
        print(f"dni-lab probe {args.probe_command}: error: {msg}", file=sys.stderr)
        return EXIT_ERROR


# -- the commands ------------------------------------------------------------------------
def fit(args: argparse.Namespace) -> int:
    """Fit on the training records, save, print the training scores."""
    source = {"model": args.model, "quick": bool(args.quick), "hidden": args.hidden}
    hypothesis = resolve_hypothesis(args.hypothesis)  # before the model: a typo fails fast
    model, records = build_model(source, args.queries, FIT_SEED)
    probe = Probe(args.layer, C=args.C, penalty=args.penalty, folds=args.folds)
    probe.fit(model, records, hypothesis)
    # how this command got its model and hypothesis: apply and report rebuild them
    probe.training_["cli"] = {
        **source,
        "hypothesis": args.hypothesis,
        "queries": args.queries,
        "seed": FIT_SEED,
    }
    weights = probe.save(args.out)
    t = probe.training_
    cv = "n/a" if probe.cv_auroc_ is None else f"{probe.cv_auroc_:.3f}"
    print(
        f"probe: layer {args.layer} ({probe.coef_.shape[1]} units) of {model.name}, "
        f"hypothesis {args.hypothesis}; {t['records']:,} records, {t['symbols']:,} symbols, "
        f"{t['positives']:,} positive"
    )
    print(
        f"train AUROC {probe.train_auroc_:.3f}, out-of-fold AUROC {cv}, "
        f"threshold {probe.threshold_:.3f} (train F1 {probe.train_f1_:.3f})"
    )
    print(f"written to {weights} and {storage.paths(weights)[1]}")
    return 0


def apply(args: argparse.Namespace) -> int:
    """Print the probability of every symbol (or record) of each ``--text``."""
    model, _, probe = _load(args, queries=None)
    texts = list(args.text)
    frame = probe.apply(model, texts, per=args.per, allow_other_model=args.allow_other_model)
    if args.per == "symbol" and _one_symbol_per_char(frame, texts):
        chars = [texts[r][s] for r, s in zip(frame["record"], frame["symbol"], strict=True)]
        frame = frame.with_columns(char=pl.Series(chars)).select(
            "record", "symbol", "char", "probability", "predicted"
        )
    else:
        frame = frame.select(pl.exclude("score", "record_score"))
    print(
        f"probe on layer {probe.layer} of {model.name}; predicted: probability >= "
        f"threshold {probe.threshold_:.3f}"
    )
    _print(frame.with_columns(pl.col("probability").round(3)))
    return 0


def report(args: argparse.Namespace) -> int:
    """Print :meth:`Probe.report`'s frame on held-out records."""
    cli = _fitted_by(args.path)
    name = args.hypothesis or cli.get("hypothesis")
    if name is None:
        raise CLIError(
            f"{storage.paths(args.path)[1].name} does not say which hypothesis the probe was "
            "fitted on (it was not fitted by dni-lab probe fit); pass --hypothesis."
        )
    hypothesis = resolve_hypothesis(name)
    model, records, probe = _load(args, queries=args.queries)
    frame = probe.report(
        model,
        records,
        hypothesis,
        n_boot=args.n_boot,
        seed=args.seed,
        allow_other_model=args.allow_other_model,
    )
    print(
        f"probe on layer {probe.layer} of {model.name}, hypothesis {name}; held out: "
        f"{len(records):,} records; intervals: {args.n_boot} bootstrap replicates over "
        "records"
    )
    _print(frame.with_columns(pl.col("value", "lo", "hi", "se").round(4)))
    return 0


# -- models, records, hypotheses ---------------------------------------------------------
def build_model(source: dict[str, Any], queries: int | None, seed: int) -> tuple[Model, list]:
    """The model and records a command reads: a ``module:function``'s, or the SQL model's.

    Parameters
    ----------
    source : dict
        ``model`` (``"module:function"`` or None for the shipped SQL LSTM), ``quick`` and
        ``hidden`` (the SQL model's variant).
    queries, seed : int or None, int
        SQL queries generated from ``seed`` and cut into windows (the SQL model only;
        None: no records, for a command that brings its own).
    """
    if source.get("model"):
        return _from_function(source["model"])
    if queries is not None and queries < 1:
        raise CLIError(f"--queries {queries}: pass a positive number of SQL queries.")
    from hypotheses.workloads import sql as workload

    module, encode, _ = workload.load(
        quick=bool(source.get("quick")), hidden=int(source.get("hidden") or 128)
    )
    records = [] if queries is None else workload.records(queries, seed=seed)
    return Model(module, encode=encode, name=SQL_MODEL), records


def _from_function(spec: str) -> tuple[Model, list]:
    fn = _import(spec, "--model")
    out = fn()
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Model)):
        raise CLIError(
            f"--model {spec} returned {type(out).__name__}; it must return (dl.Model, records)."
        )
    return out[0], list(out[1])


def resolve_hypothesis(name: str) -> Any:
    """An SQL grammar signal by its id (``sql.range:KwSelect``), or ``module:attribute``.

    Raises
    ------
    CLIError
        Neither: the message suggests the closest signal ids.
    """
    from hypotheses.grammars import sql as grammar

    from ..backend.query.subset import select_signals

    family = grammar.family()
    hids = family.hids()
    if name in hids:
        return select_signals(family, [family.signals()[hids.index(name)]])
    module = name.partition(":")[0]
    if ":" in name and importlib.util.find_spec(module.split(".")[0]) is not None:
        return _import(name, "--hypothesis")
    near = difflib.get_close_matches(name, hids, n=3)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise CLIError(
        f"unknown hypothesis {name!r}; {hint}the SQL grammar's are sql.range:<rule>, "
        "sql.impulse:<rule> (e.g. sql.range:KwSelect), or pass module:attribute."
    )


def _import(spec: str, option: str) -> Any:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise CLIError(f"{option} {spec!r}: pass module:attribute (e.g. mymodels:sql_model).")
    # a console script's sys.path starts at its own folder, not where the user stands
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise CLIError(f"{option} {spec}: cannot import {module!r} ({exc}).") from None
    if not hasattr(obj, attr):
        raise CLIError(f"{option} {spec}: module {module!r} has no {attr!r}.")
    return getattr(obj, attr)


def _fitted_by(path: Path) -> dict[str, Any]:
    """What ``fit`` recorded of its model and hypothesis (empty for a probe saved in Python)."""
    return dict((storage.read_sidecar(path).get("training") or {}).get("cli") or {})


def _load(args: argparse.Namespace, queries: int | None) -> tuple[Model, list, Probe]:
    """The model, its held-out records and the probe at ``args.path``, checked by
    ``Probe.load``.

    The model is built as ``fit`` built it unless ``--model``, ``--quick`` or ``--hidden``
    say otherwise; the SQL model's records are ``queries`` held-out queries' windows.
    """
    side = storage.read_sidecar(args.path)
    cli = _fitted_by(args.path)
    if args.model is None and not cli and side["model"]["name"] != SQL_MODEL:
        raise CLIError(
            f"{storage.paths(args.path)[1].name} binds the probe to model "
            f"{side['model']['name']!r}, not the shipped SQL model; pass --model "
            "module:function returning (dl.Model, records)."
        )
    source = {
        "model": args.model if args.model is not None else cli.get("model"),
        "quick": args.quick if args.quick is not None else cli.get("quick", False),
        "hidden": args.hidden if args.hidden is not None else cli.get("hidden", 128),
    }
    model, records = build_model(source, queries, HELD_OUT_SEED)
    probe = Probe.load(args.path, model=model, allow_other_model=args.allow_other_model)
    return model, records, probe


def _one_symbol_per_char(frame: pl.DataFrame, texts: Sequence[str]) -> bool:
    """Whether each text's symbols are its characters (a character model, not a tokenizer)."""
    counts = frame.group_by("record").len().sort("record")["len"].to_list()
    return counts == [len(t) for t in texts]


def _print(frame: pl.DataFrame) -> None:
    with pl.Config(
        tbl_rows=max(frame.height, 1),
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        print(frame)
