"""``dl.activations(names=...)`` as a list, a glob or a callable: the names it selects.

TransformerLens users write ``run_with_cache(names_filter=lambda name:
name.endswith("hook_z"))``; nnsight and module-path users think in globs
(``"transformer.h.*.mlp"``). Both select among the names a model can read: its
TransformerLens hook names where it has them (a Hugging Face model's
``blocks.N.attn.hook_z``, ..., :meth:`~dni_lab.backend.hf.HFModel.hook_names`), the
TransformerLens 4 bridge's names (``blocks.N.hook_out``, ...,
:func:`~dni_lab.backend.hf.tl_bridge.bridge_names`: a filter over them chooses what
TransformerLens 4.3's ``run_with_cache`` would return), then its addresses that no
such name already reads (``model.addresses``). A name the filter selects that the model
cannot read after all (a rotary hook on a model without rotary) is left out, as
TransformerLens leaves out hooks a model does not have; a filter that selects nothing
raises a :class:`~dni_lab.backend.errors.LayerError` with close names.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from ..errors import LayerError, did_you_mean

_GLOB = re.compile(r"[*?\[]")
_SHOWN = 12


def is_glob(name: Any) -> bool:
    """Whether ``name`` is a string with glob wildcards (``*``, ``?``, ``[...]``)."""
    return isinstance(name, str) and _GLOB.search(name) is not None


def expand_names(model: Any, names: Any, is_feature_set: Callable[[Any], bool]) -> list[Any]:
    """The names ``names`` selects on ``model``: a list of names and ``(name, units)`` pairs.

    Parameters
    ----------
    model : Model
        The model the names are read from.
    names : str, sequence, callable or feature set
        One name or glob, a sequence of names, globs, ``(name, units)`` pairs and feature
        sets, or a callable ``name -> bool`` over the model's names.
    is_feature_set : callable
        Recognises a feature set (``dl.features``), which is kept as it is.

    Returns
    -------
    list
        Names and pairs in order: a glob or callable replaced by the names it selects.

    Raises
    ------
    LayerError
        A glob or callable that selects none of the model's names.
    """
    if is_feature_set(names) or isinstance(names, (str, tuple)):
        names = [names]
    elif callable(names):
        label = getattr(names, "__name__", type(names).__name__)
        return _select(model, names, f"names filter {label!r}", None)
    out: list[Any] = []
    for n in names:
        if is_glob(n):
            out += _select(model, lambda c, p=n: fnmatch.fnmatchcase(c, p), f"glob {n!r}", n)
        else:
            out.append(n)
    return out


def candidates(model: Any) -> list[tuple[str, str | None]]:
    """``(name, address or None)`` of each name a filter chooses among, in order.

    A model's TransformerLens hook names first (their address unknown until resolved),
    the bridge's names, then its addresses.
    """
    hook_names = getattr(model, "hook_names", None)
    tl = [(n, None) for n in (hook_names() if hook_names is not None else [])]
    n_blocks = getattr(model, "_n_blocks", None)
    if tl and isinstance(n_blocks, int):
        from ..hf.tl_bridge import bridge_names

        tl += [(n, None) for n in bridge_names(n_blocks)]
    return tl + [(a, a) for a in model.addresses]


def _select(model: Any, keep: Callable[[str], Any], what: str, pattern: str | None) -> list[str]:
    """The readable names ``keep`` selects, each address once (a hook name before its path)."""
    pool = candidates(model)
    picked, seen = [], set()
    for name, address in pool:
        if not keep(name):
            continue
        try:
            address = address or model.resolve_layer(name)
        except LayerError:  # a hook this model does not have (rotary on GPT-2)
            continue
        if address in seen and address == name:
            continue  # a path some hook name of the filter already reads
        seen.add(address)
        picked.append(name)
    if picked:
        return picked
    names = [n for n, _ in pool]
    close = did_you_mean(pattern.replace("*", "") if pattern else "", names) if pattern else ""
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    more = f", ... ({len(names)} in all: model.hook_names() and model.addresses)"
    raise LayerError(
        f"{what} selects none of model {model.name!r}'s names.{close} Its names include "
        f"{shown}{more if len(names) > _SHOWN else ''}; pass a list of names, a glob "
        "('blocks.*.hook_z') or a callable name -> bool."
    )
