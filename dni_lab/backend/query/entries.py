"""What a catalog holds: models (checkpoints), hypothesis families, input datasets and
feature sets.

:class:`~.catalog.Catalog` adds registration to these collections;
:class:`~.relations.Scope` reads them (with a namespace) into relations. Both
depend on this module, not on each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..extraction.models import Model
from ..hypothesis.hypotheses import HypothesisFamily


@dataclass
class ModelEntry:
    """A model (one checkpoint) and its metadata; checkpoints of one model share a name."""

    model: Model
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def mid(self) -> str:
        return self.model.name


@dataclass
class HypothesisEntry:
    """A hypothesis family (a plain hypothesis is a family of one) and where it comes from."""

    family: HypothesisFamily
    source: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class FeatureEntry:
    """A feature set (``dl.features``) and the model name it attaches to.

    ``mid`` None attaches it to every model in scope that has its hook with width
    ``d_in`` (a namespace set, or one registered without a model).
    """

    features: Any
    mid: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(repr=False)
class Dataset:
    """Input records under a dataset id (``did``)."""

    did: str
    records: Sequence[Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # the records themselves would flood a notebook's output
        return f"<Dataset {self.did!r}: {len(self.records)} records>"


class CatalogContents:
    """The five collections of a catalog, keyed as the relations name them.

    Attributes
    ----------
    models : list of ModelEntry
        Checkpoints in registration order.
    hypotheses : list of HypothesisEntry
        Hypothesis families in registration order.
    datasets : dict of str to Dataset
        Input records by dataset id.
    tables : dict of str to polars.DataFrame
        Any other relation, by name.
    features : list of FeatureEntry
        Feature sets in registration order (their latents' ``fid`` follow it).
    """

    def __init__(self) -> None:
        self.models: list[ModelEntry] = []
        self.hypotheses: list[HypothesisEntry] = []
        self.datasets: dict[str, Dataset] = {}
        self.tables: dict[str, pl.DataFrame] = {}
        self.features: list[FeatureEntry] = []


def source_of(fam: HypothesisFamily) -> str:
    """Where a hypothesis is defined: the module of its function or class."""
    fn = getattr(fam, "fn", None)
    mod = getattr(fn, "__module__", None) if fn is not None else type(fam).__module__
    return str(mod or "unknown")
