"""A run's progress as a bar and one line of text: the lightest live view of a run.

The ``%%inspect`` magic shows a live :class:`~.table.ScoreTable` by default;
``dni_lab.magic.live_display = ProgressView`` shows this bar instead (for very
wide frames, or front ends that cannot render anywidget panels).
"""

from __future__ import annotations

from ..backend.engine.run import Run


def progress_text(run: Run) -> str:
    """One line on where a run stands: records, blocks, converged pairs, time.

    Parameters
    ----------
    run : Run
        A background inspection or query.

    Returns
    -------
    str
        E.g. ``"running: 512 of 2,000 records read, 2 blocks, 30/64 pairs converged, 1.2 s"``;
        once it ended early, why (``"... records read — every pair settled (early stopping)"``).
    """
    p = run.progress
    state = "cancelled" if p.cancelled else "done" if p.done else "running"
    text = (
        f"{state}: {p.read_text()}, {p.blocks} blocks, "
        f"{p.pairs_converged:,}/{p.pairs_total:,} pairs converged, {p.elapsed_s:.1f} s"
    )
    return f"{text}; {p.cluster_text}" if p.cluster_text else text


class ProgressView:
    """A progress bar and a line of text (ipywidgets); nothing without ipywidgets.

    Follows the magic's live-view protocol (:class:`dni_lab.magic.LiveView`):
    ``update()`` while the run goes on, ``finish()`` once it has ended.

    Parameters
    ----------
    run : Run
        The run to follow.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.box = self.bar = self.label = None
        try:
            import ipywidgets as w
        except ImportError:  # without widgets the cell stays quiet until the result
            return
        self.bar = w.IntProgress(min=0, max=max(1, run.progress.total_records or 1))
        self.label = w.Label(progress_text(run))
        self.box = w.HBox([self.bar, self.label])

    def _ipython_display_(self) -> None:
        if self.box is not None:
            from IPython.display import display

            display(self.box)

    def update(self) -> None:
        """Show the run's current progress."""
        if self.bar is not None:
            self.bar.value = min(self.run.progress.records_read, self.bar.max)
            self.label.value = progress_text(self.run)

    def finish(self) -> None:
        """Show the final progress; the bar turns green, or amber for a cancelled run."""
        self.update()
        if self.bar is not None:
            self.bar.bar_style = "warning" if self.run.progress.cancelled else "success"
