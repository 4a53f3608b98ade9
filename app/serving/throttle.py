"""Sign-in throttling: per user name and per client, exponential back-off up to a temporary lockout.

Every failed sign-in counts against two keys: the user name typed (known or
not: an unknown name is throttled exactly like a known one, so the lockout says
nothing about who exists) and the client address. A key is free for its first
few failures (:attr:`Policy.free`); after that each further failure locks it for
``base_s × 2^(failures − free)`` seconds, at most :attr:`Policy.lockout_s`
(15 minutes) — the temporary lockout. While a key is locked, attempts are
refused *before* the password is checked, so a locked-out attacker costs no
PBKDF2 work. A success clears the user's and the client's failures; a key with
no failure for :attr:`Policy.forget_s` is forgotten. At most
:attr:`Policy.max_keys` keys are kept (the oldest are dropped first).

The state lives in the dashboard process (one server); a restart forgets it.
The module imports no Streamlit; the clock is injectable for tests.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional


@dataclass(frozen=True)
class Policy:
    free: int  # failures allowed before the back-off starts
    base_s: float = 1.0
    lockout_s: float = 900.0
    forget_s: float = 3600.0
    max_keys: int = 10_000


USER_POLICY = Policy(free=3)  # 4th failure: 1 s, then 2, 4, ... 512 s, from the 14th on: 15 minutes
CLIENT_POLICY = Policy(free=10)  # looser: a team behind one NAT address shares it
BACKOFF_ENV = "TRAINLEDGER_SIGNIN_BACKOFF_S"  # the first lock, in seconds (default 1); each further failure doubles it


def policies_from_env() -> dict[str, Policy]:
    """The user and client policies, with the first lock from ``$TRAINLEDGER_SIGNIN_BACKOFF_S`` if set (> 0)."""
    import os
    from dataclasses import replace

    try:
        base = float(os.environ.get(BACKOFF_ENV, "") or USER_POLICY.base_s)
    except ValueError:
        base = USER_POLICY.base_s
    base = base if base > 0 else USER_POLICY.base_s
    return {"user": replace(USER_POLICY, base_s=base), "client": replace(CLIENT_POLICY, base_s=base)}


@dataclass
class _Entry:
    failures: int = 0
    locked_until: float = 0.0
    last: float = 0.0


class Throttle:
    """Failures and lockouts per key (``("user", name)``, ``("client", address)``)."""

    def __init__(self, policies: Optional[dict[str, Policy]] = None, clock: Callable[[], float] = time.monotonic):
        self.policies = policies or {"user": USER_POLICY, "client": CLIENT_POLICY}
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], _Entry] = {}

    def wait_s(self, keys: Iterable[tuple[str, str]]) -> float:
        """Seconds until every key may try again (0: now)."""
        now = self.clock()
        with self._lock:
            return max([0.0, *(e.locked_until - now for k in keys if (e := self._live(k, now)) is not None)])

    def failure(self, keys: Iterable[tuple[str, str]]) -> tuple[float, dict[tuple[str, str], int]]:
        """Count a failure against each key; returns (seconds locked now, failures per key)."""
        now = self.clock()
        counts = {}
        locked = 0.0
        with self._lock:
            for key in keys:
                e = self._live(key, now) or self._entries.setdefault(key, _Entry())
                e.failures += 1
                e.last = now
                policy = self.policies[key[0]]
                if e.failures > policy.free:
                    delay = min(policy.lockout_s, policy.base_s * 2 ** (e.failures - policy.free - 1))
                    e.locked_until = max(e.locked_until, now + delay)
                    locked = max(locked, e.locked_until - now)
                counts[key] = e.failures
            self._trim(now)
        return locked, counts

    def success(self, keys: Iterable[tuple[str, str]]) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)

    def _live(self, key: tuple[str, str], now: float) -> Optional[_Entry]:
        e = self._entries.get(key)
        if e is not None and now - e.last > self.policies[key[0]].forget_s and now >= e.locked_until:
            del self._entries[key]
            return None
        return e

    def _trim(self, now: float) -> None:
        """Keep at most max_keys: drop the oldest keys that are not locked first."""
        limit = min(p.max_keys for p in self.policies.values())
        if len(self._entries) <= limit:
            return
        order = sorted(self._entries.items(), key=lambda kv: (kv[1].locked_until > now, kv[1].last))
        for key, _ in order[:len(self._entries) - limit]:
            del self._entries[key]
