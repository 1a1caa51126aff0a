"""Errors in a user's query: the message, where it is, and a caret under the offending token."""

from __future__ import annotations

from ..errors import DNIError


class QueryError(DNIError):
    """A query that cannot be parsed, resolved or evaluated.

    The message ends with the query line holding the offending token and a caret
    (``^``) under it, so a notebook shows *where* without a traceback.

    Parameters
    ----------
    message : str
        What is wrong and, where there is one, the fix ("Did you mean ...?").
    query : str
        The full query text.
    start, end : int, optional
        Character offsets of the offending span in ``query``; without them the
        message stands alone.

    Attributes
    ----------
    line, column : int or None
        1-based position of ``start``.
    """

    def __init__(
        self, message: str, query: str = "", start: int | None = None, end: int | None = None
    ) -> None:
        self.message = message
        self.query = query
        self.start = start
        self.end = end if end is not None else (start + 1 if start is not None else None)
        self.line: int | None = None
        self.column: int | None = None
        if start is not None and query:
            start = min(start, len(query))
            self.line = query.count("\n", 0, start) + 1
            self.column = start - (query.rfind("\n", 0, start) + 1) + 1
        super().__init__(self._format())

    def _format(self) -> str:
        if self.line is None or self.start is None:
            return self.message
        lines = self.query.split("\n")
        text = lines[self.line - 1]
        col0 = self.column - 1  # type: ignore[operator]
        # The caret stays on the first line of a multi-line span; at least one ^ even at EOF.
        width = max(1, min(self.end or 0, self.start + len(text) - col0) - self.start)
        # Tabs would shift the caret: expand the line and measure the prefix the same way.
        prefix = text[:col0].expandtabs(4)
        shown = text.expandtabs(4)
        caret = " " * len(prefix) + "^" * width
        return f"{self.message} (line {self.line}, column {self.column})\n  {shown}\n  {caret}"
