"""lda's per-block bookkeeping equals what a checkpoint would compute from the rows:
record groups, the groups' moments, the class counts, the grown row buffers (also
after a merge and through pickle), and the confusion counts without predictions."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from measure_blocks import fold, padded_block

from dni_lab.backend.measures import _lda_fit as lf
from dni_lab.backend.measures._probe_error import confusion_by_group
from dni_lab.backend.measures._probe_rows import class_records, record_groups
from dni_lab.backend.measures.base import HypothesisInfo
from dni_lab.backend.measures.lda import LDA

NU, NH, T = 6, 3, 10
INFO = [HypothesisInfo(f"h{j}", "binary") for j in range(NH)]


def blocks(seed: int, n_blocks: int = 4, R: int = 40, nan: bool = False):
    """Blocks that repeat records (copies of one content must get different groups),
    with empty records, garbage padding and, if ``nan``, undefined values."""
    rng = np.random.default_rng(seed)
    pool_U = rng.normal(0, 1, (8, T, NU))
    pool_H = (pool_U[..., :NH] + rng.normal(0, 1, (8, T, NH)) > 0.3).astype(float)
    out = []
    for _ in range(n_blocks):
        mask = np.arange(T)[None, :] < rng.integers(0, T + 1, R)[:, None]
        U = rng.normal(0, 1, (R, T, NU))
        H = (U[..., :NH] + rng.normal(0, 1, (R, T, NH)) > 0.3).astype(float)
        copies = rng.random(R) < 0.3  # a third of the records are copies from a pool
        pick = rng.integers(0, 8, R)
        U[copies], H[copies] = pool_U[pick[copies]], pool_H[pick[copies]]
        mask[copies] = True
        if nan:
            H[rng.random(H.shape) < 0.05] = np.nan
        out.append(padded_block(U, H, mask, u_pad=np.nan, h_pad=1e9))
    return out


def check_bookkeeping(s) -> None:
    G = int(s.by_group.n.shape[0])
    np.testing.assert_array_equal(s.grp.numpy(), record_groups(s.code, s.rec, G).numpy())
    Yf = s.Y.float()
    whole = lf.row_grams(s.X, Yf, s.grp, G)
    for name in ("n", "mean_u", "mean_y", "cuu", "cuy"):  # float32 products, block by block
        np.testing.assert_allclose(getattr(s.by_group, name), getattr(whole, name),
                                   rtol=1e-5, atol=1e-4)  # fmt: skip
    rows = type("Rows", (), {"Y": Yf, "rec": s.rec, "defined": s.defined})()
    np.testing.assert_array_equal(s.seen.min(0).values.numpy(), class_records(rows))


def stopping(m: LDA, bl: list):
    """A state that checkpoints at every block (as after a first convergence check)."""
    s = m.start(NU, NH, info=INFO)
    s.stopping = True
    return fold(m, bl, NU, NH, INFO, state=s)


@pytest.mark.parametrize("nan", [False, True])
def test_groups_moments_and_class_counts_match_the_rows(nan):
    m = LDA(groups=7, checkpoint_growth=1.0)
    bl = blocks(0, nan=nan)
    # the groups' moments come from the folds' products, block by block, from the start
    check_bookkeeping(fold(m, bl, NU, NH, INFO))
    check_bookkeeping(stopping(m, bl))
    merged = m.merge(stopping(m, bl[:2]), stopping(m, bl[2:]))
    check_bookkeeping(merged)
    whole = stopping(m, bl)
    np.testing.assert_array_equal(merged.X.numpy(), whole.X.numpy())
    np.testing.assert_array_equal(merged.grp.numpy(), whole.grp.numpy())
    whole.stopping = merged.stopping = False  # the sampling error alone: no drift term
    a, b = m.result(whole), m.result(merged)
    np.testing.assert_array_equal(a.group_score, b.group_score)
    np.testing.assert_allclose(a.err, b.err, atol=1e-6)  # float32 moments, other blocks


def test_row_buffers_grow_in_place_and_states_never_share_one():
    m = LDA()
    bl = blocks(1, n_blocks=6)
    a = fold(m, bl[:3], NU, NH, INFO)
    kept = a.X.clone()
    b = fold(m, bl[3:4], NU, NH, INFO)
    out = m.merge(a, b)
    out = fold(m, bl[4:], NU, NH, INFO, state=out)  # appends after a merge
    np.testing.assert_array_equal(a.X.numpy(), kept.numpy())
    a = fold(m, bl[3:4], NU, NH, INFO, state=a)  # a appends too: out must not see it
    whole = fold(m, bl, NU, NH, INFO)
    np.testing.assert_array_equal(out.X.numpy(), whole.X.numpy())
    np.testing.assert_array_equal(out.Y.numpy(), whole.Y.numpy())
    assert out.store["X"].shape[0] >= len(out.X)  # spare capacity, not a copy per block
    back = pickle.loads(pickle.dumps(out))
    assert back.store == {} and back.X.untyped_storage().nbytes() == back.X.nbytes
    np.testing.assert_array_equal(m.result(back).group_score, m.result(out).group_score)
    more = fold(m, bl[:1], NU, NH, INFO, state=back)  # an unpickled state appends
    assert len(more.X) == len(out.X) + len(fold(m, bl[:1], NU, NH, INFO).X)


@pytest.mark.parametrize("with_defined", [False, True])
@pytest.mark.parametrize("rule", ["accuracy", "f1", "gaussian"])
def test_confusion_counts_equal_thresholded_predictions(rule, with_defined):
    g = torch.Generator().manual_seed(7)
    n, O, k, G = 4000, 5, 5, 9
    z = torch.randn(n, O, generator=g) * 5
    y = (torch.rand(n, O, generator=g) < torch.sigmoid(z)) & (torch.rand(n, O, generator=g) < 0.6)
    folds = torch.randint(0, k, (n,), generator=g)
    group = torch.randint(0, G, (n,), generator=g)
    defined = torch.rand(n, O, generator=g) < 0.85 if with_defined else None
    pred = lf.thresholds(z, y, folds, defined, k, rule, 128, 16.0)
    yy = y.clone()
    if defined is not None:
        pred, yy = pred & defined, yy & defined
    want = confusion_by_group(pred, yy, group, G)
    got = lf.confusion(z, y, folds, defined, group, k, G, rule, 128, 16.0)
    assert got.shape == (3, G, O) and want.sum() > 0
    np.testing.assert_array_equal(got, want)
