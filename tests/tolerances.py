"""float32 comparisons with a tolerance scaled to the values and the reduction behind them.

Two float32 computations of one quantity that differ in kernel or summation order (a
hand-written forward hook against dni_lab's padded batch, a sparse update against a dense
GEMM, one CPU's AVX-512 kernel against another's AVX2 one) agree only to a few units in
the last place of the *summands*, and the error of a sum of ``n`` terms grows about like
``sqrt(n)``. An absolute tolerance such as ``atol=1e-6, rtol=0`` on O(1) values is eight
ulps: it passes on the CPU it was tuned on and fails on the next. So every inexact float32
comparison in the tests states its scale and its reduction length, and the tolerance is

    ulps * eps32 * sqrt(reduction) * scale

where ``scale`` is the magnitude of the values summed (the greatest ``|expected|`` unless
the test says otherwise). Comparisons that are exact by construction (same kernel, same
order, bitwise copies) stay exact: docs/architecture.md, "Which comparisons are exact, and
why", lists them.

Set ``DNI_TOL_LOG=<file>`` to append each comparison's measured difference and its
tolerance to that file (how the numbers in the docs were measured).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

#: float32 machine epsilon (the spacing of floats at 1.0)
EPS32 = float(np.finfo(np.float32).eps)


def f32_tol(scale: float, reduction: int = 1, ulps: float = 8.0) -> float:
    """The tolerance for float32 values of magnitude ``scale`` from sums of ``reduction`` terms.

    Parameters
    ----------
    scale : float
        Magnitude of the values summed (e.g. the greatest ``|expected|``).
    reduction : int
        Length of the longest reduction (dot product, sum) behind each value.
    ulps : float
        How many float32 epsilons per ``sqrt(reduction)``: a few, never hundreds.
    """
    return ulps * EPS32 * math.sqrt(max(int(reduction), 1)) * float(scale)


def assert_close_f32(
    actual,
    expected,
    *,
    reduction: int = 1,
    scale: float | None = None,
    ulps: float = 8.0,
    equal_nan: bool = False,
    msg: str = "",
) -> float:
    """Assert two float32 results agree within :func:`f32_tol`; return the greatest difference.

    Parameters
    ----------
    actual, expected : array-like or torch.Tensor
        Same shape; compared in float64.
    reduction : int
        Length of the longest reduction behind each value.
    scale : float, optional
        Magnitude of the values summed; the greatest finite ``|expected|`` when omitted.
    ulps : float
        Float32 epsilons per ``sqrt(reduction)``.
    equal_nan : bool
        NaN in the same places is equal (elsewhere a NaN fails).
    msg : str
        Prefix of the failure message.
    """
    a, b = _f64(actual), _f64(expected)
    assert a.shape == b.shape, f"{msg} shapes {a.shape} != {b.shape}"
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if equal_nan:
        assert np.array_equal(nan_a, nan_b), f"{msg} NaN in different places"
    else:
        assert not (nan_a.any() or nan_b.any()), f"{msg} NaN in a result"
    ok = ~nan_b
    if scale is None:
        finite = b[ok & np.isfinite(b)]
        scale = float(np.abs(finite).max(initial=0.0))
    same = a[ok] == b[ok]  # equal infinities too
    diff = float(np.where(same, 0.0, np.abs(a[ok] - b[ok])).max(initial=0.0))
    tol = f32_tol(scale, reduction, ulps)
    _log(diff, tol)
    assert diff <= tol, (
        f"{msg} greatest difference {diff:.3g} > {tol:.3g} "
        f"(= {ulps:g} x eps32 x sqrt({reduction}) x scale {scale:.3g})"
    )
    return diff


def _f64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().to(torch.float64).numpy()
    elif hasattr(x, "to_numpy"):  # a Polars series: nulls become NaN
        x = x.cast(float).to_numpy() if hasattr(x, "cast") else x.to_numpy()
    return np.asarray(x, dtype=np.float64)


def _log(diff: float, tol: float) -> None:
    path = os.environ.get("DNI_TOL_LOG")
    if path:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(path, "a") as f:
            f.write(f"{test}\t{diff:.3e}\t{tol:.3e}\t{diff / tol if tol else 0:.3f}\n")
