"""The session catalog: models (checkpoints) with metadata, hypotheses, input datasets,
feature sets.

The catalog holds Python objects (:mod:`.entries`); :mod:`.relations` turns
them, together with the notebook's namespace, into the relations a query reads:
``models``, ``units``, ``hypotheses``, ``inputs`` and ``features``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import polars as pl

from ..engine.resolve import is_feature_set
from ..errors import DNIError, did_you_mean
from ..extraction.models import Model
from ..hypothesis.hypotheses import Hypothesis, HypothesisFamily, as_family
from .entries import (
    CatalogContents,
    Dataset,
    FeatureEntry,
    HypothesisEntry,
    ModelEntry,
    source_of,
)
from .errors import QueryError
from .relations import Scope


class Catalog(CatalogContents):
    """What a notebook session has registered for queries.

    Models, hypotheses, datasets and feature sets registered here appear in the
    relations ``models``, ``units``, ``hypotheses``, ``inputs`` and ``features``; so do
    the :class:`~dni_lab.Model`, :func:`~dni_lab.hypothesis` and feature-set objects
    of the namespace a query runs in. Other namespace objects are reached by their
    variable name in FROM.

    Examples
    --------
    >>> cat = Catalog()
    >>> for k, net in enumerate(checkpoints):                          # doctest: +SKIP
    ...     cat.add_model(dl.Model(net, encode, name="sqlparser"), epoch=k)
    >>> cat.add_hypothesis(keywords, source="sql grammar")              # doctest: +SKIP
    >>> cat.add_inputs(queries, "sql_test")                             # doctest: +SKIP
    >>> cat.add_features(dl.features.load("saes/resid1"), model)        # doctest: +SKIP
    >>> dl.query("SELECT ... INSPECT ...", catalog=cat)                 # doctest: +SKIP
    """

    _default: ClassVar[Catalog | None] = None

    @classmethod
    def default(cls) -> Catalog:
        """The session-wide catalog that ``%%inspect`` and ``dl.query`` use by default."""
        if cls._default is None:
            cls._default = cls()
        return cls._default

    # -- registration ------------------------------------------------------------
    def add_model(self, model: Model, **meta: Any) -> Model:
        """Register a model (a checkpoint); ``meta`` (epoch=, architecture=, trained=, ...)
        is added to ``model.meta``. Checkpoints of one model share its name and differ in
        their metadata (typically ``epoch``)."""
        if not isinstance(model, Model):
            raise DNIError(f"add_model needs a dl.Model, got {type(model).__name__}.")
        merged = {**model.meta, **meta}
        for e in self.models:
            if e.model is model:
                e.meta = merged
                return model
            if e.mid == model.name and e.meta == merged:
                raise DNIError(
                    f"a model named {model.name!r} with metadata {merged} is already registered; "
                    "checkpoints of one model need distinct metadata (e.g. epoch=)."
                )
        self.models.append(ModelEntry(model, merged))
        return model

    def add_hypothesis(
        self,
        hypothesis: Callable[..., Any] | HypothesisFamily,
        *,
        name: str | None = None,
        kind: str | None = None,
        source: str | None = None,
        **meta: Any,
    ) -> HypothesisFamily:
        """Register a hypothesis function or family; ``source`` says where it comes from
        (defaults to its Python module); ``meta`` adds columns to ``hypotheses``."""
        if isinstance(hypothesis, HypothesisFamily):
            fam = hypothesis
        elif name is not None or kind is not None:
            fam = Hypothesis(hypothesis, name=name, kind=kind or "binary")
        else:
            fam = as_family(hypothesis)
        self.hypotheses = [e for e in self.hypotheses if e.family is not fam]
        self.hypotheses.append(HypothesisEntry(fam, source or source_of(fam), dict(meta)))
        return fam

    def add_inputs(self, records: Sequence[Any], name: str, **meta: Any) -> Dataset:
        """Register a dataset of records under ``name`` (its ``did``)."""
        if isinstance(records, (str, bytes)) or not hasattr(records, "__len__"):
            raise DNIError(
                f"add_inputs needs a sequence of records (a list, a tuple, an array), got "
                f"{type(records).__name__}; materialize a generator with list(...)."
            )
        ds = Dataset(name, records, dict(meta))
        self.datasets[name] = ds
        return ds

    def add_features(self, features: Any, model: Model | str | None = None, **meta: Any) -> Any:
        """Register a feature set (``dl.features``) as units of a model: its latents become
        rows of the relation ``features(mid, fid, set, hook, latent, ...)``.

        Parameters
        ----------
        features : FeatureSet
            The set; its ``hook`` must be an address of the model, ``d_in`` its width.
        model : Model or str, optional
            The model (or model name) it belongs to; None attaches it to every model in
            scope whose hook ``features.hook`` has width ``d_in``.
        **meta
            Added as columns of ``features``.
        """
        if not is_feature_set(features):
            raise DNIError(
                f"add_features needs a feature set (dl.features.load, train_sae, pca, ...), "
                f"got {type(features).__name__}."
            )
        mid = model.name if isinstance(model, Model) else model
        for e in self.features:
            if e.features is features:
                e.mid, e.meta = mid, dict(meta)
                return features
            if e.features.address == features.address and e.mid == mid:
                raise DNIError(
                    f"a feature set named {features.address!r} is already registered"
                    + (f" for model {mid!r}" if mid else "")
                    + "; give this one another name (fs.name = ...)."
                )
        self.features.append(FeatureEntry(features, mid, dict(meta)))
        return features

    def add_relation(self, name: str, frame: pl.DataFrame) -> None:
        """Register any Polars frame as a relation that queries may join and filter."""
        self.tables[name] = frame

    def register(self, obj: Any, name: str | None = None, **meta: Any) -> Any:
        """Register ``obj`` by its type: a model (or a list of them), a feature set (``model=``
        as in :meth:`add_features`), a hypothesis or family, a Polars frame (needs ``name``),
        or a sequence of records (needs ``name``)."""
        if isinstance(obj, Model):
            return self.add_model(obj, **meta)
        if is_feature_set(obj):  # before callables: a feature set is an nn.Module
            return self.add_features(obj, **meta)
        if isinstance(obj, (list, tuple)) and obj and all(isinstance(m, Model) for m in obj):
            return [self.add_model(m, **meta) for m in obj]
        if isinstance(obj, HypothesisFamily) or callable(obj):
            return self.add_hypothesis(obj, name=name, **meta)
        if name is None:
            raise DNIError("register(frame_or_records, name=...) needs a name for the relation.")
        if isinstance(obj, pl.DataFrame):
            return self.add_relation(name, obj)
        return self.add_inputs(obj, name, **meta)

    # -- reading -----------------------------------------------------------------
    def relation(self, name: str, namespace: Mapping[str, Any] | None = None) -> pl.DataFrame:
        """A relation as a query sees it (``"models"``, ``"units"``, ...), for exploring."""
        scope = Scope(self, namespace)
        rel = scope.resolve(name)
        if rel is None:
            raise QueryError(f"unknown relation {name!r}.{did_you_mean(name, scope.names())}")
        frame = scope.frame(rel)
        return frame.select([c for c in frame.columns if not c.startswith("__dl_")])

    def __repr__(self) -> str:
        return (
            f"<Catalog: {len(self.models)} models, {len(self.hypotheses)} hypotheses, "
            f"{len(self.datasets)} datasets, {len(self.tables)} tables, "
            f"{len(self.features)} feature sets>"
        )
