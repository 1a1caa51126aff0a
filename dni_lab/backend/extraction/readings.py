"""Reading a model's outputs: the probe pass, each address's layout and width, the view.

:class:`Readings` is the part of :class:`~.models.Model` that turns what a module
returns into ``(records, symbols, units)``: one probe forward pass (in eval mode, every
submodule's flag put back) records what each module returned and was given, the
:mod:`.layouts` rules give each address a layout, a second probe proves the ones they
leave ambiguous (:mod:`.layouts.proof`; what it cannot prove is asked in one error that
lists every such address), and every address is read once on the probe's sample so
that what cannot be read fails before any block. A subclass whose capture already
returns symbols (Hugging Face models) sets ``reads_layouts = False`` and keeps the
widths probe only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..errors import LayerError, did_you_mean
from .layouts import (
    Inferred,
    Layout,
    Seen,
    hook_point_layout,
    infer_layouts,
    kind_layout,
)
from .layouts.proof import Pass, Proof, ask, contradiction, prove, second_pass, signature
from .module_names import layer_modules
from .probe_hooks import eval_mode, see, to_device


class Readings:
    """The probe pass and the layouts of a :class:`~.models.Model` (a mixin)."""

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
                hook = see(seen, addr, self.layouts.get(addr), calls)
                stack.callback(mod.register_forward_hook(hook, with_kwargs=True).remove)
            batch = self.encode(sample)
            self.forward(to_device(batch, device))
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
        self._proofs = {a: Proof(a, lay, "declared" if a in self.layouts else "rule")
                        for a, lay in found.layouts.items()}
        shared = {a for a, n in calls.items() if n > 1}  # refused below whatever they read as
        self._prove(found, seen, modules, sample, batch, device, shared)
        for addr, n in calls.items():
            if n > 1:  # which call's output would a symbol's value be?
                self._read.pop(addr, None)
                self._unreadable[addr] = (
                    f"layer {addr!r} of model {self.name!r} runs {n} times in one forward pass "
                    "on different values (a shared module), so it has no one output per "
                    "symbol; read the modules around each call, or give each call a module "
                    "of its own."
                )
        widths = self._replay_widths()
        self._read.update(dict.fromkeys(widths, Layout("n s u")))  # replays: batch first
        self._proofs.update({a: Proof(a, Layout("n s u"), "rule") for a in widths})
        self._shapes = {a: s.out.shape for a, s in seen.items() if a in self._read}
        self._try_reads(seen, sample)
        widths.update(self._widths_of(self.addresses, widths))
        return widths

    def _prove(self, found: Inferred, seen: Mapping[str, Seen], modules: Mapping[str, nn.Module],
               sample: list[Any], batch: Any, device: torch.device, shared: set[str]) -> None:
        """Prove the layouts the rules left ambiguous with one more probe pass; every
        address that no probe settles gets one error asking them all, each with its
        readings, what the probes saw and the ``layouts=`` entry that settles it."""
        todo = {a: note for a, note in found.ambiguous.items()
                if a in found.errors and a not in shared}
        self._questions: dict[str, Proof] = {}  # a probe run again asks afresh
        # a declaration is obeyed, but one the probe contradicts is refused, with what it saw
        declared = {a: lay for a, lay in self.layouts.items()
                    if a in seen and a not in shared and lay.axes.count("n") == 1
                    and len(lay.axes) == seen[a].out.dim() >= 3}  # fmt: skip
        if not (todo or declared) or self.frames:  # a frame's batch axis is no record count
            return
        counts = [int(self.symbols(r)) for r in sample]
        probed = [*todo, *declared]
        first = Pass(len(sample), max(counts), {a: tuple(seen[a].out.shape) for a in probed})

        def run(records: list[Any]) -> None:
            with torch.inference_mode(), eval_mode(self.module):
                self.forward(to_device(self.encode(records), device))

        key = (signature(batch), tuple(counts), tuple(sorted(probed)))
        second = second_pass(self.module, key, sample, self.symbols,
                             {a: modules[a] for a in probed}, run, self.layouts)
        for a, lay in declared.items():
            wrong = contradiction(a, lay, first, second, self.prefix_of(a), self.padded)
            if wrong:
                self._read.pop(a, None)
                self._unreadable[a] = f"model {self.name!r}: {wrong}"
                self._proofs[a] = Proof(a, None, "contradicted", wrong)
        asked, listed = [], set(self.addresses)
        for a in todo:
            proof = self._proofs[a] = prove(a, first, second, self.prefix_of(a), self.padded)
            if proof.layout is not None:
                self._read[a] = proof.layout
                self._unreadable.pop(a, None)
            elif a in listed:
                asked.append(proof)
        if asked:
            # asked when named, listing only the layers named on this model (the units a
            # run requested), never every square output the model happens to have
            self._questions = {p.address: p for p in asked}
            self._kinds = {a: type(modules[a]).__name__ for a in todo}
            self._notes = dict(todo)
            self._unreadable.update({p.address: "" for p in asked})

    def layout_question(self, addresses: Sequence[str]) -> str:
        """One message asking the layout of every layer among ``addresses`` (and every
        other layer named on this model so far) that no probe could prove; '' if none.

        Each layer comes with its readings, what the probes saw and the one
        ``layouts=`` argument that settles them all (:func:`.layouts.proof.ask`).
        """
        questions = getattr(self, "_questions", {})
        named = [*addresses, *getattr(self, "_names_asked", ())]
        asked = [questions[a] for a in dict.fromkeys(named) if a in questions]
        if not asked:
            return ""
        return ask(self.name, asked, self._kinds, self._notes)

    def layout_report(self, addresses: Sequence[str]) -> dict[str, dict[str, Any]]:
        """How each of ``addresses`` is read: its layout, and whether it was declared,
        fixed by a rule (module kind, data flow), proved by the second probe or asked.

        Parameters
        ----------
        addresses : sequence of str
            Probed addresses (:meth:`layer_widths` ran).

        Returns
        -------
        dict
            ``{address: {"layout", "how", "evidence"}}``, as provenance's ``layouts``.
        """
        proofs = getattr(self, "_proofs", {})
        out = {}
        for a in addresses:
            if not self.reads_layouts:
                out[a] = {"layout": None, "how": "model", "evidence": "the model's own capture"}
            elif a in proofs:
                out[a] = proofs[a].row()
            elif a in self._unreadable:  # the rules left several readings, or it fails
                out[a] = {"layout": None, "how": "asked",
                          "evidence": self._unreadable[a] or self.layout_question([a])}
        return out

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

    def _replay_widths(self) -> dict[str, int]:
        """Widths of the replayed recurrent sub-layers (``lstm.l1``, its cells), from the module."""
        widths: dict[str, int] = {}
        for addr in self.addresses:
            base, k, cell = self.split_address(addr)
            if k is not None:
                mod = self._module(base)
                widths[addr] = mod.hidden_size * (1 if cell or not mod.bidirectional else 2)
        return widths

    def _probe_gathered(self, sample: list[Any], device: torch.device) -> dict[str, int]:
        """Widths where captured outputs already come back per symbol (a subclass's store)."""
        with torch.inference_mode(), self.capture(self.layers) as store:
            self.forward(to_device(self.encode(sample), device))
        widths = self._replay_widths()
        for addr in self.addresses:
            if addr not in widths and addr in store:
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
            raise LayerError(self._unreadable[address] or self.layout_question([address]))
        found = self._read.get(address)
        if found is None:
            raise LayerError(
                f"layer {address!r} of model {self.name!r} produced no tensor in a probe pass; "
                "pick a layer that the module calls."
            )
        prefix = self.prefix_of(address)
        if prefix and found.axes.count("s") != 1:
            raise LayerError(
                f"model {self.name!r} drops prefix={prefix} leading positions, but layer "
                f"{address!r} is read with layout {found}, which has no single symbol axis; "
                "declare its layout or read a sequence layer."
            )
        return found

    def prefix_of(self, address: str) -> int:
        """Leading positions of ``address``'s symbol axis that are no symbol (``prefix``).

        A vision transformer's patch embedding runs before its prefix tokens are added,
        so its model answers 0 there (:meth:`dni_lab.backend.hf.vision.VisionModel.prefix_of`).
        """
        return self.prefix

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
            if t.shape[0] == sum(counts):  # one row per symbol of every record: frames
                fix = (f"its first axis has one row per symbol of every record (frames on the "
                       f"batch axis): declare dl.Model(..., layouts={{{address!r}: 'f u'}}) "
                       "('f u r' with reduce= for a map)")  # fmt: skip
            else:
                fix = ("declare the layout (Model(layouts=...)) that puts the records on the "
                       "axis 'n'")
            raise LayerError(f"{where} is read with layout {layout} as {x.shape[0]} records, but "
                             f"the block has {len(records)}; {fix}.")  # fmt: skip
        prefix = self.prefix_of(address)
        x = x[:, prefix:] if prefix else x
        if x.shape[1] != T and not (self.padded and x.shape[1] > T):
            extra = f" after dropping prefix={prefix}" if prefix else ""
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

