"""The merged probe's rows: what a probe state keeps of every symbol read, and the keys
that place a row in a fold and a jackknife group.

A record's fold and group follow from its content (:func:`record_codes`,
:func:`record_groups`), never from the order it was read in, so the full-data fit does
not depend on the order records arrive in, nor on how shards were merged. ``logreg``
and ``lda`` share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ._newton import Problem
from ._probe_error import Checkpoint
from .base import HypothesisInfo


@dataclass
class LogRegState:
    X: torch.Tensor  # (n, units) raw behaviors of the kept rows
    Y: torch.Tensor  # (n, outputs) 0/1 targets
    fold: torch.Tensor  # (n,) fold of each row's record
    key: torch.Tensor  # (n,) random keys (the bottom-k sample when max_rows is set)
    W: torch.Tensor  # (units + 1, folds * outputs), on standardized units
    out_hyp: np.ndarray  # (outputs,) hypothesis of each output
    scorable: np.ndarray  # (hyps,) binary or categorical
    info: list[HypothesisInfo] = field(default_factory=list)
    n_records: int = 0
    checks: list[Checkpoint] = field(default_factory=list)
    gen: torch.Generator | None = None
    damping: torch.Tensor | None = None  # per-column Newton damping, carried across blocks
    code: torch.Tensor | None = None  # (n,) content code of each row's record
    rec: torch.Tensor | None = None  # (n,) serial of each row's record in reading order
    growth: float | None = None  # records read before the next checkpoint, as a factor
    defined: torch.Tensor | None = None  # (n, outputs) bool; None while every value is
    n_undef: torch.Tensor | None = None  # (H,) real symbols where h is undefined
    n_seen: int = 0  # symbols read, kept in the sample or not
    retired: np.ndarray | None = None  # (H,) bool: every pair converged, no more refits




def append_rows(state: LogRegState, X, Y, fold, key, code, rec, max_rows: int | None,
            defined: torch.Tensor | None = None) -> None:  # fmt: skip
    state.X = torch.cat([state.X, X])
    state.Y = torch.cat([state.Y, Y])
    state.fold = torch.cat([state.fold, fold.to(state.fold.dtype)])
    state.key = torch.cat([state.key, key.to(state.key.device)])
    state.code = torch.cat([state.code, code.to(state.fold.dtype)])
    state.rec = torch.cat([state.rec, rec.to(state.fold.dtype)])
    if defined is not None:
        state.defined = torch.cat([state.defined, defined.to(state.defined.device)])
    if max_rows is not None and len(state.X) > max_rows:  # bottom-k of random keys: uniform
        keep = torch.topk(state.key, max_rows, largest=False).indices.sort().values
        state.X, state.Y = state.X[keep], state.Y[keep]
        state.fold, state.key = state.fold[keep], state.key[keep]
        state.code, state.rec = state.code[keep], state.rec[keep]
        if state.defined is not None:
            state.defined = state.defined[keep]


def record_codes(H: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(R,)`` non-negative int64 code of each record, from its hypothesis values.

    Integer arithmetic (values in thousandths times fixed odd multipliers, wrapping
    modulo 2**64) is exact whatever the padding or the block, so a record gets the same
    code in any block, order or shard; equal records share a fold, as they should.
    """
    T, n_h = H.shape[1:]
    # an undefined value (NaN) codes as a fixed number, so its record's code stays exact
    H = torch.nan_to_num(H.double(), nan=-0.5)
    q = torch.where(mask[..., None], (H * 1000).round(), 0.0).to(torch.int64)
    gen = torch.Generator(device="cpu").manual_seed(0x5EED)
    mult = torch.randint(1, 2**31, (T, n_h), generator=gen, dtype=torch.int64) * 2 + 1
    pos = (q * mult.to(H.device)).sum((1, 2)) + mask.sum(1) * 0x1E3779B97F4A7C15
    pos = pos ^ (pos >> 29)  # mix the high bits into the low ones the folds read
    pos = pos * 0x3F58476D1CE4E5B9
    return (pos ^ (pos >> 32)) & 0x7FFFFFFF


def class_records(state: LogRegState) -> np.ndarray:
    """``(outputs,)`` records in which each output's rarer class occurs (where defined)."""
    recs, inv = torch.unique(state.rec, return_inverse=True)
    d = torch.ones_like(state.Y) if state.defined is None else state.defined.to(state.Y.dtype)
    seen = []
    for v in (state.Y * d, (1 - state.Y) * d):
        per = torch.zeros(len(recs), state.Y.shape[1], dtype=v.dtype, device=v.device)
        seen.append(per.scatter_reduce_(0, inv[:, None].expand_as(v), v, "amax").sum(0))
    return torch.minimum(*seen).cpu().numpy()


def per_hyp_all(flags: np.ndarray, state: LogRegState, n_h: int) -> np.ndarray:
    """Per hypothesis: every one of its outputs has ``flags`` set (True without outputs)."""
    out = np.ones(n_h, dtype=bool)
    for j in np.unique(state.out_hyp):
        out[j] = bool(flags[state.out_hyp == j].all())
    return out


def record_groups(code: torch.Tensor, rec: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``(n,)`` jackknife group of each row: its record's, from the record's content and
    how many records of the same content were read before it.

    The sampling unit is the record: two copies of one record are two draws (a SQL
    workload repeats one query window 1,776 times in 10,000 records). Grouped by content
    alone, all copies fell in one group, which then held a third of a hypothesis's
    positives, and the F1's jackknife error stayed near 0.3 at every size while the F1
    moved by 0.005 from half the records to all. Copies are identical, so which copy
    gets which group does not matter: the groups' contents do not depend on the reading
    order, nor on how shards were merged (``rec`` numbers records as one process reads).
    """
    if len(code) == 0:
        return code.clone()
    recs, inv = torch.unique(rec, return_inverse=True)  # records in reading order
    rcode = torch.zeros(len(recs), dtype=code.dtype, device=code.device).scatter_(0, inv, code)
    order = torch.argsort(rcode, stable=True)  # stable: reading order within a content
    _, counts = torch.unique_consecutive(rcode[order], return_counts=True)
    first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    occ = torch.empty_like(rcode)
    occ[order] = torch.arange(len(rcode), device=code.device) - first
    return group_hash(rcode, occ, n_groups)[inv]


def group_hash(rcode: torch.Tensor, occ: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Jackknife group of records of content codes ``rcode`` that are the ``occ``-th copy
    of their content read (int64; :func:`record_groups` for rows, ``lda`` per block)."""
    x = rcode * 0x2545F4914F6CDD1D + occ * 0x1E3779B97F4A7C15 + 0x632BE59BD9B4E019
    x = (x ^ (x >> 31)) * 0x3F58476D1CE4E5B9
    return ((x ^ (x >> 29)) & 0x7FFFFFFF) % n_groups


def class_index(out_hyp: np.ndarray) -> np.ndarray:
    """Class code of each output: 0, 1, 2, ... within a categorical hypothesis."""
    idx = np.zeros(len(out_hyp), dtype=np.float32)
    for j in np.unique(out_hyp):
        sel = np.flatnonzero(out_hyp == j)
        idx[sel] = np.arange(len(sel))
    return idx


def is_categorical(out_hyp: np.ndarray) -> np.ndarray:
    counts = np.bincount(out_hyp) if len(out_hyp) else np.zeros(0, dtype=int)
    return counts[out_hyp] > 1


def design(state: LogRegState) -> torch.Tensor:
    """Standardized units plus an intercept column (never penalized)."""
    X = state.X
    mu = X.mean(0)
    sd = X.std(0, unbiased=False)
    Xs = (X - mu) / torch.where(sd > 1e-8, sd, torch.ones_like(sd))
    return torch.cat([torch.ones(len(X), 1, device=X.device), Xs], dim=1)


def fold_problem(state: LogRegState, Xs: torch.Tensor, folds: int, C: float) -> Problem:
    """The merged probe's problem: one column per (fold, output), fold-major.

    Column ``(f, o)`` trains on the rows of the other folds where output ``o`` is
    defined, each row weighing ``1 / rows``, with the L1 strength ``1 / (C * rows)``
    (scikit-learn's ``C`` on the summed loss).
    """
    k, n_out = folds, len(state.out_hyp)
    train = (state.fold[:, None] != torch.arange(k, device=Xs.device)[None, :]).float()
    if state.defined is None:
        n_f = train.sum(0).clamp_min(1)  # rows each fold trains on
        w_row = (train / n_f).T.repeat_interleave(n_out, dim=0)
        lam = (1.0 / (C * n_f)).repeat_interleave(n_out)
    else:  # column (fold, output) trains on its fold's rows where the output is defined
        w = train[:, :, None] * state.defined[:, None, :].float()  # (n, k, outputs)
        n_fo = w.sum(0).clamp_min(1)  # (k, outputs)
        w_row = (w / n_fo).permute(1, 2, 0).reshape(k * n_out, -1)
        lam = (1.0 / (C * n_fo)).reshape(-1)
    return Problem(
        X=Xs,
        Y=state.Y.T.repeat(k, 1),
        w_row=w_row,
        lam=lam,
        col_out=torch.arange(n_out, device=Xs.device).repeat(k),
        col_fold=torch.arange(k, device=Xs.device).repeat_interleave(n_out),
        row_fold=state.fold,
        outputs=n_out,
    )
