"""The axes of a TransformerLens hook point, declared by its name (never read off a shape).

A ``HookedTransformer`` (or a TransformerLens 4 ``TransformerBridge``) passed to
``dl.Model`` is read at its ``HookPoint`` modules. Their axes are TransformerLens's,
fixed by the hook's name: :func:`tl_hook_layout` gives them in the layout grammar of
:mod:`dni_lab.backend.extraction.layouts` — space-separated axis letters, ``n`` records
(batch), ``s`` the symbol (position) axis, ``u`` a units axis (several ``u`` are
flattened in order, row-major):

=====================================================  ========================  =========
hook                                                   TransformerLens shape     layout
=====================================================  ========================  =========
``hook_embed``, ``hook_pos_embed``, ``hook_resid_*``,  (batch, pos, d_model)     ``n s u``
``hook_attn_out``, ``hook_mlp_out``, ``mlp.hook_*``,
``ln*.hook_normalized``, ``ln*.hook_scale`` (1 unit),
a bridge's ``hook_in`` / ``hook_out``
``attn.hook_q/k/v/z``, ``hook_rot_q/k``                (batch, pos, head, d_head)  ``n s u u``
``attn.hook_result``, ``hook_q/k/v_input``,            (batch, pos, head, d_model) ``n s u u``
``hook_attn_in``
a bridge's ``attn.hook_q_normed`` / ``hook_k_normed``  (batch, head, pos, d_head)  ``n u s u``
``attn.hook_pattern``, ``attn.hook_attn_scores``       (batch, head, q, k)         None
=====================================================  ========================  =========

Per-head hooks are thus units ``head * d_head + d`` (``head * d_model + i`` for
``hook_result``), as on Hugging Face models. ``attn.q_norm.hook_normalized`` of a
HookedTransformer is ``(batch * pos * head, d_head)``, no per-symbol axis: None.
"""

from __future__ import annotations

from torch import nn

from ...errors import LayerError

#: (hook name suffix, dimensions it has, layout), the first suffix that matches wins
_LAYOUTS: tuple[tuple[tuple[str, ...], int, str], ...] = (
    (("attn.hook_q_normed", "attn.hook_k_normed"), 4, "n u s u"),
    (
        (
            "attn.hook_q",
            "attn.hook_k",
            "attn.hook_v",
            "attn.hook_z",
            "attn.hook_rot_q",
            "attn.hook_rot_k",
            "attn.hook_result",
            "hook_q_input",
            "hook_k_input",
            "hook_v_input",
            "hook_attn_in",
        ),
        4,
        "n s u u",
    ),
    (
        (
            "hook_embed",
            "hook_pos_embed",
            "hook_resid_pre",
            "hook_resid_mid",
            "hook_resid_post",
            "hook_attn_out",
            "hook_mlp_out",
            "hook_mlp_in",
            "mlp.hook_pre",
            "mlp.hook_pre_linear",
            "mlp.hook_post",
            "hook_normalized",
            "hook_scale",
            "hook_in",
            "hook_out",
        ),
        3,
        "n s u",
    ),
)
_PATTERNS = ("attn.hook_pattern", "attn.hook_attn_scores")
_PER_ROW = ("q_norm.hook_normalized", "k_norm.hook_normalized", "q_norm.hook_scale",
            "k_norm.hook_scale")  # fmt: skip


def tl_hook_layout(name: str, ndim: int, strict: bool = False) -> str | None:
    """The layout of TransformerLens hook point ``name`` whose tensor has ``ndim`` dimensions.

    Parameters
    ----------
    name : str
        The hook point's name in the model (``blocks.0.attn.hook_z``).
    ndim : int
        Dimensions of the tensor it carries.
    strict : bool
        Raise a :class:`~dni_lab.backend.errors.LayerError` (saying what to read) where
        the answer would be None for a TransformerLens hook: an attention pattern, a
        per-row value, a tensor of other dimensions than the name gives.

    Returns
    -------
    str or None
        ``"n s u"``, ``"n s u u"``, ``"n u s u"``; None when ``name`` is no per-symbol
        TransformerLens hook (or not one at all).
    """
    if name.endswith(_PATTERNS):
        if not strict:
            return None
        block = name.rsplit(".attn.", 1)[0]
        raise LayerError(
            f"{name!r} is an attention pattern: one value per (head, query, key), not one "
            f"per symbol, so it holds no units to score. Read the heads' outputs "
            f"('{block}.attn.hook_z', unit = head * d_head + d) or their queries and keys "
            f"('{block}.attn.hook_q' / 'hook_k')."
        )
    if name.endswith(_PER_ROW):
        if strict:
            raise LayerError(f"{name!r} is one row per (position, head), flattened with the "
                             "batch; read 'attn.hook_q' / 'hook_rot_q' instead.")  # fmt: skip
        return None
    for suffixes, dims, layout in _LAYOUTS:
        if name.endswith(suffixes) and _whole(name, suffixes):
            if ndim == dims:
                return layout
            if strict:
                raise LayerError(
                    f"TransformerLens hook {name!r} carries {dims} dimensions "
                    f"({layout!r}), but its tensor has {ndim} dimensions; declare its layout."
                )
            return None
    return None


def _whole(name: str, suffixes: tuple[str, ...]) -> bool:
    """The suffix matches whole name parts (``hook_in`` is not the end of ``hook_attn_in``)."""
    for s in suffixes:
        if name.endswith(s):
            return name == s or name[: -len(s)].endswith(".")
    return False


def is_tl_model(module: nn.Module) -> bool:
    """A TransformerLens model: it keeps its hook points in ``hook_dict``."""
    return hasattr(module, "hook_dict")


def hook_point_layout(root: nn.Module, address: str, module: nn.Module, ndim: int) -> str | None:
    """The layout of a TransformerLens model's hook point ``address`` (None: not one).

    A hook point that TransformerLens gives no per-symbol axes (a pattern, a per-row
    value) raises the :class:`LayerError` that says what to read instead.
    """
    leaf = address.rsplit(".", 1)[-1]
    if not leaf.startswith("hook_") or not is_tl_model(root):
        return None
    return tl_hook_layout(address, ndim, strict=True)
