"""The DeepBase §5.1 baseline: Pearson correlation with ``corr()`` aggregates in PostgreSQL.

DeepBase's first implementation materialized unit and hypothesis behaviors as
*dense* relations — one row per symbol, one column per unit (or hypothesis) —
and computed every unit/hypothesis correlation with native ``corr()``
aggregates over their join on ``symbolid``::

    SELECT corr(U.u_1, H.h_1), ..., corr(U.u_n, H.h_m)
    FROM unitsb_dense U JOIN hyposb_dense H ON U.symbolid = H.symbolid

PostgreSQL limits a table to 1,600 columns and a target list to 1,664 entries,
so wide behavior matrices are split over several tables and the ``corr``
expressions are batched, about 1,600 per ``SELECT``. Each batch is one full
scan of the join: that repeated work is what DeepBase's single-pass, merged
inspector avoids, and what this module measures.

The server is a throw-away one: :class:`PostgresServer` runs ``initdb`` into a
temporary directory, starts ``postgres`` listening on 127.0.0.1 only (a free
port, password authentication with a random password) and deletes everything
on exit, also on error. ``initdb`` refuses to run as root, so as root the
server runs as the ``postgres`` system user (created if missing).

Examples
--------
>>> import numpy as np
>>> U = np.random.rand(1000, 8).astype(np.float32)
>>> H = (np.random.rand(1000, 3) > 0.5).astype(np.float32)
>>> res = pg_corr(U, H)  # doctest: +SKIP
>>> res.corr.shape  # doctest: +SKIP
(8, 3)
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MAX_TABLE_COLUMNS",
    "MAX_TARGET_ENTRIES",
    "PgCorrResult",
    "PostgresServer",
    "PostgresUnavailable",
    "TablePart",
    "batch_sql",
    "corr_batched",
    "find_pg_bin",
    "load_dense",
    "numpy_corr",
    "pg_corr",
    "plan_batches",
    "tuned_settings",
]

#: PostgreSQL's hard limit on columns per table (``MaxHeapAttributeNumber``).
MAX_TABLE_COLUMNS = 1600
#: PostgreSQL's hard limit on target-list entries per query (``MaxTupleAttributeNumber``).
MAX_TARGET_ENTRIES = 1664
#: Expressions per ``SELECT`` as in the paper ("1,600 in PostgreSQL by default").
DEFAULT_BATCH = 1600
#: Behavior columns per dense table. One column goes to ``symbolid``; a little
#: headroom stays below the hard limit so that an ``ALTER TABLE`` still fits.
DEFAULT_TABLE_COLUMNS = 1500

# Binary COPY framing (PostgreSQL docs, "COPY - Binary Format").
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + (0).to_bytes(4, "big") + (0).to_bytes(4, "big")
_COPY_TRAILER = (-1).to_bytes(2, "big", signed=True)
# Rows per COPY chunk: bounds the encoder's temporary buffer to tens of MB.
_COPY_CHUNK_BYTES = 64 << 20


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found."""


def find_pg_bin(bin_dir: str | os.PathLike | None = None) -> Path:
    """Locate the directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Looks, in order, at ``bin_dir``, ``$DNI_LAB_PG_BIN``, Debian's
    ``/usr/lib/postgresql/<version>/bin`` (newest version first) and ``$PATH``.

    Raises
    ------
    PostgresUnavailable
        If no directory holds all three programs.
    """
    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(Path(bin_dir))
    if os.environ.get("DNI_LAB_PG_BIN"):
        candidates.append(Path(os.environ["DNI_LAB_PG_BIN"]))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = [p for p in debian.iterdir() if p.name.split(".")[0].isdigit()]
        for v in sorted(versions, key=lambda p: float(p.name), reverse=True):
            candidates.append(v / "bin")
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if all((c / prog).is_file() for prog in ("initdb", "pg_ctl", "postgres")):
            return c
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; install Debian's "
        "postgresql package or set DNI_LAB_PG_BIN to the directory that holds them."
    )


def _free_port() -> int:
    # Binding port 0 asks the kernel for a free port; the tiny race until the
    # server binds it is handled by retrying the start.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _service_user() -> pwd.struct_passwd | None:
    """The unprivileged user to run the server as, or None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "dni-lab-pg"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PostgresUnavailable(
            "running as root, no 'postgres' user exists and useradd is missing; initdb refuses "
            "to run as root. Create an unprivileged user named 'postgres'."
        )
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "dni-lab-pg"],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam("dni-lab-pg")


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def tuned_settings() -> dict[str, str]:
    """Server settings tuned as in DeepBase §6.3 ("following the manual's guidelines").

    Memory follows the PostgreSQL manual's advice (shared buffers ~25% of RAM,
    effective cache ~75%), parallel workers match the CPU count, and durability
    is off: the server is thrown away after the run, and WAL/fsync would only
    slow the bulk load, never the aggregation being compared.
    """
    mem_mb = _memory_bytes() >> 20
    ncpu = os.cpu_count() or 1
    shm_free = shutil.disk_usage("/dev/shm").free if Path("/dev/shm").is_dir() else 0
    return {
        "shared_buffers": f"{min(mem_mb // 4, 8192)}MB",
        "effective_cache_size": f"{mem_mb * 3 // 4}MB",
        # One hash of a dense hypothesis table must fit in memory, or every batch
        # re-spills it to disk.
        "work_mem": f"{min(max(mem_mb // 16, 64), 2048)}MB",
        "maintenance_work_mem": f"{min(max(mem_mb // 16, 64), 2048)}MB",
        "max_worker_processes": str(max(ncpu, 2)),
        "max_parallel_workers": str(ncpu),
        # The leader also works, so ncpu - 1 helpers keep every core busy.
        "max_parallel_workers_per_gather": str(max(ncpu - 1, 0)),
        # Small containers have a tiny /dev/shm; files in the data dir always work.
        "dynamic_shared_memory_type": "posix" if shm_free > (1 << 30) else "mmap",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "wal_level": "minimal",
        "max_wal_senders": "0",
        "max_wal_size": "8GB",
        "autovacuum": "off",
        # JIT compiles every one of ~1,600 corr() expressions per query: measured
        # 10x slower than interpreted on this workload (the paper's 9.6 had no JIT).
        "jit": "off",
        "log_min_messages": "warning",
    }


class PostgresServer:
    """A throw-away PostgreSQL server in a temporary directory.

    Use as a context manager: the server is initialised and started on entry,
    stopped and deleted on exit (also when the body raises).

    Parameters
    ----------
    bin_dir : path, optional
        Directory of ``initdb``/``pg_ctl``/``postgres``; see :func:`find_pg_bin`.
    settings : dict, optional
        Extra ``postgresql.conf`` settings, applied over :func:`tuned_settings`.
    tmp_root : path, optional
        Where to create the temporary directory (default: the system's).

    Attributes
    ----------
    port : int
        TCP port on 127.0.0.1 (set once started).
    conninfo : str
        A libpq connection string for :func:`psycopg.connect`.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike | None = None,
        settings: dict[str, Any] | None = None,
        tmp_root: str | os.PathLike | None = None,
    ) -> None:
        self.bin_dir = find_pg_bin(bin_dir)
        self.settings = {**tuned_settings(), **{k: str(v) for k, v in (settings or {}).items()}}
        self.tmp_root = tmp_root
        self.user = _service_user()
        self.dbuser = "dni"
        self.password = secrets.token_hex(16)
        self.port = 0
        self.root: Path | None = None
        self._running = False

    # -- paths and commands ---------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def conninfo(self) -> str:
        return (
            f"host=127.0.0.1 port={self.port} dbname=postgres user={self.dbuser} "
            f"password={self.password} connect_timeout=30"
        )

    def _cmd(self, prog: str, *args: str) -> list[str]:
        cmd = [str(self.bin_dir / prog), *args]
        if self.user is None:
            return cmd
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", self.user.pw_name, "--", *cmd]
        return ["su", "-s", "/bin/sh", self.user.pw_name, "-c", shlex.join(cmd)]

    def _run(self, prog: str, *args: str, timeout: float = 120) -> None:
        # cwd inside our directory: the service user may not be allowed to read ours.
        proc = subprocess.run(
            self._cmd(prog, *args),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            log = self.root / "server.log" if self.root else None
            tail = log.read_text()[-2000:] if log and log.exists() else ""
            raise RuntimeError(
                f"{prog} {' '.join(args[:3])} failed ({proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}\n{tail}"
            )

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> PostgresServer:
        """Initialise the cluster and start the server; returns ``self``."""
        self.root = Path(tempfile.mkdtemp(prefix="dni_lab_pg_", dir=self.tmp_root))
        try:
            if self.user is not None:
                os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
            pwfile = self.root / "pw"
            pwfile.write_text(self.password + "\n")
            pwfile.chmod(0o600)
            if self.user is not None:
                os.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                self.dbuser,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
            pwfile.unlink()
            self._start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_server(self, attempts: int = 3) -> None:
        conf = self.data_dir / "postgresql.conf"
        base = conf.read_text()
        for attempt in range(attempts):
            self.port = _free_port()
            extra = {
                **self.settings,
                "listen_addresses": "'127.0.0.1'",
                "port": str(self.port),
                "unix_socket_directories": f"'{self.root}'",
            }
            conf.write_text(base + "\n# dni_lab benchmark\n" + _conf_lines(extra))
            try:
                self._run(
                    "pg_ctl",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.root / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "start",
                )
                self._running = True
                return
            except RuntimeError:
                # Most likely someone took the port between probe and bind.
                if attempt == attempts - 1:
                    raise

    def stop(self) -> None:
        """Stop the server (if running) and delete its directory."""
        try:
            if self._running:
                with contextlib.suppress(Exception):
                    self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")
                self._running = False
        finally:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.root = None

    def connect(self, **kwargs: Any) -> Any:
        """A new autocommit :class:`psycopg.Connection` to the server."""
        import psycopg

        return psycopg.connect(self.conninfo, autocommit=True, **kwargs)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _conf_lines(settings: dict[str, str]) -> str:
    lines = []
    for k, v in settings.items():
        quoted = v if v.startswith("'") or v.replace(".", "").isdigit() else f"'{v}'"
        lines.append(f"{k} = {quoted}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# Dense behavior tables
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TablePart:
    """One dense table holding columns ``start:start+width`` of a behavior matrix."""

    table: str
    prefix: str
    start: int
    width: int

    def column(self, j: int) -> str:
        """Column name of global column ``j`` (which must lie in this part)."""
        return f"{self.prefix}{j}"


def _binary_copy_rows(ids: np.ndarray, X: np.ndarray) -> bytes:
    """Encode rows ``(symbolid, x_0, ..., x_{c-1})`` in COPY's binary tuple format.

    Vectorised with numpy: each field is a big-endian int32 length followed by
    its big-endian value, each tuple starts with an int16 field count.
    """
    n, c = X.shape
    head = np.empty(n, dtype=[("nf", ">i2"), ("len", ">i4"), ("id", ">i4")])
    head["nf"] = c + 1
    head["len"] = 4
    head["id"] = ids
    body = np.empty((n, c, 2), dtype=">u4")
    body[:, :, 0] = 4
    body[:, :, 1] = X.astype(">f4", copy=False).view(">u4")
    rows = np.concatenate(
        [head.view(np.uint8).reshape(n, 10), body.view(np.uint8).reshape(n, -1)], 1
    )
    return rows.tobytes()


def load_dense(
    conn: Any,
    name: str,
    X: np.ndarray,
    prefix: str,
    max_columns: int = DEFAULT_TABLE_COLUMNS,
) -> list[TablePart]:
    """Materialize ``X`` (symbols × columns) as dense tables ``name_0, name_1, ...``.

    Each table has ``symbolid int4`` plus at most ``max_columns`` ``real``
    columns ``{prefix}{j}``. Rows are bulk-loaded with binary ``COPY ... FREEZE``
    into a table created in the same transaction (no WAL, hint bits set, so the
    first scan does not rewrite pages), then analysed (``symbolid`` only) for the planner.

    Parameters
    ----------
    conn : psycopg.Connection
        An autocommit connection.
    name : str
        Table name stem (a plain identifier).
    X : ndarray, shape (N, C)
        Behaviors; stored as float4 (``real``) like the float32 activations.
    prefix : str
        Column name prefix, e.g. ``"u"`` or ``"h"``.
    max_columns : int
        Behavior columns per table (PostgreSQL allows 1,600 columns in all).

    Returns
    -------
    list of TablePart
        The tables, in column order.
    """
    if not 1 <= max_columns < MAX_TABLE_COLUMNS:
        raise ValueError(f"max_columns must be in [1, {MAX_TABLE_COLUMNS - 1}]")
    X = np.ascontiguousarray(X, dtype=np.float32)
    n, c = X.shape
    ids = np.arange(n, dtype=np.int32)
    parts = []
    for p, start in enumerate(range(0, c, max_columns)):
        width = min(max_columns, c - start)
        part = TablePart(f"{name}_{p}", prefix, start, width)
        cols = ", ".join(f"{prefix}{j} real" for j in range(start, start + width))
        rows_per_chunk = max(1, _COPY_CHUNK_BYTES // (10 + 8 * width))
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {part.table}")
            cur.execute(f"CREATE TABLE {part.table} (symbolid int4 NOT NULL, {cols})")
            with cur.copy(f"COPY {part.table} FROM STDIN WITH (FORMAT BINARY, FREEZE)") as cp:
                cp.write(_COPY_HEADER)
                for r in range(0, n, rows_per_chunk):
                    sl = slice(r, min(r + rows_per_chunk, n))
                    cp.write(_binary_copy_rows(ids[sl], X[sl, start : start + width]))
                cp.write(_COPY_TRAILER)
        with conn.cursor() as cur:
            # Row count and page count are all the planner needs to pick the hash
            # side of the join; per-column histograms of hundreds of behavior
            # columns would take longer than the COPY itself and change no plan.
            cur.execute(f"ANALYZE {part.table} (symbolid)")
        parts.append(part)
    return parts


def _part_of(parts: Sequence[TablePart], j: int) -> int:
    for k, p in enumerate(parts):
        if p.start <= j < p.start + p.width:
            return k
    raise IndexError(f"column {j} is in no table part")


def plan_batches(
    pairs: np.ndarray,
    u_parts: Sequence[TablePart],
    h_parts: Sequence[TablePart],
    max_exprs: int = DEFAULT_BATCH,
) -> list[tuple[int, int, np.ndarray]]:
    """Group ``(unit, hypothesis)`` pairs into ``SELECT`` batches.

    Pairs are grouped by the (unit table, hypothesis table) that holds them, so
    each query joins exactly two dense tables, then cut into batches of at most
    ``max_exprs`` expressions.

    Returns
    -------
    list of (unit part index, hypothesis part index, pairs array (k, 2))
    """
    if not 1 <= max_exprs <= MAX_TARGET_ENTRIES:
        raise ValueError(f"max_exprs must be in [1, {MAX_TARGET_ENTRIES}]")
    upart = np.array([_part_of(u_parts, int(i)) for i in range(max(pairs[:, 0]) + 1)])
    hpart = np.array([_part_of(h_parts, int(j)) for j in range(max(pairs[:, 1]) + 1)])
    batches = []
    for a in range(len(u_parts)):
        for b in range(len(h_parts)):
            sel = pairs[(upart[pairs[:, 0]] == a) & (hpart[pairs[:, 1]] == b)]
            for s in range(0, len(sel), max_exprs):
                batches.append((a, b, sel[s : s + max_exprs]))
    return batches


def batch_sql(u: TablePart, h: TablePart, pairs: np.ndarray) -> str:
    """The paper's query for one batch: ``corr`` over the join of two dense tables."""
    exprs = ", ".join(f"corr(u.{u.column(int(i))}, h.{h.column(int(j))})" for i, j in pairs)
    return f"SELECT {exprs} FROM {u.table} u JOIN {h.table} h ON u.symbolid = h.symbolid"


def corr_batched(
    conn: Any,
    u_parts: Sequence[TablePart],
    h_parts: Sequence[TablePart],
    pairs: np.ndarray | None = None,
    max_exprs: int = DEFAULT_BATCH,
    max_batches: int | None = None,
) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Run the batched ``corr()`` queries.

    Parameters
    ----------
    conn : psycopg.Connection
        Connection to the server holding the tables.
    u_parts, h_parts : list of TablePart
        The dense unit and hypothesis tables from :func:`load_dense`.
    pairs : ndarray (k, 2), optional
        ``(unit, hypothesis)`` column pairs to score; default: all of them.
    max_exprs : int
        ``corr`` expressions per ``SELECT``.
    max_batches : int, optional
        Run only the first ``max_batches`` batches (to time a subset).

    Returns
    -------
    corr : ndarray (n_units, n_hyps), float64
        Correlations; NaN where a pair was not computed or PostgreSQL returned
        NULL (a constant column).
    batches : list of dict
        Per batch: ``{"n_exprs", "seconds"}``.
    """
    n_u = u_parts[-1].start + u_parts[-1].width
    n_h = h_parts[-1].start + h_parts[-1].width
    if pairs is None:
        ii, jj = np.meshgrid(np.arange(n_u), np.arange(n_h), indexing="ij")
        pairs = np.stack([ii.ravel(), jj.ravel()], axis=1)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    corr = np.full((n_u, n_h), np.nan)
    stats: list[dict[str, float]] = []
    batches = plan_batches(pairs, u_parts, h_parts, max_exprs)
    if max_batches is not None:
        batches = batches[:max_batches]
    with conn.cursor() as cur:
        for a, b, sel in batches:
            sql = batch_sql(u_parts[a], h_parts[b], sel)
            t0 = time.perf_counter()
            cur.execute(sql)
            row = cur.fetchone()
            stats.append({"n_exprs": len(sel), "seconds": time.perf_counter() - t0})
            vals = np.array([np.nan if v is None else v for v in row], dtype=np.float64)
            corr[sel[:, 0], sel[:, 1]] = vals
    return corr, stats


@dataclass
class PgCorrResult:
    """Output of :func:`pg_corr`.

    Attributes
    ----------
    corr : ndarray (n_units, n_hyps)
        Correlations (NaN where not computed or undefined).
    load_s : float
        Seconds to create, COPY and ANALYZE the dense tables.
    query_s : float
        Seconds spent in the ``corr`` queries that ran.
    batches : list of dict
        Per query: number of expressions and seconds.
    n_batches_total : int
        Batches needed for all requested pairs (more than ran if ``max_batches``).
    n_pairs : int
        Pairs requested.
    n_rows : int
        Symbols (rows per table).
    server_settings : dict
        The settings the server ran with.
    """

    corr: np.ndarray
    load_s: float
    query_s: float
    batches: list[dict[str, float]] = field(default_factory=list)
    n_batches_total: int = 0
    n_pairs: int = 0
    n_rows: int = 0
    server_settings: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every requested batch ran."""
        return len(self.batches) == self.n_batches_total


def pg_corr(
    U: np.ndarray,
    H: np.ndarray,
    *,
    pairs: np.ndarray | None = None,
    max_exprs: int = DEFAULT_BATCH,
    max_batches: int | None = None,
    max_columns: int = DEFAULT_TABLE_COLUMNS,
    server: PostgresServer | None = None,
    settings: dict[str, Any] | None = None,
) -> PgCorrResult:
    """All unit × hypothesis correlations computed by PostgreSQL, as in DeepBase §5.1.

    Parameters
    ----------
    U : ndarray (N, n_units)
        Unit behaviors, one row per symbol.
    H : ndarray (N, n_hyps)
        Hypothesis behaviors aligned with ``U``.
    pairs, max_exprs, max_batches
        See :func:`corr_batched`.
    max_columns : int
        Behavior columns per dense table.
    server : PostgresServer, optional
        A running server to use; by default a throw-away one is started and
        removed afterwards (its start-up is not counted in any timing).
    settings : dict, optional
        Extra server settings when this function starts the server.

    Returns
    -------
    PgCorrResult
    """
    if U.shape[0] != H.shape[0]:
        raise ValueError(f"U has {U.shape[0]} rows but H has {H.shape[0]}")
    with contextlib.ExitStack() as stack:
        if server is None:
            server = stack.enter_context(PostgresServer(settings=settings))
        conn = stack.enter_context(server.connect())
        t0 = time.perf_counter()
        u_parts = load_dense(conn, "unitsb_dense", U, "u", max_columns)
        h_parts = load_dense(conn, "hyposb_dense", H, "h", max_columns)
        load_s = time.perf_counter() - t0
        if pairs is None:
            n_total = len(
                plan_batches(_all_pairs(U.shape[1], H.shape[1]), u_parts, h_parts, max_exprs)
            )
            n_pairs = U.shape[1] * H.shape[1]
        else:
            n_total = len(
                plan_batches(np.asarray(pairs).reshape(-1, 2), u_parts, h_parts, max_exprs)
            )
            n_pairs = len(np.asarray(pairs).reshape(-1, 2))
        corr, stats = corr_batched(conn, u_parts, h_parts, pairs, max_exprs, max_batches)
        for p in (*u_parts, *h_parts):
            conn.execute(f"DROP TABLE {p.table}")
        return PgCorrResult(
            corr=corr,
            load_s=load_s,
            query_s=sum(s["seconds"] for s in stats),
            batches=stats,
            n_batches_total=n_total,
            n_pairs=n_pairs,
            n_rows=U.shape[0],
            server_settings=dict(server.settings),
        )


def _all_pairs(n_u: int, n_h: int) -> np.ndarray:
    ii, jj = np.meshgrid(np.arange(n_u), np.arange(n_h), indexing="ij")
    return np.stack([ii.ravel(), jj.ravel()], axis=1)


def numpy_corr(U: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Reference: the unit × hypothesis block of ``numpy.corrcoef`` (float64)."""
    n_u = U.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        full = np.corrcoef(np.asarray(U, np.float64), np.asarray(H, np.float64), rowvar=False)
    return full[:n_u, n_u:]
