"""The named figures of the documentation pages, each with its source and format.

A page shows a figure as ``<!-- fig:NAME -->…<!-- /fig -->`` (see ``benchmarks/figures.py``).
The notebooks' figures are printed, rounded as the pages show them, by each notebook's
last cell (``figures: {json}``, checked by nbval); the formats here only fix the number of
digits (``0.9`` is shown as ``0.90``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from benchmarks.readme_table import REPO, RESULTS, load_results

NOTEBOOKS = REPO / "notebooks"
PREFIX = "figures: "  # the line a notebook's figures cell prints, then one JSON object


def _dig(value: Any, key: str) -> Any:
    for part in key.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


@cache
def notebook_figures(stem: str) -> dict[str, Any]:
    """The ``figures: {...}`` lines of a notebook's stored outputs, merged into one dict.

    Parameters
    ----------
    stem
        The notebook's file name without ``.ipynb``, e.g. ``"10_transformers"``.

    Raises
    ------
    KeyError
        A key printed twice (two cells would claim the same figure).
    """
    cells = json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
    out: dict[str, Any] = {}
    for cell in cells:
        for output in cell.get("outputs", []):
            for line in "".join(output.get("text", "")).splitlines():
                if line.startswith(PREFIX):
                    found = json.loads(line[len(PREFIX) :])
                    if set(found) & set(out):
                        raise KeyError(f"{stem}: figures printed twice: {set(found) & set(out)}")
                    out.update(found)
    return out


@dataclass(frozen=True)
class Result:
    """A figure at a dotted ``key`` of ``benchmarks/results/<file>.json``, shown as ``fmt``."""

    file: str
    key: str
    fmt: str = "{}"

    def value(self, results: dict[str, dict] | None = None) -> Any:
        """The stored value (``results``: parsed files by name, default the committed ones)."""
        results = _results() if results is None else results
        return _dig(results[self.file], self.key)

    def where(self) -> str:
        return f"benchmarks/results/{self.file}.json {self.key}"


@dataclass(frozen=True)
class Notebook:
    """A figure printed by a notebook's figures cell (``figures: {...}``), shown as ``fmt``."""

    stem: str
    key: str
    fmt: str = "{}"

    def value(self, figures: dict[str, Any] | None = None) -> Any:
        """The stored value (``figures``: the notebook's printed figures, default its file's)."""
        return (notebook_figures(self.stem) if figures is None else figures)[self.key]

    def where(self) -> str:
        return f"notebooks/{self.stem}.ipynb figures {self.key}"


Source = Result | Notebook


@cache
def _results() -> dict[str, dict]:
    return load_results(RESULTS)


F1, F2, F3, F4, INT = "{:.1f}", "{:.2f}", "{:.3f}", "{:.4f}", "{:d}"


def _nb(stem: str, prefix: str, **fmts: str) -> dict[str, Source]:
    return {f"{prefix}.{key}": Notebook(stem, key, fmt) for key, fmt in fmts.items()}


def _models() -> dict[str, Source]:
    """docs/models.md: each seed model's sizes and accuracies, read from the model store by
    benchmarks/model_figures.py (``models.json``: one entry per model id, e.g. ``sql_quick``)."""
    lstm = {"hidden": INT, "n_train": "{:,}", "epochs": INT, "accuracy": F3}
    lstm |= {"baseline_majority": F3, "baseline_bigram": F3}
    spec = {**lstm, "n_units_s": INT, "weight": "{:g}"}
    spec |= {"r_outside_max": F2, **{f"r_in_s.{i}": F2 for i in range(4)}}
    grid = {"train_episodes": INT, "epochs": INT, "channels": INT, "accuracy": F2, "majority": F2}
    gpt2 = {k: INT for k in ("n_layer", "n_embd", "n_head", "epochs")}
    gpt2 |= {"n_train": "{:,}", "accuracy": F3, "majority": F3}
    keys: dict[str, dict[str, str]] = {}
    for v in ("quick", "full"):
        keys[f"sql_{v}"] = {**lstm, "n_queries": "{:,}", "last_char_accuracy": F3}
        keys[f"sql512_{v}"] = {**lstm, "n_queries": "{:,}", "last_char_accuracy": F3}
        keys[f"parens_{v}"] = dict(lstm)
        keys[f"arith_{v}"] = {**lstm, "type_accuracy": F3}
        keys[f"specialized_{v}"] = dict(spec)
        keys[f"boolean_{v}"] = dict(lstm)
        keys[f"pysource_{v}"] = {**lstm, "max_chars": "{:,}", "files": INT}
        keys[f"gridworld_{v}"] = dict(grid)
        keys[f"gpt2_{v}"] = dict(gpt2)
    keys["specialized_quick"] |= {f"units.{i}": INT for i in range(4)}
    keys["boolean_full"] |= {"length": INT, "p_true_all_false": F2}
    keys["flee_full"] = {**grid, "accuracy": F3, "majority": F3, "blind_accuracy": F3}
    keys["flee_quick"] = {**grid, "ghost_erased_accuracy": F2}
    for name in ("seed1", "seed2", "depth_s8", "depth_w02", "inside", "paren", "paren_w0"):
        keys[f"specialized_{name}"] = {k: F2 for k in ("r_in_s_min", "r_in_s_max", "r_outside_max")}
    keys["specialized_depth_s8"]["n_units_s"] = INT
    keys["specialized_depth_w02"]["weight"] = "{:g}"
    keys["specialized_paren_w0"]["weight"] = "{:g}"
    return {
        f"models.{m}.{k}": Result("models", f"models.{m}.{k}", fmt)
        for m, ks in keys.items()
        for k, fmt in ks.items()
    }


FIGURES: dict[str, Source] = {
    # docs/quickstart.md: what the demo read and how much of its frame converged
    "demo.records_read": Result("demo", "records_read", "{:,}"),
    "demo.windows": Result("demo", "windows", "{:,}"),
    "demo.converged": Result("demo", "converged", "{:.1%}"),
    "demo.lda_early": Result("demo", "settled_early_by_measure.lda", "{:.0%}"),
    "demo.corr_early": Result("demo", "settled_early_by_measure.corr", "{:.0%}"),
    # docs/benchmarks.md: the demo alone and beside two busy loops (issue 34, target 5)
    **{f"demo.{k}": Result("demo", k, F1) for k in
       ("alone_s", "alone_min_s", "alone_max_s", "busy_s", "busy_min_s", "busy_max_s")},
    "demo.busy_ratio": Result("demo", "busy_ratio", F2),
    # docs/ray.md: the size of the stored multi-node run
    "ray.records": Result("cluster_nodes", "records", "{:,}"),
    "ray.hidden": Result("cluster_nodes", "hidden", "{:,}"),
    "ray.hypotheses": Result("cluster_nodes", "hypotheses", INT),
    # docs/benchmarks.md: the machine, the probe run's size, the eps sweep (bench_coverage.py
    # --sweep; rows 0-3 parens, 4-7 SQL, each at eps 0.1, 0.05, 0.025, 0.01)
    "bench.cores": Result("demo", "environment.cores", INT),
    "probes.records": Result("probes", "records", "{:,}"),
    "eps.units": Result("early_stop_eps", "rows.0.units", INT),
    "eps.records": Result("early_stop_eps", "records", "{:,}"),
    "eps.block_size": Result("early_stop_eps", "block_size", INT),
    "eps.orders": Result("early_stop_eps", "orders", INT),
    "eps.sql_hypotheses": Result("early_stop_eps", "rows.4.hypotheses", INT),
    **{
        f"eps.{i}.{name}": Result("early_stop_eps", f"rows.{row}.{key}", fmt)
        for i in range(4)
        for name, row, key, fmt in (
            ("eps", i, "eps", "{}"),
            ("parens_read", i, "median_records_read", "{:,g}"),
            ("parens_within", i, "within_eps", "{:.2%}"),
            ("sql_read", i + 4, "median_records_read", "{:,g}"),
            ("sql_within", i + 4, "within_eps", "{:.2%}"),
        )
    },
    # docs/api/measures.md: the probe's coverage (bench_coverage.py --measures logreg-loading;
    # rows 0 SQL, 1 parens)
    "probecov.eps": Result("coverage_logreg_loading", "eps", "{}"),
    "probecov.block": Result("coverage_logreg_loading", "block_size", INT),
    "probecov.orders": Result("coverage_logreg_loading", "rows.0.orders", INT),
    "probecov.records": Result("coverage_logreg_loading", "rows.0.records", "{:,}"),
    "probecov.hypotheses": Result("coverage_logreg_loading", "rows.0.hypotheses", INT),
    **{
        f"probecov.{w}.{key}": Result("coverage_logreg_loading", f"rows.{row}.{key}", fmt)
        for w, row in (("sql", 0), ("parens", 1))
        for key, fmt in (
            ("within_eps", "{:.2%}"),
            ("worst_order_within_eps", "{:.2%}"),
            ("pairs_converged", "{:,}"),
            ("settled_by_half_the_data", "{:,}"),
            ("nonempty_pairs", "{:,}"),
            ("groups_settled", INT),
            ("groups", INT),
            ("median_records_read", "{:,g}"),
        )
    },
    # docs/features.md: the sparse-path benchmark (bench_features_sparse.py), the explanations'
    "fsparse.d_sae": Result("features_sparse", "d_sae", "{:,}"),
    "fsparse.k": Result("features_sparse", "k", INT),
    "fsparse.records": Result("features_sparse", "records_per_block", INT),
    "fsparse.symbols": Result("features_sparse", "symbols_per_record_max", INT),
    "fsparse.hypotheses": Result("features_sparse", "hypotheses", INT),
    "fsparse.threads": Result("features_sparse", "threads", INT),
    "fsparse.cores": Result("features_sparse", "environment.cores", INT),
    "fsparse.load": Result("features_sparse", "environment.load_average.0", F2),
    **{
        f"fsparse.{m}.{key}": Result("features_sparse", f"{m}.{key}", fmt)
        for m in ("corr", "diffmeans")
        for key, fmt in (
            ("dense_s", "{:.3g}"),
            ("sparse_s", "{:.3g}"),
            ("ratio", "{:.1f}x"),
            ("max_score_diff", "{:.1e}"),
            ("sparse_vs_float64", "{:.1e}"),
            ("dense_vs_float64", "{:.1e}"),
        )
    },
    "explanations.latents": Result("explanations", "latents", "{:,}"),
    **_models(),
    # docs/findings.md, one notebook per row (notebook 10: three rows)
    **_nb(
        "06_gridworld_cnn",
        "nb06",
        unit=INT,
        r=F2,
        iou=F2,
        iou_1px=F3,
        untrained_r=F3,
        untrained_iou=F2,
        rises_after_epoch=INT,
        stays_from_epoch=INT,
        epochs=INT,
        ahead_1=F2,
        ahead_8=F2,
        silhouette=F2,
        silhouette_random=F2,
        perturbation_p=F2,
        accuracy=F2,
        ablated=F2,
        ablated_random=F2,
        ablation_p=F2,
    ),
    **_nb(
        "03_specialized_units",
        "nb03",
        selected=F1,
        precision=F2,
        recall=F2,
        recall_s1=F2,
        recall_s8=F2,
        recall_w01=F2,
        recall_w09=F2,
        corr_recall=F2,
        corr_precision=F2,
        silhouette_min=F2,
        silhouette_max=F2,
        random_min=F2,
        random_max=F2,
        powered_cells=INT,
        power_cells=INT,
    ),
    **_nb(
        "09_sql_magic_tour",
        "nb09",
        unit=INT,
        r=F3,
        last_epoch_r=F3,
        q=F3,
        untrained=F2,
        silhouette=F2,
        silhouette_random=F3,
        perturbation_p=F2,
        selectivity=F3,
        control_f1=F3,
    ),
    **_nb(
        "02_sql_autocompletion",
        "nb02",
        colref_epoch0=F2,
        colref_epoch1=F2,
        f1_epoch0_min=F2,
        f1_epoch0_max=F2,
        q_max=F3,
        untrained_colref=F2,
        untrained_select=F2,
        untrained_where=F2,
        trained_colref=F2,
        trained_select=F2,
        trained_where=F2,
        selectivity_max=F3,
    ),
    **_nb(
        "04_boolean_fsm",
        "nb04",
        f1_min=F3,
        f1_max=F3,
        untrained_min=F2,
        untrained_max=F2,
        main_r_min=F2,
        main_r_max=F2,
        other_r_min=F2,
        other_r_max=F2,
        q_max=F3,
        selectivity_min=F2,
        selectivity_max=F2,
    ),
    **_nb(
        "10_transformers",
        "nb10",
        lstm_r=F2,
        gpt2_r=F2,
        gpt2_block=INT,
        lstm_untrained=F2,
        gpt2_untrained=F2,
        lstm_gain=F2,
        gpt2_gain=F2,
        lstm_q=F3,
        gpt2_q=F3,
        head_block=INT,
        head=INT,
        head_attention=F3,
        chance=F3,
        head_drop=F4,
        head_rank=INT,
        heads=INT,
        head_p=F2,
        costliest_drop=F3,
        clean=F2,
        corrupted=F2,
        lens_block0=F2,
        spearman=F2,
        patched_heads=INT,
        best_block=INT,
        best_head=INT,
        recovered=F2,
    ),
    **_nb(
        "11_sae_features",
        "nb11",
        value_latent_min=F3,
        value_latent_max=F3,
        value_neuron_min=F2,
        value_neuron_max=F2,
        depth_neuron=F2,
        digit_neuron=F2,
        open_neuron=F2,
        depth_latent=F2,
        digit_latent=F2,
        open_latent=F2,
        digit2_latent_f1=F2,
        digit2_neuron_f1=F2,
        ablation_p_min=F2,
        explained_variance=F2,
        loss_recovered=F3,
        dead_share=F2,
    ),
    **_nb(
        "05_source_code",
        "nb05",
        q_max=F2,
        **{
            f"{p}_{k}": F2
            for p in ("comment", "bracket_depth", "identifier", "string", "indent")
            for k in ("r", "untrained")
        },
    ),
}
