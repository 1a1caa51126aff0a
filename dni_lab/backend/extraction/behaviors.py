"""Behaviors: one unit's activations over chosen records, the service verify and examples share.

``layer_plan``/``address_and_width`` resolve a layer as the engine does,
``check_units`` validates a unit selection, and ``symbol_activations`` yields
per-batch activations through the engine's Extractor, so every consumer reads
a unit's behavior the same way. ``BehaviorSource`` serves the widgets' overlays
(one selected unit and its hypothesis' signal) on the same Extractor.

A *layer* here may also be a feature set (``dl.features``): its latents are the
units of the layer ``"{hook}:{name}"``, encoded from the hook's activation
(:func:`features_of` says which layers are latents, for the Extractor).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..engine.resolve import ModelUnits, is_feature_set, resolve_units
from ..errors import DNIError
from ..hypothesis.hypotheses import HypothesisFamily, as_family, hypothesis_block
from .extract import Extractor, on_device, resolve_device, symbol_mask
from .models import Model


def layer_plan(model: Model, layer: str | int, sample: Sequence[Any], device) -> ModelUnits:
    """Resolve ``layer`` to its address and width, as the engine resolves units."""
    return resolve_units(model, [[(layer, "*")]], list(sample[:2]), device)


def address_and_width(
    model: Model, layer: str | int, sample: Sequence[Any], device
) -> tuple[str, int]:
    mp = layer_plan(model, layer, sample, device)
    (addr,) = mp.layer_units
    return addr, len(mp.layer_units[addr])


def features_of(model: Model, layer: Any) -> dict[str, tuple[str, Any]]:
    """``{"{hook}:{name}": (hook address, feature set)}`` when ``layer`` is a feature set
    (what the Extractor needs to encode its latents), else ``{}``."""
    if not is_feature_set(layer):
        return {}
    return {layer.address: (model.resolve_layer(layer.hook), layer)}


def check_units(units: Sequence[int], width: int, addr: str) -> np.ndarray:
    idx = np.asarray(list(units), dtype=np.int64)
    if idx.size == 0:
        raise DNIError(f"no units given for layer {addr!r}; pass a non-empty list of indices.")
    if idx.min() < 0 or idx.max() >= width or len(set(idx.tolist())) != len(idx):
        raise DNIError(
            f"units {idx.tolist()} are not distinct indices of layer {addr!r} (0..{width - 1})."
        )
    return idx


def batches(items: Sequence[Any], size: int) -> Iterator[tuple[int, list[Any]]]:
    for start in range(0, len(items), size):
        yield start, list(items[start : start + size])


def symbol_activations(
    model: Model,
    records: Sequence[Any],
    addr: str,
    units: np.ndarray | None,
    device: torch.device,
    batch_size: int = 256,
    extractor: Extractor | None = None,
    features: Mapping[str, tuple[str, Any]] | None = None,
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """``(first, acts (R, T, U), mask (R, T))`` per batch, extracted by the engine's Extractor.

    The caller holds :func:`~.extract.on_device` for the model. A caller that asks
    again for the same units (a panel turning pages) passes its ``extractor`` so
    that replayed recurrent layers are built once. ``features`` (from
    :func:`features_of`) makes ``addr`` a feature set's latents.
    """
    feats = dict(features or {})
    ex = extractor or Extractor(model, {addr: units}, "activation", device, feats)
    for first, recs in batches(records, batch_size):
        mask = symbol_mask(model, recs, device)
        yield first, ex(recs, mask)[addr], mask


def as_model_map(models: Any) -> dict[str, Model]:
    """``{mid: Model}`` from one model, a list of models, or a mapping."""
    if models is None:
        return {}
    if isinstance(models, Model):
        return {models.name: models}
    if isinstance(models, Mapping):
        return {str(k): v for k, v in models.items()}
    return {m.name: m for m in models}


def as_signal_map(hypotheses: Any) -> dict[str, tuple[HypothesisFamily, int]]:
    """``{hid: (family, column)}`` for every signal of the given hypotheses."""
    if hypotheses is None:
        return {}
    if isinstance(hypotheses, HypothesisFamily) or callable(hypotheses):
        hypotheses = [hypotheses]
    out: dict[str, tuple[HypothesisFamily, int]] = {}
    for h in hypotheses:
        fam = as_family(h)
        for j, hid in enumerate(fam.hids()):
            out[hid] = (fam, j)
    return out


class BehaviorSource:
    """Unit activations and hypothesis signals over records, cached per unit.

    Parameters
    ----------
    models : Model, list or mapping
        The models named by selections' ``mid``.
    records : sequence
        The records the overlay shows.
    hypotheses : list, optional
        Hypotheses and families; a selection's ``hid`` picks the signal.
    device : str
        Where to run the models ("cpu" keeps a GPU free for the run itself).
    batch_size : int
        Records per forward pass when scanning all records (top-activating order).
    features : feature set or list, optional
        Feature sets (``dl.features``) whose latents selections may name: a selection's
        ``layer`` ``"{hook}:{name}"`` is the set's ``address``, ``unit`` the latent.
    """

    def __init__(
        self,
        models: Any,
        records: Sequence[Any],
        hypotheses: Any = None,
        device: str = "cpu",
        batch_size: int = 256,
        features: Any = None,
    ) -> None:
        self.models = as_model_map(models)
        self.features = as_feature_map(features)
        self.records = records if isinstance(records, Sequence) else list(records)
        self.signals = as_signal_map(hypotheses)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self._extractors: dict[tuple[str, str, int], Extractor] = {}
        self._peaks: dict[tuple[str, str, int], np.ndarray] = {}
        self._copies: dict[str, tuple[tuple[int, ...], Model]] = {}
        self._levels: dict[tuple[str, int], tuple[Model, HypothesisFamily]] = {}

    def model(self, mid: str) -> Model:
        """A private copy of model ``mid``, renewed when the original's weights change.

        A background run drives the original module from its worker thread; forward
        hooks (and moves between devices) on one shared module from two threads would
        mix their captures, so the overlay never touches the original.
        """
        if mid not in self.models:
            raise DNIError(
                f"no model {mid!r} for the overlay; pass it in models= "
                f"(have {sorted(self.models)})."
            )
        orig = self.models[mid]
        version = _weights_version(orig)
        have = self._copies.get(mid)
        if have is None or have[0] != version:
            module = _without_capture_hooks(copy.deepcopy(orig.module))
            clone = orig.with_module(module)  # keeps a subclass's own reading (HFModel)
            self._copies[mid] = (version, clone)
            self._extractors = {k: v for k, v in self._extractors.items() if k[0] != mid}
            self._peaks = {k: v for k, v in self._peaks.items() if k[0] != mid}
        return self._copies[mid][1]

    def activations(self, sel: Mapping[str, Any], indices: Sequence[int]) -> list[np.ndarray]:
        """The unit's behavior on records ``indices``: one float32 array per record."""
        mid, layer, unit = sel["mid"], sel["layer"], int(sel["unit"])
        model = self.model(mid)
        key = (mid, layer, unit)
        feats = self.features_at(model, layer)
        if key not in self._extractors:
            self._extractors[key] = Extractor(
                model, {layer: [unit]}, "activation", self.device, feats
            )
        ext = self._extractors[key]
        recs = [self.records[i] for i in indices]
        out: list[np.ndarray] = []
        with on_device(model, self.device):
            for _, acts, mask in symbol_activations(
                model, recs, layer, np.asarray([unit]), self.device, self.batch_size, ext
            ):
                a = acts[..., 0].cpu().numpy()
                n = mask.sum(1).cpu().numpy()
                out += [a[i, : n[i]].astype(np.float32) for i in range(len(a))]
        return out

    def features_at(self, model: Model, layer: str) -> dict[str, tuple[str, Any]]:
        """The Extractor's ``features`` for ``layer``: a known set's latents, else ``{}``."""
        fs = self.features.get(layer)
        return {} if fs is None else features_of(model, fs)

    def width(self, mid: str, layer: str) -> int:
        """The number of units of ``layer`` of model ``mid`` (a set's ``d_sae``)."""
        if layer in self.features:
            return int(self.features[layer].d_sae)
        model = self.model(mid)
        return address_and_width(model, layer, self.records, self.device)[1]

    def signal(self, hid: str | None, indices: Sequence[int], model: Model) -> list[np.ndarray]:
        """The hypothesis signal ``hid`` on records ``indices`` (empty list if unknown)."""
        if hid is None or hid not in self.signals:
            return []
        fam, col = self.signals[hid]
        recs = [self.records[i] for i in indices]
        n = [model.symbols(r) for r in recs]
        first = int(indices[0]) if len(indices) else 0
        H = hypothesis_block([self._decided(hid, fam, model)], recs, n, first, None)
        return [H[i, : n[i], col].astype(np.float32) for i in range(len(recs))]

    def _decided(self, hid: str, fam: HypothesisFamily, model: Model) -> HypothesisFamily:
        """``fam`` as ``model`` reads it, its level decided once from all the records.

        Deciding per shown record would stop on one whose counts coincide (``'9'``);
        the decision is kept per hypothesis and model (a renewed copy decides again).
        """
        from ..engine.levels import decided_for_model  # the engine imports extraction

        have = self._levels.get((hid, id(model)))
        if have is None or have[0] is not model:  # the model is kept, so its id is not reused
            have = (model, decided_for_model(model, [fam], self.records)[0])
            self._levels[hid, id(model)] = have
        return have[1]

    def peaks(self, sel: Mapping[str, Any]) -> np.ndarray:
        """``(n_records, 2)``: each record's minimum and maximum behavior (cached per unit)."""
        key = (sel["mid"], sel["layer"], int(sel["unit"]))
        if key not in self._peaks:
            acts = self.activations(sel, range(len(self.records)))
            self._peaks[key] = np.asarray(
                [(a.min(), a.max()) if a.size else (np.nan, np.nan) for a in acts], np.float64
            )
        return self._peaks[key]

    def order(self, sel: Mapping[str, Any] | None, how: str) -> np.ndarray:
        """Record indices: ``"index"`` (as given), ``"top"`` (highest peak first) or
        ``"bottom"`` (lowest trough first)."""
        n = len(self.records)
        if how == "index" or not sel:
            return np.arange(n)
        pk = self.peaks(sel)
        if how == "top":
            return np.argsort(-np.nan_to_num(pk[:, 1], nan=-np.inf), kind="stable")
        if how == "bottom":
            return np.argsort(np.nan_to_num(pk[:, 0], nan=np.inf), kind="stable")
        raise ValueError(f"unknown order {how!r}; use 'index', 'top' or 'bottom'.")


def as_feature_map(features: Any) -> dict[str, Any]:
    """``{"{hook}:{name}": feature set}`` from one set, a list of them, or None."""
    if features is None:
        return {}
    items = [features] if is_feature_set(features) else list(features)
    bad = [type(f).__name__ for f in items if not is_feature_set(f)]
    if bad:
        raise DNIError(
            f"features= takes feature sets (dl.features.load, train_sae, pca, ...); got {bad}."
        )
    return {f.address: f for f in items}


def feature_sets_in(units: Any) -> list[Any]:
    """The feature sets an inspection's (normalized) unit specification attaches, once each."""
    groups = [g for spec in units.values() for g in spec] if isinstance(units, Mapping) else units
    out: dict[int, Any] = {}
    for group in groups or []:
        for layer, _sel in group:
            if is_feature_set(layer):
                out.setdefault(id(layer), layer)
    return list(out.values())


def _without_capture_hooks(module: Any) -> Any:
    """Drop the engine's capture hooks that a copy taken mid-forward carries along (they
    would write the copy's activations into the run's store); the user's hooks stay."""
    for m in module.modules():
        for hooks in (m._forward_hooks, m._forward_pre_hooks):
            ours = "dni_lab.backend.extraction.models"
            for k in [k for k, fn in hooks.items() if fn.__module__ == ours]:
                del hooks[k]
    return module


def _weights_version(model: Model) -> tuple[int, ...]:
    """Changes when a parameter or buffer is written in place (an optimizer step) or replaced."""
    tensors = list(model.module.parameters()) + list(model.module.buffers())
    return tuple(id(t) for t in tensors) + tuple(t._version for t in tensors)
