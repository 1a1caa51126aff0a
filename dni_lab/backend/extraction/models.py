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
from .layouts import (
    Layout,
    Seen,
    as_layout,
    first_input,
    first_tensor,
    hook_point_layout,
    infer_layouts,
    kind_layout,
)
from .module_names import (
    alias_target,
    layer_modules,
    layer_names,
    named_sequential,
    residual_hooks,
)

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


class Model:
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
        self.behavior_memo = BehaviorMemo()  # recent blocks' behaviors, for repeated queries

    @classmethod
    def from_hf(cls, module: nn.Module, tokenizer: Any, **kwargs: Any) -> Model:
        """A Hugging Face model and its fast tokenizer; tokens are the symbols.

        See :class:`dni_lab.backend.hf.HFModel` for the keyword arguments (``name``,
        ``pool``, ``max_length``, ``truncate``, ``stride``, ``skip_long``, ``meta``,
        ``decoder_input``) and
        ``docs/transformers.md``. Needs ``pip install dni_lab[hf]``.
        """
        if "hf" not in ADAPTERS:
            raise DNIError(
                "Model.from_hf needs dni_lab.backend.hf: `import dni_lab` loads it "
                "(with `pip install dni_lab[hf]` for transformers)."
            )
        return ADAPTERS["hf"](module, tokenizer, **kwargs)

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
            return layer
        alias = alias_target(self.module, self.layers, layer)
        if alias in addresses:
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

    @property
    def has_widths(self) -> bool:
        """Whether :meth:`layer_widths` already ran its probe pass."""
        return bool(self._widths) or self._probed

    def layer_widths(self, sample: Sequence[Any], device: torch.device | str) -> dict[str, int]:
        """Width (number of units) of every address, cached on the model.

        The first call runs one probe forward pass on ``sample`` (a record or two
        is enough) on ``device``; later calls return the cached widths, whatever
        their arguments, since widths do not depend on the records.

        Parameters
        ----------
        sample : sequence
            Records the module accepts; only used on the first call.
        device : torch.device or str
            Where the module's parameters live for the probe pass.

        Returns
        -------
        dict[str, int]
            ``{address: width}`` for every address with a tensor output.
        """
        if not self.has_widths:
            self._widths = self._probe_widths(list(sample), torch.device(device))
            self._probed = True
        elif self.reads_layouts:  # a Sequential named since the probe is an address now
            self._widths.update(self._widths_of(self.addresses, self._widths))
        return dict(self._widths)

    def _probe_widths(self, sample: list[Any], device: torch.device) -> dict[str, int]:
        if not sample:
            raise ValueError(
                f"model {self.name!r}: measuring layer widths needs at least one record; "
                "pass a non-empty sample of records the model accepts."
            )
        if not self.reads_layouts:
            return self._probe_gathered(sample, device)
        modules = self._probed_modules()
        seen: dict[str, Seen] = {}
        calls: dict[str, int] = {}
        # eval mode, as every read: a BatchNorm in train mode would update its statistics
        with torch.inference_mode(), eval_mode(self.module), contextlib.ExitStack() as stack:
            for addr, mod in modules.items():
                hook = _see(seen, addr, self.layouts.get(addr), calls)
                stack.callback(mod.register_forward_hook(hook, with_kwargs=True).remove)
            self.forward(to_device(self.encode(sample), device))
        unknown = sorted(set(self.layouts) - set(self.addresses) - set(modules))
        if unknown:
            raise LayerError(
                f"model {self.name!r}: layouts= names {unknown[0]!r}, which is no address of "
                f"the model.{did_you_mean(unknown[0], self.addresses)}"
            )
        refused = {a: seen.pop(a) for a in list(seen) if isinstance(seen[a], str)}
        found = infer_layouts(modules, seen, self.layouts, self.own_layout, self.name,
                              self.frames, self.reduce)
        self._read, self._unreadable = found.layouts, {**found.errors, **refused}
        for addr, n in calls.items():
            if n > 1:  # which call's output would a symbol's value be?
                self._read.pop(addr, None)
                self._unreadable[addr] = (
                    f"layer {addr!r} of model {self.name!r} runs {n} times in one forward pass "
                    "on different values (a shared module), so it has no one output per "
                    "symbol; read the modules around each call, or give each call a module "
                    "of its own."
                )
        widths: dict[str, int] = {}
        for addr in self.addresses:
            base, k, cell = self.split_address(addr)
            if k is not None:
                # a replayed recurrent sub-layer: its width follows from the module
                mod = self._module(base)
                widths[addr] = mod.hidden_size * (1 if cell or not mod.bidirectional else 2)
                self._read[addr] = Layout("n s u")  # replays come back batch first
        self._shapes = {a: s.out.shape for a, s in seen.items() if a in self._read}
        self._try_reads(seen, sample)
        widths.update(self._widths_of(self.addresses, widths))
        return widths

    def _widths_of(self, addresses: Sequence[str], known: Mapping[str, int]) -> dict[str, int]:
        """Widths of probed addresses with a layout (a Sequential named after the probe too)."""
        return {
            a: self._read[a].width(self._shapes[a])
            for a in addresses
            if a not in known and a in self._read and a in self._shapes
        }

    def _try_reads(self, seen: Mapping[str, Seen], sample: list[Any]) -> None:
        """Read every address on the probe's sample: what cannot be read fails now, not
        after a block (too few positions, records on the wrong axis, a frame count)."""
        counts = [int(self.symbols(r)) for r in sample]
        T = max(counts) if counts else 0
        for addr in list(self._read):
            if addr not in seen:
                continue
            try:
                self.symbol_view(addr, seen[addr].out, sample, T, counts)
            except LayerError as exc:
                self._read.pop(addr)
                self._unreadable[addr] = str(exc)

    def _probe_gathered(self, sample: list[Any], device: torch.device) -> dict[str, int]:
        """Widths where captured outputs already come back per symbol (a subclass's store)."""
        with torch.inference_mode(), self.capture(self.layers) as store:
            self.forward(to_device(self.encode(sample), device))
        widths: dict[str, int] = {}
        for addr in self.addresses:
            base, k, cell = self.split_address(addr)
            if k is not None:
                mod = self._module(base)
                widths[addr] = mod.hidden_size * (1 if cell or not mod.bidirectional else 2)
            elif addr in store:
                t = store[addr]
                widths[addr] = int(t.shape[1] if t.dim() == 4 else t.shape[-1])
        return widths

    def _probed_modules(self) -> dict[str, nn.Module]:
        """Every module the probe pass watches: the layers, and Sequentials (data flow)."""
        out = dict(layer_modules(self.module))
        known = {id(m) for m in out.values()}
        for name, mod in self.module.named_modules():
            if id(mod) not in known and not isinstance(mod, (nn.ModuleList, nn.ModuleDict)):
                out[name] = mod
                known.add(id(mod))
        return out

    # -- reading ----------------------------------------------------------------
    #: Whether outputs are read through layouts; a subclass whose capture already
    #: returns ``(records, symbols, units)`` (Hugging Face models) sets it False.
    reads_layouts = True

    def own_layout(self, address: str, module: nn.Module, ndim: int) -> str | None:
        """A layout this model fixes for an address beyond its module kind (None: no rule).

        A TransformerLens model's hook points are read by their names' meanings.
        """
        return hook_point_layout(self.module, address, module, ndim)

    def static_layout(self, address: str, ndim: int) -> Layout | None:
        """The layout a declaration, the model's rule or the module kind fixes (no probe)."""
        if address in self.layouts:
            return self.layouts[address]
        mod = self._module(address)
        spec = self.own_layout(address, mod, ndim) or kind_layout(mod, ndim)
        return Layout(spec) if spec else None

    def layout(self, address: str) -> Layout:
        """The layout ``address`` is read with; a :class:`LayerError` if it has several readings.

        Needs the probe pass (:meth:`layer_widths`) to have run.
        """
        if address in self._unreadable:
            raise LayerError(self._unreadable[address])
        found = self._read.get(address)
        if found is None:
            raise LayerError(
                f"layer {address!r} of model {self.name!r} produced no tensor in a probe pass; "
                "pick a layer that the module calls."
            )
        if self.prefix and found.axes.count("s") != 1:
            raise LayerError(
                f"model {self.name!r} drops prefix={self.prefix} leading positions, but layer "
                f"{address!r} is read with layout {found}, which has no single symbol axis; "
                "declare its layout or read a sequence layer."
            )
        return found

    def check_readable(self, address: str) -> None:
        """Raise the layout error of an address with several readings (before any data)."""
        if self.reads_layouts and self.has_widths:
            self.layout(address)

    def symbol_view(
        self, address: str, t: torch.Tensor, records: list[Any], T: int, counts: list[int]
    ) -> torch.Tensor:
        """A captured output as ``(records, T, units)``, position ``t`` = symbol ``t``."""
        layout = self.layout(address)
        where = f"layer {address!r} of model {self.name!r}"
        x = layout.view(t, counts, self._image_hw(layout, t, records, address), where)
        if x.shape[0] != len(records):
            raise LayerError(
                f"{where} is read with layout {layout} as {x.shape[0]} records, but the "
                f"block has {len(records)}; declare the layout (Model(layouts=...)) that puts "
                "the records on the axis 'n'."
            )
        x = x[:, self.prefix:] if self.prefix else x
        if x.shape[1] != T and not (self.padded and x.shape[1] > T):
            extra = f" after dropping prefix={self.prefix}" if self.prefix else ""
            raise LayerError(
                f"{where} has {x.shape[1]} symbol positions{extra} (layout {layout}), but the "
                f"block's longest record has {T} symbols; make encode() emit one position per "
                "symbol, pass Model(symbols=fn), prefix= for leading tokens, padded=True when "
                "encode() pads past the longest record, or a layout that reduces the extra "
                "axis ('r' with reduce=)."
            )
        return x[:, :T]

    def _image_hw(self, layout: Layout, t: torch.Tensor, records: list[Any], address: str):
        """The image size a 2-D map is resized to, or None when it is read as it is."""
        if layout.axes.count("s") != 2:
            return None
        shape = getattr(records[0], "shape", None)
        if shape is None or len(shape) < 2:
            return None  # the map's own pixels are the symbols
        hw = (int(shape[-2]), int(shape[-1]))
        s_sizes = tuple(int(n) for a, n in zip(layout.axes, t.shape, strict=True) if a == "s")
        if s_sizes != hw and not self.resize:
            raise LayerError(
                f"layer {address!r} outputs maps of {s_sizes}, the input is {hw}; use "
                "Model(..., resize=True) to resize maps to the input."
            )
        return hw

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


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a tensor, or the tensors of a tuple/list/dict, to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def _first_tensor(out: Any) -> torch.Tensor:
    return first_tensor(out)


def _keep(store: dict, addr: str, layout: Layout | None = None) -> Callable:
    where = f"layer {addr!r}"

    def hook(_mod, _inp, out):
        store[addr] = layout.select(out, where) if layout is not None else first_tensor(out, where)

    return hook


def _see(seen: dict, addr: str, layout: Layout | None, calls: dict[str, int]) -> Callable:
    """A probe hook: what the module returned (the tensor read) and was given, how often.

    A declared ``output=`` that the output does not have is that address's error, kept
    in ``seen`` as a string: the other addresses stay readable.
    """
    where = f"layer {addr!r}"

    def hook(_mod, args, kwargs, out):
        try:
            t = layout.select(out, where) if layout is not None else first_tensor(out, where)
        except LayerError as exc:
            if layout is not None:
                seen[addr] = str(exc)
            return  # no tensor output: not a readable address
        before = seen.get(addr)
        # a module run again on the same values (TransformerLens applies ln1 to the
        # query, key and value inputs alike) has one output; other values make two
        if before is None:
            calls[addr] = 1
        elif not (isinstance(before, Seen) and before.out.shape == t.shape
                  and torch.equal(before.out, t)):
            calls[addr] += 1
        seen[addr] = Seen(t, first_input(args, kwargs))

    return hook


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode; every submodule's own ``training`` flag put back on exit.

    ``module.train(flag)`` on the way out would set every submodule to the top's flag:
    an eval-mode network inside a fresh (train-mode) wrapper would come back training.
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, flag in modes:
            m.training = flag  # the attribute itself: train() would recurse into children


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
