"""Train-once, load-after model store for the reference workloads.

Models are trained by our own scripts, deterministically under a seed, and
cached as ``state_dict`` files (``torch.save`` of tensors only, loaded with
``weights_only=True``) next to a JSON sidecar with the config, metrics and a
checksum. The directory is ``$DNI_LAB_MODELS`` or ``~/.cache/dni_lab/models``.
Training runs under :func:`using_threads` so that the weights, and with them
the store's entries, do not depend on the machine's core count.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn


def model_dir(directory: str | os.PathLike | None = None) -> Path:
    """The model store's directory (created on demand)."""
    d = Path(directory or os.environ.get("DNI_LAB_MODELS") or Path.home() / ".cache/dni_lab/models")
    d.mkdir(parents=True, exist_ok=True)
    return d


def config_key(name: str, config: dict[str, Any]) -> str:
    """File stem for a model: its name and a hash of its config."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return f"{name}-{hashlib.sha256(blob).hexdigest()[:12]}"


def cached_model(
    name: str,
    config: dict[str, Any],
    build: Callable[[], nn.Module],
    train: Callable[[nn.Module], dict[str, Any]],
    directory: str | os.PathLike | None = None,
) -> tuple[nn.Module, dict[str, Any]]:
    """Load the model ``name`` trained under ``config``, training it first if needed.

    Parameters
    ----------
    name : str
        Workload name, e.g. ``"sql-lstm"``.
    config : dict
        Everything that determines the trained weights (sizes, seed, epochs, data).
    build : callable
        Returns a fresh, untrained module of the right architecture.
    train : callable
        Trains the module in place and returns metrics (e.g. ``{"accuracy": 0.71}``)
        plus any JSON-able metadata to keep with the model.
    directory : path, optional
        Store directory; defaults to :func:`model_dir`.

    Returns
    -------
    module, meta : nn.Module, dict
        The trained module in eval mode and its sidecar metadata.
    """
    d = model_dir(directory)
    stem = config_key(name, config)
    weights, sidecar = d / f"{stem}.pt", d / f"{stem}.json"
    module = build()
    if weights.exists() and sidecar.exists():
        loaded = _load_entry(weights, sidecar, module)
        if loaded is not None:
            return module.eval(), loaded
        warnings.warn(
            f"model store entry {weights} is corrupt (checksum, sidecar or payload); "
            f"retraining {name!r}.",
            stacklevel=2,
        )
    meta = {"name": name, "config": config, **train(module)}
    module.eval()
    tmp = tempfile.NamedTemporaryFile(dir=d, suffix=".tmp", delete=False)
    tmp.close()
    torch.save(module.state_dict(), tmp.name)
    meta["sha256"] = hashlib.sha256(Path(tmp.name).read_bytes()).hexdigest()
    os.replace(tmp.name, weights)
    _atomic_write(sidecar, json.dumps(meta, indent=1, default=str))
    return module, meta


def _load_entry(weights: Path, sidecar: Path, module: nn.Module) -> dict[str, Any] | None:
    """The entry's metadata after loading its weights into ``module``; None if corrupt.

    Only plain tensors are ever unpickled (``weights_only=True``): an entry whose
    payload holds anything else, whose sidecar is not a JSON object, or whose
    tensors do not fit the architecture counts as corrupt, never as a crash.
    """
    try:
        meta = json.loads(sidecar.read_text())
        if not isinstance(meta, dict):
            return None
        if hashlib.sha256(weights.read_bytes()).hexdigest() != meta.get("sha256"):
            return None
        state = torch.load(weights, map_location="cpu", weights_only=True)
        module.load_state_dict(state)
    except (OSError, ValueError, RuntimeError, EOFError, KeyError, TypeError, pickle.PickleError):
        return None
    return meta


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def using_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the caller's setting.

    Float reductions may round differently under another thread count, so
    training under a fixed count is bitwise reproducible on any machine; one
    thread also keeps tiny models from slowing down badly on a shared machine.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
