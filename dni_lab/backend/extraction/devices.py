"""Where behaviors are computed: the device a run asks for, and a module held on it.

``resolve_device`` turns ``"auto"`` (or a name) into a ``torch.device`` a run can use;
``on_device`` holds a model's module there in eval mode for the length of a read and
puts every submodule's mode and the weights' home back afterwards.
"""

from __future__ import annotations

import contextlib

import torch

from ..errors import DNIError
from .models import Model, eval_mode


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``"auto"`` picks CUDA when present, then Apple's MPS, else the CPU."""
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DNIError(f"unknown device {device!r}; use 'auto', 'cpu' or 'cuda'.") from exc
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        # torch would fail at the first transfer, deep inside a run, with an AssertionError
        raise DNIError(
            f"device {device!r} is not available ({torch.cuda.device_count()} CUDA devices "
            "visible); use device='auto' (CUDA when present) or 'cpu'."
        )
    return dev


@contextlib.contextmanager
def on_device(model: Model, device: torch.device):
    """Hold the module on ``device`` in eval mode; restore every submodule's mode and home.

    Each submodule's own ``training`` flag is saved and put back, so a wrapper in train
    mode around an eval-mode network leaves as it came (``module.train(flag)`` on the
    top module would set every submodule to the top's flag).

    A module already on ``device``, placed on an accelerator of its kind, or spread over devices
    (Hugging Face's ``hf_device_map``) is left where it is: moving weights costs a
    round trip per call, and a placed model's owner chose its place.
    """
    mod = model.module
    tensors = list(mod.parameters()) + list(mod.buffers())
    home = tensors[0].device if tensors else torch.device(device)
    target = torch.device(device)
    on_accelerator = home.type == target.type and home.type not in ("cpu", "meta")
    placed = getattr(mod, "hf_device_map", None) is not None or on_accelerator
    placed = placed or not getattr(model, "movable", True)  # it sends inputs to its own device
    # a model spread over devices by its owner stays where it is: moving it home again
    # would gather every tensor on the first one's device
    spread = any(t.device != home for t in tensors)
    move = not placed and not spread and home != target
    if move:
        mod.to(device)
    try:
        with eval_mode(mod):
            yield
    finally:
        if move:
            mod.to(home)


def symbol_mask(model: Model, records: list, device: torch.device) -> torch.Tensor:
    """``(R, T)`` bool mask of real symbols, T the block's longest record."""
    n = torch.as_tensor([model.symbols(r) for r in records], device=device)
    T = int(n.max()) if len(n) else 0
    return torch.arange(T, device=device)[None, :] < n[:, None]
