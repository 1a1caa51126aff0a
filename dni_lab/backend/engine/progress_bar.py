"""``dl.inspect(..., progress=True)`` outside notebooks: a tqdm bar over records read."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class ProgressBar:
    """A per-block callback that draws a tqdm bar (a plain line when tqdm is missing).

    The bar counts records; its postfix shows the pairs settled. Call :meth:`close`
    when the run ends (early stopping leaves the bar short of its total, honestly).
    """

    def __init__(self, total: int | None, file: Any = None) -> None:
        self.file = file if file is not None else sys.stderr
        self._done = 0
        try:
            # the text bar, always: tqdm.auto picks its widget once per process when any
            # IPython kernel config exists, and then writes nothing to ``file``
            from tqdm.std import tqdm
        except ImportError:  # no tqdm: one line per block
            self._bar = None
        else:
            self._bar = tqdm(total=total, unit="rec", file=self.file, desc="dni_lab")

    def __call__(self, run: Any) -> None:
        p = run.progress
        settled = (p.pairs_converged + p.pairs_decided) / max(p.pairs_total, 1)
        if self._bar is None:
            print(f"dni_lab: {p.records_read} records, {settled:.0%} of pairs settled",
                  file=self.file, flush=True)  # fmt: skip
            return
        self._bar.update(p.records_read - self._done)
        self._done = p.records_read
        self._bar.set_postfix_str(f"{settled:.0%} settled", refresh=False)

    def close(self, progress: Any = None) -> None:
        """End the bar; with the run's final ``progress`` say how reading ended.

        The bar stays at the records read: early stopping or a Stop leave it short of its
        total, and the postfix says which.
        """
        why = progress.read_text() if progress is not None and progress.ending else ""
        if self._bar is None:
            if why:
                print(f"dni_lab: {why}", file=self.file, flush=True)
            return
        if why:
            self._bar.set_postfix_str(why, refresh=True)
        self._bar.close()


def with_bar(total: int | None, on_block: Callable[[Any], None] | None):
    """A bar and the callback that feeds it before calling ``on_block``."""
    bar = ProgressBar(total)

    def both(run: Any) -> None:
        bar(run)
        if on_block is not None:
            on_block(run)

    return bar, both
