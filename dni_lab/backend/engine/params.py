"""How an inspection reads its data: one frozen, validated parameters object.

``dl.inspect``'s keywords, the engine's :class:`~dni_lab.backend.engine.inspection.Inspection`,
the ``WITH (...)`` options of an INSPECT query and the metadata stored with an
exported score frame all go through :class:`InspectParams`, so a value is checked
once, by one rule, with one message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..errors import DNIError
from ..hypothesis.cache import HypothesisCache


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: Field -> (is the value valid?, what a valid value is). The query layer uses the same
#: rules to put its caret under a bad ``WITH`` value.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "eps": (
        lambda v: v is None or (_number(v) and 0 < v < math.inf),
        "a positive number or NULL (None: read every record)",
    ),
    "confidence": (lambda v: _number(v) and 0 < v < 1, "a number strictly between 0 and 1"),
    "block_size": (lambda v: _count(v) and v > 0, "a positive whole number"),
    "device": (
        lambda v: isinstance(v, (str, torch.device)),
        "a device name ('cpu', 'cuda', 'auto')",
    ),
    "behavior": (
        lambda v: isinstance(v, str) or callable(v) or getattr(v, "metric_gradient", False),
        "'activation', 'gradient', a function or dl.verify.GradientOf(metric)",
    ),
    "cache": (
        lambda v: v is None or isinstance(v, (bool, str, Path, HypothesisCache)),
        "TRUE, FALSE or a directory",
    ),
    "max_records": (lambda v: v is None or (_count(v) and v > 0), "a positive count or None"),
    "max_seconds": (
        lambda v: v is None or (_number(v) and 0 < v < math.inf),
        "a positive number of seconds or None",
    ),
    "min_records": (lambda v: _count(v) and v >= 0, "a count of 0 or more"),
    "cluster": (
        lambda v: v is None or isinstance(v, bool) or (isinstance(v, str) and v.strip() != "")
        or (_count(v) and v > 0),
        "'local', a count of local workers, 'auto', a Ray address ('ray://host:10001') or None",
    ),
    "workers": (lambda v: v is None or (_count(v) and v > 0), "a positive count or None"),
    "forward_batch": (lambda v: v is None or (_count(v) and v > 0), "a positive count or None"),
    "fdr": (
        lambda v: v is None or (_number(v) and 0 < v < 1),
        "a false discovery rate strictly between 0 and 1 (e.g. 0.05) or None",
    ),
}


@dataclass(frozen=True)
class InspectParams:
    """How an inspection reads: early stopping, blocks, device, behavior, cache, limits.

    Parameters
    ----------
    eps : float or None
        Early stopping: a pair stops once its error is ≤ eps; reading stops when
        all pairs have. ``None`` reads every record.
    confidence : float
        Confidence level of the error intervals, strictly between 0 and 1.
    block_size : int
        Records per block.
    device : str or torch.device
        ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ...
    behavior : {"activation", "gradient"} or callable
        What a unit does at a symbol; a callable maps activations ``(R, T, D)`` and
        the records to a tensor of the same shape.
    cache : HypothesisCache, path, bool or None
        Hypothesis-behavior cache; None uses the process-wide default, False none.
    max_records : int or None
        Read at most this many records. A budget ends reading, it does not settle a
        score: a pair still open when it ends the run stays open (``converged=False``),
        its ``reason`` naming the budget and its error.
    max_seconds : float or None
        Read for at most this many seconds of wall-clock time (checked after each block);
        pairs open when it ends the run stay open, as with ``max_records``.
    min_records : int
        Read at least this many records before any pair may stop early.
    cluster : str, int, bool or None
        Shard the run over Ray (``pip install dni_lab[ray]``): ``"local"`` or a worker
        count starts a Ray on this machine, ``"auto"`` or True joins the Ray this process
        is connected to (or ``RAY_ADDRESS``), ``"ray://host:10001"`` or ``"host:6379"``
        connects there. None (or False) runs in this process.
    workers : int or None
        Ray actors reading blocks; None: one per GPU when the device is CUDA, else one
        per CPU of the cluster.
    forward_batch : int or None
        Records per forward pass, apart from ``block_size`` (the records between two
        early-stopping checks): a large model wants a small forward batch and a large
        statistical block. A block runs as forward batches of records of similar
        length (less padding); None: the whole block in one pass. The scores do not
        depend on it.
    fdr : float or None
        Control the false discovery rate at this level: ``dl.inspect`` and ``dl.query``
        add ``p_value``, ``q_value`` (Benjamini–Hochberg over the run's tested pairs, per
        measure) and ``significant`` (``q_value <= fdr``) to the frame
        (:mod:`~dni_lab.backend.engine.fdr`). None: no such columns.

    Raises
    ------
    DNIError
        When a value breaks its rule; the message names the field and the value.

    Examples
    --------
    >>> InspectParams(eps=None).replace(block_size=64).block_size
    64
    """

    eps: float | None = 0.025
    confidence: float = 0.95
    block_size: int = 512
    device: str | torch.device = "auto"
    behavior: str | Callable[..., Any] = "activation"
    cache: HypothesisCache | str | Path | bool | None = None
    max_records: int | None = None
    max_seconds: float | None = None
    min_records: int = 0
    cluster: str | int | bool | None = None
    workers: int | None = None
    forward_batch: int | None = None
    fdr: float | None = None

    def __post_init__(self) -> None:
        if self.cluster is False:  # "no cluster" has one spelling downstream
            object.__setattr__(self, "cluster", None)
        self._validate()

    def _validate(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            what = problem(f.name, value)
            if what is not None:
                raise DNIError(
                    f"{f.name} must be {what}, got {value!r}; "
                    f"e.g. {f.name}={f.default!r} (the default)."
                )
        check_workers(self.cluster, self.workers)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The parameters' names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes: Any) -> InspectParams:
        """A copy with ``changes`` applied (and validated)."""
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            raise TypeError(f"unknown inspection parameters {unknown}; known: {self.names()}.")
        return dataclasses.replace(self, **changes)

    def to_metadata(self) -> dict[str, Any]:
        """JSON-ready values, as stored with an exported score frame.

        A behavior function is written as ``"function"``, a cache object as its
        directory (or ``"memory"``); everything else as given.
        """
        out: dict[str, Any] = {name: getattr(self, name) for name in self.names()}
        out["device"] = str(self.device)
        if getattr(self.behavior, "metric_gradient", False):
            out["behavior"] = repr(self.behavior)  # gradient_of(name)
        elif not isinstance(self.behavior, str):
            out["behavior"] = "function"
        if isinstance(self.cache, HypothesisCache):
            directory = getattr(self.cache, "directory", None)
            out["cache"] = str(directory) if directory is not None else "memory"
        elif isinstance(self.cache, Path):
            out["cache"] = str(self.cache)
        return out


_Options = TypeVar("_Options")


def keyword_options(cls: type[_Options], func: str, options: dict[str, Any]) -> _Options:
    """``cls(**options)``: a function's shared keyword options as one frozen dataclass.

    A signature ``f(..., **options: Unpack[SomeOptions])`` accepts any keyword at run
    time; this refuses an unknown one as Python refuses an unknown named parameter,
    naming ``func`` and the options it takes, so a typo (``n_randon=3``) never falls
    back silently to a default.
    """
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(
            f"{func}() got an unexpected keyword argument {unknown[0]!r}; "
            f"its options are {', '.join(names)}."
        )
    return cls(**options)


def check_workers(cluster: Any, workers: Any) -> None:
    """Refuse ``workers=`` without ``cluster=``: it would be ignored (no Ray starts).

    Parameters
    ----------
    cluster, workers
        As in :func:`dl.inspect`.

    Raises
    ------
    DNIError
        When ``workers`` is set and ``cluster`` is None or False.
    """
    if workers is not None and (cluster is None or cluster is False):
        raise DNIError(
            f"workers={workers!r} needs cluster=: pass cluster='local' to start that many "
            "Ray workers on this machine (or cluster='auto' / a Ray address), or drop "
            "workers= to run in this process."
        )


def problem(name: str, value: Any) -> str | None:
    """What a valid ``name`` is, if ``value`` is not one; None when it is valid."""
    valid, what = RULES[name]
    return None if valid(value) else what
