"""A model's state, bitwise: what inspection must leave exactly as it found it.

``snapshot(module)`` records every submodule's ``training`` flag, every parameter and
buffer (bytes, dtype, device, shape, stride, the tensor object itself), ``requires_grad``,
``.grad``, the hooks registered on every submodule, and the global module hooks;
``differences(before, after)`` lists what changed, in words.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_mod

HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
              "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
              "_forward_hooks_always_called", "_state_dict_hooks",
              "_load_state_dict_pre_hooks")  # fmt: skip
GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                "_global_backward_pre_hooks", "_global_forward_hooks_always_called")  # fmt: skip


def _bytes(t: torch.Tensor) -> bytes:
    """Row-major bytes of any dense tensor (0-dim, transposed, half, bfloat16)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def _tensor(t: torch.Tensor) -> tuple:
    return (_bytes(t), t.dtype, t.device, tuple(t.shape), t.stride(), id(t), t.data_ptr())


def snapshot(module: nn.Module) -> dict[str, Any]:
    """Everything inspection must not change about ``module``."""
    mods = dict(module.named_modules(remove_duplicate=False))
    snap: dict[str, Any] = {"training": {n: m.training for n, m in mods.items()}}
    for n, p in module.named_parameters(remove_duplicate=False):
        snap[f"param {n}"] = _tensor(p)
        snap[f"param {n} requires_grad"] = p.requires_grad
        snap[f"param {n} grad"] = None if p.grad is None else _tensor(p.grad)
    for n, b in module.named_buffers(remove_duplicate=False):
        snap[f"buffer {n}"] = None if b is None else _tensor(b)
    for n, m in mods.items():
        for d in HOOK_DICTS:
            hooks = getattr(m, d, None)
            if hooks is not None:
                snap[f"hooks {n}.{d}"] = [(k, id(v)) for k, v in hooks.items()]
    for g in GLOBAL_HOOKS:
        hooks = getattr(module_mod, g, None)
        if hooks is not None:
            snap[f"global {g}"] = [(k, id(v)) for k, v in hooks.items()]
    return snap


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed, one line per key (training flags one line per submodule)."""
    out = []
    tb, ta = before["training"], after["training"]
    out += [f"{n or '<root>'}.training {tb[n]} -> {ta.get(n)}" for n in tb if tb[n] != ta.get(n)]
    for key in sorted(set(before) | set(after)):
        if key == "training" or before.get(key) == after.get(key):
            continue
        b, a = before.get(key), after.get(key)
        if isinstance(b, tuple) and isinstance(a, tuple):
            fields = ("values", "dtype", "device", "shape", "stride", "object", "storage")
            what = [f for f, x, y in zip(fields, b, a, strict=True) if x != y]
            out.append(f"{key}: {', '.join(what)} changed")
        else:
            out.append(f"{key}: {b!r:.80} -> {a!r:.80}")
    return out


def user_hooks(module: nn.Module) -> list[Any]:
    """Hooks a user had registered before inspecting (they must survive, untouched)."""
    first = next(m for m in module.modules() if not list(m.children()))
    return [module.register_forward_hook(lambda *_: None),
            module.register_forward_pre_hook(lambda *_: None),
            first.register_forward_hook(lambda *_: None)]  # fmt: skip
