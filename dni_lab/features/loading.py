"""``dl.features.load``: a feature set from disk, whichever format wrote it."""

from __future__ import annotations

from pathlib import Path

import torch

from ..backend.errors import DNIError
from .base import FeatureSet
from .formats import dictionary_learning, saelens, sparsify


def load(
    path: str | Path,
    hook: str | None = None,
    name: str | None = None,
    dtype: str | torch.dtype | None = None,
    scaling_factor: float | None = None,
) -> FeatureSet:
    """Load a feature set saved by SAELens, sparsify or dictionary_learning.

    The format is read from the files in ``path``: ``cfg.json`` +
    ``sae_weights.safetensors`` (SAELens, any version; ``sparsity.safetensors``
    becomes ``log_sparsity``), ``cfg.json`` + ``sae.safetensors`` (one sparsify
    hook directory; a run's root with several asks for ``hook=``), ``ae.pt`` +
    ``config.json`` (dictionary_learning, read with ``weights_only=True``).

    Parameters
    ----------
    path : str or Path
        The directory holding the files.
    hook : str, optional
        The model address the set reads; overrides what the files say (sparsify
        names hooks by module path, dictionary_learning by submodule).
    name : str, optional
        The set's name in score frames; defaults to the directory's name.
    dtype : str or torch.dtype, optional
        Cast the weights to this dtype; without it, weights whose dtype differs
        from the config's are an error.
    scaling_factor : float, optional
        A SAELens set normalized with ``"expected_average_only_in"``: the constant its
        inputs are scaled by, folded into the weights (read from ``activation_scaler.json``
        when the directory has one; SAELens' ``pretrained_saes.yaml`` lists it for its
        releases as ``norm_scaling_factor``).

    Returns
    -------
    FeatureSet

    Examples
    --------
    >>> sae = dl.features.load("saes/resid_1")                        # doctest: +SKIP
    >>> dl.inspect(model, hyps, ["corr"], data, units=[sae])          # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is a file"
        raise DNIError(
            f"feature set path {str(path)!r} {what}; pass the directory that holds the "
            "config and weights (cfg.json + sae_weights.safetensors for SAELens)."
        )
    files = {p.name for p in path.iterdir()}
    if saelens.WEIGHTS in files or (saelens.CFG in files and sparsify.WEIGHTS not in files):
        fs = saelens.read(path, dtype=dtype, name=name, scaling_factor=scaling_factor)
        if hook:
            fs.hook = hook
        return fs
    if scaling_factor is not None:
        raise DNIError(
            f"scaling_factor= folds a SAELens set's input scaling; {str(path)!r} is no SAELens "
            "directory (no cfg.json + sae_weights.safetensors). Drop scaling_factor=."
        )
    if sparsify.WEIGHTS in files:
        return sparsify.read(path, hook=hook, dtype=dtype, name=name)
    if dictionary_learning.WEIGHTS in files or dictionary_learning.CFG in files:
        return dictionary_learning.read(path, hook=hook, dtype=dtype, name=name)
    subdirs = sparsify.hook_dirs(path)
    if subdirs:
        chosen = [p for p in subdirs if hook is not None and p.name == hook]
        if len(subdirs) == 1 or chosen:
            target = chosen[0] if chosen else subdirs[0]
            return sparsify.read(target, hook=hook, dtype=dtype, name=name)
        raise DNIError(
            f"{str(path)!r} holds sparsify SAEs for hooks {[p.name for p in subdirs]}; "
            "pick one: dl.features.load(path, hook='<one of them>') or load(path / hook)."
        )
    raise DNIError(
        f"{str(path)!r} holds no feature set dni_lab can read (found {sorted(files)[:10]}); "
        "expected cfg.json + sae_weights.safetensors (SAELens), cfg.json + sae.safetensors "
        "(sparsify) or ae.pt + config.json (dictionary_learning)."
    )
