"""``%%inspect`` and ``%inspect``: run an INSPECT query from a notebook cell.

``%load_ext dni_lab`` registers them. A mistake in the query is a ``UsageError``
that shows the position, a caret and suggestions, not a traceback.

In a kernel an INSPECT query runs in the background: the cell ends at once and
shows a live score table that works while the run streams (Stop, paging,
sorting, selection), and the kernel is free for other cells. ``-o NAME`` is bound
to the query's result frame when the run ends (the partial result after Stop), and a
later cell that names ``NAME`` first waits for the run: every cell that names it sees a
Polars frame, so a notebook run top to bottom (Run All, nbconvert, nbval) sees the final
frame. (Until the end the name holds the run handle,
:class:`~dni_lab.backend.query.QueryRun`, seen only by code that does not name it; for
the live INSPECT frame, ``run.frame``, start the query with ``dl.query(...,
background=True)``.) Interrupting the kernel while a cell waits
stops the run and binds the partial result. ``--wait`` runs in the foreground (the
cell's result is the frame); in a terminal that is the only mode, and an
interrupt there also keeps the partial result. A partial result (Stop, ``cancel()``,
an interrupt) says so in one line on stderr where it is handed over, and in
``dl.provenance(frame)["partial"]`` / ``["partial_reason"]``.

While the query runs the cell shows :func:`live_display` (a live score table);
replace it (``dni_lab.magic.live_display = fn``) to show something else, such as
:class:`~dni_lab.widgets.progress.ProgressView`.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Protocol

import polars as pl
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .backend.errors import DNIError
from .backend.query import Catalog, QueryError, QueryRun, parse, run_query
from .magic_waits import _POLL_S, RunWaiting, _bind, _say_partial, _stop

# Options that take a value: the word after them is theirs, not the query's.
_VALUED = {"-o", "--output", "--eps", "--block-size", "--catalog"}
_UNSET = object()  # --eps none means "read everything", so None cannot mean "not given"


class LiveView(Protocol):
    """What :func:`live_display` returns. In a kernel the magic displays it in the cell (it
    may be a widget); while the run goes on the magic calls its ``update()``, if it has one,
    from the kernel's main thread, and ``finish()``, if it has one, when the run has ended
    (not ``close()``: on a widget that would remove it from the cell). A view may instead
    follow the run itself through ``run.on_block`` and ``run.frame``."""

    def update(self) -> None: ...

    def finish(self) -> None: ...


def live_display(run: QueryRun) -> LiveView:
    """The view of ``run`` the cell shows while it goes on: a live score table.

    Replaceable (``dni_lab.magic.live_display = fn``), e.g. by
    :class:`dni_lab.widgets.progress.ProgressView` for a plain progress bar; see
    :class:`LiveView`.
    """
    # Imported here: the panels load anywidget, which a cell without a live view never needs.
    from .widgets.table import ScoreTable

    return ScoreTable(run)


def _in_kernel() -> bool:
    """Whether the shell talks to a front end that renders widgets.

    ``isinstance``, not the class name: Colab, VS Code and others subclass the
    kernel's shell.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return False
    try:
        from ipykernel.zmqshell import ZMQInteractiveShell
    except ImportError:  # no kernel package: a terminal IPython
        return False
    return isinstance(shell, ZMQInteractiveShell)


def _eps(text: str) -> float | None:
    if text.lower() in ("none", "null"):
        return None
    return float(text)


_eps.__name__ = "eps"  # argparse names the type in its message: "invalid eps value: 'x'"


def split_options(line: str) -> tuple[str, str]:
    """``"-o res --eps 0.1 SELECT ..."`` → (``"-o res --eps 0.1"``, ``"SELECT ..."``)."""
    pos, expect_value = 0, False
    for m in re.finditer(r"\S+", line):
        word = m.group()
        if expect_value:
            expect_value = False
        elif word.startswith("-"):
            expect_value = word in _VALUED
        else:
            return line[: m.start()].strip(), line[m.start() :]
        pos = m.end()
    return line[:pos].strip(), ""


@magics_class
class InspectMagics(RunWaiting, Magics):
    """The ``inspect`` magic, as a cell (``%%inspect``) and a line (``%inspect``)."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        # -o names bound to a run still going: a cell that uses one waits (wait_for_use)
        self.pending: dict[str, QueryRun] = {}
        # where the kernel allows, such a cell awaits the run instead (see cell_await)
        self._awaiter: Any = None
        self._async_cell: str | None = None

    @magic_arguments()
    @argument("-o", "--output", metavar="NAME", help="store the result frame in this variable")
    @argument(
        "--eps", type=_eps, default=_UNSET, help="early-stopping error bound; 'none' reads all"
    )
    @argument("--block-size", type=int, metavar="N", help="records per block")
    @argument("--no-live", action="store_true", help="no progress display; run in the foreground")
    @argument(
        "--wait", action="store_true", help="run in the foreground; the result is the cell's frame"
    )
    @argument("--catalog", metavar="NAME", help="a dl.Catalog variable (default: the session's)")
    @line_cell_magic
    @no_var_expand  # the line is SQL: '$x' or '{a}' in a string literal must stay as written
    def inspect(self, line: str, cell: str | None = None) -> pl.DataFrame | None:
        """Run an SQL query with an INSPECT clause; the result is a Polars frame.

        ::

            %%inspect -o scores --eps 0.05
            SELECT M.epoch, S.uid, S.unit_score
            INSPECT U.uid AND H.h USING corr OVER D.seq AS S
            FROM models M, units U, hypotheses H, inputs D
            WHERE U.layer = 'lstm' AND H.name = 'keyword'
            GROUP BY M.epoch
            HAVING S.unit_score > 0.8

            %inspect SELECT * FROM units WHERE layer = 'lstm'
        """
        opts_text, rest = split_options(line)
        text = rest if cell is None else (rest + "\n" + cell if rest.strip() else cell)
        try:  # bad flags raise UsageError themselves; an unclosed quote raises ValueError
            args = parse_argstring(self.inspect, opts_text)
        except ValueError as exc:
            raise UsageError(f"cannot read the options {opts_text!r}: {exc}") from None
        if not text.strip():
            raise UsageError("%inspect needs a query: %inspect SELECT ... INSPECT ... FROM ...")
        ns = self.shell.user_ns
        options: dict[str, Any] = {}
        if args.eps is not _UNSET:
            options["eps"] = args.eps
        if args.block_size is not None:
            options["block_size"] = args.block_size
        try:
            q = parse(text)
            catalog = self._catalog(args.catalog)
            if q.inspect is None:
                result = run_query(q, catalog, ns, options=options)
            else:
                run = run_query(q, catalog, ns, background=True, options=options)
                if _in_kernel() and not (args.wait or args.no_live):
                    self._background(run, args.output)
                    return None
                result = self._foreground(run, live=not args.no_live)
        except QueryError as exc:
            raise UsageError(str(exc)) from None
        except DNIError as exc:
            raise UsageError(f"{type(exc).__name__}: {exc}") from None
        if args.output:
            ns[args.output] = result
        return result  # type: ignore[return-value]

    def _catalog(self, name: str | None) -> Catalog:
        if name is None:
            return Catalog.default()
        cat = self.shell.user_ns.get(name)
        if not isinstance(cat, Catalog):
            raise UsageError(f"--catalog {name}: no dl.Catalog named {name!r} in the namespace")
        return cat

    def _foreground(self, run: QueryRun, live: bool) -> pl.DataFrame:
        """Wait for ``run`` here; an interrupt stops it and the partial result is returned."""
        view = live_display(run) if live else None
        _note(view, "the cell's frame")
        if view is not None and _in_kernel():  # a terminal would print the widget's repr
            from IPython.display import display

            display(view)
        update = getattr(view, "update", None)
        try:
            while not run.wait(_POLL_S):
                if update is not None:
                    update()
        except KeyboardInterrupt:  # stop reading; the partial frame is still a result
            _stop(run)
        finally:
            finish = getattr(view, "finish", None)
            if finish is not None:
                finish()
        result = run.result(warn=False)  # the note below says it in the magic's words
        _say_partial(result, "the cell's frame")
        return result

    def _background(self, run: QueryRun, name: str | None) -> None:
        """Show the live view and return; bind ``name`` now to the run, later to its result."""
        from IPython.display import display

        view = live_display(run)
        _note(view, _bound_note(name) if name else "run.result()")
        display(view)
        ns = self.shell.user_ns
        if name:
            ns[name] = run
            self.pending[name] = run
        ended = threading.Lock()

        def on_end(r: QueryRun) -> None:
            # Called by the run's thread after every block and once at the end.
            if not r.done or not ended.acquire(blocking=False):
                return
            if name:
                _bind(ns, name, r)
            finish = getattr(view, "finish", None)
            if finish is not None:
                finish()

        run.on_block(on_end)
        if run.done:  # it ended before the callback was registered
            on_end(run)


def _bound_note(name: str) -> str:
    """Where the result goes, and what ``name`` is until then (the table's header says it)."""
    return (
        f"bound to {name} when the run ends: a cell that names {name} waits for that and "
        f"gets the frame (until then {name} holds the run's handle)"
    )


def _note(view: Any, result: str) -> None:
    """Tell a live table where the query's result goes (it shows S, not the result)."""
    if view is not None and hasattr(view, "note"):
        from .widgets.table import QUERY_NOTE

        view.note = QUERY_NOTE.format(result=result)


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%inspect`` / ``%inspect`` (``%load_ext dni_lab``)."""
    magics = InspectMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.wait_for_use)
    if _in_kernel():  # a terminal has no widgets to keep alive
        from .cell_await import install

        magics._awaiter = install(ipython, magics._wants_async, magics._await_runs)
