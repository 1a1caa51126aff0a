"""Names of a PyTorch module's submodules, as :class:`~.models.Model` lists them.

Libraries register one module under several paths, or expose it under an attribute
that is not a registered name: a TransformerLens 4 bridge nests every hook point
under ``_original_component`` wrappers too, and answers legacy names such as
``blocks.0.hook_resid_post`` with the hook point registered as ``blocks.0.hook_out``.
A model lists each module once, under its shortest path (the one its library
documents), and resolves such aliases to it, so that hooks go on the module the
forward pass calls.
"""

from __future__ import annotations

from typing import Any

from torch import nn

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def layer_names(module: nn.Module) -> list[str]:
    """Each non-container submodule once, where it first appears, under its shortest path.

    The root itself is ``""`` when the model is a single leaf module.
    """
    return list(layer_modules(module))


def layer_modules(module: nn.Module) -> dict[str, nn.Module]:
    """:func:`layer_names` with each one's module, from one walk of ``module``."""
    best: dict[int, tuple[str, nn.Module]] = {}
    for name, mod in module.named_modules(remove_duplicate=False):
        if name and not isinstance(mod, _CONTAINERS):
            old = best.get(id(mod))
            if old is None or (name.count("."), len(name)) < (old[0].count("."), len(old[0])):
                best[id(mod)] = (name, mod)
    return dict(best.values()) or {"": module}


def alias_target(module: nn.Module, layers: list[str], path: str) -> str | None:
    """The name in ``layers`` of the module that attribute path ``path`` reaches, if any."""
    obj: Any = module
    try:
        for part in path.split("."):
            obj = getattr(obj, part)
    except Exception:  # a property that raises is not an alias either
        return None
    if not isinstance(obj, nn.Module):
        return None
    return next((n for n in layers if n and module.get_submodule(n) is obj), None)


def residual_hooks(module: nn.Module, layers: list[str]) -> list[str]:
    """A TransformerLens model's residual stream after each block, or ``[]`` for other models.

    ``blocks.{i}.hook_resid_post`` in a ``HookedTransformer``, ``blocks.{i}.hook_out``
    in a TransformerLens 4 bridge; both have ``hook_dict`` and ``blocks``.
    """
    blocks = getattr(module, "blocks", None)
    if not hasattr(module, "hook_dict") or not isinstance(blocks, nn.ModuleList):
        return []
    known = set(layers)
    out = []
    for i in range(len(blocks)):
        names = (f"blocks.{i}.hook_resid_post", f"blocks.{i}.hook_out")
        name = next((n for n in names if n in known), None)
        if name is None:
            return []
        out.append(name)
    return out
