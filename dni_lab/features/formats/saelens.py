"""SAELens' layout: ``cfg.json`` + ``sae_weights.safetensors`` (+ ``sparsity.safetensors``).

Version 6 configs keep the hook in ``metadata.hook_name`` and say so with
``metadata.sae_lens_version``; without a version a config is read as SAELens does
pre-6 ones (``hook_point``, ``activation_fn_str``, TopK as
``activation_fn_kwargs.k``, a boolean ``normalize_activations``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..._version import __version__
from ...backend.errors import DNIError
from ..architectures import feature_class, with_weights
from ..base import FeatureSet

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
SPARSITY = "sparsity.safetensors"
SCALER = "activation_scaler.json"  # a mid-training checkpoint's input scaling factor
#: The SAELens release whose layout :func:`save` writes (read back by its ``load_from_disk``).
SAE_LENS_VERSION = "6.54.0"


def safetensors():
    try:
        import safetensors.torch as st
    except ImportError as exc:  # pragma: no cover - safetensors comes with the extra
        raise DNIError(
            "reading and writing feature sets and probes needs safetensors: "
            "pip install dni_lab[features]."
        ) from exc
    return st


class Config(dict):
    """A feature set's config file: a missing key is a :class:`DNIError` naming the file."""

    def __init__(self, data: dict[str, Any], source: str, file: str) -> None:
        super().__init__(data)
        self.source, self.file = source, file

    def __missing__(self, key: str) -> Any:
        raise DNIError(
            f"{self.source}: {self.file} has no {key!r}, which this architecture needs; the "
            f"file is incomplete or from another tool. Add {key!r} (see the tool's config)."
        )

    def copy(self) -> Config:
        return Config(self, self.source, self.file)


def read_json(file: Path, what: str, source: str | None = None) -> Any:
    """The JSON in ``file``, or a :class:`DNIError` naming it and where to copy it from
    (``what`` was saved there: a feature set, a probe); ``source`` prefixes the message."""
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"{source}: " if source else ""
        raise DNIError(
            f"{where}{file.name} is not valid JSON ({exc}); the file is truncated or was "
            f"edited by hand. Copy it again from where the {what} was saved."
        ) from None


def read_config(file: Path, source: str) -> Config:
    """The JSON object in ``file``, or a :class:`DNIError` naming it (not JSON, not an object)."""
    data = read_json(file, "feature set", source)
    if not isinstance(data, dict):
        raise DNIError(f"{source}: {file.name} holds a JSON {type(data).__name__}, not an object.")
    return Config(data, source, file.name)


def read_tensors(file: Path, source: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, or an error naming it (truncated, not safetensors)."""
    try:
        return safetensors().load_file(str(file))
    except Exception as exc:  # safetensors raises its own error type
        raise DNIError(
            f"{source}: cannot read {file.name} ({type(exc).__name__}: {str(exc)[:120]}); "
            "the file is truncated or not safetensors. Copy it again."
        ) from None


def _version(cfg: dict[str, Any]) -> tuple[int, ...]:
    v = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version")
    if not v:
        return (0,)
    return tuple(int(p) for p in str(v).split("-")[0].split(".")[:3] if p.isdigit())


def _pre6(cfg: dict[str, Any]) -> dict[str, Any]:
    """A pre-6 config in version 6's terms, with SAELens' defaults of that conversion."""
    cfg = cfg.copy()
    if "hook_point" in cfg and "hook_name" not in cfg:
        cfg["hook_name"] = cfg.pop("hook_point")
    act = cfg.get("activation_fn", cfg.get("activation_fn_str", "relu"))
    k = (cfg.get("activation_fn_kwargs") or {}).get("k")
    if act == "topk" and k is not None:
        cfg["architecture"] = "topk"
        cfg["k"] = k
    cfg.setdefault("architecture", "standard")
    cfg.setdefault("apply_b_dec_to_input", True)
    norm = cfg.get("normalize_activations")
    if isinstance(norm, bool):
        norm = "expected_average_only_in" if norm else "none"
    cfg["normalize_activations"] = norm or "none"
    return cfg


def read(
    path: Path,
    dtype: str | torch.dtype | None = None,
    name: str | None = None,
    scaling_factor: float | None = None,
) -> FeatureSet:
    """The feature set saved in directory ``path`` in SAELens' layout.

    ``normalize_activations="expected_average_only_in"`` scales the hook's output by a
    constant before encoding. SAELens folds that constant into the weights when training
    ends; a checkpoint saved mid-training keeps it in ``activation_scaler.json`` beside
    the config, and a pretrained release lists it in SAELens' ``pretrained_saes.yaml``
    (``norm_scaling_factor``). It is folded here the way SAELens folds it (``W_enc · c``,
    ``W_dec / c``, ``b_dec / c``), from ``scaling_factor`` or that file, and recorded in
    ``meta["folded_scaling_factor"]``.
    """
    source = f"SAELens feature set {str(path)!r}"
    cfg = read_config(path / CFG, source)
    if _version(cfg) < (6,):
        cfg = _pre6(cfg)
    factor = _scaling_factor(path, cfg, scaling_factor, source)
    if factor is not None:
        cfg["normalize_activations"] = "none"  # folded below, as SAELens leaves it
    meta = dict(cfg.get("metadata") or {})
    hook = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point")
    if not hook:
        raise DNIError(f"{source}: cfg.json names no hook (metadata.hook_name or hook_point).")
    cls = feature_class(cfg.get("architecture", "standard"), source)
    weights_file = path / WEIGHTS
    if not weights_file.exists():
        raise DNIError(f"{source} has a {CFG} but no {WEIGHTS}; copy the weights file next to it.")
    weights = read_tensors(weights_file, source)
    kwargs: dict[str, Any] = {}
    if cls.architecture == "topk":
        kwargs.update(
            k=cfg["k"], rescale_acts_by_decoder_norm=cfg.get("rescale_acts_by_decoder_norm", False)
        )
    if "d_out" in cfg:
        kwargs.update(d_out=cfg["d_out"], hook_out=meta.get("hook_name_out"))
    fs = cls(
        cfg["d_in"],
        cfg["d_sae"],
        hook,
        name=name or meta.get("dni_lab_name") or path.name,
        dtype=dtype or cfg.get("dtype", "float32"),
        apply_b_dec_to_input=cfg.get("apply_b_dec_to_input", True),
        normalize_activations=cfg.get("normalize_activations", "none"),
        meta=meta,
        **kwargs,
    )
    with_weights(fs, weights, f"{source} ({WEIGHTS})", cast=dtype is not None)
    if factor is not None:
        with torch.no_grad():
            fs.W_enc.mul_(factor)
            fs.W_dec.div_(factor)
            fs.b_dec.div_(factor)
        fs.meta["folded_scaling_factor"] = factor
    if (path / SPARSITY).exists():
        fs.log_sparsity = read_tensors(path / SPARSITY, source).get("sparsity")
    return fs


def _scaling_factor(path: Path, cfg: dict[str, Any], given: float | None, source: str):
    """The input scaling factor to fold, or None; a DNIError when one is needed and absent."""
    expected = cfg.get("normalize_activations") == "expected_average_only_in"
    if given is not None and not expected:
        raise DNIError(
            f"{source}: scaling_factor={given!r} given, but its cfg.json normalizes with "
            f"{cfg.get('normalize_activations', 'none')!r}; only 'expected_average_only_in' "
            "scales by a constant. Drop scaling_factor=."
        )
    if not expected:
        return None
    if cfg.get("d_out") is not None:
        raise DNIError(
            f"{source}: a transcoder with normalize_activations='expected_average_only_in' "
            "is not read; fold the scaling factor in SAELens (fold_activation_norm_scaling_"
            "factor) and save it again."
        )
    if given is None and (path / SCALER).exists():
        given = read_config(path / SCALER, source).get("scaling_factor")
        if given is None:  # SAELens writes null once the factor is folded: the cfg is stale
            raise DNIError(
                f"{source}: cfg.json says 'expected_average_only_in' but {SCALER} holds no "
                "factor; pass dl.features.load(path, scaling_factor=...)."
            )
    if given is None:
        raise DNIError(
            f"{source}: normalize_activations='expected_average_only_in' scales the hook's "
            f"output by a constant this directory does not store (no {SCALER}); pass "
            "dl.features.load(path, scaling_factor=c) with its value (SAELens' "
            "pretrained_saes.yaml lists it as norm_scaling_factor) to fold it into the weights."
        )
    try:
        factor = float(given)
    except (TypeError, ValueError):
        factor = float("nan")
    if not (factor > 0 and factor != float("inf")):
        raise DNIError(f"{source}: the scaling factor must be a positive number, not {given!r}.")
    return factor


def save(fs: FeatureSet, path: str | Path, model_name: str | None = None) -> Path:
    """Write ``fs`` in SAELens' version-6 layout, readable by ``SAE.load_from_disk``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = fs.config()
    meta = {
        **{k: v for k, v in fs.meta.items() if isinstance(v, (str, int, float, bool, type(None)))},
        "sae_lens_version": SAE_LENS_VERSION,
        "hook_name": fs.hook,
        "dni_lab_name": fs.name,
        "dni_lab_version": __version__,
    }
    if model_name:
        meta["model_name"] = model_name
    if fs.hook_out is not None:
        meta["hook_name_out"] = fs.hook_out
    out = {k: v for k, v in cfg.items() if k not in ("hook", "name", "hook_out")}
    out.update(device="cpu", reshape_activations="none", metadata=meta)
    (path / CFG).write_text(json.dumps(out, indent=2))
    state = {k: v.detach().cpu().contiguous() for k, v in fs.state_dict().items()}
    safetensors().save_file(state, str(path / WEIGHTS))
    log_sparsity = getattr(fs, "log_sparsity", None)
    if log_sparsity is not None:
        safetensors().save_file({"sparsity": log_sparsity.detach().cpu()}, str(path / SPARSITY))
    return path
