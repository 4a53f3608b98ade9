"""Dashboard sessions: what keeps a browser signed in across reloads, and what ends it.

Signing in (app/serving/signin.py) creates a session: a random 256-bit token goes to
the browser in an HttpOnly, SameSite=Lax cookie (never in a URL); the ledger
keeps only its SHA-256 (table ``dashboard_session``, migration 0007), the user
name, a fingerprint of the user's password hash and an expiry
(:data:`SESSION_HOURS`). A session is valid while

* its row exists (signing out deletes it),
* it has not expired, and
* the user is still in the auth file with the same password hash (a changed
  password or a removed user ends every session of that user).

A session opened through an OpenID provider (``source = "oidc"``, app/serving/oidc.py) keeps the role and
project scope mapped from the provider's claims at sign-in (columns ``role`` and ``projects``, migration 0020)
and, in ``password_fp``, the fingerprint of the OIDC configuration it was mapped under: a changed issuer, client
or mapping (or OIDC switched off) ends every such session. Users-file and OIDC sessions never stand in for each
other, even for the same name.

The dashboard checks this on every page run (app/views/access.py) and on every page
load (app/serving/signin.py). Nothing here imports Streamlit.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

from sqlalchemy import null
from sqlmodel import delete
from trainledger.app.serving.auth import ROLES, UserEntry
from trainledger.store.db import get_engine, session_scope
from trainledger.store.models import DashboardSession
from trainledger.store.types import utcnow

COOKIE = "trainledger_session"
SESSION_HOURS = 12
TOKEN_BYTES = 32
MAX_TOKEN_LEN = 100


def cookie_name(port: Optional[int]) -> str:
    """The cookie of the dashboard on ``port`` (cookies are shared by every port of a host, so the port is in the name)."""
    return f"{COOKIE}_{port}" if port else COOKIE


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def password_fingerprint(entry: UserEntry) -> str:
    """SHA-256 of the user's password hash entry: changes when the password (or its salt) does."""
    return _hash(entry.password_hash)


def create(url: str, entry: UserEntry, now: Optional[datetime] = None,
           hours: float = SESSION_HOURS) -> tuple[str, datetime]:
    """A new session for ``entry``: (the token for the cookie, its expiry). Expired sessions are purged."""
    now = now or utcnow()
    token = secrets.token_urlsafe(TOKEN_BYTES)
    expires = now + timedelta(hours=hours)
    with session_scope(get_engine(url)) as s:
        s.exec(delete(DashboardSession).where(DashboardSession.expires_at <= now))
        s.add(DashboardSession(token_hash=_hash(token), user_name=entry.name, password_fp=password_fingerprint(entry),
                               created_at=now, expires_at=expires))
    return token, expires


def create_oidc(url: str, user: str, role: str, projects: Optional[tuple[str, ...]], config_fp: str,
                now: Optional[datetime] = None, hours: float = SESSION_HOURS) -> tuple[str, datetime]:
    """A new session for a user signed in through the OpenID provider, with the role and projects mapped at sign-in."""
    if role not in ROLES:
        raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    now = now or utcnow()
    token = secrets.token_urlsafe(TOKEN_BYTES)
    expires = now + timedelta(hours=hours)
    with session_scope(get_engine(url)) as s:
        s.exec(delete(DashboardSession).where(DashboardSession.expires_at <= now))
        s.add(DashboardSession(token_hash=_hash(token), user_name=user, password_fp=config_fp, created_at=now,
                               expires_at=expires, source="oidc", role=role,
                               projects=list(projects) if projects is not None else null()))  # SQL NULL: all
    return token, expires


@dataclass(frozen=True)
class SessionUser:
    """Who a valid session belongs to: the name, role and project scope (None: every project), and its source."""

    name: str
    role: str
    projects: Optional[tuple[str, ...]]
    source: str  # "file" | "oidc"


def _still_valid(row: DashboardSession, users: dict[str, UserEntry], oidc_fp: Optional[str],
                 now: datetime) -> Optional[SessionUser]:
    if row.expires_at <= now:
        return None
    if row.source == "oidc":
        projects = row.projects
        if (oidc_fp is None or not hmac.compare_digest(row.password_fp, oidc_fp) or row.role not in ROLES
                or (projects is not None and not (isinstance(projects, list) and all(isinstance(p, str) for p in projects)))):
            return None
        return SessionUser(row.user_name, row.role, tuple(projects) if projects is not None else None, "oidc")
    entry = users.get(row.user_name)
    if row.source == "file" and entry is not None and hmac.compare_digest(row.password_fp, password_fingerprint(entry)):
        return SessionUser(entry.name, entry.role, entry.projects, "file")
    return None


def resolve(url: str, token: Optional[str], users: dict[str, UserEntry], oidc_fp: Optional[str] = None,
            now: Optional[datetime] = None) -> Optional[SessionUser]:
    """Who is signed in with ``token``, or None; a session that ended is deleted.

    A users-file session takes the role and projects the file says now; an OIDC session those mapped at sign-in,
    while ``oidc_fp`` (the fingerprint of the OIDC configuration now; None: OIDC is off) is the one it was made under.
    """
    if not token or len(token) > MAX_TOKEN_LEN:
        return None
    now = now or utcnow()
    with session_scope(get_engine(url)) as s:
        row = s.get(DashboardSession, _hash(token))
        if row is None:
            return None
        found = _still_valid(row, users, oidc_fp, now)
        if found is None:
            s.delete(row)  # expired, user removed, password or OIDC mapping changed: this session is over
        return found


def lookup(url: str, token: Optional[str], users: dict[str, UserEntry],
           now: Optional[datetime] = None) -> Optional[UserEntry]:
    """The users-file user of ``token`` (role as the auth file says now), or None; a session that ended is deleted.

    An OIDC session is not a users-file user: None (and it is left alone)."""
    if not token or len(token) > MAX_TOKEN_LEN:
        return None
    with session_scope(get_engine(url)) as s:
        row = s.get(DashboardSession, _hash(token))
        if row is None or row.source != "file":
            return None
    found = resolve(url, token, users, None, now)
    return users.get(found.name) if found is not None else None


def revoke(url: str, token: Optional[str]) -> bool:
    """Sign out: delete the session of ``token``; whether there was one."""
    if not token or len(token) > MAX_TOKEN_LEN:
        return False
    with session_scope(get_engine(url)) as s:
        row = s.get(DashboardSession, _hash(token))
        if row is None:
            return False
        s.delete(row)
        return True
