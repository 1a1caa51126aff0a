"""What the live score table says about its run: the status it sends and its one-line text.

The browser draws the same words from the status (``js/table.js: progressBar``); the
static snapshot uses :func:`progress_line`.
"""

from __future__ import annotations

from typing import Any

from ..backend.engine.run import Run

#: What the live table of a query shows, said in its header.
QUERY_NOTE = (
    "live: the INSPECT frame S, before SELECT, HAVING, ORDER BY and LIMIT apply; "
    "the query's result is {result}"
)


def run_status(run: Run) -> dict[str, Any]:
    """The run's progress as the table's ``_status`` fields (JSON-able)."""
    p = run.progress
    left, rate = p.time_left_s, p.records_per_s
    return {
        "records_read": p.records_read,
        "total_records": p.total_records,
        # why reading ended before the data's end: a Stop (partial) or early stopping
        "ending": p.ending,
        "partial": p.cancelled,
        "blocks": p.blocks,
        "share_converged": round(p.share_converged, 4),
        # eps=None reads every record: no pair "converges", so no share to show
        "early_stopping": _eps(run) is not None,
        "records_per_s": None if rate is None else round(rate, 1),
        # the engine pins the estimate (Progress.mark): it never grows between blocks
        "time_left_s": None if left is None else round(left, 1),
        "elapsed_s": round(p.elapsed_s, 1),
        # a sharded run: nodes, workers and what failures cost (engine Progress.cluster_text)
        "cluster": p.cluster_text,
    }


def _eps(run: Run) -> float | None:
    """The run's early-stopping bound (``dl.inspect`` or a query's options)."""
    insp = run.inspection
    params = getattr(insp, "params", None) or getattr(
        getattr(insp, "grouping", None), "options", None
    )
    return getattr(params, "eps", None)


def progress_line(st: dict[str, Any]) -> str:
    """The header's progress text from a status dict (``js/table.js: progressBar`` says the
    same in the browser): records read of the total and why reading ended, blocks, what
    stops the run, speed, time left."""
    if st.get("records_read") is None:
        return ""
    total = st.get("total_records")
    read = f"{st['records_read']:,}" + (f" of {total:,}" if total else "") + " records read"
    parts = [read + (f" — {st['ending']}" if st.get("ending") else "")]
    parts.append(f"{st.get('blocks', 0):,} blocks")
    if st.get("early_stopping"):
        parts.append(f"{round(100 * (st.get('share_converged') or 0))}% of pairs converged")
    elif st.get("state") == "running":
        parts.append("reading all records (eps=None)")
    else:
        parts.append("eps=None: no early stop")
    if st.get("state") == "running":
        if st.get("records_per_s"):
            parts.append(f"{st['records_per_s']:,.0f} records/s")
        if st.get("time_left_s") is not None:
            parts.append(f"≤ {round(st['time_left_s']):,} s left")
    elif st.get("elapsed_s") is not None:
        parts.append(f"{st['elapsed_s']:.1f} s")
    if st.get("cluster"):
        parts.append(st["cluster"])
    return " · ".join(parts)
