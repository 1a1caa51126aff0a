"""Comparisons whose answer is fixed before they run, caught before they mislead.

Two ways an ablation (or an oracle test) can print numbers that say nothing:

* **One possible random set.** Asking for ``k`` random units among the ``m`` units left
  outside the top ``k`` has ``C(m, k)`` possible answers; when that is 1 (``k`` of a
  ``2k``-unit layer with ``exclude``, or ``k`` equal to the layer's width), every random
  draw is the same set, ``random_std`` is 0 and the p-value is 1 whatever the units do.
  Its ``per_k`` row gets a null p-value and a ``reason``, and a
  :class:`VacuousComparisonWarning` says so.
* **A layer whose output the model never uses.** A tap (an ``nn.Identity`` called as
  ``self.tap(x)`` with its return value discarded) can be read, but forcing it changes
  nothing downstream: :func:`check_layer_feeds` raises a :class:`LayerError` naming the
  module whose output the tap reads, before any random set runs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import LayerError
from ..extraction.models import Model, _first_tensor
from .common import forward_output
from .force import force_units

#: Records of the probe passes that check a layer feeds the model's output.
PROBE_RECORDS = 64


class VacuousComparisonWarning(UserWarning):
    """A comparison with random unit sets cannot tell the units apart from chance."""


def possible_sets(width: int, k: int, exclude: int) -> int | float:
    """How many distinct sets :func:`~.common.random_unit_sets` can draw.

    ``C(width - exclude, k)``, or ``C(width, k)`` where too few units are left outside the
    ``exclude`` units of the set under test and the draw falls back to the whole layer.
    A count past 64 bits (C(256, 12)) is a float: frames hold 64-bit integers.
    """
    pool = width - exclude if width - exclude >= k else width
    n = math.comb(pool, k)
    return n if n < 2**63 else float(n)


def one_set_reason(width: int, k: int, exclude: int, n_random: int) -> str | None:
    """Why the p-value of ``k`` random units of a ``width``-unit layer is void, or None."""
    n = possible_sets(width, k, exclude)
    if n > 1:
        return None
    pool = width - exclude if width - exclude >= k else width
    same = " (the top set itself)" if pool == width and k == width else ""
    return (
        f"only C({pool}, {k}) = {n} set of {k} random units is possible in a layer of "
        f"{width} units: all {n_random} random sets are the same set{same}, so their "
        "std is 0 and no p-value can be computed; use a smaller k or a wider layer"
        + (", or exclude=False" if exclude and pool < width else "")
    )


def warn_one_set(addr: str, reasons: dict[int, str]) -> None:
    """One warning for the values of k whose random sets are all one set."""
    if reasons:
        detail = "; ".join(f"k={k}: {why}" for k, why in reasons.items())
        warnings.warn(
            f"layer {addr!r}: the random sets cannot vary, p_value is null ({detail}).",
            VacuousComparisonWarning,
            stacklevel=3,
        )


def check_layer_feeds(
    model: Model, addr: str, width: int, records: Sequence[Any], device: torch.device
) -> None:
    """Raise when forcing every unit of ``addr`` leaves the model's output bitwise unchanged.

    Two probe passes over the first :data:`PROBE_RECORDS` records force all units to 0,
    then to 1 (values the layer cannot hold everywhere at once); if both outputs equal the
    untouched output bit for bit, the layer's output does not feed the model's output.

    Raises
    ------
    LayerError
        Naming the layer and the module whose output it reads, when there is one.
    """
    recs = list(records[:PROBE_RECORDS])
    units = list(range(width))
    with torch.inference_mode():
        plain = forward_output(model, recs, device)
        for value in (0.0, 1.0):
            with force_units(model, addr, units, value):
                forced = forward_output(model, recs, device)
            if not torch.equal(forced, plain):
                return
    feeders = _modules_feeding(model, addr, recs, device)
    instead = (
        f"force the module whose output it reads instead: {', '.join(map(repr, feeders))}"
        if feeders
        else "force a layer whose output the model uses"
    )
    raise LayerError(
        f"forcing all {width} units of layer {addr!r} of model {model.name!r} to 0 and to 1 "
        f"leaves the model's output bitwise unchanged on {len(recs)} records: the layer's "
        "output does not feed the model's output (a tap whose return value is discarded, "
        "e.g. `self.tap(x)` without using it), so ablating it can show nothing. Read it "
        f"with dl.inspect as before; to verify, {instead}."
    )


def _modules_feeding(
    model: Model, addr: str, records: list[Any], device: torch.device
) -> list[str]:
    """Names of the modules whose output is the tensor the module at ``addr`` reads."""
    base = Model.split_address(addr)[0]
    try:
        tap = model.module.get_submodule(base)
    except AttributeError:
        return []
    seen: dict[str, torch.Tensor] = {}
    read: list[torch.Tensor] = []

    def keep(name: str):
        def hook(_mod, _args, out) -> None:
            t = _first_tensor(out) if not isinstance(out, torch.Tensor) else out
            if isinstance(t, torch.Tensor):
                seen.setdefault(name, t)

        return hook

    def reads(_mod, args) -> None:
        if args and isinstance(args[0], torch.Tensor):
            read.append(args[0])

    handles = [tap.register_forward_pre_hook(reads)]
    for name, mod in model.module.named_modules():
        if name and mod is not tap and not _contains(mod, tap):
            handles.append(mod.register_forward_hook(keep(name)))
    try:
        with torch.inference_mode():
            forward_output(model, records, device)
    finally:
        for h in handles:
            h.remove()
    if not read:
        return []
    x = read[0]
    return [n for n, t in seen.items() if _same_tensor(t, x)][:3]


def _contains(mod: torch.nn.Module, sub: torch.nn.Module) -> bool:
    return any(m is sub for m in mod.modules())


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a is b or (
        a.shape == b.shape and a.stride() == b.stride() and a.data_ptr() == b.data_ptr()
    )
