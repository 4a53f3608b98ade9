"""``trainledger import``: runs from our CSV format (:mod:`trainledger.sources.imports.csv_import`, where the format
is described) or Slurm ``sacct`` output (:mod:`trainledger.sources.imports.slurm`).

Both go through the one import path of this module, in two phases:

1. **Parse and validate** the whole input, streaming, with bounded memory:
   validated rows go to a temporary on-disk :class:`Spill` (a private SQLite
   file), never into a list. No ledger transaction is open meanwhile, so the
   ledger's write lock is not held while a large file is read (a small import
   beside a big one goes through). A malformed input (bad header, unparsable
   time, wrong column count, a bad value) stops here with ``FILE:LINE: field:
   reason``, and nothing is written.
2. **Write** the spilled rows in batches, in *one* transaction taken only now:
   all of the file's new runs, or none. Every batch is folded into the monthly
   rollup as it is written.

Every import returns a :class:`Receipt`: rows read, runs imported, updated,
already present, and rows skipped by reason with the first job ids of each.
Importing the same file twice imports nothing the second time (run ids are the
Slurm job id, the CSV ``id`` column, or a hash of the row); an ``id`` must be a
valid run id (``trainledger.store.ids.validate_run_id``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sqlite3
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import insert, select, text, update
from sqlalchemy.engine import Engine
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.facts import rollup
from trainledger.sources.imports.admission import admit
from trainledger.sources.imports.localtime import localize, readings, system_timezone  # noqa: F401  (imported from here too)
from trainledger.store.db import session_scope
from trainledger.store.mappings.slurm_map import Rule, load_rules
from trainledger.store.models import NodeType, Offer, Project, Run, RunStatus, User
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
#: limits that keep every value storable on SQLite and PostgreSQL alike (INTEGER, BIGINT, VARCHAR(n))
MAX_NODES = 100_000
MAX_BIGINT = 2**63 - 1
YEARS = (1970, 2199)
#: column lengths of the run, project and user tables (ledger/store/models.py)
TEXT_LIMITS = {"id": 64, "name": 200, "project": 100, "user": 100, "strategy": 20, "launcher": 20, "error": 4000}
#: how a naive local time that a DST change skips or repeats is read (``--dst``); "report": skipped and reported
DST_POLICIES = ("refuse", "earliest", "latest", "report")
#: rows per write batch (and per rollup fold): bounds the memory of the write phase
BATCH = 1000
_UTC = timezone.utc
#: an import's progress, ``(stage, done, total)``: "read" (rows so far, total None), then "write" (per BATCH)
StageProgress = Callable[[str, int, Optional[int]], None]
PROGRESS_LINES = 1000  # input lines read between two "read" progress calls


# --- values -------------------------------------------------------------------------------

def to_int(text: str, where: str, fieldname: str, minimum: int = 0, maximum: int = MAX_BIGINT) -> int:
    try:
        v = int(text)
    except (TypeError, ValueError):  # also a number of more than 4300 digits
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise LedgerInputError(f"{where}: {fieldname}: expected a whole number, got {shown!r}") from None
    if v < minimum:
        raise LedgerInputError(f"{where}: {fieldname}: must be at least {minimum}, got {v}")
    if v > maximum:
        raise LedgerInputError(f"{where}: {fieldname}: must be at most {maximum:,}, got {text}")
    return v


def check_text(value: str, where: str, fieldname: str, limit: int) -> str:
    """A text field as stored: no control characters, at most ``limit`` characters (the column's length)."""
    bad = CONTROL_RE.search(value)
    if bad:
        raise LedgerInputError(f"{where}: {fieldname}: contains a control character ({bad.group()!r}); remove it")
    if len(value) > limit:
        raise LedgerInputError(f"{where}: {fieldname}: at most {limit} characters, got {len(value)}")
    return value


def parse_time(text: str, where: str, fieldname: str) -> datetime:
    """An ISO 8601 time as written (naive, or aware when it carries an offset); years 1970-2199."""
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise LedgerInputError(f"{where}: {fieldname}: expected an ISO 8601 time such as 2026-11-03T08:00:00, got {text!r}") from None
    if not YEARS[0] <= ts.year <= YEARS[1]:
        raise LedgerInputError(f"{where}: {fieldname}: the year must be {YEARS[0]} to {YEARS[1]}, got {text!r}")
    return ts


# --- what the rows are checked against ----------------------------------------------------------

@dataclass(frozen=True)
class NodeTypeInfo:
    id: int
    name: str
    gpu_model: str
    gpus_per_node: int


@dataclass
class Context:
    """What validation needs from the ledger, read in one short transaction before the parse."""

    node_types: dict[str, NodeTypeInfo]
    offers: dict[str, tuple[int, int]]  # name → (offer id, node type id)
    rules: list[Rule]
    display_tz: ZoneInfo
    engine: Optional[Engine] = None  # the ledger, for what a parser must look up after the parse (requeued jobs)

    def node_type(self, value: Optional[str], where: str, flag: Optional[str] = None) -> NodeTypeInfo:
        value = value or flag
        names = ", ".join(sorted(self.node_types))
        if not value:
            raise LedgerInputError(f"{where}: node_type: missing; add a node_type column or pass --node-type ({names})")
        if value not in self.node_types:
            raise LedgerInputError(f"{where}: node_type: unknown {value!r}; use one of {names}")
        return self.node_types[value]

    def offer(self, value: Optional[str], nt: NodeTypeInfo, where: str) -> Optional[int]:
        if not value:
            return None
        o = self.offers.get(value)
        if o is None or o[1] != nt.id:
            valid = sorted(n for n, x in self.offers.items() if x[1] == nt.id)
            raise LedgerInputError(f"{where}: offer: {value!r} is not an offer for {nt.name}; use one of {', '.join(valid)}")
        return o[0]


def load_context(engine: Engine) -> Context:
    with session_scope(engine) as s:
        nts = {n.name: NodeTypeInfo(n.id, n.name, n.gpu_model, n.gpus_per_node) for n in s.scalars(select(NodeType))}
        offers = {o.name: (o.id, o.node_type_id) for o in s.scalars(select(Offer))}
        return Context(nts, offers, load_rules(s), display_timezone(s), engine)


@dataclass
class ImportOptions:
    """How to read a file: ``--node-type``/``--offer`` (the one-type shortcut), ``--tz``, ``--dst``, ``--strict``."""

    node_type: Optional[str] = None
    offer: Optional[str] = None
    tz: Optional[ZoneInfo] = None  # None: the ledger's display time zone (import) / the process's zone (sync)
    fmt: str = "auto"
    cluster: str = ""
    strict: bool = False
    dst: str = "refuse"
    by_node: bool = False

    def check(self, ctx: Context) -> None:
        """Refuse flags that no row could use, before the file is read."""
        if self.fmt not in ("auto", "csv", "sacct"):
            raise LedgerInputError(f"--format: expected auto, csv or sacct, got {self.fmt!r}")
        if self.dst not in DST_POLICIES:
            raise LedgerInputError(f"--dst: expected earliest or latest, got {self.dst!r}")
        if self.node_type and self.node_type not in ctx.node_types:
            raise LedgerInputError(f"--node-type: unknown {self.node_type!r}; use one of {', '.join(sorted(ctx.node_types))}")
        if self.node_type and self.offer:
            ctx.offer(self.offer, ctx.node_types[self.node_type], "--offer")
        elif self.offer and self.offer not in ctx.offers:
            raise LedgerInputError(f"--offer: unknown {self.offer!r}; use one of {', '.join(sorted(ctx.offers))}")


# --- the receipt ----------------------------------------------------------------------------------

FIRST_IDS = 5


@dataclass
class Skipped:
    rows: int = 0
    first: list[str] = field(default_factory=list)
    hint: str = ""


@dataclass
class Receipt:
    """What an import did: rows read; runs imported, updated, already present; rows skipped by reason."""

    source: str
    format: str = "csv"
    strict: bool = False
    rows_read: int = 0
    imported: int = 0
    updated: int = 0
    already_present: int = 0
    skipped: dict[str, Skipped] = field(default_factory=dict)

    def skip(self, reason: str, job: str, *, where: str = "", fieldname: str = "", detail: str = "",
             hint: str = "", benign: bool = False) -> None:
        """Count a row that is not imported. Under ``--strict`` a row that could not be costed (not
        ``benign``: steps, pending jobs and the like are never runs) refuses the whole file instead."""
        if self.strict and not benign:
            raise LedgerInputError(f"{where}: {fieldname}: {detail or reason}" + (f"; {hint}" if hint else ""))
        s = self.skipped.get(reason)
        if s is None:
            s = self.skipped[reason] = Skipped(hint=hint)
        s.rows += 1
        if len(s.first) < FIRST_IDS and job and job not in s.first:
            s.first.append(job)

    def unskip(self, reason: str, n: int = 1) -> None:
        s = self.skipped.get(reason)
        if s is not None:
            s.rows -= n
            if s.rows <= 0:
                del self.skipped[reason]

    @property
    def skipped_rows(self) -> int:
        return sum(s.rows for s in self.skipped.values())

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format, "rows_read": self.rows_read, "imported": self.imported,
                "updated": self.updated, "already_present": self.already_present, "skipped_rows": self.skipped_rows,
                "skipped": {k: {"rows": v.rows, "first": v.first, "hint": v.hint} for k, v in sorted(self.skipped.items())}}


def receipt_text(d: dict[str, Any]) -> str:
    """The receipt as a few lines for a terminal (``d`` is :meth:`Receipt.as_dict`)."""
    lines = [f"read {d['rows_read']:,} rows ({d['format']}) from {d['source']}",
             f"  imported         {d['imported']:>8,} runs",
             f"  updated          {d['updated']:>8,} runs",
             f"  already present  {d['already_present']:>8,} runs",
             f"  skipped          {d['skipped_rows']:>8,} rows" + (":" if d["skipped"] else "")]
    for reason, s in d["skipped"].items():
        first = ", ".join(s["first"]) + (", ..." if s["rows"] > len(s["first"]) else "")
        lines.append(f"    {s['rows']:>8,}  {reason}" + (f"  [{first}]" if first else ""))
        if s["hint"]:
            lines.append(f"              {s['hint']}")
    return "\n".join(lines)


# --- the spill: validated rows on disk between the two phases --------------------------------------

class Spill:
    """Validated rows in a private temporary SQLite file, keyed by run id (bounded memory).

    ``add`` buffers rows and writes them in batches; a second row with a run id
    already spilled calls ``on_duplicate(run_id, line, row, first_line, first_row)``
    (default: a one-line error naming both lines). Parsers may add tables of
    their own on :attr:`db`.
    """

    FLUSH = 2000

    def __init__(self, name: str) -> None:
        self.name = name
        self._dir = tempfile.TemporaryDirectory(prefix="tl-import-")
        self.db = sqlite3.connect(os.path.join(self._dir.name, "spill.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("PRAGMA temp_store=FILE")
        self.db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, line INTEGER NOT NULL, row BLOB NOT NULL) WITHOUT ROWID")
        self.db.execute("BEGIN")
        self._buf: list[tuple[str, int, bytes]] = []
        self.on_duplicate: Callable[..., None] = self._refuse_duplicate

    def _refuse_duplicate(self, run_id: str, line: int, row: dict, first_line: int, first_row: dict) -> None:
        raise LedgerInputError(f"{self.name}:{line}: {row.get('_idfield', 'id')}: run {run_id!r} appears twice "
                               f"in the file (first at line {first_line})")

    def add(self, run_id: str, line: int, row: dict[str, Any]) -> None:
        self._buf.append((run_id, line, pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)))
        if len(self._buf) >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        buf, self._buf = self._buf, []
        if not buf:
            return
        cur = self.db.executemany("INSERT OR IGNORE INTO rows (id, line, row) VALUES (?, ?, ?)", buf)
        if cur.rowcount != len(buf):
            for run_id, line, blob in buf:
                first = self.get(run_id)
                if first is not None and first[0] != line:
                    self.on_duplicate(run_id, line, pickle.loads(blob), first[0], first[1])

    def get(self, run_id: str) -> Optional[tuple[int, dict[str, Any]]]:
        r = self.db.execute("SELECT line, row FROM rows WHERE id = ?", (run_id,)).fetchone()
        return (r[0], pickle.loads(r[1])) if r else None

    def put(self, run_id: str, line: int, row: dict[str, Any]) -> None:
        """Insert or replace one row now (for the parsers' fix-ups after a duplicate)."""
        self.db.execute("INSERT OR REPLACE INTO rows (id, line, row) VALUES (?, ?, ?)",
                        (run_id, line, pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)))

    def delete(self, run_id: str) -> None:
        self.db.execute("DELETE FROM rows WHERE id = ?", (run_id,))

    def __len__(self) -> int:
        self.flush()
        return self.db.execute("SELECT count(*) FROM rows").fetchone()[0]

    def batches(self, n: int = BATCH) -> Iterator[list[tuple[str, int, dict[str, Any]]]]:
        """The rows in run id order, ``n`` at a time."""
        self.flush()
        last = ""
        while True:
            got = self.db.execute("SELECT id, line, row FROM rows WHERE id > ? ORDER BY id LIMIT ?", (last, n)).fetchall()
            if not got:
                return
            yield [(i, line, pickle.loads(b)) for i, line, b in got]
            last = got[-1][0]

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            self._dir.cleanup()

    def __enter__(self) -> "Spill":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# --- reading files ---------------------------------------------------------------------------------

def open_input(path: Path | str):
    """The file (or standard input for ``-``) as text, read as it is consumed (UTF-8, a BOM dropped)."""
    if str(path) == "-":
        return open(sys.stdin.fileno(), encoding="utf-8-sig", newline="", closefd=False)
    try:
        fh = open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: {exc.strerror or exc}") from None
    return fh


def read_lines(fh, path: Path | str) -> Iterator[str]:
    """Lines of an open input; a byte that is not UTF-8 is a one-line error, wherever it is."""
    try:
        yield from fh
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: {exc.strerror or exc}") from None


def counting(lines: Iterable[str], receipt: Receipt, progress: Optional[StageProgress]) -> Iterable[str]:
    """``lines`` unchanged; with ``progress``, ``progress("read", receipt.rows_read, None)`` every
    :data:`PROGRESS_LINES` lines as the parser consumes them (without, the lines themselves: no extra step)."""
    def counted() -> Iterator[str]:
        for n, line in enumerate(lines, 1):
            yield line
            if n % PROGRESS_LINES == 0:
                progress("read", receipt.rows_read, None)

    return lines if progress is None else counted()


def detect_format(first_line: str) -> str:
    first = first_line.lstrip("\ufeff")
    return "sacct" if first.startswith("JobID|") or "|" in first and "JobID" in first else "csv"


# --- the write phase ---------------------------------------------------------------------------------

#: the columns an imported row may set (the rest keep their defaults)
INSERT_COLUMNS = ("id", "name", "project_id", "user_id", "launcher", "node_type_id", "offer_id", "nodes",
                  "gpus_per_node", "world_size", "strategy", "model_shape", "status", "created_at", "started_at",
                  "ended_at", "heartbeat_at", "tokens", "mfu", "gpu_util_mean", "util_source", "peak_mem_bytes",
                  "mem_kind", "final_loss", "exit_code", "error", "config", "resume_of", "share", "share_basis")
#: a run that a sacct record created is a mirror of its record: every one of these follows it
MIRROR = ("name", "project_id", "user_id", "launcher", "node_type_id", "offer_id", "nodes", "gpus_per_node",
          "world_size", "status", "started_at", "ended_at", "heartbeat_at", "exit_code", "error", "gpu_util_mean",
          "util_source", "peak_mem_bytes", "mem_kind", "config", "resume_of", "share", "share_basis")
#: columns read of a run that a row may change
EXISTING = ("id", "name", "project_id", "user_id", "launcher", "node_type_id", "offer_id", "nodes", "gpus_per_node",
            "world_size", "status", "started_at", "ended_at", "heartbeat_at", "exit_code", "error", "gpu_util_mean",
            "util_source", "peak_mem_bytes", "mem_kind", "config", "resume_of", "share", "share_basis")
LIVE = (RunStatus.queued, RunStatus.running)


def is_sacct_run(run: dict[str, Any]) -> bool:
    """Was this run created from a sacct record (import or sync: ``config["source"] == "sacct"``), rather than
    tracked (launch, the run wrapper)? A run imported before the mapping existed (no config) is merged as if
    tracked: its record adds the allocation it already has."""
    config = run.get("config")
    return isinstance(config, dict) and config.get("source") == "sacct"


def merge_tracked(run: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """What a sacct record changes on a run that was tracked (``launch --launcher slurm``, the run wrapper).

    The allocation is what is paid for, so its start and end (when it has
    ended), its node count and its record under ``config["slurm"]`` come from
    Slurm; the status, exit code and error only when the tracked run has not
    recorded an end itself (killed by a time limit, a node failure, scancel);
    GPU-Util, project, user and ``resume_of`` only where the run has none.
    Steps, tokens, MFU, name, node type and offer stay as tracked.
    """
    new: dict[str, Any] = {}
    if row["started_at"] is not None:
        new["started_at"] = row["started_at"]
        new["nodes"] = row["nodes"]
        if row.get("share_basis"):  # the allocation's share of each node (trainledger.money.allocation.shares)
            new["share"], new["share_basis"] = row.get("share"), row["share_basis"]
    if row["ended_at"] is not None:
        new["ended_at"] = row["ended_at"]
    if run["status"] in LIVE and row["status"] not in LIVE:
        new.update(status=row["status"], exit_code=row.get("exit_code"), error=row.get("error"),
                   heartbeat_at=row["ended_at"])
    elif run["status"] == RunStatus.queued and row["status"] == RunStatus.running:
        new["status"] = RunStatus.running
    for key in ("gpu_util_mean", "util_source", "project_id", "user_id", "resume_of"):
        if run.get(key) is None and row.get(key) is not None:
            new[key] = row[key]
    if row.get("config") and row["config"].get("slurm"):
        new["config"] = {**(run.get("config") or {}), "slurm": row["config"]["slurm"]}
    return {k: v for k, v in new.items() if run.get(k) != v}


class _Names:
    """Project and user ids by name, created on first use (a bounded cache)."""

    LIMIT = 50_000

    def __init__(self, session: Session) -> None:
        self.session = session
        self.ids: dict[tuple[type, str], int] = {}

    def id(self, model: type, name: Optional[str], create: bool = True) -> Optional[int]:
        if not name:
            return None
        key = (model, name)
        got = self.ids.get(key)
        if got is None:
            got = self.session.execute(select(model.id).where(model.name == name)).scalar()
            if got is None and create:
                got = self._create(model, name)
            if got is not None:
                if len(self.ids) > self.LIMIT:
                    self.ids.clear()
                self.ids[key] = got
        return got


    def _create(self, model: type, name: str) -> int:
        """A new project/user; if another writer created it meanwhile (PostgreSQL), that one's id."""
        from sqlalchemy.exc import IntegrityError

        try:
            with self.session.begin_nested():
                row = model(name=name)
                self.session.add(row)
                self.session.flush()
            return row.id
        except IntegrityError:
            return self.session.execute(select(model.id).where(model.name == name)).scalar_one()


def _existing(session: Session, ids: list[str]) -> dict[str, dict[str, Any]]:
    cols = [getattr(Run, c) for c in EXISTING]
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(ids), 500):
        for r in session.execute(select(*cols).where(Run.id.in_(ids[i:i + 500]))):
            out[r[0]] = dict(zip(EXISTING, r))
    return out


def _alias_target(row: dict[str, Any], existing: dict[str, dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The run ``trainledger launch`` registered for this Slurm job, if the job's name points to one and that
    run recorded this very job id at submission (a job name alone proves nothing: users choose it)."""
    alias = row.get("_alias")
    if not alias:
        return None
    run = existing.get(alias[0])
    slurm = ((run or {}).get("config") or {}).get("slurm") or {}
    if run is None or str(slurm.get("job_id")) != alias[1]:
        return None
    if slurm.get("cluster") and alias[2] and slurm["cluster"] != alias[2]:
        return None
    return run


def _plan(row: dict[str, Any], existing: dict[str, dict[str, Any]], names: _Names) -> tuple[str, Any]:
    """("insert", row) | ("update", (run id, changes)) | ("present", None) for one spilled row.

    A project or user is created only when the run is going to refer to it.
    """
    run = existing.get(row["id"]) or _alias_target(row, existing)
    if run is None:
        return "insert", row
    if not row.get("_merge"):
        return "present", None
    mirror = is_sacct_run(run)
    values = dict(row)
    for key, model, name in (("project_id", Project, row.get("project")), ("user_id", User, row.get("user"))):
        values[key] = names.id(model, name) if mirror or run.get(key) is None else None
    if mirror:
        changes = {k: values.get(k) for k in MIRROR if run.get(k) != values.get(k)}
    else:
        changes = merge_tracked(run, values)
    return ("update", (run["id"], changes)) if changes else ("present", None)


def _insert_values(row: dict[str, Any], names: _Names, now: datetime) -> dict[str, Any]:
    v = {c: row.get(c) for c in INSERT_COLUMNS}
    v["project_id"] = names.id(Project, row.get("project"))
    v["user_id"] = names.id(User, row.get("user"))
    v["name"] = v["name"] or ""
    v["strategy"] = v["strategy"] or ""
    v["model_shape"] = ""
    v["created_at"] = now
    return v


def _sqlite_time(v: Optional[datetime]) -> Optional[str]:
    """SQLAlchemy's SQLite DATETIME text of a time (stored as naive UTC)."""
    if v is None:
        return None
    if v.tzinfo is not None:
        v = v.astimezone(_UTC).replace(tzinfo=None)
    return v.isoformat(" ", "microseconds")


def _sqlite_enum(v: Any) -> Any:
    return v.value if isinstance(v, RunStatus) else v


def _sqlite_json(v: Any) -> Any:
    return None if v is None else json.dumps(v)


#: per column of INSERT_COLUMNS: how SQLAlchemy would store its value on SQLite (None: as it is)
_SQLITE = [{"created_at": _sqlite_time, "started_at": _sqlite_time, "ended_at": _sqlite_time,
            "heartbeat_at": _sqlite_time, "status": _sqlite_enum, "config": _sqlite_json}.get(c) for c in INSERT_COLUMNS]


def _insert(session: Session, values: list[dict[str, Any]]) -> None:
    """New runs: one ``executemany`` of plain tuples on SQLite (the ingest's fast path, values formatted as
    the ORM stores them, so both read back alike); SQLAlchemy Core's batched insert on PostgreSQL."""
    conn = session.connection()
    if conn.dialect.name != "sqlite":
        conn.execute(insert(Run), values)
        return
    sql = f"INSERT INTO run ({', '.join(INSERT_COLUMNS)}) VALUES ({', '.join('?' * len(INSERT_COLUMNS))})"
    convs = list(zip(INSERT_COLUMNS, _SQLITE))
    created = _sqlite_time(values[0]["created_at"])  # one per batch
    rows = []
    for v in values:
        t = [v[c] if f is None else f(v[c]) for c, f in convs]
        t[_CREATED] = created
        rows.append(tuple(t))
    conn.exec_driver_sql(sql, rows)


_CREATED = INSERT_COLUMNS.index("created_at")
_SQLITE[_CREATED] = None


def _write_batch(session: Session, batch: list[tuple[str, int, dict[str, Any]]], names: _Names, receipt: Receipt) -> None:
    ids = [rid for rid, _, _ in batch] + [row["_alias"][0] for _, _, row in batch if row.get("_alias")]
    existing = _existing(session, ids)
    inserts, touched = [], []
    now = utcnow()
    conn = session.connection()
    for _, _, row in batch:
        action, what = _plan(row, existing, names)
        if action == "insert":
            inserts.append(_insert_values(row, names, now))
            receipt.imported += 1
        elif action == "update":
            run_id, changes = what
            conn.execute(update(Run).where(Run.id == run_id).values(**changes))
            touched.append(run_id)
            receipt.updated += 1
        else:
            receipt.already_present += 1
    if inserts:
        _insert(session, inserts)
        touched += [v["id"] for v in inserts]
    rollup.touch(session, touched)


#: runs written between two folds into the monthly rollup (bounds the rollup's working set)
FOLD = 5000


def write_spill(engine: Engine, spill: Spill, receipt: Receipt,
                also: Optional[Callable[[Session], None]] = None, progress: Optional[StageProgress] = None) -> None:
    """Phase 2: the spilled rows into the ledger in one transaction (taken now), batch by batch, folded
    into the monthly rollup every :data:`FOLD` runs; ``also(session)`` runs last in the same transaction.
    ``progress("write", rows written, rows to write)`` is called once before the first batch and after each."""
    total = len(spill)
    if not total and also is None:
        return
    if progress:
        progress("write", 0, total)
    with session_scope(engine) as s:
        if s.get_bind().dialect.name == "postgresql":
            s.execute(text("SELECT pg_advisory_xact_lock(7261015)"))  # imports and syncs of one ledger queue up
        names = _Names(s)
        done = folded = 0
        with rollup.bulk(s):
            for batch in spill.batches():
                _write_batch(s, batch, names, receipt)
                done += len(batch)
                if progress:
                    progress("write", done, total)
                if done - folded >= FOLD:
                    rollup.sync(s)
                    folded = done
        if also is not None:
            also(s)


Parser = Callable[[Iterable[str], str, Context, ImportOptions, Spill, Receipt], None]


def import_lines(engine: Engine, lines: Iterable[str], name: str, parse: Parser, opts: ImportOptions,
                 fmt: str, ctx: Optional[Context] = None,
                 also: Optional[Callable[[Session], None]] = None, progress: Optional[StageProgress] = None) -> Receipt:
    """Both phases for one input: parse ``lines`` with ``parse`` into a spill, then write it
    (``progress``: see :data:`StageProgress`)."""
    ctx = ctx or load_context(engine)
    opts.check(ctx)
    receipt = Receipt(source=name, format=fmt, strict=opts.strict)
    with Spill(name) as spill:
        parse(counting(lines, receipt, progress), name, ctx, opts, spill, receipt)
        if progress:
            progress("read", receipt.rows_read, None)
        admit(spill, receipt, ctx, name, fmt, utcnow())
        write_spill(engine, spill, receipt, also, progress)
    return receipt


def import_file(engine: Engine, path: Path | str, opts: ImportOptions, parsers: dict[str, Parser],
                progress: Optional[StageProgress] = None) -> Receipt:
    """Import ``path`` (``-``: standard input) with the parser of its format (``opts.fmt``, or detected
    from the first line when "auto": sacct output starts with ``JobID|``); ``progress``: :data:`StageProgress`."""
    import itertools

    if opts.fmt != "auto" and opts.fmt not in parsers:
        raise LedgerInputError(f"--format: expected auto or one of {', '.join(parsers)}, got {opts.fmt!r}")
    name = "stdin" if str(path) == "-" else Path(path).name
    with open_input(path) as fh:
        lines = read_lines(fh, path)
        first = next(lines, None)
        fmt = detect_format(first or "") if opts.fmt == "auto" else opts.fmt
        rest = itertools.chain([first], lines) if first is not None else iter(())
        return import_lines(engine, rest, name, parsers[fmt], opts, fmt, progress=progress)
