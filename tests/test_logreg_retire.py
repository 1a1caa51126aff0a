"""A probe's retired hypotheses: refits skip them, and nothing else moves.

Once every pair of a hypothesis converged the engine keeps those scores and reads the
hypothesis from the probe no more (``Measure.retire``); the probe then refits only the
open hypotheses. Their fits are independent columns, so their scores must match a probe
that refits everything, within the solver's tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records
from test_logreg_coverage import N_UNITS, _padded, planted

import dni_lab as dl
from dni_lab.backend.measures import _column_pool
from dni_lab.backend.measures._newton import newton
from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.logreg import LogReg


def _fits(monkeypatch, retire_at: int | None, blocks: int = 4, n: int = 800):
    """A probe over ``blocks`` blocks, a checkpoint at each; "strong" retired before
    block ``retire_at``. Returns the state, its peek and each fit's column count."""
    wl = planted(seed=4)
    U, H, mask = _padded(wl, n)
    m = LogReg(checkpoint_growth=1.0)
    s = m.start(N_UNITS, 3, info=[HypothesisInfo(h, "binary") for h in wl.signals])
    widths: list[int] = []
    real = newton

    def counting(p, W0, *a, **k):
        widths.append(W0.shape[1])
        return real(p, W0, *a, **k)

    monkeypatch.setattr(_column_pool, "newton", counting)
    step = n // blocks
    for b in range(blocks):
        if b == retire_at:
            converged = np.zeros((N_UNITS, 3), dtype=bool)
            converged[:, 0] = True
            m.retire(s, converged)
        s = m.update(s, U[b * step : (b + 1) * step], H[b * step : (b + 1) * step],
                     mask[b * step : (b + 1) * step])  # fmt: skip
    return s, m.peek(s), widths


def test_retired_hypotheses_leave_the_refits_and_the_others_do_not_move(monkeypatch):
    _, whole, w_whole = _fits(monkeypatch, None)
    part, res, w_part = _fits(monkeypatch, 2)
    k = 5
    assert w_whole == [3 * k] * 4  # every checkpoint fits all three outputs' folds
    assert w_part == [3 * k] * 2 + [2 * k] * 2, w_part
    # the open hypotheses: the same fits, up to the solver's tolerance
    assert np.abs(res.group_score[0, 1:] - whole.group_score[0, 1:]).max() < 5e-3
    live = np.isfinite(whole.unit_score[:, 1:])
    assert live.sum() >= N_UNITS
    gap = np.abs(res.unit_score[:, 1:] - whole.unit_score[:, 1:])[live]
    assert gap.max() < 5e-3, gap.max()
    # the retired one keeps its last real checkpoint's scores (the engine shows its own)
    assert [c.n_records for c in part.checks] == [200, 400, 600, 800]
    assert part.checks[-1].f1[0] == part.checks[1].f1[0]
    assert np.array_equal(part.checks[-1].coef[:, 0], part.checks[1].coef[:, 0], equal_nan=True)
    assert part.checks[-1].f1[1] != part.checks[1].f1[1]  # the open ones were refitted


@pytest.mark.parametrize("probe", ["logreg", "lda"])
def test_an_inspection_with_retirement_keeps_every_converged_score(probe):
    """Through the engine: pairs converge, their hypotheses retire, reading goes on for
    the others; each row converged in both equals the run without retirement."""
    from dni_lab.backend.measures.lda import LDA

    base = LogReg if probe == "logreg" else LDA

    @dl.hypothesis
    def vowel(r):
        return [c in "aeiou" for c in r]

    torch.manual_seed(0)
    lm = dl.Model(CharLM(), encode=encode_chars, name="lm")
    recs = random_records(1500, seed=3)
    kw = dict(units=[("lstm", "*")], eps=0.1, block_size=150, cache=False)
    calls: list[np.ndarray] = []

    class Watched(base):
        def retire(self, state, converged):
            calls.append(converged.all(0))
            super().retire(state, converged)

    class NoRetire(base):
        def retire(self, state, converged):
            pass

    a = dl.inspect(lm, [paren, vowel], [Watched()], recs, **kw).sort(["hid", "unit"])
    b = dl.inspect(lm, [paren, vowel], [NoRetire()], recs, **kw).sort(["hid", "unit"])
    assert calls and any(c.any() for c in calls), "no hypothesis retired: nothing tested"
    both = (a["converged"] & b["converged"]).to_numpy()
    assert both.sum() >= 16
    for col in ("unit_score", "group_score"):
        diff = np.abs(a[col].to_numpy() - b[col].to_numpy())[both]
        assert np.nanmax(diff) < 5e-3, (col, np.nanmax(diff))


def test_lda_retires_too_and_its_open_hypotheses_are_exactly_the_same():
    """The closed-form probe's checkpoints skip retired hypotheses; its fits are per
    output from shared moments, so the open ones' scores equal a full checkpoint's."""
    from dni_lab.backend.measures.lda import LDA

    wl = planted(seed=4)
    U, H, mask = _padded(wl, 800)
    info = [HypothesisInfo(h, "binary") for h in wl.signals]
    runs = []
    for retire in (False, True):
        m = LDA(checkpoint_growth=1.0)
        s = m.start(N_UNITS, 3, info=info)
        s.stopping = True  # checkpoints at every block, as after a first convergence check
        for b in range(4):
            if retire and b == 2:
                converged = np.zeros((N_UNITS, 3), dtype=bool)
                converged[:, 2] = True  # "weak" settled
                m.retire(s, converged)
            sl = slice(b * 200, (b + 1) * 200)
            s = m.update(s, U[sl], H[sl], mask[sl])
        runs.append((s, m.peek(s)))
    (full, a), (part, b) = runs
    assert [c.n_records for c in part.checks] == [200, 400, 600, 800]
    np.testing.assert_allclose(b.group_score[:, :2], a.group_score[:, :2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.unit_score[:, :2], a.unit_score[:, :2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.err[:, :2], a.err[:, :2], rtol=0, atol=1e-12)
    assert part.checks[-1].f1[2] == part.checks[1].f1[2] != full.checks[-1].f1[2]
