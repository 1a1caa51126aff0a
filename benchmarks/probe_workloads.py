"""The workloads of ``bench_probes.py``: the SQL LSTM and issue 46's code LSTM.

``code`` is issue 46's ratio workload: the char-LSTM on Python source (128 units,
:mod:`hypotheses.workloads.pysource`, the full model, trained on first use) over
``CODE_RECORDS`` held-out windows of 100 characters, and 39 binary hypotheses:
:class:`hypotheses.code.CodeFamily`'s six binary signals (comment, string, keyword,
identifier, def, class) and one ``kw_<word>`` signal for each of the 33 Python keywords
most frequent in those windows. The held-out text gives 500 disjoint windows; the rest
are windows of the same text shifted by half a window (distinct records).
"""

from __future__ import annotations

import collections
import keyword
from typing import Any

from benchmarks.run_benchmarks import behaviors
from benchmarks.workload import Workload

CODE_RECORDS = 600
CODE_KEYWORDS = 33
CODE_BINARY = ["comment", "string", "keyword", "identifier", "def", "class"]


def code_records(n: int, quick: bool) -> list[str]:
    """``n`` windows of 100 characters of the held-out source (shifted ones after the
    disjoint ones)."""
    from hypotheses.workloads import pysource

    text = pysource.corpus(80_000 if quick else 500_000)[1]
    out = pysource.chunks(text)
    out += pysource.chunks(text[pysource.SEQ // 2 :])
    return out[:n]


def code_workload(n_records: int, quick: bool, n_keywords: int = CODE_KEYWORDS):
    """``(workload, family, signal names)`` of the code LSTM (see the module's docstring)."""
    from hypotheses.code import CodeFamily, lex
    from hypotheses.workloads import pysource

    module, encode, _ = pysource.load(quick=quick)
    records = code_records(n_records, quick)
    counts = collections.Counter(t.text for r in records for t in lex(r))
    words = sorted(keyword.kwlist, key=lambda w: (-counts[w], keyword.kwlist.index(w)))
    family = CodeFamily(select=CODE_BINARY, keywords=words[:n_keywords])
    wl = Workload(module.eval(), encode, "lstm", 128, records, [family])
    return wl, family, family.signals()


def sql_workload(n_queries: int, quick: bool, n_hyps: int) -> tuple[Workload, Any, list[str]]:
    """The SQL LSTM, its held-out windows and the ``n_hyps`` most balanced signals."""
    from dni_lab.backend.query.subset import SubsetFamily
    from hypotheses.grammars import sql as grammar
    from hypotheses.workloads import sql as sql_wl

    module, encode, _ = sql_wl.load(quick=quick, hidden=128)
    records = sql_wl.records(n_queries, seed=10_007)
    family = grammar.family()
    wl = Workload(module, encode, "lstm", 128, records, [family])
    bh = behaviors(wl, records[: min(len(records), 1024)], 512)
    _, H = bh.flat()
    rate = H.mean(0).numpy()
    binary = [j for j, i in enumerate(bh.info) if i.kind == "binary" and 0.01 < rate[j] < 0.99]
    chosen = sorted(binary, key=lambda j: abs(rate[j] - 0.5))[:n_hyps]
    signals = [family.signals()[j] for j in sorted(chosen)]
    sub = SubsetFamily(family, signals)
    return Workload(module, encode, "lstm", 128, records, [sub]), sub, signals
