"""The rows of the README's Benchmarks table: what each compares and where its numbers are.

Each :class:`Row` names one results file (its stem) and
reads every measured figure from it; the ``what`` text holds only the workload's
description. Targets are declared here once, from the issues that set them
(11: speed and memory; 13: Stop; 14: extraction; 24: the demo and the probes'
F1), and checked against the stored numbers when the table is rendered.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

_OPS = {"<=": ("≤", lambda v, b: v <= b), ">=": ("≥", lambda v, b: v >= b)}


@dataclass(frozen=True)
class Target:
    """One condition of a row: ``value(results) op bound``, shown as ``label op bound``."""

    label: str
    op: str  # "<=" or ">="
    bound: float
    unit: str
    value: Callable[[dict], float]

    def text(self) -> str:
        """The condition as the README shows it, e.g. ``≥ 20×`` or ``|ΔF1| ≤ 0.01``."""
        return f"{self.label}{_OPS[self.op][0]} {self.bound:g}{self.unit}".strip()

    def holds(self, res: dict) -> bool:
        """Whether the stored numbers meet the condition."""
        return bool(_OPS[self.op][1](self.value(res), self.bound))


@dataclass(frozen=True)
class Row:
    """A table row: its static description, its results file and how to read it.

    ``cells`` returns the ours, baseline and ratio cells from the file's parsed JSON;
    ``targets`` are checked against the same JSON (none: an information row, whose
    target cell is ``note``).
    """

    what: str
    script: str
    source: str
    cells: Callable[[dict], tuple[str, str, str]]
    targets: tuple[Target, ...] = ()
    note: str = "info"


def secs(x: float) -> str:
    """Seconds with three significant digits, milliseconds below 0.1 s."""
    return f"{x * 1e3:.2g} ms" if x < 0.01 else f"{x * 1e3:.3g} ms" if x < 0.1 else f"{x:.3g} s"


def times(x: float) -> str:
    """A ratio with three significant digits, e.g. ``3.94×``, ``26×``, ``113×``."""
    return f"{x:.3g}×" if x < 1000 else f"{x:,.0f}×"


def pct(x: float) -> str:
    """A share as a percentage (0.138 → ``14%``; 0.9904 → ``99.0%`` above 90%)."""
    return f"{x:.1%}" if x > 0.9 else f"{x:.0%}"


def _demo(d: dict) -> tuple[str, str, str]:
    early = d.get("settled_early_by_measure") or {}
    by = ", ".join(f"{m} {pct(v)}" for m, v in sorted(early.items()))
    settled = f"; settled before the end: {by}" if by else ""
    inspection = statistics.median(r["inspection_s"] for r in d["runs_alone"])
    return (f"{secs(d['alone_s'])} wall, inspection {secs(inspection)}"
            f" (reads {d['records_read']:,} of {d['windows']:,.0f} windows; "
            f"{pct(d['converged'])} of all pairs converged{settled})", "—", "—")  # fmt: skip


def _demo_busy(d: dict) -> tuple[str, str, str]:
    ours = (f"{secs(d['busy_s'])} beside {d['busy_loops']} loops, median of "
            f"{len(d['runs_busy'])} ({secs(d['busy_min_s'])}–{secs(d['busy_max_s'])}); "
            f"{d['environment']['cpu']}")  # fmt: skip
    alone = (f"{secs(d['alone_s'])} alone, median of {len(d['runs_alone'])} "
             f"({secs(d['alone_min_s'])}–{secs(d['alone_max_s'])})")  # fmt: skip
    return ours, alone, times(d["busy_ratio"])


def _demo_cold(d: dict) -> tuple[str, str, str]:
    run = d["run_from_nothing"]
    return f"{secs(run['wall_s'])} wall ({secs(run['load_s'])} training)", "—", "—"


def _logreg_vs_corr(p: dict) -> tuple[str, str, str]:
    ratio = p["inspect_logreg_s"] / p["inspect_corr_s"]
    alone = p["logreg_measure_s"] / p["corr_measure_s"]
    return (f"{secs(p['inspect_logreg_s'])} ({p['hypotheses']} hyps, {p['records']:,} windows)",
            f"corr {secs(p['inspect_corr_s'])}",
            f"{times(ratio)} (the measures alone: {times(alone)})")  # fmt: skip


def _peer(name: str):
    """Cells of the merged probe against one per-hypothesis probe library."""

    def cells(p: dict) -> tuple[str, str, str]:
        s = p[name]
        ours = secs(p["logreg_measure_s"])
        if p["training_rows"] < p["symbols"]:  # the probe fit a sample, and so did the peer
            ours += f" (both fit {p['training_rows']:,} of {p['symbols']:,} symbols)"
        if "ours_s" in s:  # timed on the same hypotheses: no extrapolation
            t = s["threads"]
            ours = f"{secs(s['ours_s'])} ({s['fitted']} hyps, {t['ours']} thread)"
            base = f"{secs(s['seconds'])} ({s['fitted']} hyps fitted, {t['liblinear']} thread)"
            return ours, base, f"{times(s['ratio'])} faster; max |ΔF1| {s['max_abs_f1_diff']:.3f}"
        base = f"{secs(s['total_s'])} ({s['fitted']} of {p['hypotheses']} fitted, extrapolated"
        base += f"; {s['epochs']} epochs)" if "epochs" in s else ")"
        ratio = f"{times(s['total_s'] / p['logreg_measure_s'])} faster; max |ΔF1| "
        return ours, base, ratio + f"{s['max_abs_f1_diff']:.3f}"

    return cells


def _peer_speedup(s: dict, p: dict) -> float:
    """The baseline's time over ours: on the same hypotheses where both were timed on them,
    else the baseline's extrapolated to all hypotheses over our run on all of them."""
    return s["ratio"] if "ratio" in s else s["total_s"] / p["logreg_measure_s"]


def _peer_targets(name: str) -> tuple[Target, ...]:
    return (Target("", ">=", 20, "×", lambda p: _peer_speedup(p[name], p)),
            Target("|ΔF1| ", "<=", 0.01, "", lambda p: p[name]["max_abs_f1_diff"]))  # fmt: skip


def _sizes(c: dict) -> str:
    return f"{c['symbols']:,} symbols × {c['units']} units × {c['hypotheses']} hyps"


def _corr_vs_gemm(r: dict) -> tuple[str, str, str]:
    c = r["corr_vs_product"]
    return (f"{secs(c['corr_measure_s'])} ({_sizes(c)})", secs(c["bare_product_s"]),
            times(c["ratio"]))  # fmt: skip


def _warm(w: dict) -> tuple[str, str, str]:
    pg = w["postgres"]
    alone = times(pg["ratio_measure_only"])
    return (f"{secs(w['inspect_s'])} ({_sizes(w)})",
            f"{secs(pg['query_s'])} (+{secs(pg['load_s'])} load)",
            f"{times(pg['ratio'])} (the measure alone: {alone})")  # fmt: skip


def _pg_paper(r: dict) -> tuple[str, str, str]:
    c, pg = r["corr_vs_product"], r["postgres"]
    base = secs(pg["query_total_s"]) + (" (extrapolated)" if pg["query_total_is_extrapolated"]
                                        else "")  # fmt: skip
    return f"{secs(c['corr_measure_s'])} ({_sizes(c)})", base, times(r["ratio_query"])


def _fixed(f: dict) -> tuple[str, str, str]:
    return f"{secs(f['warm_inspect_s'])} (fingerprints {secs(f['fingerprints_s'])})", "—", "—"


def _rss(m: dict) -> tuple[str, str, str]:
    (small, large), (p_small, p_large) = m["records"], m["peak_rss_mib"]
    return (f"{p_large:.0f} MiB at {large:,} records", f"{p_small:.0f} MiB at {small:,}",
            times(m["ratio"]))  # fmt: skip


def _rss_full(r: dict) -> tuple[str, str, str]:
    small, large = r["memory"]["sizes"]
    return (f"{large['inspect_peak_mb']:.0f} MiB at {large['records']:,} records",
            f"{small['inspect_peak_mb']:.0f} MiB at {small['records']:,}",
            times(r["memory"]["peak_ratio"]))  # fmt: skip


def _early(e: dict) -> tuple[str, str, str]:
    return (f"{e['early_stop_records_read']:,} records, {secs(e['early_stop_s'])}",
            f"{e['records']:,}, {secs(e['full_scan_s'])}",
            f"{pct(e['share_records_read'])} read, {times(e['full_scan_s'] / e['early_stop_s'])} "
            f"faster, {pct(e['share_within_eps'])} within eps")  # fmt: skip


def _early_full(r: dict) -> tuple[str, str, str]:
    es, full = r["inspect"]["early_stop"], r["inspect"]["full_scan"]
    share = es["records_read"] / full["records_read"]
    return (f"{es['records_read']:,} records, {secs(es['seconds'])}",
            f"{full['records_read']:,}, {secs(full['seconds'])}",
            f"{pct(share)} read, {times(full['seconds'] / es['seconds'])} faster, "
            f"{pct(es['share_within_eps_of_full'])} within eps")  # fmt: skip


def _scale(r: dict) -> tuple[str, str, str]:
    e, ref = r["early"], r["reference"]
    m = r["model"]
    return (f"{e['records_read']:,} of {r['records']:,} records ({e['tokens_read']:,} of "
            f"{r['tokens']:,} tokens), {secs(e['seconds'])}, peak RSS {e['peak_rss_mb']:,.0f} MB "
            f"({m['n_layer']} × {m['n_embd']}, {r['units']} units × {len(r['hypotheses'])} "
            f"hypotheses)", f"full read of {ref['tokens']:,} tokens, {secs(ref['seconds'])}",
            f"{pct(r['within_eps'])} within eps {r['eps']:g} of it")  # fmt: skip


def _forward_cost(r: dict) -> tuple[str, str, str]:
    s, m = r["seconds"], r["model"]
    return (f"`dl.inspect` {secs(s['inspect'])}: {r['records_read']:,} of {r['records']:,} "
            f"records read, {pct(r['converged_share'])} converged ({m['n_layer']} × "
            f"{m['n_embd']}, {r['units']:,} units)",
            f"bare forward of the records read (`module.transformer`) {secs(s['bare_body'])}",
            times(r["ratio_inspect_vs_bare_body"]))  # fmt: skip


def _explanations(r: dict) -> tuple[str, str, str]:
    return (f"{r['latents']:,} latents in {secs(r['seconds'])} ({r['threads']} thread), "
            f"{r['inspections']} inspections, median {r['records_read_median']:,.0f} of "
            f"{r['records']:,} records read", f"{pct(r['share_compiled'])} of the explanations "
            f"compiled", f"median auroc score {r['median_score']['right']:.2f} right vs "
            f"{r['median_score']['wrong']:.2f} wrong explanations")  # fmt: skip


def _failure(kind: str):
    """Cells of a failure row of ``bench_cluster_failures.py`` (a node lost, a holder killed)."""

    def cells(c: dict) -> tuple[str, str, str]:
        s = c[kind]
        extra = (f"shards dealt again {min(s['shards_redealt'])}–{max(s['shards_redealt'])}"
                 if kind == "node" else
                 f"holders rebuilt {sum(s['holder_restarts'])}, held shards read again "
                 f"{min(s['held_shards_reread'])}–{max(s['held_shards_reread'])}")  # fmt: skip
        ours = (f"{s['frames']} of {s['tries']} runs gave the one-process frame (max |Δ| "
                f"{s['max_diff']:.1e}); median {secs(s['median_s'])} to the frame; {extra}")
        return ours, f"{secs(c['undisturbed_warm_s'])} undisturbed", times(s["vs_undisturbed"])

    return cells, (Target("frames ", ">=", 100, "%",
                          lambda c: 100 * c[kind]["frames"] / c[kind]["tries"]),)  # fmt: skip


def _user_task(u: dict) -> tuple[str, str, str]:
    b = u["before"]
    return (f"{secs(u['worst_after_s'])} at most after {len(u['after'])} runs (a 1-CPU task and "
            f"a {u['cpus']}-CPU one)", f"{secs(b['one_cpu_s'])} and {secs(b['every_cpu_s'])} "
            "before any run", "—")  # fmt: skip


def _hf(h: dict) -> tuple[str, str, str]:
    return (f"{h['records_per_s_extract']:.0f} records/s (GPT-2 {h['blocks']} blocks × "
            f"{h['width']})", f"{h['records_per_s_bare']:.0f} records/s",
            times(h["ratio_vs_bare"]))  # fmt: skip


def _depth(h: dict) -> tuple[str, str, str]:
    ours = f"{secs(h['seconds_extract_block3'])} ({h['records']} records, {h['tokens']:,} tokens)"
    return ours, secs(h["seconds_bare"]), times(h["speedup_extract_block3"])


def _depth_all(h: dict) -> tuple[str, str, str]:
    return (f"{secs(h['seconds_inspect_all'])} ({h['records']} records)",
            f"{secs(h['seconds_bare'])} (the body alone, no LM head: "
            f"{secs(h['seconds_bare_body'])})", times(h["speedup_inspect_all"]))  # fmt: skip


def _peer_best(h: dict, key: str) -> float:
    """The faster peer's speed-up over a bare forward in ``key`` (block3, all, mixed)."""
    return max(h["peers"][f"speedup_{t}"][key] for t in ("transformer_lens", "nnsight"))


def _peers(key: str):
    def cells(h: dict) -> tuple[str, str, str]:
        p = h["peers"]
        # on a busy machine the load moves between the tools' processes: CPU seconds beside
        cpu = {t: p[f"speedup_cpu_{t}"][key] for t in ("ours", "transformer_lens", "nnsight")
               if f"speedup_cpu_{t}" in p}  # fmt: skip
        on_cpu = lambda t: f" (CPU {times(cpu[t])})" if t in cpu else ""  # noqa: E731
        return (f"{times(p['speedup_ours'][key])} a bare forward{on_cpu('ours')}",
                f"TransformerLens {times(p['speedup_transformer_lens'][key])}"
                f"{on_cpu('transformer_lens')}, "
                f"nnsight {times(p['speedup_nnsight'][key])}{on_cpu('nnsight')}",
                times(p["speedup_ours"][key] / _peer_best(h, key)))  # fmt: skip

    return cells


def _waste(h: dict) -> tuple[str, str, str]:
    t = h["peers"]["tools"]
    return (pct(t["ours"]["padding_waste_mixed"]) + " (sorted by length)",
            pct(t["nnsight"]["padding_waste_mixed"]) + " (record order)", "—")  # fmt: skip


def _peer_rss(h: dict) -> float:
    t = h["peers"]["tools"]
    peers = (t["transformer_lens"]["rss_peak_mb"], t["nnsight"]["rss_peak_mb"])
    return t["ours"]["rss_peak_mb"] / min(peers)


def _rss_peers(h: dict) -> tuple[str, str, str]:
    t = h["peers"]["tools"]
    return (f"{t['ours']['rss_peak_mb']:,.0f} MiB",
            f"TransformerLens {t['transformer_lens']['rss_peak_mb']:,.0f} MiB, "
            f"nnsight {t['nnsight']['rss_peak_mb']:,.0f} MiB", times(_peer_rss(h)))  # fmt: skip


_ACT_PEERS = {"transformer_lens": "TransformerLens", "nnsight": "nnsight"}


def _act_tools(d: dict, workload: str) -> dict[str, dict]:
    """``bench_activations.py``'s measured tools of one workload (block3, all), by name."""
    return {r["tool"]: r for r in d["rows"] if r["workload"] == workload and "error" not in r}


def _act_ratio(workload: str, key: str, best):
    """Ours over the best peer's ``key`` (the faster: ``max``; the leaner: ``min``)."""

    def ratio(d: dict) -> float:
        t = _act_tools(d, workload)
        return t["ours"][key] / best(t[p][key] for p in _ACT_PEERS if p in t)

    return ratio


def _acts(workload: str):
    """Cells of ``dl.activations`` against the peers: tokens per CPU second, peak RSS."""

    def cells(d: dict) -> tuple[str, str, str]:
        t = _act_tools(d, workload)
        o, s = t["ours"], t["ours_stream"]
        ours = (f"{o['tokens_per_cpu_s']:,.0f} tokens per CPU s, {o['rss_peak_mb']:,.0f} MiB "
                f"(streamed: {s['tokens_per_cpu_s']:,.0f}, {s['rss_peak_mb']:,.0f} MiB)")
        base = ", ".join(f"{n} {t[p]['tokens_per_cpu_s']:,.0f}, {t[p]['rss_peak_mb']:,.0f} MiB"
                         for p, n in _ACT_PEERS.items() if p in t)  # fmt: skip
        speed = _act_ratio(workload, "tokens_per_cpu_s", max)(d)
        rss = _act_ratio(workload, "rss_peak_mb", min)(d)
        return ours, base, f"{times(speed)} speed, {times(rss)} RSS"

    targets = (Target("speed vs the faster peer ", ">=", 1, "×",
                      _act_ratio(workload, "tokens_per_cpu_s", max)),
               Target("RSS vs the leaner ", "<=", 1, "×", _act_ratio(workload, "rss_peak_mb", min)))
    return cells, targets  # fmt: skip


def _every(d: dict) -> tuple[str, str, str]:
    """Every name TransformerLens 4.3's ``run_with_cache`` returns: time and peak RSS."""
    e = d["every"]
    t = {r["tool"]: r for r in e["rows"]}
    o, tl, q = t["ours"], t["transformer_lens"], e["ratios"]["ours"]
    return (f"{o['seconds']:.2f} s, {o['rss_peak_mb']:,.0f} MiB ({e['names']} names, "
            f"max |diff| {e['max_abs_diff']:.1e})",
            f"TransformerLens 4.3 {tl['seconds']:.2f} s, {tl['rss_peak_mb']:,.0f} MiB",
            f"{times(q['time'])} time, {times(q['peak_rss'])} peak RSS")  # fmt: skip


def _grids(d: dict) -> tuple[str, str, str]:
    """The patching grids with their nulls against TransformerLens's helpers."""
    g = d["grids"]
    ours = ", ".join(f"{k} {secs(v['seconds_ours_null'])}" for k, v in g.items())
    base = ", ".join(f"{k} {secs(v['seconds_transformer_lens'])}" for k, v in g.items())
    worst = max(v["max_abs_diff"] for v in g.values())
    ratio = ", ".join(f"{times(v['ratio_with_null'])}" for v in g.values())
    return f"{ours} (with nulls; max |diff| {worst:.1e})", base, ratio


def _worst_grid(d: dict) -> float:
    return max(v["ratio_with_null"] for v in d["grids"].values())


def _stops(s: dict) -> list[float]:
    return sorted(t["stop_s"] for t in s["trials"] if not t["ended_before_stop"])


def _stop(s: dict) -> tuple[str, str, str]:
    st = _stops(s)
    return (f"{secs(statistics.median(st))} median, {secs(st[-1])} max ({len(st)} Stops)",
            "—", "—")  # fmt: skip


def _cluster(c: dict) -> tuple[str, str, str]:
    two = next(r for r in c["runs"] if r["workers"] == 2)
    return (f"{secs(two['seconds'])} (2 workers, {c['cores']} cores)",
            f"{secs(c['single_process_s'])} (no Ray)",
            f"{times(two['vs_single_process'])} ({times(two['speedup'])} vs 1 worker)")  # fmt: skip


def _driver_bytes(c: dict) -> tuple[str, str, str]:
    """Bytes the driver receives per block, as a share of the block's behaviors."""
    by = {r["eps"] is None: r for r in c["bytes_by_measure"]}
    mb = c["block_behavior_bytes"] / 1e6
    return (f"{by[True]['share_of_behaviors']:.2%} read to the end, "
            f"{by[False]['share_of_behaviors']:.2%} with early stopping",
            f"{mb:.3g} MB of behaviors per block", "—")  # fmt: skip


def _node_run(c: dict, k: int) -> dict:
    """The node table's run on ``k`` nodes (KeyError where it has none: not measured)."""
    for r in c["nodes"]:
        if r["nodes"] == k:
            return r
    raise KeyError(k)


def _nodes(k: int):
    """Cells of the node table's row for a cluster of ``k`` nodes made on one machine:
    one node against one process, more nodes against one node."""

    def cells(c: dict) -> tuple[str, str, str]:
        r = _node_run(c, k)
        shipped = r["bytes_per_block"]
        size = f"{shipped / 1e6:.3g} MB" if shipped >= 1e6 else f"{shipped / 1e3:.3g} kB"
        share = shipped / c["block_behavior_bytes"]
        ours = (f"{secs(r['seconds'])} ({r['workers']} workers, {k} × {r['cpus_per_node']} "
                f"CPUs on {c['cores']} cores; start-up {secs(r['start_s'])}); {size} per block "
                f"to the driver, {share:.2%} of its behaviors")  # fmt: skip
        if k == 1:
            base, t = f"{secs(c['single_process_s'])} (one process)", c["single_process_s"]
        else:
            t = _node_run(c, 1)["seconds"]
            base = f"{secs(t)} (one node)"
        return ours, base, f"{times(t / r['seconds'])}; max |Δr| {r['max_abs_diff']:.1e}"

    def share(c: dict) -> float:
        return 100 * _node_run(c, k)["bytes_per_block"] / c["block_behavior_bytes"]

    return cells, (Target("", "<=", 1, "%", share),)


def _max_share(c: dict) -> float:
    return 100 * max(r["share_of_behaviors"] for r in c["bytes_by_measure"])


def _coverage(measure: str):
    """Cells of one measure's coverage rows (both workloads in one cell)."""

    def rows(c: dict) -> list[dict]:
        return [r for r in c["rows"] if r["measure"] == measure]

    def cells(c: dict) -> tuple[str, str, str]:
        rs = rows(c)
        ours = "; ".join(f"{r['workload']}: {pct(r['within_eps'])} within eps, "
                         f"{pct(r['within_err'])} within its error" for r in rs)
        size = "; ".join(f"{r['workload']}: {r['orders']} orders of {r['records']:,} records, "
                         f"median {r['median_records_read']:,.0f} read" for r in rs)
        worst = min(r["within_eps"] for r in rs)
        return ours, size, f"worst {pct(worst)}"

    target = (Target("", ">=", 95, "%", lambda c: 100 * min(r["within_eps"] for r in rows(c))),)
    return cells, target


def _probe_coverage():
    """Cells of the probe's coverage row: pairs settled before the end, and by half the data."""

    def cells(c: dict) -> tuple[str, str, str]:
        ours = "; ".join(
            f"{r['workload']}: {pct(r['within_eps'])} of {r['pairs_converged']:,} pairs settled "
            f"before the end within eps; {pct(r['settled_by_half_the_data'] / r['nonempty_pairs'])}"
            f" of {r['nonempty_pairs']:,} non-empty pairs settled by half the data; "
            f"{r['groups_settled']} of {r['groups']} group F1s settled" for r in c["rows"])
        size = "; ".join(f"{r['workload']}: {r['orders']} orders of {r['records']:,} records, "
                         f"{r['hypotheses']} hypotheses, median {r['median_records_read']:,.0f} "
                         "read" for r in c["rows"])  # fmt: skip
        return ours, size, f"worst order {pct(min(r['worst_order_within_eps'] for r in c['rows']))}"

    def by_half(c: dict) -> float:
        return 100 * min(r["settled_by_half_the_data"] / r["nonempty_pairs"] for r in c["rows"])

    target = (Target("within eps ", ">=", 95, "%",
                     lambda c: 100 * min(r["within_eps"] for r in c["rows"])),
              Target("settled by half ", ">=", 50, "%", by_half))  # fmt: skip
    return cells, target


_DEMO = ("`dni-lab demo` (corr + the closed-form probe `lda`, default eps), model stored, "
         "cold hypothesis cache")
_NODES = "`bench_cluster.py --nodes 1,2,3`"
_EARLY = ("read ", "<=", 25, "%"), ("within eps ", ">=", 95, "%")

ROWS: tuple[Row, ...] = (
    Row(_DEMO, "`bench_demo.py`", "demo", _demo,
        (Target("", "<=", 45, " s", lambda d: d["alone_s"]),
         Target("inspection ", "<=", 20, " s",
                lambda d: statistics.median(r["inspection_s"] for r in d["runs_alone"])),
         Target("converged ", ">=", 95, "%", lambda d: 100 * d["converged"]))),
    Row("the same beside busy processes (`while :` loops; issues 24 and 34 measured two)",
        "`bench_demo.py`", "demo",
        _demo_busy, (Target("", "<=", 2.0, "×", lambda d: d["busy_ratio"]),)),
    Row("`dni-lab demo` from nothing (trains the SQL model)", "`bench_demo.py --from-nothing`",
        "demo", _demo_cold, (Target("", "<=", 180, " s", lambda d: d["from_nothing_s"]),)),
    Row("merged `logreg` vs `corr`, 128 units, end to end", "`bench_probes.py`", "probes",
        _logreg_vs_corr,
        (Target("", "<=", 5, "×", lambda p: p["inspect_logreg_s"] / p["inspect_corr_s"]),)),
    Row("merged `logreg` vs scikit-learn `liblinear`, one probe per hypothesis, extraction "
        "done once", "`bench_probes.py`", "probes", _peer("sklearn"), _peer_targets("sklearn")),
    Row("merged `logreg` vs NeuroX 1.0.9 probes (its default Adam)", "`bench_probes.py`",
        "probes", _peer("neurox"), _peer_targets("neurox")),
    Row("`corr` measure vs bare UᵀH GEMM, default workload, trained SQL model",
        "`run_benchmarks.py --skip postgres,logreg`", "full", _corr_vs_gemm,
        (Target("", "<=", 2, "×", lambda r: r["corr_vs_product"]["ratio"]),)),
    Row("PostgreSQL `corr()` (batched) vs the `corr` measure on the same behaviors, "
        "DeepBase §6.3, default workload", "`run_benchmarks.py`", "full", _pg_paper,
        (Target("", ">=", 1000, "×", lambda r: r["ratio_query"]),)),
    Row("the same at the smoke size (trained quick SQL model)", "`run_benchmarks.py --quick`",
        "quick", _pg_paper, (Target("", ">=", 1000, "×", lambda r: r["ratio_query"]),)),
    Row("small warm query (hypotheses cached, behaviors memoised) vs PostgreSQL `corr()`",
        "`bench_warm_query.py`", "warm_query", _warm,
        (Target("", ">=", 100, "×", lambda w: w["postgres"]["ratio"]),)),
    Row("fixed cost of a warm `dl.inspect` call (32 records, 40 hyps)", "`bench_fixed_cost.py`",
        "fixed_cost", _fixed,
        (Target("", "<=", 50, " ms", lambda f: f["warm_inspect_s"] * 1e3),)),
    Row("peak RSS at four times the records, cold run, default caches, stand-in model",
        "`bench_fixed_cost.py --rss 20000`", "rss", _rss,
        (Target("", "<=", 1.3, "×", lambda m: m["ratio"]),)),
    Row("the same, trained 512-unit SQL model, default workload",
        "`run_benchmarks.py --skip postgres,logreg`", "full", _rss_full,
        (Target("", "<=", 1.3, "×", lambda r: r["memory"]["peak_ratio"]),)),
    Row("early stopping (eps 0.025) vs full scan, default workload, stand-in model",
        "`bench_early_stop.py`", "early_stop", _early,
        (Target(*_EARLY[0], lambda e: e["share_records_read"] * 100),
         Target(*_EARLY[1], lambda e: e["share_within_eps"] * 100))),
    Row("the same, trained 512-unit SQL model", "`run_benchmarks.py --skip postgres,logreg`",
        "full", _early_full,
        (Target(*_EARLY[0], lambda r: 100 * r["inspect"]["early_stop"]["records_read"]
                / r["inspect"]["full_scan"]["records_read"]),
         Target(*_EARLY[1],
                lambda r: r["inspect"]["early_stop"]["share_within_eps_of_full"] * 100))),
    Row("early stopping at scale: GPT-2 small's shape over 1,000,000 tokens of Python source, "
        "`corr` at eps 0.05 (random weights, 2 threads)", "`bench_scale.py`", "scale", _scale,
        (Target("", "<=", 300, " s", lambda r: r["early"]["seconds"]),
         Target("", ">=", 95, "%", lambda r: 100 * r["within_eps"]))),
    Row("inspection at the cost of the forward: GPT-2 small's shape over 40,000 parentheses "
        "records, `corr` on two hypotheses at every block, eps 0.05 (random weights, 2 threads)",
        "`bench_scale.py --part forward`", "scale_forward", _forward_cost,
        (Target("", "<=", 1.3, "×", lambda r: r["ratio_inspect_vs_bare_body"]),)),
    Row("explanations as hypotheses: each of 10,000 synthetic latents scored (`auroc`, eps "
        "0.05) against its own compiled explanation", "`bench_explanations.py`", "explanations",
        _explanations),
    Row("converged `corr` pairs within eps of the full-data score, random record orders, "
        "SQL and parentheses LSTMs", "`bench_coverage.py`", "coverage", *_coverage("corr")),
    Row("converged `LogReg(unit_score=\"loading\")` pairs (group F1 and loading) within eps of "
        "the full-data fit, eps 0.05, random record orders, SQL and parentheses LSTMs",
        "`bench_coverage.py --measures logreg-loading --eps 0.05`", "coverage_logreg_loading",
        *_probe_coverage()),
    Row("extraction through the Hugging Face adapter vs a bare forward pass",
        "`bench_hf_extract.py`", "hf_extract", _hf,
        (Target("", ">=", 0.8, "×", lambda h: h["ratio_vs_bare"]),)),
    Row("units in block 3 of 12 vs a bare forward pass (GPT-2 small's shape: 12 blocks, width 768, "
        "vocabulary 50,257): "
        "the forward pass stops after block 3", "`bench_hf_depth.py`", "hf_depth", _depth,
        (Target("", ">=", 2.5, "×", lambda h: h["speedup_extract_block3"]),)),
    Row("the same vs TransformerLens 4.3 (`stop_at_layer`) and nnsight 0.8 (`.stop()`), "
        "each in its own process", "`bench_hf_depth.py --peers`", "hf_depth", _peers("block3"),
        (Target("vs the faster peer ", ">=", 1, "×",
                lambda h: h["peers"]["speedup_ours"]["block3"] / _peer_best(h, "block3")),)),
    Row("extraction of units in every block vs a bare forward pass, and the peers",
        "`bench_hf_depth.py --peers`", "hf_depth", _peers("all"),
        (Target("", ">=", 0.95, "×", lambda h: h["peers"]["speedup_ours"]["all"]),)),
    Row("`dl.inspect` end to end (`corr`) with units in every block (9,216) vs a bare forward "
        "pass: the pass stops before the final layer norm and the LM head", "`bench_hf_depth.py`",
        "hf_depth", _depth_all,
        (Target("", ">=", 0.95, "×", lambda h: h["speedup_inspect_all"]),)),
    Row("padding waste, records of 16 to 256 words in forward batches", "`bench_hf_depth.py "
        "--peers`", "hf_depth", _waste,
        (Target("", "<=", 10, "%",
                lambda h: 100 * h["peers"]["tools"]["ours"]["padding_waste_mixed"]),)),
    Row("peak RSS of the extraction workloads vs the leaner peer", "`bench_hf_depth.py "
        "--peers`", "hf_depth", _rss_peers, (Target("", "<=", 1, "×", _peer_rss),)),
    Row("`dl.activations` vs TransformerLens 3.9 `run_with_cache(names_filter=...)` and nnsight "
        "0.8 `.save()`: `blocks.3.hook_resid_post`, 64 records × ~128 tokens, GPT-2 small's "
        "shape, each tool in its own process keeping every value", "`bench_activations.py`",
        "activations", *_acts("block3")),
    Row("the same, every block's `hook_resid_post`", "`bench_activations.py`", "activations",
        *_acts("all")),
    Row("`dl.activations` of every name TransformerLens 4.3's `run_with_cache` returns "
        "(`hook_pattern` and `hook_attn_scores` included) vs `TransformerBridge.run_with_cache`"
        ", GPT-2-shaped (4 blocks, width 512), 64 records of 64 tokens, one thread each, "
        "one cache kept whole",
        "`bench_activations.py --every`", "activations", _every,
        (Target("time ", "<=", 1, "×", lambda d: d["every"]["ratios"]["ours"]["time"]),
         Target("peak RSS ", "<=", 1, "×",
                lambda d: d["every"]["ratios"]["ours"]["peak_rss"]))),
    Row("patching grids (resid_pre layer × position, head_out and pattern layer × head), "
        "each with its null grid, vs TransformerLens 4.3's `get_act_patch_*` (no null), "
        "same model and process", "`bench_patching.py`", "patching", _grids,
        (Target("worst ", "<=", 1, "×", _worst_grid),)),
    Row("Stop during the main job (`corr` + `logreg`, Stops spread over a run)",
        "`bench_stop.py`", "stop", _stop,
        (Target("max ", "<=", 1, " s", lambda s: _stops(s)[-1]),)),
    Row("one inspection on a local Ray cluster, 2 workers vs 1 process, default workload",
        "`bench_cluster.py --workers 1,2`", "cluster", _cluster, (), "info"),
    Row("bytes the driver receives per block on a local Ray cluster (2 workers), `corr`: "
        "workers read their own blocks, a holder merges and checks", "`bench_cluster.py`",
        "cluster_bytes", _driver_bytes, (Target("", "<=", 1, "%", _max_share),)),
    Row("the same for `logreg` (its rows stay on the holder)",
        "`bench_cluster.py --quick --records 2048 --bytes-measures logreg`",
        "cluster_bytes_logreg", _driver_bytes,
        (Target("", "<=", 1, "%", _max_share),)),
    Row("`corr` read to the end on a Ray cluster of one node made on this machine "
        "(`ray.cluster_utils.Cluster`, the cores shared out over the nodes): time, "
        "bytes the driver receives per block", _NODES, "cluster_nodes", *_nodes(1)),
    Row("the same, two nodes", _NODES, "cluster_nodes", *_nodes(2)),
    Row("a worker node removed after 2 shards and mid-run (head + 2 nodes of 1 CPU, blocks "
        "above Ray's inline limit, `corr` + `logreg`)", "`bench_cluster_failures.py`",
        "cluster_failures", *_failure("node")),
    Row("the probe holder's process killed after 2 shards and mid-run, same cluster",
        "`bench_cluster_failures.py`", "cluster_failures", *_failure("holder")),
    Row("the user's own Ray task after a sharded run (local Ray of 2 CPUs; the workers stay, "
        "reserving no CPU)", "`bench_user_task.py`", "user_task", _user_task,
        (Target("", "<=", 1, " s", lambda u: u["worst_after_s"]),)),
    Row("the same, three nodes (more CPUs declared than the machine has)", _NODES,
        "cluster_nodes", *_nodes(3)),
)  # fmt: skip
