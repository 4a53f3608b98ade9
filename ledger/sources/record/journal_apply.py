"""Applying journal events to the ledger, idempotently (the event format: :mod:`trainledger.sources.record.journal`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Optional

from sqlalchemy import select
from sqlmodel import Session
from trainledger.sources.record import outcome
from trainledger.sources.record.journal_file import RunNotRegistered
from trainledger.sources.record.sanitize import clean_event
from trainledger.store.ids import validate_run_id
from trainledger.store.ingest import insert_samples
from trainledger.store.lookup import get_or_create
from trainledger.store.models import NodeType, Offer, Project, Run, RunNode, RunStatus, User

#: fields of a ``run`` event that name rows in other tables
NAMED = {"node_type": (NodeType, "node_type_id"), "offer": (Offer, "offer_id"),
         "project": (Project, "project_id"), "user": (User, "user_id")}
TIME_FIELDS = {"created_at", "started_at", "ended_at", "heartbeat_at", "last_checkpoint_at"}
REAPED_ERROR = outcome.REAPED_ERROR
ENDED = outcome.ENDED
#: fields of an end event that are settled with the other reports of the run's end (trainledger.sources.record.outcome)
SETTLED = ("status", "error", "exit_code", "ended_at")
#: fields of a start event that would turn an ended run back into a running one
REOPENING = ("status", "ended_at", "heartbeat_at", "error", "exit_code")


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
        ev = clean_event(ev)  # a journal written by an older version may hold anything
        handler = _HANDLERS.get(ev.get("type"))
        if handler is None:
            raise ValueError(f"unknown journal event type {ev.get('type')!r}")
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
        session.flush()
        return
    ending = fields.get("status") in ENDED
    if ending:
        outcome.lock_run(session, run)
    if fields.get("status") == RunStatus.running and run.status in ENDED:
        # a replayed start event (e.g. a journal replayed again after the run's end
        # was written straight to the ledger) never reopens an ended run
        for key in REOPENING:
            fields.pop(key, None)
    if isinstance(fields.get("config"), dict) and isinstance(run.config, dict):
        # the Slurm job of a `launch --launcher slurm` run and the reports of its end are the ledger's record
        kept = {k: run.config[k] for k in ("slurm", outcome.KEY) if k in run.config}
        fields["config"] = {**fields["config"], **kept}
    own = outcome.own_report(fields["status"], fields.get("error"), fields.get("exit_code"),
                             fields.get("ended_at")) if ending else None
    for k, v in fields.items():
        if not (ending and k in SETTLED):
            setattr(run, k, v)
    if own is not None:
        outcome.record_report(session, run, own)
    session.flush()


def _apply_heartbeat(session: Session, rid: str, ev: dict[str, Any]) -> None:
    ts = _ts(ev["ts"])
    run = session.get(Run, rid)
    if run is not None and (run.heartbeat_at is None or run.heartbeat_at < ts):
        run.heartbeat_at = ts
        if run.status == RunStatus.crashed and run.error == REAPED_ERROR:
            # reaped during an outage, but the run was alive: undo the reaping
            run.status, run.ended_at, run.error = RunStatus.running, None, None
        outcome.apply_outcome(run)  # an end "at the last heartbeat" moves with it, whichever came first


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
    (nodes have the same GPUs and the same span), its p95 the highest node p95 (an upper bound).

    The nodes' wrappers write at the same time from different hosts: the run's row is locked first (PostgreSQL),
    so that the last writer reads every other node's committed figures instead of overwriting them with its
    own view (a lost update; SQLite serialises writers anyway)."""
    session.exec(select(Run.id).where(Run.id == run.id).with_for_update())
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
    """A node's phase totals (trainledger.sources.record.phases): its ``run_phase`` rows set to them."""
    from trainledger.sources.record.phases import apply_phases

    apply_phases(session, rid, ev, _registered, _ts)


_HANDLERS = {"run": _apply_run, "heartbeat": _apply_heartbeat, "samples": _apply_samples, "nodes": _apply_nodes,
             "node_beat": _apply_node_beat, "checkpoint": _apply_checkpoint, "phases": _apply_phases}


def _insert_samples(session: Session, run_id: str, rows: list[list[Any]]) -> None:
    """Insert samples once: rows already present (same run, node, gpu, metric, ts) are skipped
    (``trainledger.store.ingest``: one executemany on SQLite, COPY on PostgreSQL)."""
    if rows:
        insert_samples(session, rows, run_id=run_id)
