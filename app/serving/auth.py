"""Dashboard users: a TOML file of users with a role and a salted PBKDF2-SHA256 hash.

The file (``trainledger dashboard --auth-file users.toml``) looks like::

    [users.alice]
    role = "lead"        # lead: may edit prices, fleet and settings (later: launch, cancel)
    password_hash = "pbkdf2_sha256$600000$<salt, base64>$<hash, base64>"

    [users.bob]
    role = "viewer"      # viewer: reads every page, changes nothing
    password_hash = "pbkdf2_sha256$600000$..."
    projects = ["llama-ft"]   # optional: the projects this user sees (absent: every project, team totals)

Roles: ``viewer`` reads, ``lead`` also writes (prices, budgets, fleet, settings, runs), ``admin`` is a lead who
also manages sign-in and sees the audit log. ``projects`` scopes a user to those projects on every page.

Create an entry without trainledger installed (stdlib only)::

    python -m trainledger.app.serving.auth hash alice --role lead            # asks for the password twice
    printf 'secret\\n' | python -m trainledger.app.serving.auth hash bob --role viewer --password-stdin >> users.toml

The hash is PBKDF2-HMAC-SHA256 (``hashlib.pbkdf2_hmac``) with a random 16-byte
salt and 600,000 iterations (OWASP's 2023 figure); verification is constant
time (``hmac.compare_digest``). This module imports nothing from Streamlit.
"""

from __future__ import annotations

import argparse
import base64
import functools
import getpass
import hashlib
import hmac
import re
import secrets
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ALGORITHM = "pbkdf2_sha256"
ITERATIONS = 600_000
SALT_BYTES = 16
ROLES = ("viewer", "lead", "admin")
WRITE_ROLES = ("lead", "admin")
MAX_FILE_BYTES = 1 << 20  # a users file of thousands of users is well under this
USER_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,100}$")


class AuthFileError(ValueError):
    """An auth file that cannot be used; the message is one line naming the file and the fix."""


@dataclass(frozen=True)
class UserEntry:
    name: str
    role: str
    password_hash: str
    projects: Optional[tuple[str, ...]] = None  # None: every project (team scope)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def hash_password(password: str, *, salt: Optional[bytes] = None, iterations: int = ITERATIONS) -> str:
    """``pbkdf2_sha256$ITERATIONS$SALT$HASH`` (salt and hash in base64) for ``password``."""
    if not password:
        raise ValueError("password: must not be empty")
    if iterations < 1:
        raise ValueError("iterations: must be positive")
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return f"{ALGORITHM}${iterations}${_b64(salt)}${_b64(digest)}"


def _parse_hash(encoded: str) -> tuple[int, bytes, bytes]:
    parts = encoded.split("$")
    if len(parts) != 4 or parts[0] != ALGORITHM:
        raise ValueError(f"expected {ALGORITHM}$ITERATIONS$SALT$HASH")
    try:
        iterations = int(parts[1])
        salt = base64.b64decode(parts[2], validate=True)
        digest = base64.b64decode(parts[3], validate=True)
    except ValueError:
        raise ValueError(f"expected {ALGORITHM}$ITERATIONS$SALT$HASH with base64 salt and hash") from None
    if iterations < 1 or not salt or len(digest) != 32:
        raise ValueError("iterations must be positive and the hash 32 bytes")
    return iterations, salt, digest


def verify_password(password: str, encoded: str) -> bool:
    """Whether ``password`` matches the encoded hash (constant-time comparison)."""
    try:
        iterations, salt, digest = _parse_hash(encoded)
    except ValueError:
        return False
    candidate = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    return hmac.compare_digest(candidate, digest)


@functools.lru_cache(maxsize=8)
def _dummy_hash(iterations: int) -> str:
    return hash_password("not-a-user", salt=b"\0" * SALT_BYTES, iterations=iterations)


def _iterations(encoded: str) -> int:
    try:
        return _parse_hash(encoded)[0]
    except ValueError:
        return ITERATIONS


def load_auth_file(path: str | Path) -> dict[str, UserEntry]:
    """Read and validate an auth file; :class:`AuthFileError` (one line) if it cannot be used."""
    from trainledger.errors import LedgerInputError
    from trainledger.store.files import read_bounded

    path = Path(path)
    try:  # at most MAX_FILE_BYTES read; NUL or bad UTF-8: FILE:LINE
        text = read_bounded(path, MAX_FILE_BYTES, "users file", "--auth-file")
    except LedgerInputError as exc:
        raise AuthFileError(str(exc)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AuthFileError(f"--auth-file {path.name}: not valid TOML: {exc}") from None
    extra = set(data) - {"users"}
    if extra:
        raise AuthFileError(f"--auth-file {path.name}: unknown table {sorted(extra)[0]!r}; only [users.NAME] tables are allowed")
    users = data.get("users")
    if not isinstance(users, dict) or not users:
        raise AuthFileError(f"--auth-file {path.name}: no users; add one with `python -m trainledger.app.serving.auth hash NAME --role lead`")
    out: dict[str, UserEntry] = {}
    for name, entry in users.items():
        where = f"--auth-file {path.name}: user {name!r}"
        if not USER_RE.match(name):
            raise AuthFileError(f"{where}: names use letters, digits and _ . @ - only")
        if not isinstance(entry, dict):
            raise AuthFileError(f"{where}: expected a [users.{name}] table with role and password_hash")
        unknown = set(entry) - {"role", "password_hash", "projects"}
        if unknown:
            raise AuthFileError(f"{where}: unknown key {sorted(unknown)[0]!r}; use role, password_hash and projects")
        role = entry.get("role")
        if role not in ROLES:
            raise AuthFileError(f"{where}: role must be viewer, lead or admin, got {role!r}")
        projects = entry.get("projects")
        if projects is not None and (not isinstance(projects, list) or not projects
                                     or not all(isinstance(p, str) and p for p in projects)):
            raise AuthFileError(f"{where}: projects must be a non-empty list of project names, "
                                f"or left out for every project")
        encoded = entry.get("password_hash")
        if not isinstance(encoded, str):
            raise AuthFileError(f"{where}: password_hash is missing; create it with `python -m trainledger.app.serving.auth hash {name}`")
        try:
            _parse_hash(encoded)
        except ValueError as exc:
            raise AuthFileError(f"{where}: password_hash: {exc}") from None
        out[name] = UserEntry(name=name, role=role, password_hash=encoded,
                              projects=tuple(sorted(set(projects))) if projects is not None else None)
    return out


def authenticate(users: dict[str, UserEntry], name: str, password: str) -> Optional[UserEntry]:
    """The user if the name and password match, else None.

    The same work either way: an unknown name is checked against a dummy hash
    with as many PBKDF2 iterations as the file's costliest user, so a wrong name
    takes as long as a wrong password (no user enumeration by timing).
    """
    entry = users.get(name)
    if entry is None:
        cost = max((_iterations(u.password_hash) for u in users.values()), default=ITERATIONS)
        verify_password(password, _dummy_hash(cost))
        return None
    return entry if verify_password(password, entry.password_hash) else None


class UsersFile:
    """An auth file read again whenever it changes (size or mtime): a removed user or a new password takes effect
    at once. Thread-safe; :class:`AuthFileError` (one line) when the file is unusable."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._key: Optional[tuple[int, int]] = None
        self._users: dict[str, UserEntry] = {}

    def users(self) -> dict[str, UserEntry]:
        try:
            st = self.path.stat()
        except OSError as exc:
            raise AuthFileError(f"--auth-file: cannot read {self.path}: {exc.strerror or exc}") from None
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if key != self._key:
                self._users = load_auth_file(self.path)
                self._key = key
            return self._users


@functools.lru_cache(maxsize=4)
def users_file(path: str) -> UsersFile:
    """The process-wide :class:`UsersFile` of ``path``."""
    return UsersFile(path)


def make_entry(name: str, role: str, password: str, *, iterations: int = ITERATIONS) -> str:
    """A ``[users.NAME]`` TOML block to append to an auth file."""
    if not USER_RE.match(name):
        raise ValueError(f"user {name!r}: names use letters, digits and _ . @ - only")
    if role not in ROLES:
        raise ValueError(f"--role: must be viewer, lead or admin, got {role!r}")
    return f'[users.{name}]\nrole = "{role}"\npassword_hash = "{hash_password(password, iterations=iterations)}"\n'


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainledger.app.serving.auth", description="Create users for `trainledger dashboard --auth-file FILE`.")
    sub = parser.add_subparsers(dest="command", required=True)
    h = sub.add_parser("hash", help="Print a [users.NAME] TOML block with a salted PBKDF2-SHA256 password hash.")
    h.add_argument("name", help="User name (letters, digits, _ . @ -).")
    h.add_argument("--role", choices=ROLES, default="viewer", help="viewer reads; lead may also edit prices, fleet and settings.")
    h.add_argument("--password-stdin", action="store_true", help="Read the password from the first line of stdin instead of asking.")
    h.add_argument("--iterations", type=int, default=ITERATIONS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            print("error: the passwords differ", file=sys.stderr)
            return 2
    try:
        sys.stdout.write(make_entry(args.name, args.role, password, iterations=args.iterations))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
