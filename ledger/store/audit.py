"""The audit log (``audit_log``, migration 0020; docs/AUDIT.md): who changed the ledger's configuration, when, from
where, what, before and after.

Every store function that changes configuration (budgets, offers and prices, fleets and their idle policy,
exchange rates, carbon intensity, settings, the Slurm and invoice mappings; ``trainledger users`` for sign-in
users) calls :func:`record_change` on the session it writes with, so the row is part of the same transaction:
a write that fails records nothing, and nothing is written without its row. Who made the change is the
:class:`Actor` bound to that session (:func:`bind`): the CLI binds the OS user on every session it opens
(``trainledger.cli.common.session``), the dashboard the signed-in user on every write session
(``trainledger.app.queries.data.write_session`` takes it). A session bound to no one (the library called
from a script, the demo, a test) records the process's OS user with origin ``python``.

The table is append-only: triggers refuse UPDATE and DELETE (and TRUNCATE on PostgreSQL); this module has
no path that changes or removes a row. Runs, samples, imported jobs and invoices are data, not
configuration, and are not recorded here.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.store.models import AuditLog
from trainledger.store.types import utcnow

ORIGINS = ("cli", "dashboard", "python")
_KEY = "trainledger.audit.actor"
#: field names never recorded, whatever a caller passes (a password, its hash, a token, a secret)
SECRET_FIELD = re.compile(r"password|secret|token|hash|credential", re.IGNORECASE)


@dataclass(frozen=True)
class Actor:
    """Who writes: ``name`` (the dashboard user, or the OS user of the CLI), ``origin`` (``cli``, ``dashboard``
    or ``python``) and ``client`` (the CLI's host name, or the browser's address when known, else "")."""

    name: str
    origin: str
    client: str = ""

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"audit actor: origin must be one of {', '.join(ORIGINS)}, got {self.origin!r}")


def os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no USER/LOGNAME and no passwd entry (some containers)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def cli_actor() -> Actor:
    """The person at the command line: the OS user and this machine's host name."""
    return Actor(name=os_user(), origin="cli", client=socket.gethostname())


def process_actor() -> Actor:
    """A session bound to no one: the library called directly (scripts, the demo, tests)."""
    return Actor(name=os_user(), origin="python", client=socket.gethostname())


def bind(session: Session, actor: Actor) -> Session:
    """Make ``actor`` the author of every change written through ``session``."""
    if not isinstance(actor, Actor):
        raise TypeError(f"audit.bind: expected an Actor, got {type(actor).__name__}")
    session.info[_KEY] = actor
    return session


def actor_of(session: Session) -> Actor:
    """The actor bound to ``session``, else :func:`process_actor`."""
    actor = session.info.get(_KEY)
    return actor if isinstance(actor, Actor) else process_actor()


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: Decimals as strings (exact, trailing zeros dropped: 4380.00 → "4380"), datetimes and dates in ISO 8601, enums by value."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value.is_finite() else str(value)  # exact; no trailing zeros
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if not SECRET_FIELD.search(str(k))}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    return str(value)


def record(session: Session, actor: Actor, action: str, target: str, before: Optional[dict[str, Any]],
           after: Optional[dict[str, Any]]) -> Optional[AuditLog]:
    """Add one row to ``audit_log`` in ``session``'s transaction (committed with the write it describes).

    ``before``/``after`` are the changed object's fields (None for a create / a delete); they are made
    JSON-safe and never keep a field named like a secret. A change that changes nothing (before == after)
    records nothing and returns None.
    """
    if not isinstance(actor, Actor):
        raise TypeError(f"audit.record: expected an Actor, got {type(actor).__name__}")
    b = jsonable(before) if before is not None else None
    a = jsonable(after) if after is not None else None
    if b is not None and b == a:
        return None
    row = AuditLog(at=utcnow(), actor=actor.name[:200], origin=actor.origin, client=(actor.client or "")[:200],
                   action=action[:80], target=str(target)[:300], before=b, after=a)
    session.add(row)
    session.flush()
    return row


def record_change(session: Session, action: str, target: str, before: Optional[dict[str, Any]],
                  after: Optional[dict[str, Any]]) -> Optional[AuditLog]:
    """:func:`record` by the actor bound to ``session`` (:func:`actor_of`): what the store's write functions call."""
    return record(session, actor_of(session), action, target, before, after)


def entries(session: Session, since: Optional[datetime] = None, limit: Optional[int] = None) -> list[dict[str, Any]]:
    """The audit log, newest first: rows at or after ``since`` (aware), at most ``limit`` of them."""
    q = select(AuditLog)
    if since is not None:
        q = q.where(AuditLog.at >= since)
    q = q.order_by(AuditLog.at.desc(), AuditLog.id.desc())
    if limit is not None:
        q = q.limit(max(int(limit), 0))
    return [as_dict(r) for r in session.exec(q)]


def as_dict(row: AuditLog) -> dict[str, Any]:
    return {"id": row.id, "at": row.at, "actor": row.actor, "origin": row.origin, "client": row.client,
            "action": row.action, "target": row.target, "before": row.before, "after": row.after}


def change_text(before: Optional[dict[str, Any]], after: Optional[dict[str, Any]], width: int = 0) -> str:
    """``before → after`` compactly: only the fields that differ (``key: old → new``); a create shows its
    fields after ``+``, a delete its fields after ``-``. ``width`` > 0 cuts the text to that many characters."""
    def show(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(show(x) for x in v) + "]"
        return "—" if v is None else (v if isinstance(v, str) else str(jsonable(v)))

    if before is None and after is None:
        text = ""
    elif before is None:
        text = "+ " + ", ".join(f"{k}={show(v)}" for k, v in after.items())
    elif after is None:
        text = "- " + ", ".join(f"{k}={show(v)}" for k, v in before.items())
    else:
        keys = [k for k in (*before, *(k for k in after if k not in before)) if before.get(k) != after.get(k)]
        text = ", ".join(f"{k}: {show(before.get(k))} → {show(after.get(k))}" for k in keys)
    return text if width <= 0 or len(text) <= width else text[:width - 1] + "…"
