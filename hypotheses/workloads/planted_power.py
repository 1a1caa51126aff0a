"""Power of the perturbation check on planted units (DeepBase §4.4, §6.1).

:func:`dl.verify.perturbation` gives one empirical p-value: the planted set's
silhouette (baseline vs treatment activation changes) ranked among ``n_random``
random sets' silhouettes, so ``p >= 1 / (n_random + 1)`` and p ≤ 0.05 needs
``n_random >= 19``. Its *power* is how often it reaches p ≤ 0.05 on a model
whose S did learn the hypothesis, as a function of ``n_random`` and of the
number of baseline/treatment pairs (swaps) it draws.

Computing that by calling ``perturbation`` once per (pairs, random sets, repeat)
would run the model thousands of times. Instead one call per model, with *every*
unit of the layer as the set under test, returns every unit's activation change
for a pool of pairs (the swaps it draws do not depend on the units). Each repeat
then subsamples pairs and random sets from that pool and computes all the sets'
silhouettes at once: the same numbers ``perturbation`` would give for that
sample (checked in ``tests/test_planted.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

import dni_lab as dl
from dni_lab.backend.verify.common import empirical_p
from hypotheses.grammars import parens as grammar

from .planted import Planted, paren

#: DeepBase §6.1's swaps at a parenthesis: the other parenthesis (baseline, "is a
#: parenthesis" stays true) or a digit (treatment). The paper names '(' -> digit as the
#: treatment; ')' -> digit is its mirror image, so that both parentheses are used.
PAPER_SWAPS = {
    "(": {"baseline": ")", "treatment": "01234"},
    ")": {"baseline": "(", "treatment": "01234"},
}


def swap_rules(kind: str = "paper") -> dl.verify.SwapRules | dict:
    """The swaps of the check.

    Parameters
    ----------
    kind : {"paper", "grammar"}
        ``"paper"``: :data:`PAPER_SWAPS`, at parentheses only. ``"grammar"``: any
        terminal of the grammar for any other at every position (digits too), the
        hypothesis labelling each swap (the library's rule for grammar records).
    """
    if kind == "paper":
        return PAPER_SWAPS
    if kind == "grammar":
        return dl.verify.grammar_terminals(grammar.grammar(4))
    raise ValueError(f"unknown swap rules {kind!r}; choose 'paper' or 'grammar'")


def swap_pool(
    p: Planted, records: Sequence[str], max_pairs: int, seed: int = 0, rules: str = "paper"
) -> np.ndarray:
    """Every unit's activation change for up to ``max_pairs`` pairs: ``(pairs, 2, width)``.

    ``[:, 0]`` is the baseline swap, ``[:, 1]`` the treatment swap of the same
    (record, position); one position per record, as ``perturbation`` draws them
    under :func:`swap_rules` ``(rules)``.
    """
    v = dl.verify.perturbation(
        p.model, records, "lstm", list(range(p.width)), paren, swap_rules(rules),
        max_pairs=max_pairs, n_random=0, seed=seed, device="cpu",
    )  # fmt: skip
    frame = v.frame.with_row_index("row")
    pairs = frame.pivot(
        "kind", index=["record", "position"], values="row", aggregate_function="first"
    )
    delta = np.asarray(v.frame["delta"].to_list())
    return np.stack([delta[pairs["baseline"].to_numpy()], delta[pairs["treatment"].to_numpy()]], 1)


def set_silhouettes(X: np.ndarray, labels: np.ndarray, sets: np.ndarray) -> np.ndarray:
    """Silhouette of two-cluster ``labels`` for each unit set (rows of ``sets``) at once.

    Equal to :func:`dl.verify.silhouette_score` on ``X[:, set]`` for every set;
    batched, because the power study needs 10^5 of them.
    """
    lab = torch.as_tensor(np.asarray(labels, dtype=bool))
    if lab.all() or not lab.any():
        raise ValueError("set_silhouettes needs both labels (baseline and treatment rows)")
    X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    sets = torch.as_tensor(np.asarray(sets, dtype=np.int64))
    onehot = torch.stack([~lab, lab], 1).double()  # (n, 2)
    sizes = onehot.sum(0)
    n_own = sizes[lab.long()]
    chunk = max(1, 4_000_000 // len(X) ** 2)  # keep each (sets, n, n) distance block small
    out = []
    for s in range(0, len(sets), chunk):
        Xs = X[:, sets[s : s + chunk]].permute(1, 0, 2)  # (k, n, |set|)
        sums = torch.cdist(Xs, Xs) @ onehot  # (k, n, 2): summed distance to each cluster
        own = sums.gather(2, lab.long()[None, :, None].expand(len(Xs), -1, 1))[..., 0]
        other = sums.gather(2, (~lab).long()[None, :, None].expand(len(Xs), -1, 1))[..., 0]
        a = own / (n_own - 1).clamp_min(1)
        b = other / sizes[(~lab).long()]
        top = torch.maximum(a, b)
        sil = torch.where((n_own > 1) & (top > 0), (b - a) / top.clamp_min(1e-300), 0.0)
        out.append(sil.mean(1))
    return torch.cat(out).numpy()


def power_samples(
    pool: np.ndarray, planted: Sequence[int], n_random: Sequence[int], n_pairs: Sequence[int],
    repeats: int, seed: int = 0,
) -> pl.DataFrame:  # fmt: skip
    """The check's p-value for each repeat, number of random sets and number of pairs.

    Each repeat draws ``max(n_random)`` random sets of ``len(planted)`` units outside
    ``planted`` (the check's default) and a random order of the pool's pairs; a
    design uses the first ``n`` of each (nested samples, so curves are monotone in
    the data they see, not in noise).

    Returns
    -------
    polars.DataFrame
        One row per (repeat, n_random, n_pairs): ``silhouette`` of the planted set,
        ``random_mean`` and ``p_value``.
    """
    if max(n_pairs) > len(pool):
        raise ValueError(
            f"n_pairs up to {max(n_pairs)} but the swap pool holds {len(pool)} pairs; "
            "draw a larger pool (more records, or max_pairs) or lower n_pairs."
        )
    rng = np.random.default_rng(seed)
    S = np.asarray(sorted(planted))
    rows = []
    for rep in range(repeats):
        rand = dl.verify.random_unit_sets(pool.shape[2], len(S), max(n_random), S, rng)
        sets = np.stack([S, *rand])
        order = rng.permutation(len(pool))
        for m in n_pairs:
            pairs = pool[order[:m]]  # (m, 2, width)
            X = pairs.reshape(2 * m, -1)
            sil = set_silhouettes(X, np.tile([False, True], m), sets)
            for n in n_random:
                rows.append(
                    {"repeat": rep, "n_random": n, "n_pairs": m, "silhouette": sil[0],
                     "random_mean": float(sil[1 : n + 1].mean()),
                     "p_value": empirical_p(sil[0], sil[1 : n + 1])}
                )  # fmt: skip
    return pl.DataFrame(rows)


def power(samples: pl.DataFrame, by: Sequence[str] = (), alpha: float = 0.05) -> pl.DataFrame:
    """Fraction of samples with ``p_value <= alpha``, per design (and per ``by`` columns)."""
    keys = [*by, "n_random", "n_pairs"]
    return (
        samples.group_by(keys)
        .agg(power=(pl.col("p_value") <= alpha).mean(), samples=pl.len())
        .sort(keys)
    )


def smallest_designs(
    table: pl.DataFrame, by: Sequence[str] = (), target: float = 0.8
) -> pl.DataFrame:
    """Per number of random sets: the fewest pairs whose power reaches ``target`` (null: never)."""
    keys = [*by, "n_random"]
    reached = pl.col("n_pairs").filter(pl.col("power") >= target)
    return (
        table.group_by(keys)
        .agg(pairs_needed=reached.min(), best_power=pl.col("power").max())
        .sort(keys)
    )
