"""``dl.inspect``: the one call that runs a Deep Neural Inspection."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import polars as pl
import torch

from .engine.fdr import FDRInspection
from .engine.inspection import Inspection
from .engine.params import InspectParams
from .engine.progress_bar import with_bar
from .engine.run import Run, run_here, start_run
from .hypothesis.cache import HypothesisCache


def inspect(
    models: Any,
    hypotheses: Any,
    measures: Any = ("corr",),
    data: Iterable[Any] = (),
    units: Any = None,
    eps: float | None = 0.025,
    confidence: float = 0.95,
    block_size: int = 512,
    device: str | torch.device = "auto",
    behavior: str | Callable = "activation",
    cache: HypothesisCache | str | bool | None = None,
    background: bool = False,
    on_block: Callable[[Any], None] | None = None,
    progress: bool = False,
    max_records: int | None = None,
    max_seconds: float | None = None,
    cluster: str | int | bool | None = None,
    workers: int | None = None,
    forward_batch: int | None = None,
    column: str | None = None,
    fdr: float | None = None,
) -> pl.DataFrame | Run:
    """Score how well hidden units match hypotheses.

    Parameters
    ----------
    models : Model or list of Model
        One or many models (checkpoints, epochs, an untrained copy); they need not
        share an architecture.
    hypotheses : list
        Functions ``record -> one value per symbol``, :func:`dl.hypothesis` objects
        and hypothesis families.
    measures : list
        Names (``"corr"``, ``"logreg"``, ``"ridge"``, ``"mi"``, ``"diffmeans"``,
        ``"iou"``, ``"local_iou"``), Measure objects, or functions ``f(u, h)``.
    data : iterable, path, DataLoader or ray.data.Dataset
        Records (strings, token lists, image arrays); a generator works, and so does an
        endless one (a stream that only repeats its records ends the run under early
        stopping, its open pairs saying so). A ``torch.utils.data.DataLoader`` is read as
        the records it batches (each collated batch split back along its batch axis). Or where they
        live, read block by block (on a cluster, each worker reads its own blocks): a
        Parquet file, an Arrow IPC file (``.arrow``/``.feather``/``.ipc``), a text file
        (one record per line), a directory of them, or a ``ray.data.Dataset``; tables
        (Polars, pyarrow, pandas) work too. A path may be local or a URI of a
        ``pyarrow.fs`` or fsspec filesystem (``file://``, ``s3://``, ``gs://``,
        ``memory://``, ...). See ``docs/ray.md``, "Data sources". Token ids are
        records too: a 2-D integer tensor, a ``BatchEncoding`` (padding dropped through
        its attention mask) or a list of id lists, one record per row; a Hugging Face
        model feeds them as they are and its hypotheses get a ``dl.TokenRecord``
        (``docs/transformers.md``, "Token ids as data").
    units : list, optional
        ``[(layer, "*" | [indices]), ...]``; a layer is an address (see
        ``Model.addresses``) or a 0-based position among layers with parameters.
        Each entry is a unit group for joint measures; an entry may itself be a
        list of pairs to group units of several layers. Default: every layer with
        parameters, one group each.
    eps : float or None
        Early stopping: a pair stops once its error is ≤ eps; reading stops when
        all pairs have. ``None`` reads every record.
    confidence : float
        Confidence level of the error intervals.
    block_size : int
        Records per block.
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"``, ``"cuda"``, ...
    behavior : {"activation", "gradient"}, callable or GradientOf
        What a unit does at a symbol; a callable maps activations ``(R, T, D)`` and
        the records to a tensor of the same shape; ``dl.verify.GradientOf(metric)``: the
        gradient of a metric of the output (a logit difference) with respect to each
        unit, on any model, Hugging Face transformers included.
    cache : HypothesisCache, path, bool or None
        Hypothesis-behavior cache; None uses the process-wide default (memory and
        ``~/.cache/dni_lab``), False disables it.
    background : bool
        Return a :class:`Run` handle at once instead of the frame.
    on_block : callable, optional
        Called after every block with the run (background) or the inspection.
    max_records : int, optional
        Read at most this many records. A budget ends reading, it does not settle a
        score: a pair still open when it ends the run stays open (``converged=False``),
        its ``reason`` naming the budget and its error (``"left open: max_records=5,000
        ended the reading at err 0.036 > eps 0.025"``). Reaching the data's own end is
        different: every score is then its full-data value and counts as converged.
    max_seconds : float, optional
        Read for at most this many seconds (wall clock, checked after each block); pairs
        open when it ends the run stay open, as with ``max_records``.
    progress : bool
        Draw a tqdm progress bar (records read, pairs settled) on stderr: for
        scripts and terminals; in a notebook display the background run instead.
    cluster : str, int, bool or None
        Shard the run over a Ray cluster (``pip install dni_lab[ray]``): ``"local"`` or a
        worker count starts one on this machine, ``"auto"`` joins the running one, and
        ``"ray://host:10001"`` connects to a remote one. Workers keep the models resident
        and fold blocks into measure states that this process merges in record order, so
        the frame equals the single-process one (see the README's "Ray cluster" section).
    workers : int, optional
        Ray actors to start; default one per GPU (CUDA device) or per CPU of the cluster.
    forward_batch : int, optional
        Records per forward pass (default: the whole block). ``block_size`` is the
        statistical step of early stopping; a big model wants a small forward batch and a
        large block. Records of similar length share a forward batch; the padding this
        leaves is in ``dl.provenance(frame)["padding_waste"]``. Scores do not depend on it.
    column : str, optional
        The column of a table, file or Dataset that holds the records; needed when it
        has several.
    fdr : float, optional
        Control the false discovery rate at this level (``0 < fdr < 1``, e.g. 0.05) over
        every pair tested: the frame gains ``p_value`` (a two-sided t-test of the score
        against the measure's ``null_score`` from its error estimate), ``q_value``
        (Benjamini–Hochberg per measure) and ``significant`` (``q_value <= fdr``). Only
        measures with a ``null_score`` (``corr``) give p-values; other pairs, and pairs
        without an error yet or with a null score, get null p and q and are not counted.
        Valid under early stopping: a pair stops on its error, not its score, and with
        ``eps`` set its error counts as at least eps (the stop selected it on its error).
        ``dl.provenance(frame)["fdr_control"]`` counts the pairs tested and the
        discoveries. See :mod:`dni_lab.backend.engine.fdr`.

    Returns
    -------
    polars.DataFrame or Run
        The score frame: one row per (model, unit, hypothesis, measure). A run's
        ``metadata()`` is what ``dl.export`` stores with the frame. In the foreground a
        Ctrl-C stops reading after the block in flight and returns the frame so far:
        ``dl.provenance(frame)["partial"]`` is True and a ``PartialResultWarning`` says so.
        ``dl.provenance(frame)["ended_by"]`` says what ended the reading.

    Raises
    ------
    DNIError
        A bad parameter (``eps <= 0``, ``confidence`` outside (0, 1), a budget of 0), named
        before anything is read. An error met after some blocks (a :class:`RecordError`: a
        record of another kind, at its position) carries the frame of the records read
        before it as ``err.partial_frame``, marked partial in ``dl.provenance``.

    See Also
    --------
    dni_lab.backend.engine.params.InspectParams : the validated run options.
    """
    params = InspectParams(
        eps=eps,
        confidence=confidence,
        block_size=block_size,
        device=device,
        behavior=behavior,
        cache=cache,
        max_records=max_records,
        max_seconds=max_seconds,
        cluster=cluster,
        workers=workers,
        forward_batch=forward_batch,
        fdr=fdr,
    )
    kind = Inspection if fdr is None else FDRInspection  # adds p, q and significant
    insp = kind(models, hypotheses, measures, data, units=units, params=params, column=column)
    if background:
        return start_run(insp, [on_block] if on_block else [])
    if not progress:
        return run_here(insp, on_block)  # Ctrl-C: the partial frame, marked partial
    bar, callback = with_bar(insp.progress.total_records, on_block)
    try:
        return run_here(insp, callback)
    finally:
        bar.close(insp.progress)
