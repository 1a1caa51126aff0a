"""A ground-truth scorecard: does dni_lab find the right unit where the answer is known?

Usage::

    python benchmarks/bench_scorecard.py            # every case, stored in results/scorecard.json
    python benchmarks/bench_scorecard.py --quick    # smaller cases (CI)

Each case has units whose meaning is known by construction and hypotheses that name it.
For every hypothesis, ``dl.inspect`` ranks all units by ``|score|`` (``corr``, and ``auroc``
for binary hypotheses); a case reports **precision@1** (the share of hypotheses whose
top-ranked unit is a true one) and the **mean reciprocal rank** of the best true unit, next
to two baselines that ignore the hypothesis: *activation magnitude* (units ranked by their
mean |activation|, the same ranking for every hypothesis) and *random units* (the expected
value of a random ranking, computed exactly).

Cases:

* ``synthetic`` — SAELens' ``sae_lens.synthetic`` (run in its side environment,
  ``benchmarks/scorecard_side.py``): features with firing rates from 8% to 1% embedded in
  fewer dimensions (superposition); a TopK SAE trained here by ``dl.features.train_sae`` on
  them. A latent is a true unit of feature *j* when it is matched to *j* by decoder cosine
  (Hungarian matching, as SAELens' MCC) with cosine ≥ 0.9; features with no such latent are
  left out (their count is reported, with the MCC). Hypothesis: feature *j* fires.
* ``toy_superposition`` — Elhage et al.'s toy model of superposition trained here
  (``x' = ReLU(WᵀWx + b)``, 20 sparse features, 5 hidden dimensions, importance 0.9^i); output
  unit *i* reconstructs feature *i*. Hypotheses: feature *i* fires, for the features the
  model represents (``‖W_i‖ > 0.5``).
* ``planted`` — DeepBase §6.1's specialized parentheses LSTM (units *S* trained to follow
  depth, ``parens.load_specialized``); precision@|S| (the share of *S* among the |S|
  top-ranked units) instead of precision@1.

A pretrained model's known variable is not in the table: no unit of the models that ship
in wheels here (``tests/test_pretrained.py``) is known by construction.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from scipy.optimize import linear_sum_assignment
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import dni_lab as dl  # noqa: E402
from benchmarks.results_io import write_results  # noqa: E402

SIDE = REPO / ".dni_cache" / "saelens-venv" / "bin" / "python"
T = 16  # symbols per record of the replayed cases


class Replay(nn.Module):
    """Stands in for a network: its output is the stored activations it is given."""

    def forward(self, x):
        return x


def replay_model(X: np.ndarray, name: str) -> dl.Model:
    """Record ``i`` is rows ``i*T .. i*T+T-1`` of ``X`` (symbols × units), as a layer's output."""
    Xt = torch.as_tensor(X, dtype=torch.float32)

    def encode(records):
        return torch.stack([Xt[r * T : (r + 1) * T] for r in records])

    return dl.Model(Replay(), encode=encode, symbols=lambda r: T, layouts={"": "n s u"},
                    name=name)  # fmt: skip


def fires(F: np.ndarray, cols: list[int], name: str):
    """A family of binary hypotheses: feature ``cols[j]`` is active at each symbol."""
    sub = (F[:, cols] > 0).astype(np.float32)
    return dl.hypothesis_family(signals=[f"f{c}" for c in cols], name=name, kind="binary")(
        lambda r: sub[r * T : (r + 1) * T]
    )


def ranks(frame: pl.DataFrame, truth: dict[str, set[int]], measure: str) -> dict[str, list]:
    """Per hypothesis: the units ranked by |score| (best first) under ``measure``."""
    f = frame.filter(pl.col("measure") == measure).with_columns(a=pl.col("unit_score").abs())
    out = {}
    for hid in truth:
        rows = f.filter(pl.col("hid").str.ends_with(hid)).sort("a", descending=True,
                                                              nulls_last=True)  # fmt: skip
        out[hid] = rows["unit"].to_list()
    return out


def score_rankings(order: dict[str, list], truth: dict[str, set[int]], k: int = 1) -> dict:
    """precision@k and the mean reciprocal rank of the best true unit."""
    prec, rr = [], []
    for hid, units in order.items():
        t = truth[hid]
        prec.append(len(set(units[:k]) & t) / min(k, len(t)))
        first = next((i for i, u in enumerate(units) if u in t), None)
        rr.append(0.0 if first is None else 1.0 / (first + 1))
    return {"precision": float(np.mean(prec)), "mrr": float(np.mean(rr))}


def random_baseline(n_units: int, truth: dict[str, set[int]], k: int = 1) -> dict:
    """The expected precision@k and reciprocal rank of a uniformly random ranking."""
    prec, rr = [], []
    for t in truth.values():
        m = len(t)
        prec.append(k * m / n_units / min(k, m))  # E|top k ∩ truth| / min(k, |truth|)
        # E[1/rank of the first true unit] with m true units among n, placed at random
        p_first = [
            m / (n_units - i) * np.prod([(n_units - m - j) / (n_units - j) for j in range(i)])
            for i in range(n_units - m + 1)
        ]
        rr.append(float(sum(p / (i + 1) for i, p in enumerate(p_first))))
    return {"precision": float(np.mean(prec)), "mrr": float(np.mean(rr))}


def case_rows(name: str, model: dl.Model, fam, data, truth, units, magnitude, k=1, **kw):
    """The case's rows: dni_lab per measure, then the two baselines."""
    kinds = fam.kind.values() if isinstance(fam.kind, dict) else [fam.kind]
    measures = ["corr", "auroc"] if all(v == "binary" for v in kinds) else ["corr"]
    t0 = time.perf_counter()
    frame = dl.inspect(model, [fam], measures, data, units=units, eps=None, cache=False,
                       device="cpu", **kw)  # fmt: skip
    secs = time.perf_counter() - t0
    rows = []
    for m in measures:
        r = score_rankings(ranks(frame, truth, m), truth, k)
        rows.append({"case": name, "ranker": f"dni_lab {m}", **r})
    by_mag = {h: list(magnitude) for h in truth}
    rows.append({"case": name, "ranker": "activation magnitude",
                 **score_rankings(by_mag, truth, k)})  # fmt: skip
    rows.append({"case": name, "ranker": "random units",
                 **random_baseline(len(magnitude), truth, k)})  # fmt: skip
    for r in rows:
        r.update(hypotheses=len(truth), units=len(magnitude), k=k, seconds=secs)
    return rows


def magnitude_order(X: np.ndarray) -> np.ndarray:
    return np.argsort(-np.abs(X).mean(0), kind="stable")


# ---------------------------------------------------------------------------------------


def synthetic_case(quick: bool) -> tuple[list[dict], dict]:
    if not SIDE.exists():
        return [], {"skipped": f"no sae-lens side environment ({SIDE}): `make saelens-env`"}
    from safetensors.torch import load_file

    n_feat, d_hidden = (32, 16) if quick else (64, 32)
    n = 800 * T if quick else 3000 * T
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "synthetic.safetensors")
        subprocess.run([str(SIDE), str(REPO / "benchmarks" / "scorecard_side.py"), out,
                        str(n_feat), str(d_hidden), str(n)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": ""}, timeout=600)  # fmt: skip
        data = load_file(out)
    X, F, D = (data[k].numpy() for k in ("hidden", "features", "dictionary"))
    model = replay_model(X, "synthetic")
    records = list(range(n // T))
    trained = dl.features.train_sae(model, records, "", d_sae=2 * n_feat, k=4, epochs=3 if quick
                                    else 6, device="cpu", verbose=False, name="sae")  # fmt: skip
    sae = trained.features
    W = sae.W_dec.detach().numpy()
    cos = np.abs((D / np.linalg.norm(D, axis=1, keepdims=True)) @
                 (W / np.linalg.norm(W, axis=1, keepdims=True)).T)  # fmt: skip
    rows_i, cols_i = linear_sum_assignment(-cos)
    mcc = float(cos[rows_i, cols_i].mean())
    pairs = zip(rows_i, cols_i, strict=True)
    matched = {int(f): int(lat) for f, lat in pairs if cos[f, lat] >= 0.9}
    truth = {f"f{f}": {lat} for f, lat in matched.items()}
    fam = fires(F, sorted(matched), "synthetic")
    with torch.no_grad():
        Z = sae.encode(torch.as_tensor(X)).numpy()
    rows = case_rows("synthetic (sae_lens.synthetic + a TopK SAE)", model, fam, records, truth,
                     [(sae, "*")], magnitude_order(Z))  # fmt: skip
    return rows, {"features": n_feat, "hidden": d_hidden, "samples": n, "d_sae": sae.d_sae,
                  "mcc": mcc, "matched_features": len(matched)}  # fmt: skip


def toy_case(quick: bool) -> tuple[list[dict], dict]:
    n_feat, d_hidden, p = 20, 5, 0.1
    g = torch.Generator().manual_seed(0)
    W = nn.Parameter(torch.randn(d_hidden, n_feat, generator=g) * 0.3)
    b = nn.Parameter(torch.zeros(n_feat))
    imp = 0.9 ** torch.arange(n_feat, dtype=torch.float32)
    opt = torch.optim.Adam([W, b], lr=1e-2)
    for _ in range(1500 if quick else 5000):
        x = torch.rand(1024, n_feat, generator=g) * (torch.rand(1024, n_feat, generator=g) < p)
        loss = (imp * (torch.relu(x @ W.T @ W + b) - x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    n = 1000 * T if quick else 4000 * T
    x = (torch.rand(n, n_feat, generator=g) * (torch.rand(n, n_feat, generator=g) < p)).numpy()
    with torch.no_grad():
        out = torch.relu(torch.as_tensor(x) @ W.T @ W + b).numpy()
    represented = [i for i in range(n_feat) if float(W[:, i].detach().norm()) > 0.5]
    truth = {f"f{i}": {i} for i in represented}
    fam = fires(x, represented, "toy")
    model = replay_model(out, "toy-superposition")
    rows = case_rows("toy model of superposition (20 features in 5 dims)", model, fam,
                     list(range(n // T)), truth, [("", "*")], magnitude_order(out))  # fmt: skip
    return rows, {"features": n_feat, "hidden": d_hidden, "represented": len(represented),
                  "final_loss": float(loss)}  # fmt: skip


def planted_case(quick: bool) -> tuple[list[dict], dict]:
    from hypotheses.workloads import parens

    module, encode, meta = parens.load_specialized(quick=True)  # the quick model in both modes
    S = set(int(u) for u in meta["specialized_units"])
    model = dl.Model(module, encode=encode, name="parens-specialized")
    records = parens.records(300 if quick else 1500, seed=3)
    depth = dl.hypothesis(parens.depth, name="depth", kind="continuous")
    acts = dl.activations(model, records, ["lstm"], device="cpu")
    X = torch.cat([acts.record(i, "lstm") for i in range(len(records))]).numpy()
    rows = case_rows(f"planted units (specialized parentheses LSTM, |S| = {len(S)})", model,
                     depth, records, {"depth": S}, [("lstm", "*")], magnitude_order(X),
                     k=len(S))  # fmt: skip
    return rows, {"units": X.shape[1], "specialized": sorted(S)}


PAGE = REPO / "docs" / "scorecard.md"
BEGIN, END = "<!-- scorecard:begin -->", "<!-- scorecard:end -->"


def markdown(res: dict) -> str:
    """The docs page's table from a stored result (``docs/scorecard.md``, between markers)."""
    lines = ["| case | ranker | precision@k | mean reciprocal rank | hypotheses | units | k |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["rows"]:
        case = r["case"].replace("|", "\\|")  # a Markdown cell's own bar
        lines.append(f"| {case} | {r['ranker']} | {r['precision']:.3f} | {r['mrr']:.3f} "
                     f"| {r['hypotheses']} | {r['units']} | {r['k']} |")  # fmt: skip
    cases = res["cases"]
    syn = cases.get("synthetic", {})
    if "mcc" in syn:
        lines.append("")
        lines.append(f"Synthetic case: {syn['features']} features in {syn['hidden']} dimensions, "
                     f"{syn['samples']:,} samples; the SAE ({syn['d_sae']} latents) matches "
                     f"{syn['matched_features']} of them at cosine ≥ 0.9 (MCC {syn['mcc']:.3f}).")
    elif "skipped" in syn:
        lines += ["", f"Synthetic case skipped: {syn['skipped']}."]
    toy = cases.get("toy_superposition", {})
    if toy:
        lines.append(f"Toy model: {toy['represented']} of {toy['features']} features "
                     f"represented (‖W_i‖ > 0.5).")  # fmt: skip
    return "\n".join(lines)


def render_page(res: dict, check: bool) -> bool:
    """Write (or with ``check``, compare) the table between the page's markers."""
    text = PAGE.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{markdown(res)}\n{END}{tail}"
    if check:
        return new == text
    PAGE.write_text(new, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--page", action="store_true",
                    help="only rewrite docs/scorecard.md from results/scorecard.json")
    args = ap.parse_args(argv)
    if args.page:
        import json

        render_page(json.loads((REPO / "benchmarks" / "results" / "scorecard.json").read_text()),
                    check=False)  # fmt: skip
        return 0
    torch.set_num_threads(2)
    rows, cases = [], {}
    for name, fn in (("synthetic", synthetic_case), ("toy_superposition", toy_case),
                     ("planted", planted_case)):  # fmt: skip
        r, info = fn(args.quick)
        rows += r
        cases[name] = info
        print(f"{name}: {info}")
    table = pl.DataFrame(rows).with_columns(pl.col("precision", "mrr").round(3))
    with pl.Config(tbl_rows=40, tbl_width_chars=160, fmt_str_lengths=60):
        print(table.select("case", "ranker", "precision", "mrr", "hypotheses", "units", "k"))
    beats = {}
    for case, part in table.group_by("case", maintain_order=True):
        ours = part.filter(pl.col("ranker").str.starts_with("dni_lab"))["precision"].max()
        base = part.filter(~pl.col("ranker").str.starts_with("dni_lab"))["precision"].max()
        beats[case[0]] = bool(ours > base)
    print("dni_lab beats both baselines:", beats)
    write_results(args.out or (None if args.quick else REPO / "benchmarks" / "results" /
                               "scorecard.json"),
                  {"command": " ".join(["python", "benchmarks/bench_scorecard.py",
                                        *(argv or sys.argv[1:])]),
                   "rows": table.to_dicts(), "cases": cases, "beats_baselines": beats})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
