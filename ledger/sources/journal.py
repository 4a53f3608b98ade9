"""The run journal: every tracking event is appended (fsync'd JSON lines) before
it is applied to the ledger, so an unreachable ledger never loses anything.

Events (one JSON object per line, ``seq`` increasing within a run's journal)::

    {"seq": 1, "type": "run", "run_id": "...", "fields": {...}}      # upsert the run row
    {"seq": 2, "type": "heartbeat", "run_id": "...", "ts": "..."}    # liveness
    {"seq": 3, "type": "samples", "run_id": "...", "rows": [[node, gpu, metric, ts, value], ...]}
    {"seq": 4, "type": "nodes", "run_id": "...", "rows": [{"hostname": ..., ...}]}
    {"seq": 5, "type": "node_beat", "run_id": "...", "hostname": "...", "ts": "..."}   # a node's liveness
    {"seq": 6, "type": "checkpoint", "run_id": "...", "ts": "...", "step": 100, "path": "..."}
    {"seq": 7, "type": "phases", "run_id": "...", "node": "...", "rows": {"eval": [s, n, ckpt_s, ckpt_n, first, last]}}

A ``run`` event with ``"attach": true`` only updates a run that another
process registered (the Python API under the run wrapper); ``nodes``,
``node_beat`` and attached ``run`` events of a run that is not in the ledger
yet raise :class:`RunNotRegistered` and wait in the journal until it is.

Applying is idempotent: run fields are set (not added), heartbeats only move
forward, samples are inserted once per (run, node, gpu, metric, ts), nodes
are upserted by (run, hostname), and a checkpoint replaces the run's last
checkpoint only if it is later (its step is also kept as a ``checkpoint_step``
sample, the run's checkpoint history). Replaying a journal any number of times
therefore gives the same ledger: nothing is lost and nothing is counted twice.
``<run>.applied`` records the last applied ``seq`` so replays are cheap.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Optional

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session

from ledger.errors import LedgerInputError
from ledger.store.ids import validate_run_id
from ledger.store.ingest import insert_samples
from ledger.store.lookup import get_or_create
from ledger.store.models import NodeType, Offer, Project, Run, RunNode, RunStatus, User

ENV_JOURNAL_DIR = "TRAINLEDGER_JOURNAL_DIR"
#: fields of a ``run`` event that name rows in other tables
NAMED = {"node_type": (NodeType, "node_type_id"), "offer": (Offer, "offer_id"),
         "project": (Project, "project_id"), "user": (User, "user_id")}
TIME_FIELDS = {"created_at", "started_at", "ended_at", "heartbeat_at", "last_checkpoint_at"}
REAPED_ERROR = "heartbeat stopped; marked crashed at the last heartbeat"
ENDED = (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.crashed)
#: fields of a start event that would turn an ended run back into a running one
REOPENING = ("status", "ended_at", "heartbeat_at", "error", "exit_code")


def default_journal_dir() -> Path:
    env = os.environ.get(ENV_JOURNAL_DIR)
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "journal"


class JournalWriteError(RuntimeError):
    """The journal could not be written (e.g. disk full): the run must stop loudly."""


class RunNotRegistered(LookupError):
    """An event of a run that another process owns arrived before that run's registration: retry later."""


class Journal:
    """Append-only, fsync'd event log of one run (``name``: the file's stem, default the run id; each process
    that writes events of a run on one machine has its own, e.g. ``<run>.node1``, ``<run>.api-<pid>``)."""

    def __init__(self, directory: Path | str, run_id: str, name: Optional[str] = None):
        validate_run_id(run_id)  # it names the journal's files
        if name is not None:
            validate_run_id(name, "journal name")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        name = name or run_id
        self.path = self.dir / f"{name}.jsonl"
        self.applied_path = self.dir / f"{name}.applied"
        self.run_id = run_id
        self.seq = 0
        self._skip = (0, 0)  # (byte offset, seq): every event before the offset has seq <= this seq
        if self.path.exists():
            for ev in read_events(self.path):
                self.seq = max(self.seq, ev["seq"])

    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Number, write and fsync events; returns them with their ``seq``.

        All or nothing: if the write fails (disk full, file too large, I/O
        error) the file is cut back to where it was, ``seq`` is restored and
        :class:`JournalWriteError` is raised, so a half-written line never
        hides the events appended after it.
        """
        out = [{"seq": self.seq + i, "run_id": self.run_id, **ev} for i, ev in enumerate(events, 1)]
        if not out:
            return out
        data = "".join(json.dumps(ev, separators=(",", ":"), default=_json_default) + "\n" for ev in out)
        fd = None
        size = None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            size = os.fstat(fd).st_size
            view = memoryview(data.encode("utf-8"))
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError as exc:
            if fd is not None and size is not None:
                try:  # drop the torn tail; truncating only frees space
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                except OSError:
                    pass
            raise JournalWriteError(_write_error(self.path, exc)) from exc
        finally:
            if fd is not None:
                os.close(fd)
        self.seq = out[-1]["seq"]
        return out

    def applied_seq(self) -> int:
        try:
            return int(self.applied_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def mark_applied(self, seq: int) -> None:
        tmp = self.applied_path.with_suffix(".applied.tmp")
        try:
            tmp.write_text(str(seq))
            os.replace(tmp, self.applied_path)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise JournalWriteError(_write_error(self.applied_path, exc)) from exc

    def pending(self) -> list[dict[str, Any]]:
        """Events not applied yet. The file is read from the end of the last applied event seen
        (seq only grows along the file), so a flush costs O(new events), not O(journal)."""
        done = self.applied_seq()
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        start, seen = self._skip
        if seen > done or start > size:  # the applied mark went back, or the file is not ours any more
            start, seen = 0, 0
        out = []
        with open(self.path, "rb") as fh:
            fh.seek(start)
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # torn write: never fsync'd, so never acknowledged
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    break
                start += len(line)
                if ev["seq"] > done:
                    out.append(ev)
                elif not out:
                    self._skip = (start, ev["seq"])
        return out


def _write_error(path: Path, exc: OSError) -> str:
    return f"cannot write the run journal {path}: {exc.strerror or exc} (is its disk full?)"


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_events(path: Path) -> list[dict[str, Any]]:
    """Events of a journal file; a torn last line (crash mid-write) is ignored."""
    events = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # torn write: never fsync'd, so never acknowledged
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return events


# --- applying ------------------------------------------------------------------

def _id_for(session: Session, model, name: Optional[str], create: bool) -> Optional[int]:
    if not name:
        return None
    if create:  # a project or user: created if new, safe beside concurrent writers
        return get_or_create(session, model, name)
    row = session.exec(select(model.id).where(model.name == name)).first()
    if row is not None:
        return row[0]
    raise ValueError(f"unknown {model.__tablename__} {name!r}")


def _ts(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def apply_events(session: Session, events: Iterable[dict[str, Any]]) -> int:
    """Apply events in order, idempotently, in the caller's transaction."""
    n = 0
    for ev in events:
        handler = _HANDLERS.get(ev["type"])
        if handler is None:
            raise ValueError(f"unknown journal event type {ev['type']!r}")
        handler(session, validate_run_id(ev["run_id"], "journal event run_id"), ev)
        n += 1
    session.flush()  # before the caller commits: session hooks that run before commit (the rollup) see every change
    return n


def _registered(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotRegistered(f"run {run_id} is not in the ledger yet")
    return run


def _apply_run(session: Session, rid: str, ev: dict[str, Any]) -> None:
    fields = dict(ev["fields"])
    for key, (model, col) in NAMED.items():
        if key in fields:
            fields[col] = _id_for(session, model, fields.pop(key), create=model in (Project, User))
    for key in TIME_FIELDS & fields.keys():
        fields[key] = _ts(fields[key])
    if "status" in fields:
        fields["status"] = RunStatus(fields["status"])
    run = _registered(session, rid) if ev.get("attach") else session.get(Run, rid)
    if run is None:
        session.add(Run(id=rid, **fields))
    else:
        if fields.get("status") == RunStatus.running and run.status in ENDED:
            # a replayed start event (e.g. a journal replayed again after the run's end
            # was written straight to the ledger) never reopens an ended run
            for key in REOPENING:
                fields.pop(key, None)
        if isinstance(fields.get("config"), dict) and isinstance(run.config, dict) and "slurm" in run.config:
            # the Slurm job of a `launch --launcher slurm` run is the ledger's record, not the trainer's
            fields["config"] = {**fields["config"], "slurm": run.config["slurm"]}
        for k, v in fields.items():
            setattr(run, k, v)
    session.flush()


def _apply_heartbeat(session: Session, rid: str, ev: dict[str, Any]) -> None:
    ts = _ts(ev["ts"])
    run = session.get(Run, rid)
    if run is not None and (run.heartbeat_at is None or run.heartbeat_at < ts):
        run.heartbeat_at = ts
        if run.status == RunStatus.crashed and run.error == REAPED_ERROR:
            # reaped during an outage, but the run was alive: undo the reaping
            run.status, run.ended_at, run.error = RunStatus.running, None, None


def _apply_samples(session: Session, rid: str, ev: dict[str, Any]) -> None:
    if ev.get("attach"):
        _registered(session, rid)
    _insert_samples(session, rid, ev["rows"])


def _apply_nodes(session: Session, rid: str, ev: dict[str, Any]) -> None:
    run = _registered(session, rid)
    for row in ev["rows"]:
        row = {k: (_ts(v) if k == "heartbeat_at" else v) for k, v in row.items()}
        existing = session.exec(select(RunNode).where(RunNode.run_id == rid, RunNode.hostname == row["hostname"])).first()
        if existing is None:
            session.add(RunNode(run_id=rid, **row))
        else:
            for k, v in row.items():
                setattr(existing[0], k, v)
    session.flush()
    if run.nodes > 1 and "wrapper" in (run.config or {}):
        _run_util_from_nodes(session, run)


def _run_util_from_nodes(session: Session, run: Run) -> None:
    """A multi-node run recorded by one wrapper per node: its GPU-Util is the mean of its nodes' means
    (nodes have the same GPUs and the same span), its p95 the highest node p95 (an upper bound)."""
    rows = session.exec(select(RunNode.gpu_util_mean, RunNode.gpu_util_p95, RunNode.util_source)
                        .where(RunNode.run_id == run.id, RunNode.gpu_util_mean.is_not(None))).all()
    if rows:
        run.gpu_util_mean = sum(r[0] for r in rows) / len(rows)
        p95s = [r[1] for r in rows if r[1] is not None]
        run.gpu_util_p95 = max(p95s) if p95s else None
        run.util_source = rows[0][2]


def _apply_node_beat(session: Session, rid: str, ev: dict[str, Any]) -> None:
    _registered(session, rid)
    ts = _ts(ev["ts"])
    node = session.exec(select(RunNode).where(RunNode.run_id == rid, RunNode.hostname == ev["hostname"])).first()
    if node is not None and (node[0].heartbeat_at is None or node[0].heartbeat_at < ts):
        node[0].heartbeat_at = ts
        if node[0].status == "crashed":  # reaped during an outage, but its wrapper was alive
            node[0].status = "running"


def _apply_checkpoint(session: Session, rid: str, ev: dict[str, Any]) -> None:
    """The run's last checkpoint becomes this one if it is later; its step joins the ``checkpoint_step`` series."""
    run = _registered(session, rid)
    ts = _ts(ev["ts"])
    if run.last_checkpoint_at is None or run.last_checkpoint_at < ts:
        run.last_checkpoint_at = ts
        run.last_checkpoint_step = ev.get("step")
        run.last_checkpoint_path = (ev.get("path") or None) and str(ev["path"])[:500]
    session.flush()
    if ev.get("step") is not None:
        _insert_samples(session, rid, [["", -1, "checkpoint_step", ev["ts"], float(ev["step"])]])


def _apply_phases(session: Session, rid: str, ev: dict[str, Any]) -> None:
    """A node's phase totals (ledger.sources.phases): its ``run_phase`` rows set to them."""
    from ledger.sources.phases import apply_phases

    apply_phases(session, rid, ev, _registered, _ts)


_HANDLERS = {"run": _apply_run, "heartbeat": _apply_heartbeat, "samples": _apply_samples, "nodes": _apply_nodes,
             "node_beat": _apply_node_beat, "checkpoint": _apply_checkpoint, "phases": _apply_phases}


def _insert_samples(session: Session, run_id: str, rows: list[list[Any]]) -> None:
    """Insert samples once: rows already present (same run, node, gpu, metric, ts) are skipped
    (``ledger.store.ingest``: one executemany on SQLite, COPY on PostgreSQL)."""
    if rows:
        insert_samples(session, rows, run_id=run_id)


def sync_journal(engine: Engine, journal: Journal) -> int:
    """Apply a journal's pending events in one transaction; returns how many."""
    pending = journal.pending()
    if not pending:
        return 0
    with Session(engine) as session:
        apply_events(session, pending)
        session.commit()
    journal.mark_applied(pending[-1]["seq"])
    return len(pending)


def sync_all(engine: Engine, directory: Optional[Path] = None) -> dict[str, int]:
    """``trainledger sync``: replay every journal in ``directory``; returns events applied per journal.

    A journal of a run that is not in the ledger yet (a second node's, the API's)
    is retried after the others, whose registration it may be waiting for, and
    otherwise left for the next sync.
    """
    directory = Path(directory or default_journal_dir())
    out: dict[str, int] = {}
    if not directory.is_dir():
        return out
    waiting = []
    for path in sorted(directory.glob("*.jsonl")):
        applied = path.with_suffix(".applied")
        if applied.exists() and applied.stat().st_mtime_ns >= path.stat().st_mtime_ns:
            continue  # nothing written since the last replay
        waiting.append(path)
    for _ in range(2):
        later = []
        for path in waiting:
            try:
                journal = Journal(directory, path.stem)
            except LedgerInputError:  # not a run id: not a journal trainledger wrote
                continue
            try:
                n = sync_journal(engine, journal)
            except RunNotRegistered:
                later.append(path)
                continue
            if n:
                out[path.stem] = n
        waiting = later
    return out
