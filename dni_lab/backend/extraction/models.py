"""The Model adapter: an ``nn.Module`` plus ``encode``, with named layers and hooks.

Every extractable activation has a stable address (TransformerLens' hook
points): a module path from ``named_modules()`` (``"lstm"``, ``"blocks.0"``),
and for recurrent modules one address per stacked layer (``"lstm.l1"``) and,
for LSTMs, the cell state (``"lstm.l1.cell"``, ``"lstm.cell"`` for the last
layer). Hooks live only inside :meth:`Model.capture` and are always removed.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DNIError, LayerError, did_you_mean
from .behavior_memo import BehaviorMemo
from .layouts import Layout, as_layout, first_tensor
from .module_names import (
    alias_target,
    layer_modules,
    layer_names,
    named_sequential,
    residual_hooks,
)
from .readings import Readings, eval_mode, to_device  # noqa: F401 (re-exported)

#: Addresses an unknown-layer error lists before it points to ``model.addresses``.
_LISTED = 30
_SUB = re.compile(r"^(?P<base>.+?)\.l(?P<k>\d+)(?P<cell>\.cell)?$|^(?P<base2>.+?)\.cell$")
_ids = itertools.count()


def default_symbols(record: Any) -> int:
    """Symbols of a record: pixels (H·W) of an array with ≥ 2 dims, else ``len(record)``."""
    shape = getattr(record, "shape", None)
    if shape is not None and len(shape) >= 2:
        return int(shape[-1] * shape[-2])
    try:
        return len(record)
    except TypeError:
        raise DNIError(
            f"a record of type {type(record).__name__} ({record!r:.40}) has no length, so its "
            "symbols cannot be counted; pass Model(..., symbols=fn), fn(record) -> symbols."
        ) from None


# Adapters for other libraries' models register their constructor here when their
# package is imported (``dni_lab`` imports them): ``Model.from_hf`` importing its own
# subclass would make models and the adapter import each other.
ADAPTERS: dict[str, Callable[..., Model]] = {}


class Model(Readings):
    """A PyTorch module prepared for inspection.

    Parameters
    ----------
    module : nn.Module
        The trained (or untrained) network.
    encode : callable
        ``encode(list_of_records)`` → the module's input batch: a tensor, a tuple of
        tensors (positional arguments) or a dict of tensors (keyword arguments).
        Position ``t`` of every sequence output must correspond to symbol ``t``.
    name : str, optional
        The model id (``mid``) in score frames; defaults to ``"model{n}"``.
    symbols : callable, optional
        ``symbols(record) -> int``; defaults to :func:`default_symbols`.
    resize : bool
        Resize convolutional maps to the input's height and width, so a symbol is
        an input pixel; if False the map must already have the input's size.
    meta : mapping, optional
        Metadata shown in the catalog (epoch, architecture, trained, ...).
    layouts : mapping, optional
        ``{address: layout}``: how an address's output maps onto (records, symbols,
        units), as a spec string (``"n u s"`` for a ``Conv1d``-like output) or a
        :class:`~.layouts.Layout` (``Layout("n u r s", reduce="mean")``). Needed only
        where a module's kind and the data flow leave more than one reading: naming
        such an address raises a :class:`LayerError` that lists the readings.
    prefix : int
        Leading positions of every sequence output that are no symbol (a BOS token):
        dropped when read, left alone when units are forced.
    padded : bool
        ``encode()`` pads sequences past the block's longest record (to a fixed
        length): trailing positions past a record's symbols are padding. Without it,
        a symbol axis longer than the block's longest record is an error, since its
        positions would not be symbols.
    frames : bool
        The batch axis holds frames, not records: every record's ``symbols(record)``
        frames one after the other (see :class:`~.layouts.Frames`, which makes such
        an ``encode`` and ``symbols``). Each layer is read per frame.
    reduce : {"mean", "max"}, optional
        With ``frames``, how the axes inside one frame (a conv map's positions) are
        reduced to one value per unit.

    Examples
    --------
    >>> lstm = nn.LSTM(8, 4, batch_first=True)
    >>> m = Model(lstm, encode=lambda recs: torch.zeros(len(recs), 3, 8), name="toy")
    >>> m.layers
    ['']
    """

    def __init__(
        self,
        module: nn.Module,
        encode: Callable[[list[Any]], Any] | None = None,
        name: str | None = None,
        symbols: Callable[[Any], int] | None = None,
        resize: bool = True,
        meta: Mapping[str, Any] | None = None,
        layouts: Mapping[str, str | Layout] | None = None,
        prefix: int = 0,
        padded: bool = False,
        frames: bool = False,
        reduce: str | None = None,
    ) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"Model needs an nn.Module, got {type(module).__name__}.")
        if isinstance(module, torch.jit.ScriptModule):
            raise LayerError(
                f"{type(module).__name__} is a TorchScript module: forward hooks cannot be "
                "installed on it, so no unit can be read. Load the eager (Python) model instead."
            )
        if not isinstance(prefix, (int, np.integer)) or isinstance(prefix, bool) or prefix < 0:
            raise DNIError(f"prefix={prefix!r}: pass the number of leading non-symbol positions.")
        self.module = module
        self.encode = encode if encode is not None else _default_encode
        self.name = name or f"model{next(_ids)}"
        self.symbols = symbols or default_symbols
        self.resize = resize
        self.meta = dict(meta or {})
        self._widths: dict[str, int] = {}  # filled once by layer_widths' probe pass
        self.layouts = {a: as_layout(v, f"layout of {a!r}") for a, v in (layouts or {}).items()}
        self.prefix = int(prefix)
        self.padded = bool(padded)
        self.frames = bool(frames)
        self.reduce = reduce
        if reduce is not None and reduce not in ("mean", "max"):
            raise DNIError(f"reduce={reduce!r}: use 'mean' or 'max'.")
        self._probed = False
        self._read: dict[str, Layout] = {}  # every probed address's layout (declared or ruled)
        self._shapes: dict[str, torch.Size] = {}  # each probed output's shape
        self._named: list[str] = []  # Sequentials addressed by path (named, not listed)
        self._unreadable: dict[str, str] = {}  # addresses with several readings: the error
        self._names_asked: dict[str, None] = {}  # layers named so far, in order (a set)
        self.behavior_memo = BehaviorMemo()  # recent blocks' behaviors, for repeated queries

    @classmethod
    def from_hf(cls, module: nn.Module, tokenizer: Any = None, **kwargs: Any) -> Model:
        """A Hugging Face model and its fast tokenizer; tokens are the symbols.

        See :class:`dni_lab.backend.hf.HFModel` for the keyword arguments (``name``,
        ``pool``, ``max_length``, ``truncate``, ``stride``, ``skip_long``, ``meta``,
        ``decoder_input``) and
        ``docs/transformers.md``. Needs ``pip install dni_lab[hf]``.

        Without a tokenizer, ``module`` is a vision transformer (a Hugging Face ViT,
        DeiT, DINOv2 with or without registers, or a timm ``VisionTransformer``): its
        patches are the symbols and its ``[CLS]``/register tokens a prefix, all read
        from the model (:class:`dni_lab.backend.hf.vision.VisionModel`: ``name``,
        ``pool``, ``meta``, ``layouts``).
        """
        kind = "hf" if tokenizer is not None else "hf_vision"
        if kind not in ADAPTERS:
            raise DNIError(
                "Model.from_hf needs dni_lab.backend.hf: `import dni_lab` loads it "
                "(with `pip install dni_lab[hf]` for transformers)."
            )
        if tokenizer is None:
            return ADAPTERS[kind](module, **kwargs)
        return ADAPTERS[kind](module, tokenizer, **kwargs)

    def with_module(self, module: nn.Module) -> Model:
        """This model (same name, encode, symbols, kind) around another module, e.g. a copy."""
        clone = copy.copy(self)
        clone.module = module
        clone.behavior_memo = BehaviorMemo(self.behavior_memo.max_bytes)
        return clone

    # -- addressing -------------------------------------------------------------
    @property
    def layers(self) -> list[str]:
        """Module addresses, in ``named_modules()`` order (containers left out).

        A module registered under several paths is listed once, under its shortest
        (see :mod:`~dni_lab.backend.extraction.module_names`); the root itself is ``""`` when the
        model is a single leaf module.
        """
        return layer_names(self.module)

    @property
    def addresses(self) -> list[str]:
        """Every extractable address: :attr:`layers` plus recurrent sub-layers and cells."""
        out: list[str] = []
        for name, mod in layer_modules(self.module).items():  # one walk: a notebook asks often
            out.append(name)
            if isinstance(mod, nn.RNNBase) and name:  # a bare RNN is read whole
                prefix = f"{name}."
                out += [f"{prefix}l{k}" for k in range(mod.num_layers)]
                if isinstance(mod, nn.LSTM) and not mod.bidirectional:  # one cell per step
                    out += [f"{prefix}l{k}.cell" for k in range(mod.num_layers)] + [f"{prefix}cell"]
        return out + [n for n in self._named if n not in out]

    def positional_layers(self) -> list[str]:
        """Layers with parameters of their own, the order positions refer to (0-based).

        A TransformerLens model (it has ``hook_dict`` and ``blocks``) counts its blocks
        instead, each by its residual stream after the block, as Hugging Face models do.
        """
        layers = self.layers
        resid = residual_hooks(self.module, layers)
        if resid:
            return resid
        own = [n for n in layers if any(True for _ in self._module(n).parameters(recurse=False))]
        return own or layers

    def resolve_layer(self, layer: str | int) -> str:
        """The address named by ``layer`` (an address or a 0-based position)."""
        if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
            pos = self.positional_layers()
            if not -len(pos) <= int(layer) < len(pos):
                raise LayerError(
                    f"model {self.name!r} has {len(pos)} layers with parameters; position "
                    f"{layer} is out of range. Layers by position: {pos}."
                )
            return pos[int(layer)]
        addresses = self.addresses
        if layer in addresses:
            self._named_now(layer)
            return layer
        alias = alias_target(self.module, self.layers, layer)
        if alias in addresses:
            self._named_now(alias)
            return alias
        block = named_sequential(self.module, layer)  # a ModuleList named raises here
        if block is not None:
            self._named.append(block)  # an address from now on, after every listed one
            return block
        shown = ", ".join(repr(a) for a in addresses[:_LISTED])
        if len(addresses) > _LISTED:
            shown += f", ... ({len(addresses) - _LISTED} more: model.addresses lists them all)"
        raise LayerError(
            f"model {self.name!r} has no layer {layer!r}.{did_you_mean(layer, addresses)} "
            f"Available layers: {shown}."
        )

    def _named_now(self, address: str) -> None:
        """Remember that ``address`` was named: a layout question lists the layers named."""
        self.__dict__.setdefault("_names_asked", {})[address] = None

    def token_id(self, token: int | str) -> int:
        """The id of ``token``: an id as it is; a string needs a tokenizer (``from_hf``)."""
        if isinstance(token, (int, np.integer)):
            return int(token)
        raise DNIError(
            f"model {self.name!r} has no tokenizer to read {token!r} with; give the token id, "
            "or load the model with dl.Model.from_hf(module, tokenizer)."
        )

    def _module(self, name: str) -> nn.Module:
        return self.module.get_submodule(name) if name else self.module

    @staticmethod
    def split_address(address: str) -> tuple[str, int | None, bool]:
        """``"lstm.l1.cell"`` → (``"lstm"``, 1, True); plain modules → (name, None, False)."""
        m = _SUB.match(address)
        if not m:
            return address, None, False
        if m.group("base2") is not None:
            return m.group("base2"), -1, True
        return m.group("base"), int(m.group("k")), bool(m.group("cell"))

    # -- running ----------------------------------------------------------------
    def forward(self, batch: Any) -> Any:
        """Call the module on an encoded batch (tensor, tuple of tensors or dict)."""
        if isinstance(batch, Mapping):
            return self.module(**batch)
        if isinstance(batch, tuple):
            return self.module(*batch)
        return self.module(batch)

    @contextlib.contextmanager
    def capture(self, addresses: Sequence[str]) -> Iterator[dict[str, Any]]:
        """Install forward hooks for ``addresses``; yields a dict filled by the next forward.

        Values are raw module outputs (first tensor of a tuple); recurrent
        sub-layers are stored as ``("rnn", module, input, hx)`` for the extractor
        to replay. Hooks are removed on exit, also on error.
        """
        store: dict[str, Any] = {}
        handles = []
        # one walk of the modules in all; Sequentials named by path are hooked as layers
        layers = set(self.layers) | set(self._named) if addresses else set()
        try:
            for addr in addresses:
                base, k, _cell = self.split_address(addr)
                if k is None and addr in layers:
                    keep = _keep(store, addr, self.layouts.get(addr))
                    handles.append(self._module(addr).register_forward_hook(keep))
                else:
                    mod = self._module(base)
                    handles.append(mod.register_forward_hook(_keep_rnn(store, addr, mod)))
            yield store
        finally:
            for h in handles:
                h.remove()

    def __repr__(self) -> str:
        return f"Model({self.name!r}, {type(self.module).__name__}, layers={len(self.layers)})"



def _first_tensor(out: Any) -> torch.Tensor:
    return first_tensor(out)


def _keep(store: dict, addr: str, layout: Layout | None = None) -> Callable:
    where = f"layer {addr!r}"

    def hook(_mod, _inp, out):
        store[addr] = layout.select(out, where) if layout is not None else first_tensor(out, where)

    return hook


def _keep_rnn(store: dict, addr: str, mod: nn.Module) -> Callable:
    def hook(_mod, inp, _out):
        x = inp[0]
        if isinstance(x, nn.utils.rnn.PackedSequence):
            raise LayerError(
                f"layer {addr!r} received a PackedSequence; per-layer replay needs padded "
                "input. Pad in encode() and let dni_lab mask the padding."
            )
        hx = inp[1] if len(inp) > 1 else None
        store[addr] = ("rnn", mod, x, hx)

    return hook


def _default_encode(records: list[Any]) -> torch.Tensor:
    """Stack array records into one float tensor (images); others need an explicit encode."""
    try:
        return torch.as_tensor(np.stack([np.asarray(r, dtype=np.float32) for r in records]))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            "records are not numeric arrays; pass Model(..., encode=fn) that turns a list of "
            "records into the module's input batch."
        ) from exc
