"""Names of a PyTorch module's submodules, as :class:`~.models.Model` lists them.

Libraries register one module under several paths, or expose it under an attribute
that is not a registered name: a TransformerLens 4 bridge nests every hook point
under ``_original_component`` wrappers too, and answers legacy names such as
``blocks.0.hook_resid_post`` with the hook point registered as ``blocks.0.hook_out``.
A model lists each module once, under its shortest path (the one its library
documents), and resolves such aliases to it, so that hooks go on the module the
forward pass calls.

Containers are left out of the listing. An ``nn.Sequential`` has a forward pass and an
output (its last entry's), so it can be addressed as one layer by its path
(:func:`named_sequential`): it becomes an address once named, after every listed one,
so that listings (``model.layers``, default units, unit positions) stay as they are and
a block is not counted twice (its output is its last entry's). ``nn.ModuleList`` and
``nn.ModuleDict`` have no forward pass, hence no output: naming one raises a
:class:`~dni_lab.backend.errors.LayerError` that lists its entries.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..errors import LayerError

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


def named_sequential(module: nn.Module, path: str) -> str | None:
    """``path`` if it names an ``nn.Sequential`` of ``module`` (one layer: its output).

    Returns None when ``path`` names no container (nor any module). Raises a
    :class:`LayerError` when it names an ``nn.ModuleList`` or ``nn.ModuleDict``, which
    have no forward pass: the error lists the entries to address instead.
    """
    if not path:
        return None
    try:
        mod = module.get_submodule(path)
    except AttributeError:
        return None
    if isinstance(mod, nn.Sequential):
        return path
    if isinstance(mod, (nn.ModuleList, nn.ModuleDict)):
        entries = [f"{path}.{k}" for k, _ in list(mod.named_children())[:5]]
        more = f", ... ({len(mod) - 5} more)" if len(mod) > 5 else ""
        raise LayerError(
            f"{path!r} is an {type(mod).__name__}: a container with no forward pass of its "
            f"own, so it has no output to read. Address one of its entries "
            f"({', '.join(repr(e) for e in entries)}{more}), or the module that calls them."
        )
    return None
