"""Grouping: FROM/WHERE choose units, hypotheses and inputs; GROUP BY makes groups.

Relations are never cross-joined whole (units × hypotheses × records would be
huge). WHERE is split into conjuncts; a conjunct on one alias filters that
relation alone, and only aliases linked by a conjunct are joined (a
*component*). Groups are the product of each component's GROUP BY partitions.
Each group is inspected separately, as DeepBase defines it; when every
measure is independent of the unit group, groups reading the same records
share one engine call (their scores would be identical) and each takes its
own rows back — see :mod:`.execute`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from ..engine.params import InspectParams
from ..measures import Measure
from .binder import UNIT_KINDS, Binder, Bound
from .features import features_frame, unit_spec
from .nodes import Query, Span, has_top_or, split_top
from .options import resolve_measures, resolve_options
from .relations import Scope
from .sql import DEFAULT_ENGINE, RelationalEngine, SQLEngineError
from .tokens import quote_ident

ROW = "__dl_row"


@dataclass
class Group:
    """One GROUP BY group: its keys and what it inspects.

    ``units`` maps a checkpoint (index into :attr:`Scope.models`) to unit ids, or
    to None for the engine's default units; ``hyps`` lists (hypothesis entry,
    signal) pairs; ``records`` lists (dataset, record index) pairs.
    """

    keys: dict[tuple[str, str], Any]
    units: dict[int, np.ndarray | None]
    hyps: list[tuple[int, str, str]]  # (entry, signal, hid)
    records: list[tuple[int, int]]


@dataclass
class Step:
    """One engine call: checkpoints sharing a unit spec, hypotheses, records."""

    ckpts: list[int]
    units: list[Any] | None
    hyps: list[tuple[int, str, str]]
    records: list[tuple[int, int]]
    groups: list[int]


@dataclass
class Grouping:
    """A query bound to its scope and split into GROUP BY groups and engine steps."""

    query: Query
    scope: Scope
    binder: Binder
    units: Bound
    hyps: Bound
    inputs: Bound
    models: Bound | None  # the models alias each S row joins to, if any
    measures: list[Measure]
    options: InspectParams
    key_refs: list[tuple[str, str]]
    groups: list[Group] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)


def group_query(
    q: Query, scope: Scope, options: dict[str, Any], engine: RelationalEngine = DEFAULT_ENGINE
) -> Grouping:
    """Bind, filter, group and split a parsed INSPECT query into engine steps."""
    ins = q.inspect
    assert ins is not None
    bd = Binder(q, scope)
    ub = bd.operand(ins.units, ("units", "models", "features"), "units")
    hb = bd.operand(ins.hyps, ("hypotheses",), "hypotheses")
    db = bd.operand(ins.inputs, ("inputs",), "inputs")
    measures = resolve_measures(q, scope)
    opts = resolve_options(q, options)
    for b in bd.aliases.values():
        if b.kind not in UNIT_KINDS:
            b.frame = scope.frame(b.rel).with_row_index(ROW)
    keys = [bd.resolve(r, "GROUP BY") for r in q.group_by]
    conds = _conjuncts(q)
    bound = []
    for span in conds:
        text, used = bd.condition(span)
        bound.append((span, text, used or {ub.alias}))  # a constant condition still filters
    for span, _, used in bound:
        if not any(bd.aliases[a].kind in UNIT_KINDS for a in used):
            bd.check_literals(span)
    for b in bd.aliases.values():
        if b.kind not in UNIT_KINDS:
            _filter(q, b, [(s, t) for s, t, u in bound if u == {b.alias}], engine)
    models_aliases = [b for b in bd.aliases.values() if b.kind == "models"]
    mids = None
    if len(models_aliases) == 1:
        mids = set(models_aliases[0].frame["mid"].to_list())  # type: ignore[index]
    sample = _records(scope, db.frame.head(1))  # type: ignore[union-attr]
    for b in bd.aliases.values():
        if b.kind == "units":
            b.frame = scope.units_frame(mids, sample).with_row_index(ROW)
        elif b.kind == "features":
            b.frame = features_frame(scope, b.rel.ids, mids, sample).with_row_index(ROW)
    if ub.kind == "features" and not ub.frame.height:  # type: ignore[union-attr]
        raise q.error(
            f"relation {ub.rel.name!r} has no latents for the models this query chose: no "
            "feature set is registered, or none fits their hooks. Register one with "
            "catalog.add_features(fs, model) (or hold it in a notebook variable); it attaches "
            "where model address fs.hook is fs.d_in wide",
            ins.units.first,
            ins.units.last,
        )
    for span, _, used in bound:
        if any(bd.aliases[a].kind in UNIT_KINDS for a in used):
            bd.check_literals(span)
    for b in bd.aliases.values():
        if b.kind in UNIT_KINDS:
            _filter(q, b, [(s, t) for s, t, u in bound if u == {b.alias}], engine)
    links = [(s, t, u) for s, t, u in bound if len(u) > 1]
    mb = ub if ub.kind == "models" else None
    if ub.kind in UNIT_KINDS and len(models_aliases) == 1:
        mb = models_aliases[0]
        # Units always belong to their own model; DeepBase writes M.mid = U.mid, we imply it.
        join = f'{quote_ident(mb.alias)}."mid" = {quote_ident(ub.alias)}."mid"'
        links.append(((ins.tok, ins.tok + 1), join, {mb.alias, ub.alias}))
    p = Grouping(q, scope, bd, ub, hb, db, mb, measures, opts, keys)
    comps = _components(q, bd, links, engine)
    p.groups = _groups(p, comps)
    p.steps = _steps(p)
    return p


def _conjuncts(q: Query) -> list[Span]:
    spans = [it.on for it in q.from_ if it.on is not None]
    where = q.span("WHERE")
    if where is not None:
        spans += [where] if has_top_or(q, where) else split_top(q, where, "AND")
    return spans


def _filter(q: Query, b: Bound, conds: list[tuple[Span, str]], engine: RelationalEngine) -> None:
    # One condition at a time, so an engine error points at the condition that caused it.
    for span, text in conds:
        sql = f'SELECT * FROM "__dl_t" AS {quote_ident(b.alias)} WHERE {text}'
        b.frame = _run(q, engine, sql, {"__dl_t": b.frame}, span)  # type: ignore[dict-item]


def _run(q: Query, engine: RelationalEngine, sql: str, tables: dict, span: Span) -> pl.DataFrame:
    try:
        return engine.execute(sql, tables)
    except SQLEngineError as exc:
        raise q.error(f"cannot evaluate this condition: {exc}", span[0], span[1] - 1) from None


def _components(q: Query, bd: Binder, links: list, engine: RelationalEngine) -> list[pl.DataFrame]:
    """Per set of linked aliases, a frame of joined row ids: one column per alias."""
    parent = {a: a for a in bd.aliases}

    def find(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    for _, _, used in links:
        first, *rest = sorted(used)
        for a in rest:
            parent[find(a)] = find(first)
    comps: dict[str, list[str]] = {}
    for a in bd.aliases:
        comps.setdefault(find(a), []).append(a)
    out = []
    for members in comps.values():
        if len(members) == 1:
            out.append(bd.aliases[members[0]].frame.select(pl.col(ROW).alias(members[0])))
            continue
        conds = [(s, t) for s, t, u in links if u <= set(members)]
        tables = {f"__dl_t{k}": bd.aliases[a].frame for k, a in enumerate(members)}
        cols = ", ".join(f"{quote_ident(a)}.{ROW} AS {quote_ident(a)}" for a in members)
        src = ", ".join(f"__dl_t{k} AS {quote_ident(a)}" for k, a in enumerate(members))
        where = " AND ".join(f"({t})" for _, t in conds)
        out.append(_run(q, engine, f"SELECT {cols} FROM {src} WHERE {where}", tables, conds[0][0]))
    return out


def _groups(p: Grouping, comps: list[pl.DataFrame]) -> list[Group]:
    bd = p.binder
    parts_per_comp = []
    for comp in comps:
        names = []
        for alias, col in p.key_refs:
            if alias in comp.columns:
                name = f"{alias}.{col}"
                look = bd.aliases[alias].frame.select(ROW, pl.col(col).alias(name))  # type: ignore[union-attr]
                comp = comp.join(look, left_on=alias, right_on=ROW, how="left")
                names.append(name)
        if names:
            parts = comp.partition_by(names, maintain_order=True, as_dict=True)
            parts_per_comp.append([(dict(zip(names, k, strict=True)), f) for k, f in parts.items()])
        else:
            parts_per_comp.append([({}, comp)] if comp.height else [])
    groups = []
    for combo in itertools.product(*parts_per_comp):
        keys: dict[tuple[str, str], Any] = {}
        rows: dict[str, pl.DataFrame] = {}
        for kv, frame in combo:
            keys |= {tuple(k.split(".", 1)): v for k, v in kv.items()}  # type: ignore[misc]
            rows |= {a: frame for a in frame.columns if a in bd.aliases}
        groups.append(_group(p, keys, rows))
    return groups


def _rows(b: Bound, part: pl.DataFrame) -> pl.DataFrame:
    ids = part.select(pl.col(b.alias).alias(ROW)).unique()
    return b.frame.join(ids, on=ROW, how="semi").sort(ROW)  # type: ignore[union-attr]


def _group(p: Grouping, keys: dict, rows: dict[str, pl.DataFrame]) -> Group:
    scope, ub = p.scope, p.units
    units: dict[int, Any] = {}
    if ub.kind == "models":
        units = {int(m): None for m in _rows(ub, rows[ub.alias])["__dl_m"]}
    elif p.models is not None:
        pairs = rows[ub.alias].select(p.models.alias, ub.alias).unique()
        mframe = p.models.frame.select(ROW, "__dl_m")  # type: ignore[union-attr]
        pairs = pairs.join(mframe, left_on=p.models.alias, right_on=ROW)
        uid = _uid(ub)
        pairs = pairs.join(ub.frame.select(ROW, uid), left_on=ub.alias, right_on=ROW)  # type: ignore[union-attr]
        for (m,), f in pairs.partition_by("__dl_m", as_dict=True, maintain_order=True).items():
            units[int(m)] = np.sort(f[uid].to_numpy())
    else:
        u = _rows(ub, rows[ub.alias])
        for i, e in enumerate(scope.models):
            uids = u.filter(pl.col("mid") == e.mid)[_uid(ub)].to_numpy()
            if len(uids):
                units[i] = np.sort(uids)
    hyps = _triples(_rows(p.hyps, rows[p.hyps.alias]))
    d = _rows(p.inputs, rows[p.inputs.alias])
    recs = list(zip(d["__dl_d"].to_list(), d["rid"].to_list(), strict=True))
    return Group(keys, units, hyps, recs)


def _steps(p: Grouping) -> list[Step]:
    """Engine calls; groups share one when no measure is joint and their records agree."""
    joint = any(m.joint for m in p.measures)
    buckets: dict[Any, list[int]] = {}
    for gi, g in enumerate(p.groups):
        if not (g.units and g.hyps and g.records):
            continue  # nothing to inspect: the group contributes no rows
        buckets.setdefault(gi if joint else tuple(g.records), []).append(gi)
    steps = []
    for members in buckets.values():
        gs = [p.groups[i] for i in members]
        hyps = list(dict.fromkeys(h for g in gs for h in g.hyps))
        order = {h: k for k, h in enumerate(_triples(p.hyps.frame))}  # type: ignore[arg-type]
        hyps.sort(key=lambda h: order.get(h, len(order)))
        union: dict[int, Any] = {}
        for g in gs:
            for m, uids in g.units.items():
                prev = union.get(m, np.zeros(0, np.int64))
                union[m] = None if uids is None else np.union1d(prev, uids)
        by_spec: dict[str, tuple[list[int], Any]] = {}
        for m, uids in union.items():
            spec = None if uids is None else _unit_spec(p, m, uids)
            # a feature set's repr is not its identity: two sets may print alike
            key = repr(spec) + repr([id(a) for g in spec or [] for a, _ in g])
            by_spec.setdefault(key, ([], spec))[0].append(m)
        for ckpts, spec in by_spec.values():
            steps.append(Step(ckpts, spec, hyps, gs[0].records, members))
    return steps


def _triples(h: pl.DataFrame) -> list[tuple[int, str, str]]:
    """(hypothesis entry, signal, hid) of each row of a hypotheses frame."""
    return list(h.select("__dl_h", "__dl_sig", "hid").iter_rows())


def _uid(b: Bound) -> str:
    """The column that numbers a units relation's rows as score frames do."""
    return "fid" if b.kind == "features" else "uid"


def _unit_spec(p: Grouping, ckpt: int, uids: np.ndarray) -> list[Any]:
    """One multi-layer unit group: ``[[(layer, "*" | [indices]), ...]]`` in address order
    (for latents, ``[[(feature set, ...), ...]]`` in registration order)."""
    e = p.scope.models[ckpt]
    if p.units.kind == "features":
        f = p.units.frame.filter((pl.col("mid") == e.mid) & pl.col("fid").is_in(uids.tolist()))  # type: ignore[union-attr]
        return unit_spec(f, p.scope)
    u = p.units.frame.filter((pl.col("mid") == e.mid) & pl.col("uid").is_in(uids.tolist()))  # type: ignore[union-attr]
    widths = p.scope.widths[e.mid]
    pairs = []
    for addr in e.model.addresses:
        idx = sorted(u.filter(pl.col("layer") == addr)["unit"].to_list())
        if idx:
            pairs.append((addr, "*" if len(idx) == widths.get(addr) else idx))
    return [pairs]


def _records(scope: Scope, frame: pl.DataFrame) -> list[Any]:
    ids = frame.select("__dl_d", "rid").rows()
    return [scope.datasets[d].records[r] for d, r in ids]
