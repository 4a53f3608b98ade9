"""Replaying run journals into the ledger (``trainledger sync``, the writer's flushes), with a quarantine.

A journal's pending events are applied in one transaction. If that fails for
a reason that is the ledger's state (unreachable, locked: :data:`TRANSIENT`, or
a run whose owner has not registered it yet) nothing is marked and the next
replay tries again. If it fails for any other reason, some event is *poison*
(a value the backend refuses, a timestamp that is not one, an unknown node
type): the events are then applied one transaction each, in order, and each
one that fails is moved to the journal's quarantine file
``<name>.quarantine`` (JSON lines beside the journal: ``journal``, ``seq``,
``offset``, ``run_id``, ``type``, ``reason``, ``quarantined_at`` and the
``event`` itself), so one bad event never stops the others, nor other runs'
journals. Whole lines that are not events (corruption) are quarantined the
same way with their raw text.

What is pending is decided by content: each journal's applied mark holds the
last applied ``seq`` and the byte offset the replay read to; a journal whose
size is that offset has nothing pending (modification times are never
compared: on file systems with 1-second timestamps they cannot order a write
after a replay). ``trainledger sync --show-quarantine`` lists the quarantine
(:func:`quarantined`); ``--retry-quarantine`` applies its events again (after the
cause was fixed, e.g. the node type added) and keeps only those that still fail.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.sources.record.journal_apply import apply_events
from trainledger.sources.record.journal_file import Journal, JournalWriteError, RunNotRegistered, read_applied
from trainledger.sources.record.sanitize import clean_text, clean_value
from trainledger.store.files import write_all

#: failures that are the ledger's state, not the event's: retried by the next replay, never quarantined
TRANSIENT = (RunNotRegistered, OperationalError, InterfaceError, DisconnectionError, PoolTimeout)
SUFFIX = ".quarantine"


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return clean_text(f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__)


def _apply(engine: Engine, events: list[dict[str, Any]]) -> None:
    with Session(engine) as session:
        apply_events(session, events)
        session.commit()


def replay_journal(engine: Engine, journal: Journal) -> int:
    """Apply a journal's pending events (poison ones quarantined); returns how many were applied."""
    pending = journal.pending()
    bad = list(journal.bad_lines)
    if not pending and not bad:
        done, marked = read_applied(journal.applied_path)
        if marked is None and journal.path.exists():  # a mark from before offsets: add the offset
            journal.mark_applied(done, journal.pending_end)
        return 0
    for offset, line in bad:
        _quarantine(journal, None, "not a journal event (corrupt line)", offset=offset,
                    raw=line.decode("utf-8", "replace"))
    if not pending:
        journal.mark_applied(journal.applied_seq(), journal.pending_end)
        return 0
    try:
        _apply(engine, pending)
        applied = len(pending)
    except TRANSIENT:
        raise
    except Exception:  # some event is poison: find it, apply the others
        applied = _one_by_one(engine, journal, pending)
    journal.mark_applied(pending[-1]["seq"], journal.pending_end)
    return applied


def _one_by_one(engine: Engine, journal: Journal, pending: list[dict[str, Any]]) -> int:
    applied = 0
    last = None
    try:
        for ev in pending:
            reason = _apply_one(engine, ev)
            if reason is None:
                applied += 1
            else:
                _quarantine(journal, ev, reason)
            last = ev["seq"]
    except TRANSIENT:
        if last is not None:
            journal.mark_applied(last)
        raise
    return applied


def _apply_one(engine: Engine, ev: dict[str, Any]) -> Optional[str]:
    """Apply one event in its own transaction: None if it was applied, else why it is poison. A transient
    failure (ledger unreachable or locked, run not registered yet) is raised: the event is retried later."""
    try:
        _apply(engine, [ev])
    except TRANSIENT:
        raise
    except Exception as exc:
        return _reason(exc)
    return None


def _quarantine(journal: Journal, ev: Optional[dict[str, Any]], reason: str, offset: Optional[int] = None,
                raw: Optional[str] = None) -> None:
    """Append one entry to the journal's quarantine file (fsync'd; once per seq or offset)."""
    key = ("offset", offset) if ev is None else ("seq", ev.get("seq"))
    if any(e.get(key[0]) == key[1] for e in _entries(journal.quarantine_path)):
        return
    entry = {"journal": journal.path.name, "seq": None if ev is None else ev.get("seq"), "offset": offset,
             "run_id": journal.run_id if ev is None else ev.get("run_id"),
             "type": None if ev is None else ev.get("type"), "reason": reason,
             "quarantined_at": datetime.now(timezone.utc).isoformat(),
             "event": clean_value(ev) if ev is not None else {"raw": clean_text(raw or "")[:4000]}}
    _append(journal.quarantine_path, [entry])


def _append(path: Path, entries: list[dict[str, Any]]) -> None:
    data = "".join(json.dumps(e, separators=(",", ":"), default=str) + "\n" for e in entries).encode("utf-8")
    try:
        write_all(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), data)
    except OSError as exc:
        raise JournalWriteError(f"cannot write the quarantine {path}: {exc.strerror or exc}") from exc


def _entries(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            out = []
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a torn entry: its event is retried from the journal only if re-marked; keep going
            return out
    except FileNotFoundError:
        return []


def _has_pending(path: Path) -> bool:
    """Whether a journal holds anything past its applied mark's offset (by content, never by mtime)."""
    _seq, offset = read_applied(path.with_suffix(".applied"))
    try:
        return offset is None or path.stat().st_size != offset
    except FileNotFoundError:
        return False


def replay_all(engine: Engine, directory: Path) -> dict[str, int]:
    """Replay every journal in ``directory``; returns events applied per journal.

    A journal of a run that is not in the ledger yet (a second node's, the API's) is retried after the
    others, whose registration it may be waiting for, and otherwise left for the next sync.
    """
    out: dict[str, int] = {}
    if not directory.is_dir():
        return out
    waiting = [p for p in sorted(directory.glob("*.jsonl")) if _has_pending(p)]
    for _ in range(2):
        later = []
        for path in waiting:
            try:
                journal = Journal(directory, path.stem)
            except LedgerInputError:  # not a run id: not a journal trainledger wrote
                continue
            try:
                n = replay_journal(engine, journal)
            except RunNotRegistered:
                later.append(path)
                continue
            if n:
                out[path.stem] = n
        waiting = later
    return out


def quarantined(directory: Path) -> list[dict[str, Any]]:
    """Every quarantined event of the journals in ``directory``, oldest journal first, without the event body."""
    rows = []
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        for e in _entries(path):
            rows.append({k: e.get(k) for k in ("journal", "seq", "offset", "run_id", "type", "reason",
                                               "quarantined_at")})
    return rows


def retry_quarantine(engine: Engine, directory: Path) -> dict[str, int]:
    """Apply quarantined events again, in order; those that still fail stay (with their new reason).
    Returns ``{"applied": n, "still_quarantined": m}``."""
    applied = kept = 0
    for path in sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []:
        still = []
        for e in _entries(path):
            ev = e.get("event") or {}
            if "raw" in ev or not isinstance(ev, dict):
                still.append(e)
                continue
            reason = _apply_one(engine, ev)
            if reason is None:
                applied += 1
            else:
                still.append({**e, "reason": reason})
        kept += len(still)
        tmp = path.with_suffix(SUFFIX + ".tmp")
        tmp.unlink(missing_ok=True)
        if still:
            _append(tmp, still)
            os.replace(tmp, path)
        else:
            path.unlink()
    return {"applied": applied, "still_quarantined": kept}
