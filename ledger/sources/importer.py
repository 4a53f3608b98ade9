"""``trainledger import``: finished runs from our CSV format or Slurm ``sacct``.

Every row is validated before anything is written; one bad row rejects the
whole file with ``FILE:LINE: field: reason`` and nothing is imported.
Importing the same file twice imports nothing the second time (run ids are
the Slurm job id, the CSV ``id`` column, or a hash of the row).

Our CSV (header row, any column order)::

    id,name,project,user,node_type,offer,nodes,gpus_per_node,start,end,status,
    strategy,tokens,gpu_util_mean,mfu,final_loss

Required: name, node_type (or ``--node-type``), nodes, start, end, status.
Timestamps are ISO 8601; without an offset they are in ``--tz`` (default: the
ledger's display time zone).

Slurm: ``sacct --parsable2 --allocations --format
JobID,JobName,Account,User,Start,End,NNodes,AllocTRES,State``. GPUs come from
``gres/gpu=N`` in AllocTRES; Account becomes the project. Jobs that have not
finished, job steps, and jobs without GPUs are skipped and counted.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlmodel import Session, select

from ledger.errors import LedgerInputError
from ledger.store.lookup import get_or_create
from ledger.store.models import NodeType, Offer, Project, Run, RunStatus, User

SACCT_FIELDS = ["JobID", "JobName", "Account", "User", "Start", "End", "NNodes", "AllocTRES", "State"]
CSV_REQUIRED = ["name", "nodes", "start", "end", "status"]
CSV_OPTIONAL = ["id", "project", "user", "node_type", "offer", "gpus_per_node", "strategy", "tokens",
                "gpu_util_mean", "mfu", "final_loss", "launcher"]
SLURM_STATES = {
    "COMPLETED": RunStatus.succeeded,
    "FAILED": RunStatus.failed,
    "TIMEOUT": RunStatus.failed,
    "OUT_OF_MEMORY": RunStatus.failed,
    "BOOT_FAIL": RunStatus.failed,
    "DEADLINE": RunStatus.failed,
    "CANCELLED": RunStatus.cancelled,
    "PREEMPTED": RunStatus.cancelled,
    "NODE_FAIL": RunStatus.crashed,
}
SLURM_UNFINISHED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "REVOKED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "CONFIGURING", "COMPLETING"}
FINISHED = {RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.crashed}
GRES_RE = re.compile(r"(?:^|,)gres/gpu(?::([^=,]+))?=(\d+)")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
#: limits that keep every value storable on SQLite and PostgreSQL alike (INTEGER, BIGINT, VARCHAR(n))
MAX_NODES = 100_000
MAX_BIGINT = 2**63 - 1
YEARS = (1970, 2199)
#: column lengths of the run, project and user tables (ledger/models.py)
TEXT_LIMITS = {"id": 64, "name": 200, "project": 100, "user": 100, "strategy": 20, "launcher": 20}


@dataclass
class ImportResult:
    format: str
    imported: int = 0
    already_present: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)


def _parse_ts(text: str, tz: ZoneInfo, where: str, fieldname: str) -> datetime:
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise LedgerInputError(f"{where}: {fieldname}: expected an ISO 8601 time such as 2026-11-03T08:00:00, got {text!r}") from None
    if not YEARS[0] <= ts.year <= YEARS[1]:
        raise LedgerInputError(f"{where}: {fieldname}: the year must be {YEARS[0]} to {YEARS[1]}, got {text!r}")
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=tz)
    return ts


def _int(text: str, where: str, fieldname: str, minimum: int = 0, maximum: int = MAX_BIGINT) -> int:
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


def _text(value: str, where: str, fieldname: str, limit: int) -> str:
    """A text field as stored: no control characters, at most ``limit`` characters (the column's length)."""
    bad = CONTROL_RE.search(value)
    if bad:
        raise LedgerInputError(f"{where}: {fieldname}: contains a control character ({bad.group()!r}); remove it")
    if len(value) > limit:
        raise LedgerInputError(f"{where}: {fieldname}: at most {limit} characters, got {len(value)}")
    return value


def _ratio(text: str, where: str, fieldname: str) -> Optional[float]:
    if text is None or text.strip() == "":
        return None
    try:
        v = float(text)
    except ValueError:
        raise LedgerInputError(f"{where}: {fieldname}: expected a ratio between 0 and 1, got {text!r}") from None
    # NaN fails the range check below
    if not 0 <= v <= 1:
        raise LedgerInputError(f"{where}: {fieldname}: must be a ratio between 0 and 1 (e.g. 0.85 for 85%), got {text}")
    return v


def _row_id(*parts: Any) -> str:
    return "csv-" + hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def detect_format(text: str) -> str:
    lines = text.lstrip("\ufeff").splitlines()
    first = lines[0] if lines else ""
    return "sacct" if first.startswith("JobID|") or "|" in first and "JobID" in first else "csv"


def _validate_common(where: str, start: datetime, end: datetime, nodes: int, gpn: int, nt: NodeType) -> None:
    if end < start:
        raise LedgerInputError(f"{where}: end: {end.isoformat()} is before start {start.isoformat()}; fix the times")
    if gpn > nt.gpus_per_node:
        raise LedgerInputError(f"{where}: gpus_per_node: {gpn} exceeds the {nt.gpus_per_node} GPUs of node type {nt.name}; fix the row or pass another --node-type")


def parse_runs(session: Session, text: str, name: str, **kw: Any) -> tuple[str, list[dict[str, Any]], dict[str, int]]:
    """Validate a whole file; returns (format, run rows, skipped counts). Writes nothing."""
    try:
        return _parse_runs(session, text, name, **kw)
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit()
        raise LedgerInputError(f"{name}: not valid CSV: {exc}") from None


class _Resolver:
    """Node types and offers by name, for the rows of one file (``--node-type``/``--offer`` as defaults)."""

    def __init__(self, session: Session, node_type: Optional[str], offer: Optional[str]):
        self.node_types = {n.name: n for n in session.exec(select(NodeType)).all()}
        self.offers = {o.name: o for o in session.exec(select(Offer)).all()}
        self.default_nt, self.default_offer = node_type, offer
        if node_type and node_type not in self.node_types:
            raise LedgerInputError(f"--node-type: unknown {node_type!r}; use one of {', '.join(sorted(self.node_types))}")

    def node_type(self, value: Optional[str], where: str) -> NodeType:
        value = value or self.default_nt
        if not value:
            raise LedgerInputError(f"{where}: node_type: missing; add a node_type column or pass --node-type ({', '.join(sorted(self.node_types))})")
        if value not in self.node_types:
            raise LedgerInputError(f"{where}: node_type: unknown {value!r}; use one of {', '.join(sorted(self.node_types))}")
        return self.node_types[value]

    def offer(self, value: Optional[str], nt: NodeType, where: str) -> Optional[int]:
        value = value or self.default_offer
        if not value:
            return None
        o = self.offers.get(value)
        if o is None or o.node_type_id != nt.id:
            valid = sorted(n for n, x in self.offers.items() if x.node_type_id == nt.id)
            raise LedgerInputError(f"{where}: offer: {value!r} is not an offer for {nt.name}; use one of {', '.join(valid)}")
        return o.id


def _parse_runs(session: Session, text: str, name: str, *, node_type: Optional[str] = None,
                offer: Optional[str] = None, tz: ZoneInfo = ZoneInfo("UTC"), fmt: str = "auto",
                cluster: str = "") -> tuple[str, list[dict[str, Any]], dict[str, int]]:
    fmt = detect_format(text) if fmt == "auto" else fmt
    res = _Resolver(session, node_type, offer)
    text = text.lstrip("\ufeff")
    if fmt == "sacct":
        rows, skipped = _parse_sacct(text, name, res, tz, cluster)
        return fmt, rows, skipped
    return fmt, _parse_csv(text, name, res, tz), {}


def _skip(skipped: dict[str, int], reason: str) -> None:
    skipped[reason] = skipped.get(reason, 0) + 1


def _parse_sacct(text: str, name: str, res: _Resolver, tz: ZoneInfo, cluster: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``sacct --parsable2`` rows: allocations with GPUs that have finished (steps and unfinished jobs skipped)."""
    reader = csv.reader(io.StringIO(text), delimiter="|")
    header = next(reader, None)
    if header is None or any(f not in header for f in SACCT_FIELDS):
        raise LedgerInputError(f"{name}:1: header: sacct output needs {','.join(SACCT_FIELDS)}; run sacct --parsable2 --format {','.join(SACCT_FIELDS)}")
    col = {h: i for i, h in enumerate(header)}
    rows: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    seen: set[str] = set()
    for lineno, rec in enumerate(reader, start=2):
        if not rec or all(not x for x in rec):
            continue
        where = f"{name}:{lineno}"
        if len(rec) < len(header):
            raise LedgerInputError(f"{where}: expected {len(header)} '|'-separated fields, got {len(rec)}")
        row = _sacct_row(lambda f: rec[col[f]].strip(), where, res, tz, cluster, skipped, seen)
        if row is not None:
            rows.append(row)
    return rows, skipped


def _sacct_row(get: Any, where: str, res: _Resolver, tz: ZoneInfo, cluster: str, skipped: dict[str, int],
               seen: set[str]) -> Optional[dict[str, Any]]:
    """One sacct record as a run, or None when it is skipped (counted in ``skipped`` by reason)."""
    job = get("JobID")
    if "." in job:
        return _skip(skipped, "job steps")
    state = get("State").split()[0] if get("State") else ""
    if state in SLURM_UNFINISHED or get("End") in ("Unknown", "None", ""):
        return _skip(skipped, "unfinished jobs")
    if state not in SLURM_STATES:
        raise LedgerInputError(f"{where}: State: unknown Slurm state {state!r}; expected one of {', '.join(sorted(SLURM_STATES))}")
    m = list(GRES_RE.finditer(get("AllocTRES")))
    counts = [(x.group(1), _int(x.group(2), where, "AllocTRES gres/gpu", 0, MAX_NODES * 1024)) for x in m]
    untyped = [n for kind, n in counts if kind is None]
    gpus = untyped[0] if untyped else sum(n for _, n in counts)
    if gpus == 0:
        return _skip(skipped, "jobs without GPUs")
    nodes = _int(get("NNodes"), where, "NNodes", 1, MAX_NODES)
    nt = res.node_type(None, where)
    if gpus % nodes:
        raise LedgerInputError(f"{where}: AllocTRES: {gpus} GPUs do not split evenly over {nodes} nodes")
    start = _parse_ts(get("Start"), tz, where, "Start")
    end = _parse_ts(get("End"), tz, where, "End")
    _validate_common(where, start, end, nodes, gpus // nodes, nt)
    rid = _text(f"slurm-{cluster + '-' if cluster else ''}{job}", where, "JobID (with --cluster)", TEXT_LIMITS["id"])
    if rid in seen:
        raise LedgerInputError(f"{where}: JobID: {job} appears twice in the file")
    seen.add(rid)
    return dict(id=rid, name=_text(get("JobName"), where, "JobName", TEXT_LIMITS["name"]),
                project=_text(get("Account"), where, "Account", TEXT_LIMITS["project"]) or None,
                user=_text(get("User"), where, "User", TEXT_LIMITS["user"]) or None,
                node_type_id=nt.id, offer_id=res.offer(None, nt, where), nodes=nodes,
                gpus_per_node=gpus // nodes, world_size=gpus, started_at=start, ended_at=end,
                heartbeat_at=end, status=SLURM_STATES[state], launcher="slurm", exit_code=None)


def _parse_csv(text: str, name: str, res: _Resolver, tz: ZoneInfo) -> list[dict[str, Any]]:
    """Our runs CSV: a header with :data:`CSV_REQUIRED` (+ :data:`CSV_OPTIONAL`) columns, one finished run a row."""
    reader = csv.DictReader(io.StringIO(text))
    _check_csv_header(reader.fieldnames, name)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(reader, start=2):
        rec = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if None in raw:
            raise LedgerInputError(f"{name}:{lineno}: more fields than the header has columns")
        if not any(rec.values()):
            continue
        where = f"{name}:{lineno}"
        rows.append(_csv_row(rec, where, res, tz, seen))
    return rows


def _check_csv_header(fieldnames: Optional[list[str]], name: str) -> None:
    if fieldnames is None:
        raise LedgerInputError(f"{name}:1: header: the file is empty; expected a header row with {','.join(CSV_REQUIRED)}")
    fields = [f.strip() for f in fieldnames]
    twice = sorted({f for f in fields if fields.count(f) > 1})
    if twice:
        raise LedgerInputError(f"{name}:1: header: column {twice[0]!r} appears twice")
    unknown = [f for f in fields if f not in CSV_REQUIRED + CSV_OPTIONAL]
    if unknown:
        raise LedgerInputError(f"{name}:1: header: unknown column {unknown[0]!r}; columns are {','.join(CSV_REQUIRED + CSV_OPTIONAL)}")
    missing = [f for f in CSV_REQUIRED if f not in fields]
    if missing:
        raise LedgerInputError(f"{name}:1: header: missing column {missing[0]!r}; required: {','.join(CSV_REQUIRED)}")


def _csv_row(rec: dict[str, str], where: str, res: _Resolver, tz: ZoneInfo, seen: set[str]) -> dict[str, Any]:
    """One CSV record, validated, as the fields of a run."""
    nt = res.node_type(rec.get("node_type"), where)
    nodes = _int(rec["nodes"], where, "nodes", 1, MAX_NODES)
    gpn = _int(rec["gpus_per_node"], where, "gpus_per_node", 1) if rec.get("gpus_per_node") else nt.gpus_per_node
    start = _parse_ts(rec["start"], tz, where, "start")
    end = _parse_ts(rec["end"], tz, where, "end")
    _validate_common(where, start, end, nodes, gpn, nt)
    try:
        status = RunStatus(rec["status"].lower())
    except ValueError:
        raise LedgerInputError(f"{where}: status: expected one of {', '.join(s.value for s in FINISHED)}, got {rec['status']!r}") from None
    if status not in FINISHED:
        raise LedgerInputError(f"{where}: status: import takes finished runs ({', '.join(s.value for s in FINISHED)}), got {status.value!r}")
    if not rec["name"]:
        raise LedgerInputError(f"{where}: name: empty; give the run a name")
    for key in ("name", "project", "user", "id", "strategy", "launcher"):
        _text(rec.get(key) or "", where, key, TEXT_LIMITS[key])
    tokens = _int(rec["tokens"], where, "tokens") if rec.get("tokens") else None
    final_loss = _finite(rec.get("final_loss"), where, "final_loss")
    rid = rec.get("id") or _row_id(rec["name"], nt.name, nodes, start.isoformat(), end.isoformat())
    if rid in seen:
        raise LedgerInputError(f"{where}: id: run {rid!r} appears twice in the file")
    seen.add(rid)
    return dict(id=rid, name=rec["name"], project=rec.get("project") or None, user=rec.get("user") or None,
                node_type_id=nt.id, offer_id=res.offer(rec.get("offer"), nt, where), nodes=nodes,
                gpus_per_node=gpn, world_size=nodes * gpn, started_at=start, ended_at=end,
                heartbeat_at=end, status=status, launcher=rec.get("launcher") or "import",
                strategy=rec.get("strategy") or "", tokens=tokens,
                gpu_util_mean=_ratio(rec.get("gpu_util_mean", ""), where, "gpu_util_mean"),
                mfu=_ratio(rec.get("mfu", ""), where, "mfu"), final_loss=final_loss)


def _finite(text: Optional[str], where: str, field: str) -> Optional[float]:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise LedgerInputError(f"{where}: {field}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise LedgerInputError(f"{where}: {field}: expected a finite number, got {text!r}")
    return value


def import_runs(session: Session, path: Path, **kw: Any) -> ImportResult:
    """Validate the whole file, then insert its new runs in the caller's transaction."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    fmt, rows, skipped = parse_runs(session, text, Path(path).name, **kw)
    result = ImportResult(format=fmt, skipped=skipped)
    existing = set()
    ids = [r["id"] for r in rows]
    for i in range(0, len(ids), 500):
        existing |= set(session.exec(select(Run.id).where(Run.id.in_(ids[i:i + 500]))).all())
    for r in rows:
        if r["id"] in existing:
            result.already_present += 1
            continue
        project = r.pop("project")
        user = r.pop("user")
        session.add(Run(**r, project_id=get_or_create(session, Project, project),
                        user_id=get_or_create(session, User, user)))
        result.imported += 1
        result.run_ids.append(r["id"])
    session.flush()
    return result
