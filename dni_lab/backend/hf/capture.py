"""Reading hooked values during a Hugging Face model's forward pass, and stopping it.

:meth:`HFModel.capture <dni_lab.backend.hf.model.HFModel.capture>` installs these:
hooks that keep a module's output, its input (virtual addresses read a module's
input), a slice of it or a value computed from it (:mod:`.computed`), a
:class:`SymbolStore` that reads them back in symbol order,
and hooks that end the forward pass (:class:`StopForward`) once every captured
address has fired.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import torch
from torch import nn

from .hooks import Tap


class StopForward(Exception):
    """Raised from a hook once every captured address fired; ``HFModel.forward`` ends."""

    @staticmethod
    def error(addr: str) -> Exception:
        from ..errors import LayerError

        return LayerError(
            f"{addr!r} reads attention weights per token: the module returned none, or the "
            "batch holds windows of long records or mean-pooled records (stride=, pool='mean'), "
            "which attention-to-target units do not support."
        )


def stopper(pending: set[str], addr: str):
    def fired() -> None:
        pending.discard(addr)
        if not pending:
            raise StopForward

    return fired


class SymbolStore(dict):
    """Reads hooked outputs back as ``(R, T_symbols, D)``, gathered through the mask."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self.raw: dict[str, Any] = {}
        self.ready: dict[str, Any] = {}  # already per symbol (attention to a target)

    def _gathered(self, addr: str) -> Any:
        if addr in self.ready:
            return self.ready[addr]
        t = dict.get(self, addr, self.raw.get(addr))
        return self.model.gather_symbols(t) if isinstance(t, torch.Tensor) else t

    def get(self, addr: str, default: Any = None) -> Any:
        return self._gathered(addr) if addr in self else default

    def __getitem__(self, addr: str) -> Any:
        if addr not in self:
            raise KeyError(addr)
        return self._gathered(addr)

    def __contains__(self, addr: object) -> bool:
        return dict.__contains__(self, addr) or addr in self.raw or addr in self.ready


def count_call(calls: dict[str, int], addr: str, *_: Any) -> None:
    calls[addr] = calls.get(addr, 0) + 1


def first_input(mod: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
    """A module's first input: positional, else the keyword of its forward's first parameter.

    Hugging Face layers call attention with ``hidden_states=...``; the first parameter's
    name says which keyword that is, whatever order the caller passed keywords in.
    """
    if args:
        return args[0]
    params = list(inspect.signature(type(mod).forward).parameters)[1:]
    if params and isinstance(kwargs.get(params[0]), torch.Tensor):
        return kwargs[params[0]]
    return next(v for v in kwargs.values() if isinstance(v, torch.Tensor))


def keep_input(store: dict, addr: str, tap: Tap | None = None):
    def hook(mod, args, kwargs):
        x = first_input(mod, args, kwargs)
        if tap is not None and tap.kind is not None:
            from .computed import compute

            x = compute(tap, mod, x)
        dict.__setitem__(store, addr, x)

    return hook


def keep_slice(store: dict, addr: str, tap: Tap):
    def hook(_mod, _args, out):
        t = out[0] if isinstance(out, tuple) else out
        dict.__setitem__(store, addr, tap.read(t))

    return hook


def keep_rotary(store: dict, addr: str, tap: Tap, attn: nn.Module, seen: dict):
    """A hook on q_proj / k_proj: its output normed and rotated as the attention does."""
    from .computed import rotary

    def hook(_mod, _args, out):
        emb = seen.get("position_embeddings")
        if emb is None:
            from ..errors import LayerError

            raise LayerError(f"{addr!r}: the attention module was called without "
                             "position_embeddings, so its rotation is unknown.")  # fmt: skip
        qk = addr[-1]  # '...attn.hook_rot_q' / '_k'
        dict.__setitem__(store, addr, rotary(out, attn, qk, emb, int(tap.head_size or 0)))

    return hook


def keep_kwarg(seen: dict, name: str):
    def hook(_mod, _args, kwargs):
        seen[name] = kwargs.get(name)

    return hook


def keep_taps(
    module: nn.Module, taps: dict[str, Tap], store: dict, stack: contextlib.ExitStack
) -> None:
    """Hooks that keep each virtual address's value (a module's input or output slice)."""
    for addr, tap in taps.items():
        mod = module.get_submodule(tap.module)
        if tap.side == "input":
            hook = mod.register_forward_pre_hook(keep_input(store, addr, tap), with_kwargs=True)
        elif tap.kind == "rotary":
            attn = module.get_submodule(str(tap.context))
            seen: dict = {}
            pre = attn.register_forward_pre_hook(keep_kwarg(seen, "position_embeddings"),
                                                 with_kwargs=True)  # fmt: skip
            stack.callback(pre.remove)
            hook = mod.register_forward_hook(keep_rotary(store, addr, tap, attn, seen))
        else:
            hook = mod.register_forward_hook(keep_slice(store, addr, tap))
        stack.callback(hook.remove)


def stop_after(
    where: dict[str, tuple[nn.Module, bool]], pending: set[str], stack: contextlib.ExitStack
) -> None:
    """Hooks that raise :class:`StopForward` once every address in ``pending`` fired.

    ``where`` maps each address to its module and whether it is read at the input.
    """
    for addr, (mod, at_input) in where.items():
        stop = stopper(pending, addr)
        if at_input:
            hook = mod.register_forward_pre_hook(lambda _m, _a, f=stop: f())
        else:
            hook = mod.register_forward_hook(lambda _m, _a, _o, f=stop: f())
        stack.callback(hook.remove)


def keep_attention(store: SymbolStore, addr: str, model: Any, name: str):
    """A hook on an attention module: per symbol and head, the weight on the pair's target."""
    from .attention import read

    def hook(_mod, _args, out):
        weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
        layout = model._layout
        if weights is None or layout is None or not layout.per_token or not layout.targets:
            raise StopForward.error(addr)
        dev = weights.device
        got = read(weights, layout.index.to(dev), layout.targets[name].to(dev))
        store.ready[addr] = got.to(layout.index.device)

    return hook
