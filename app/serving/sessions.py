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

The dashboard checks this on every page run (app/views/access.py) and on every page
load (app/serving/signin.py). Nothing here imports Streamlit.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Optional

from sqlmodel import delete
from trainledger.app.serving.auth import UserEntry
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


def lookup(url: str, token: Optional[str], users: dict[str, UserEntry],
           now: Optional[datetime] = None) -> Optional[UserEntry]:
    """The signed-in user of ``token`` (role as the auth file says now), or None; a session that ended is deleted."""
    if not token or len(token) > MAX_TOKEN_LEN:
        return None
    now = now or utcnow()
    with session_scope(get_engine(url)) as s:
        row = s.get(DashboardSession, _hash(token))
        if row is None:
            return None
        entry = users.get(row.user_name)
        if (row.expires_at > now and entry is not None
                and hmac.compare_digest(row.password_fp, password_fingerprint(entry))):
            return entry
        s.delete(row)  # expired, user removed, or password changed: this session is over
        return None


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
