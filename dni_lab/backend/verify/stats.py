"""Significance of ``corr`` scores: permutation p-values and Benjamini–Hochberg q-values.

The null hypothesis of a (unit, hypothesis) pair is that the unit's activity
does not depend on which record's hypothesis signal it is paired with. The
permutation test shuffles hypothesis signals *across records* and recomputes
the correlation; symbols inside a record stay together, so the within-record
dependence that makes symbol-level tests too optimistic (see ``corr``'s error
estimate) is kept in the null. A signal must align with its record's symbols,
so records are shuffled among records of the same length only; a record whose
length no other record shares stays paired with its own signal, which only
makes the test conservative.

Every permutation is an extra block of hypothesis columns for the ``corr``
measure, so the null distribution costs one matrix product per chunk of
permutations and uses the very same arithmetic as the observed scores.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from ..engine.frames import score_rows
from ..engine.levels import decided_for_model
from ..engine.params import check_workers
from ..engine.qvalues import bh_qvalues, with_qvalues  # noqa: F401  (dl.verify's names)
from ..engine.resolve import as_families, normalize_units, resolve_units
from ..errors import DNIError
from ..extraction.extract import Extractor, on_device, resolve_device, symbol_mask
from ..extraction.models import Model
from ..hypothesis.hypotheses import hypothesis_block
from ..measures.corr import Corr
from .common import batches

#: Bytes of one chunk of permuted hypothesis columns.
_CHUNK_BYTES = 64 * 2**20


def _record_key(record: Any) -> Any:
    """A hashable identity of a record's content (strings, token sequences, arrays)."""
    if isinstance(record, (str, bytes)):
        return record
    if hasattr(record, "shape") and hasattr(record, "tobytes"):
        return (tuple(record.shape), str(record.dtype), record.tobytes())
    return repr(record)


def _blocks(model, mp, fams, records, dev, batch_size, min_records: int = 256) -> list[tuple]:
    """Unit and hypothesis behaviors of all records, in blocks of records of similar length.

    Records are sorted by length and cut into blocks at length boundaries, so a
    block holds whole strata (records of one length: the sets a permutation may
    shuffle) and pads little. Each block is ``(U, H, mask, strata)`` with
    ``strata`` the ``(start, stop)`` rows of each length.
    """
    ex = Extractor(model, mp.layer_units, "activation", dev, mp.features)
    rows: list[tuple[int, torch.Tensor, torch.Tensor]] = []
    for first, recs in batches(records, batch_size):
        n_sym = [model.symbols(r) for r in recs]
        parts = ex(recs, symbol_mask(model, recs, dev))
        U = torch.cat([parts[a] for a in mp.layer_units], dim=2)
        H = torch.from_numpy(hypothesis_block(fams, recs, n_sym, first, None)).to(dev)
        rows += [(n, U[r, :n], H[r, :n]) for r, n in enumerate(n_sym)]
    rows.sort(key=lambda row: row[0])
    out, start = [], 0
    while start < len(rows):
        stop = start + 1
        while stop < len(rows) and (
            stop - start < min_records or rows[stop][0] == rows[stop - 1][0]
        ):
            stop += 1
        chunk = rows[start:stop]
        U = torch.nn.utils.rnn.pad_sequence([u for _, u, _ in chunk], batch_first=True)
        H = torch.nn.utils.rnn.pad_sequence([h for _, _, h in chunk], batch_first=True)
        n = torch.as_tensor([k for k, _, _ in chunk], device=dev)
        mask = torch.arange(U.shape[1], device=dev)[None, :] < n[:, None]
        edges = np.flatnonzero(np.diff(n.cpu().numpy())) + 1
        strata = list(zip([0, *edges.tolist()], [*edges.tolist(), len(chunk)], strict=True))
        out.append((U, H, mask, strata))
        start = stop
    return out


def _permutations(strata: list[tuple[int, int]], P: int, gen: torch.Generator) -> torch.Tensor:
    """``(P, rows)`` row permutations, each shuffling rows only within their stratum."""
    perms = []
    for a, b in strata:
        perms.append(torch.argsort(torch.rand(P, b - a, generator=gen), dim=1) + a)
    return torch.cat(perms, dim=1)


_STATS = {"two-sided": torch.abs, "greater": lambda r: r, "less": lambda r: -r}


def null_hits(
    blocks: list[tuple], sizes: list[int], first: int, stop: int, alternative: str,
    target: torch.Tensor, info: list[Any], seed: int, dev: torch.device,
) -> torch.Tensor:  # fmt: skip
    """Permutations at least as extreme as the observed score, over chunks ``first:stop``.

    Chunk ``k`` holds ``sizes[k]`` permutations, drawn from one generator seeded with
    ``seed`` after chunks ``0..k-1`` drew theirs (their draws are replayed, not
    scored), so counts of any split of the chunks add up to the unsplit count: the
    permutation test sharded over a cluster gives the same p-values.
    """
    corr, stat = Corr(), _STATS[alternative]
    nu, nh = target.shape
    hits = torch.zeros(nu, nh, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    for k, P in enumerate(sizes[:stop]):
        if k < first:
            for *_, strata in blocks:
                for a, b in strata:
                    torch.rand(P, b - a, generator=gen)  # the draws _permutations makes
            continue
        st = corr.start(nu, nh * P, dev, info * P)
        for U, H, mask, strata in blocks:
            perm = _permutations(strata, P, gen).to(dev)
            # Rows swap only within a length, so the mask of the permuted block is unchanged.
            Hp = H[perm].permute(1, 2, 0, 3).reshape(*H.shape[:2], P * nh)  # (R, T, P·nh)
            st = corr.update(st, U, Hp, mask)
        r = torch.as_tensor(corr.result(st).unit_score, dtype=torch.float64).reshape(nu, P, nh)
        hits += (torch.nan_to_num(stat(r), nan=-np.inf) >= target[:, None, :]).sum(1)
    return hits


def permutation_test(
    model: Model,
    hypotheses: Any,
    records: Sequence[Any],
    units: Any = None,
    n_permutations: int = 999,
    alternative: str = "two-sided",
    fdr_by: str | Sequence[str] | None = None,
    unique: bool = True,
    seed: int = 0,
    device: str | torch.device = "auto",
    batch_size: int = 512,
    cluster: str | int | bool | None = None,
    workers: int | None = None,
) -> pl.DataFrame:
    """``corr`` score frame of ``model`` with permutation ``p_value`` and BH ``q_value`` columns.

    Parameters
    ----------
    model, hypotheses, records, units
        As in :func:`dl.inspect` (one model; every record is read).
    n_permutations : int
        Shuffles of hypothesis signals across same-length records. p-values are
        ``(1 + #{null at least as extreme}) / (n_permutations + 1)``.
    alternative : {"two-sided", "greater", "less"}
        Extreme means large ``|r|``, large ``r`` or small ``r``.
    fdr_by : str or list of str, optional
        Frame columns whose groups get their own BH correction (default: all rows
        form one family of tests).
    unique : bool
        Read each distinct record once. A hypothesis is a function of its record,
        so copies of a record carry the same signal *and* the same activations:
        kept, they count one observation several times and the null, which moves
        copies apart, becomes too narrow (p-values too small).
    seed : int
        Seeds the permutations.
    cluster, workers
        As in :func:`dl.inspect`: score chunks of permutations as Ray tasks (the
        behaviors are computed here once); the p-values are this process's.

    Returns
    -------
    polars.DataFrame
        The score-frame schema plus ``p_value`` and ``q_value`` (null where the
        score is null).
    """
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(
            f"alternative must be 'two-sided', 'greater' or 'less', not {alternative!r}"
        )
    check_workers(cluster, workers)
    dev = resolve_device(device)
    if unique:
        first: dict[Any, Any] = {}
        for r in records:
            first.setdefault(_record_key(r), r)
        records = list(first.values())
    fams, info = as_families(hypotheses)
    hids = [i.name for i in info]
    corr = Corr()
    with on_device(model, dev):
        mp = resolve_units(model, normalize_units(units), list(records[:2]), dev)
        # a transformer reads tokens: character and word hypotheses are aligned to them
        # each level decided once from the records whose counts differ, as a run does
        read = decided_for_model(model, fams, records)
        blocks = _blocks(model, mp, read, records, dev, batch_size)
    movable = sum(b - a for *_, strata in blocks for a, b in strata if b - a > 1)
    if movable == 0:  # every permutation is the identity: every p-value would be 1
        raise DNIError(
            f"none of the {len(records)} records shares its symbol count with another, so "
            "no permutation can move a hypothesis signal and every p-value would be 1. "
            "Pass more records, or records of equal lengths (fixed-length windows)."
        )
    if movable < 0.5 * len(records):
        warnings.warn(
            f"only {movable} of {len(records)} records share their length with another record; "
            "the permutation test is conservative for the rest.",
            stacklevel=2,
        )
    nu, nh = mp.n_units, len(hids)
    state = corr.start(nu, nh, dev, info)
    for U, H, mask, _ in blocks:
        state = corr.update(state, U, H, mask)
    obs = corr.result(state)
    r_obs = torch.as_tensor(obs.unit_score, dtype=torch.float64)
    # A permuted r equal to the observed one up to rounding counts as at least as extreme.
    target = _STATS[alternative](r_obs) - 1e-9
    n_sym = sum(U.shape[0] * U.shape[1] for U, *_ in blocks)
    chunk = max(1, min(n_permutations, _CHUNK_BYTES // max(1, 4 * n_sym * nh)))
    sizes = [min(chunk, n_permutations - d) for d in range(0, n_permutations, chunk)]
    if cluster is not None and cluster is not False:
        from ..cluster.tasks import sharded_null_hits

        hits = sharded_null_hits(
            null_hits, blocks, sizes, alternative, target, info, seed, device, cluster, workers
        )
    else:
        hits = null_hits(blocks, sizes, 0, len(sizes), alternative, target, info, seed, dev)
    p = ((1 + hits) / (n_permutations + 1)).numpy()
    p[~np.isfinite(obs.unit_score)] = np.nan
    frame = score_rows(mp.labels(), hids, corr.name, obs, len(records), converged=True)
    frame = frame.with_columns(pl.Series("p_value", p.reshape(-1)).fill_nan(None))
    return with_qvalues(frame, "p_value", fdr_by)
