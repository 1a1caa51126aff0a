"""What both overlays share: paging over records in a chosen order, and safe refreshes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from ._base import Panel, as_selection
from ._behavior import BehaviorSource
from ._paging import n_pages


class PagedOverlay(Panel):
    """A panel that shows one page of records, ordered by a unit's peak activation.

    Subclasses hold ``source`` (a :class:`~dni_lab.backend.extraction.behaviors.BehaviorSource`),
    the traits ``_order``, ``_page_index``, ``page_size`` and ``_layout``, and
    implement ``_compute()`` for the visible page. They set what ``_compute``
    needs before calling ``super().__init__``, which draws the first page.
    """

    _browser_sets: tuple[str, ...] = ("_order", "_page_index", "page_size")

    def __init__(
        self,
        models: Any,
        records: Sequence[Any],
        hypotheses: Any,
        selection: Any,
        page_size: int,
        device: str,
        unit_traits: Sequence[str] = (),
        features: Any = None,
        **kwargs: Any,
    ) -> None:
        self.source = BehaviorSource(models, records, hypotheses, device, features=features)
        self._data = pl.DataFrame()
        self.error = ""
        super().__init__(page_size=page_size, selection=as_selection(selection), **kwargs)
        self.observe(self._on_units, names=["selection", *unit_traits, "_order"])
        self.observe(self._snapshot_on_selection, names=["selection", *unit_traits])
        self.observe(lambda _c: self.refresh(), names=["_page_index", "page_size"])
        self.refresh()

    @property
    def data(self) -> pl.DataFrame:
        """The visible page as a Polars frame."""
        return self._data

    def sort_records(self, how: str = "top") -> None:
        """Order records by the (first) unit's peak: ``"top"``, ``"bottom"`` or ``"index"``."""
        self._order = how

    def refresh(self) -> None:
        """Recompute the visible page and send it (errors are shown in the panel)."""
        try:
            self._compute()
            self.error = ""
        except Exception as exc:  # a bad selection must not break the comm handler
            self.error = f"{type(exc).__name__}: {exc}"
            self._layout = {**self._layout, "error": self.error}

    def _compute(self) -> None:
        raise NotImplementedError

    def _on_units(self, _change: Any) -> None:
        """A new unit or order starts at the first page (whose observer refreshes)."""
        if self._page_index != 0:
            self._page_index = 0
        else:
            self.refresh()

    def _page_of(self, unit: dict | None) -> tuple[list[int], int, int, int]:
        """Record indices on the current page, the page number, page count and record count."""
        order = self.source.order(unit, self._order)
        pages = n_pages(len(order), self.page_size)
        page = min(max(self._page_index, 0), pages - 1)
        idx = order[page * self.page_size : (page + 1) * self.page_size].tolist()
        return idx, page, pages, len(order)
