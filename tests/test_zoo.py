"""The conformance zoo: for every named module of every zoo model (tests/zoo/), dni_lab
reads what a hand-written forward hook reads under the layout contract (corr unit scores
within 1e-6 of a float64 Pearson; the behaviors service within float32 rounding), or
refuses with the named DNIError before any record is scored. Each model's frame is
exported and read back (hashing, provenance, export run after every read).

A full run writes .dni_cache/zoo_results.json; ``test_zoo_table_is_current`` checks that
docs/zoo_table.md is what tests/zoo/table.py renders from it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import polars as pl
import pytest
from zoo import load_all
from zoo.harness import NeedsContract, case, expected, hypothesis, make_model, named_modules_of
from zoo.reference import Refuse
from zoo.table import RESULTS, TABLE, render

import dni_lab as dl

ZOO = load_all()
ROOT = Path(__file__).resolve().parents[1]
OUTCOMES: dict[str, dict] = {}


CASES = [(e.name, a) for e in ZOO.values() for a in named_modules_of(e)]


@pytest.mark.parametrize(("name", "address"), CASES, ids=[f"{n}::{a}" for n, a in CASES])
def test_zoo_module(name, address):
    entry = ZOO[name]
    rec = {"model": name, "family": entry.family, "outcome": "failed", "kind": ""}
    OUTCOMES[f"{name}::{address}"] = rec
    try:
        outcome, detail = case(entry, address)
    except NeedsContract as exc:
        rec["outcome"] = "skipped"
        pytest.skip(str(exc))
    rec["outcome"] = outcome
    rec["kind"] = detail.split(":")[0] if outcome == "named-error" else ""


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_export_after_read(name, tmp_path):
    """Every module the contract reads, in one run; the frame exported and read back."""
    entry = ZOO[name]
    try:
        model, kw = make_model(entry)
    except NeedsContract as exc:
        pytest.skip(str(exc))
    records = entry.records()
    readable = [a for a in named_modules_of(entry)
                if not isinstance(expected(entry, model, kw, records, a), Refuse)]  # fmt: skip
    for _ in range(len(readable)):  # a refused module fails its own case: drop it here
        try:
            frame = dl.inspect(models=[model], hypotheses=[hypothesis(model, [0])],
                               measures=["corr"], data=records, eps=None, device="cpu",
                               units=[(a, "*") for a in readable], cache=False)  # fmt: skip
            break
        except dl.LayerError as exc:
            named = [a for a in readable if repr(a) in str(exc)]
            if not named:
                raise
            readable.remove(named[0])
    else:
        pytest.skip("no module of this model is read")
    assert set(frame["layer"].unique()) == set(readable)
    path = dl.export(frame, tmp_path / "zoo.parquet")
    back = pl.read_parquet(path)
    assert back.equals(frame, null_equal=True)
    params = dl.read_params(path)
    assert params, "the export carries its provenance"
    assert json.dumps(params)


def test_zoo_table_is_current():
    """docs/zoo_table.md is what a full run produced (skipped after a partial run)."""
    want = {f"{n}::{a}" for n, a in CASES}
    if set(OUTCOMES) != want:
        pytest.skip(f"partial zoo run ({len(OUTCOMES)} of {len(want)} cases): table not checked")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(OUTCOMES, indent=1, sort_keys=True))
    assert len(ZOO) >= 30
    table = render(OUTCOMES)
    have = TABLE.read_text() if TABLE.exists() else ""
    assert have == table, "docs/zoo_table.md is stale: run `.venv/bin/python tests/zoo/table.py`"


SIDE_VENV = ROOT / ".dni_cache" / "zoo-venv"
SIDE = SIDE_VENV / "bin" / "python"


@pytest.mark.skipif(not (SIDE_VENV / ".installed").exists(),
                    reason=f"zoo side environment missing ({SIDE_VENV}): `make zoo-env` builds "
                    "it with transformer-lens, which dni_lab never depends on")  # fmt: skip
def test_zoo_transformer_lens_side(tmp_path):
    """tests/zoo/tl_side.py: every hook of a HookedTransformer against TransformerLens' cache."""
    out = tmp_path / "tl.json"
    proc = subprocess.run([str(SIDE), str(ROOT / "tests" / "zoo" / "tl_side.py"), str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ""})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) >= 50
    failed = [f"{r['module']}: {r['detail']}" for r in results if r["outcome"] == "failed"]
    assert not failed, f"{len(failed)} of {len(results)} hooks failed:\n" + "\n".join(failed)
