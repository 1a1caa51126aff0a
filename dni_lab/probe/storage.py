"""A probe kept as two files bound to its model: safetensors weights and a JSON sidecar.

``probe.save("truth")`` writes ``truth.safetensors`` (``coef``, ``intercept``, ``mean``,
``scale`` in float64, ``units`` in int64: nothing executable, no pickle) and
``truth.json``, which holds everything else applying the probe needs and where it came
from: the model's name and weights hash (the one every score frame's provenance
records), the layer, its address, layout and symbol level, the hypothesis's level, the
normalisation, the threshold, the training data's provenance, the library's versions and
the SHA-256 of the weights file itself.

:func:`load` refuses a weights file whose hash is not the sidecar's (altered or
truncated: always) and a model whose weights hash is not the sidecar's (unless
``allow_other_model=True``: the transfer is then recorded in ``probe.transfers_``).
Nothing is loaded half-way: every check runs before the probe is built.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..backend.engine.provenance import versions
from ..backend.errors import DNIError
from ..features.formats.saelens import read_json
from ..features.formats.saelens import safetensors as _safetensors
from .reading import as_model, model_sha256

FORMAT, VERSION = "dni_lab.probe", 1
_LEARNED = (
    "threshold_",
    "train_f1_",
    "train_auroc_",
    "cv_auroc_",
    "n_iter_",
    "address_",
    "model_name_",
    "model_sha256_",
    "layout_",
    "symbols_",
    "level_",
    "training_",
    "transfers_",
)


def paths(path: str | Path) -> tuple[Path, Path]:
    """The weights file and the sidecar of ``path`` (either file, or their common stem)."""
    p = Path(path)
    stem = p.with_suffix("") if p.suffix in (".safetensors", ".json") else p
    return stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")


def layout_of(model: Any, address: str) -> str | None:
    """The layout ``address`` is read with (None where the model reads no layouts)."""
    if not getattr(model, "reads_layouts", False):
        return None
    try:
        return str(model.layout(address))
    except DNIError:
        return None


def symbol_level(model: Any) -> str:
    """What one symbol of ``model`` is: ``"token"`` where it aligns records to tokens."""
    return "token" if getattr(model, "align", None) is not None else "symbol"


def require_same_model(probe: Any, model: Any, where: str) -> str:
    """``model``'s weights hash, refused unless the probe is bound (or transferred) to it."""
    digest = model_sha256(model)
    bound = {probe.model_sha256_} | {t["to"]["weights_sha256"] for t in probe.transfers_}
    if digest not in bound:
        raise DNIError(
            f"{where} is bound to model {probe.model_name_!r} (weights sha256 "
            f"{probe.model_sha256_[:16]}…); model {model.name!r} holds other weights "
            f"({digest[:16]}…). Pass the model it was fitted on, or allow_other_model=True "
            "to apply it to this one (a transfer)."
        )
    return digest


def transfer_entry(bound: dict[str, Any], to: dict[str, Any], **details: Any) -> dict[str, Any]:
    """One entry of ``probe.transfers_``: the model (and layer) it left and the one it met.

    ``bound`` and ``to`` hold ``name`` and ``weights_sha256`` (and ``layer`` where a layer
    changed); :func:`require_same_model` accepts every ``to`` model afterwards. ``details``
    say how (the sidecar loaded, or ``Probe.transfer``'s records and AUROCs).
    """
    return {"from": dict(bound), "to": dict(to), **details}


def save(probe: Any, path: str | Path) -> Path:
    """Write ``probe`` as ``<stem>.safetensors`` + ``<stem>.json``; returns the weights file."""
    if not hasattr(probe, "coef_"):
        raise DNIError("this Probe is not fitted; fit it before saving it.")
    weights, sidecar = paths(path)
    tensors = {
        "coef": torch.from_numpy(np.ascontiguousarray(probe.coef_[0], dtype=np.float64)),
        "intercept": torch.from_numpy(np.asarray(probe.intercept_, dtype=np.float64)),
        "mean": torch.from_numpy(np.ascontiguousarray(probe.mean_, dtype=np.float64)),
        "scale": torch.from_numpy(np.ascontiguousarray(probe.scale_, dtype=np.float64)),
        "units": torch.from_numpy(np.asarray(probe.units_, dtype=np.int64)),
    }
    blob = _safetensors().save(tensors, metadata={"format": FORMAT})
    params = probe.get_params()
    params["device"] = str(params["device"])
    params["units"] = None if params["units"] is None else [int(u) for u in params["units"]]
    learned = {k[:-1]: _finite(getattr(probe, k)) for k in _LEARNED}
    record = {
        "format": FORMAT,
        "format_version": VERSION,
        "model": {"name": learned.pop("model_name"), "weights_sha256": learned.pop("model_sha256")},
        "layer": probe.layer,
        "width": int(probe.coef_.shape[1]),
        "normalisation": "standardise: (x - mean) / scale, then coef and intercept",
        **learned,
        "params": params,
        "weights": {"file": weights.name, "sha256": hashlib.sha256(blob).hexdigest()},
        "versions": versions(),
    }
    weights.parent.mkdir(parents=True, exist_ok=True)
    weights.write_bytes(blob)
    sidecar.write_text(json.dumps(record, indent=2) + "\n")
    return weights


def load(cls: type, path: str | Path, *, model: Any, allow_other_model: bool = False) -> Any:
    """Read a probe written by :func:`save`, checked against its weights file and ``model``.

    Raises
    ------
    DNIError
        A missing file, a sidecar that is not this format, a weights file whose SHA-256
        is not the sidecar's (always), a model with other weights than the sidecar's
        (unless ``allow_other_model``).
    """
    weights, sidecar = paths(path)
    record = _read_sidecar(sidecar, weights)
    if not weights.exists():
        raise DNIError(
            f"no weights file {weights} beside {sidecar.name}; copy both files Probe.save wrote."
        )
    blob = weights.read_bytes()  # hashed and parsed from these bytes: one read
    digest, want = hashlib.sha256(blob).hexdigest(), record["weights"]["sha256"]
    if digest != want:
        raise DNIError(
            f"{weights.name} was altered since it was saved: its sha256 {digest[:16]}… is not "
            f"the {want[:16]}… that {sidecar.name} records. Restore the file from where the "
            "probe was saved, or fit the probe again."
        )
    try:
        t = _safetensors().load(blob)
    except Exception as exc:  # safetensors raises its own error type
        raise DNIError(
            f"{weights.name} is not a safetensors file ({exc}); save it again."
        ) from None
    model = as_model(model)
    here = model_sha256(model)
    bound = record["model"]
    transfer = None
    if here != bound["weights_sha256"]:
        if not allow_other_model:
            raise DNIError(
                f"{sidecar.name} binds the probe to model {bound['name']!r} (weights sha256 "
                f"{bound['weights_sha256'][:16]}…); model {model.name!r} holds other weights "
                f"({here[:16]}…). Pass the model it was fitted on, or allow_other_model=True "
                "to apply it to this one (a transfer, recorded in probe.transfers_)."
            )
        transfer = transfer_entry(
            bound, {"name": model.name, "weights_sha256": here}, file=str(sidecar)
        )
    probe = cls(**record["params"])
    probe.coef_ = t["coef"].numpy()[None, :]
    probe.intercept_ = t["intercept"].numpy()
    probe.mean_, probe.scale_ = t["mean"].numpy(), t["scale"].numpy()
    probe.units_ = t["units"].numpy()
    probe.n_features_in_, probe.classes_ = probe.coef_.shape[1], np.array([0, 1])
    for k in _LEARNED:
        setattr(probe, k, record.get(k[:-1]))
    probe.model_name_, probe.model_sha256_ = bound["name"], bound["weights_sha256"]
    probe.transfers_ = list(record.get("transfers") or []) + ([transfer] if transfer else [])
    return probe


def read_sidecar(path: str | Path) -> dict[str, Any]:
    """The sidecar of ``path`` (either file, or their stem), checked as :func:`load` checks it.

    What a caller needs before it has the model (the CLI: which model to build); the
    weights file and the model are checked only by :func:`load`.
    """
    weights, sidecar = paths(path)
    return _read_sidecar(sidecar, weights)


def _read_sidecar(sidecar: Path, weights: Path) -> dict[str, Any]:
    if not sidecar.exists():
        raise DNIError(
            f"no sidecar {sidecar} beside {weights.name}; a probe is the pair of "
            "files Probe.save wrote: copy both."
        )
    record = read_json(sidecar, "probe")
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise DNIError(
            f"{sidecar.name} is not a dni_lab probe sidecar (no format "
            f"{FORMAT!r}); pass the .json Probe.save wrote."
        )
    if record.get("format_version", 0) > VERSION:
        raise DNIError(
            f"{sidecar.name} is format version {record['format_version']}, newer "
            "than this dni_lab reads; upgrade dni_lab."
        )
    missing = [k for k in ("model", "weights", "params") if k not in record]
    if missing:
        raise DNIError(f"{sidecar.name} has no {missing}; the file is incomplete. Save it again.")
    return record


def _finite(value: Any) -> Any:
    """JSON has no NaN: an undefined score (``cv_auroc_`` without a fold) is null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value
