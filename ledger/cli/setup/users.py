"""``trainledger users add|set-role|remove|list --auth-file FILE``: the dashboard's sign-in users, audited.

The users file is the one ``trainledger dashboard --auth-file FILE`` reads (``trainledger.app.serving.auth``).
A change rewrites it atomically (a temporary file in the same folder, checked as the dashboard reads it, then
renamed over the old one), keeps every other entry and comment byte for byte, and is recorded in the ledger's
audit log (``user.add``, ``user.role``, ``user.remove``: the role and projects before and after, never the
password or its hash). The row is committed before the file is renamed into place: a change that could not be
recorded is not made. The password is read from the terminal (twice) or with ``--password-stdin`` from the
first line of standard input; it is never printed. Editing the file by hand is not audited.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session
from trainledger.errors import LedgerInputError

app = group("The dashboard's sign-in users (the --auth-file of `trainledger dashboard`); every change is audited.")

AuthFileOpt = Annotated[Path, typer.Option("--auth-file", metavar="FILE", help="The users file (TOML) that `trainledger dashboard --auth-file FILE` reads.", show_default=False)]
NameArg = Annotated[str, typer.Argument(help="User name (letters, digits, _ . @ -).", show_default=False)]
ROLE_HELP = "viewer (reads), lead (also writes prices, budgets, fleet, settings, runs) or admin (a lead who also sees the audit log)."
#: a table header line: [users.NAME], [users."NAME"] or [users.'NAME'] (an optional comment after it)
HEADER = re.compile(r"""^\s*\[\s*users\s*\.\s*(?:"(?P<dq>[^"\\]*)"|'(?P<sq>[^']*)'|(?P<bare>[A-Za-z0-9_-]+))\s*\]\s*(?:#.*)?$""")
ANY_HEADER = re.compile(r"^\s*\[")
ROLE_LINE = re.compile(r"^(?P<indent>\s*)role\s*=")


def _load(path: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    from trainledger.app.serving.auth import AuthFileError, load_auth_file

    if missing_ok and not path.exists():
        return {}
    try:
        return load_auth_file(path)
    except AuthFileError as exc:
        raise LedgerInputError(str(exc).splitlines()[0]) from None


def _fields(entry: Any) -> dict[str, Any]:
    """What the audit log keeps of a user: the role and the projects (None: every project); never the hash."""
    return {"role": entry.role, "projects": list(entry.projects) if entry.projects is not None else None}


def _check_role(role: str) -> str:
    from trainledger.app.serving.auth import ROLES

    if role not in ROLES:
        raise LedgerInputError(f"ROLE: must be {', '.join(ROLES[:-1])} or {ROLES[-1]}, got {role!r}")
    return role


def _key(name: str) -> str:
    """``name`` as a TOML key: bare when it can be, else quoted (a name with ``.`` or ``@``)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f'"{name}"'


def _block(lines: list[str], name: str) -> tuple[int, int]:
    """(first, end) line indexes of ``[users.NAME]``: its header up to the next table, less the blank and comment
    lines just before that table (they belong to it). A one-line error when the entry is not such a table."""
    start = next((i for i, line in enumerate(lines) if (m := HEADER.match(line))
                  and next(g for g in (m["dq"], m["sq"], m["bare"]) if g is not None) == name), None)
    if start is None:
        raise LedgerInputError(f"NAME: {name!r} is not written as a [users.{name}] table in the file; edit that "
                               "entry by hand")
    end = next((i for i in range(start + 1, len(lines)) if ANY_HEADER.match(lines[i])), len(lines))
    while end - 1 > start and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")) \
            and end < len(lines):
        end -= 1
    return start, end


def _password(password_stdin: bool, name: str) -> str:
    import getpass

    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif not sys.stdin.isatty():
        raise LedgerInputError("password: standard input is not a terminal; pass --password-stdin to read it from there")
    else:
        password = getpass.getpass(f"password for {name}: ")
        if getpass.getpass("again: ") != password:
            raise LedgerInputError("password: the two entries differ; nothing was changed")
    if not password:
        raise LedgerInputError("password: empty; give the user a password")
    return password


def _stage(path: Path, text: str) -> Path:
    """``text`` written to a new file next to ``path`` (the same mode, else 0600) and synced; the caller renames it."""
    mode = (path.stat().st_mode & 0o777) if path.exists() else 0o600
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise LedgerInputError(f"--auth-file: cannot write in {path.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _apply(db: Optional[str], path: Path, text: str, action: str, name: str, before: Optional[dict[str, Any]],
           expect: Optional[dict[str, Any]]) -> None:
    """Write ``text`` over ``path`` atomically, recording ``action`` first: the new file is checked as the dashboard
    reads it, the audit row committed, then the file renamed into place (on any failure: neither)."""
    from trainledger.store.audit import record_change

    tmp = _stage(path, text)
    try:
        users = _load(tmp)
        after = _fields(users[name]) if name in users else None
        if after != expect:  # pragma: no cover - the edit itself is wrong: never write it
            raise LedgerInputError(f"--auth-file: the edited file does not read back as intended for {name!r}; nothing changed")
        with session(db) as s:
            record_change(s, action, name, before, after)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@app.command("add")
@command
def users_add(name: NameArg, auth_file: AuthFileOpt,
              role: Annotated[str, typer.Option("--role", help=ROLE_HELP)] = "viewer",
              project: Annotated[Optional[list[str]], typer.Option("--project", help="A project this user sees (repeat for several); none: every project and the team's totals.", show_default=False)] = None,
              password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from the first line of standard input instead of asking twice.")] = False,
              iterations: Annotated[Optional[int], typer.Option("--iterations", hidden=True, min=1)] = None,
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add a user (the file is created when it does not exist); audited as user.add."""
    from trainledger.app.serving.auth import ITERATIONS, USER_RE, hash_password

    if not USER_RE.match(name):
        raise LedgerInputError(f"NAME: {name!r}: names use letters, digits and _ . @ - only (at most 100)")
    _check_role(role)
    projects = sorted(set(project)) if project else None
    if projects is not None and not all(p.strip() and '"' not in p and "\\" not in p and p.isprintable() for p in projects):
        raise LedgerInputError("--project: a project name, without quotes, backslashes or control characters")
    users = _load(auth_file, missing_ok=True)
    if name in users:
        raise LedgerInputError(f"NAME: {name!r} already exists in {auth_file}; change the role with `trainledger users "
                               f"set-role {name} ROLE --auth-file {auth_file}`")
    password = _password(password_stdin, name)
    entry = f'[users.{_key(name)}]\nrole = "{role}"\n'
    if projects is not None:
        entry += "projects = [" + ", ".join(f'"{p}"' for p in projects) + "]\n"
    entry += f'password_hash = "{hash_password(password, iterations=iterations or ITERATIONS)}"\n'
    old = _text(auth_file) if auth_file.exists() else ""
    text = old + ("" if not old or old.endswith("\n\n") else "\n" if old.endswith("\n") else "\n\n") + entry
    after = {"role": role, "projects": projects}
    _apply(db, auth_file, text, "user.add", name, None, after)
    emit({"user": name, **after}, as_json, lambda d: f"added {name} ({role}) to {auth_file}")


def _text(auth_file: Path) -> str:
    """The users file's text, read bounded (trainledger.store.files.read_bounded: size limit, FILE:LINE errors)."""
    from trainledger.app.serving.auth import MAX_FILE_BYTES
    from trainledger.store.files import read_bounded

    return read_bounded(auth_file, MAX_FILE_BYTES, "users file", "--auth-file")


@app.command("set-role")
@command
def users_set_role(name: NameArg, role: Annotated[str, typer.Argument(help=ROLE_HELP, show_default=False)],
                   auth_file: AuthFileOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Change a user's role (it applies on the user's next page); audited as user.role."""
    _check_role(role)
    users = _load(auth_file)
    if name not in users:
        raise LedgerInputError(f"NAME: no user {name!r} in {auth_file}; users: {', '.join(sorted(users))}")
    before = _fields(users[name])
    if before["role"] == role:
        emit({"user": name, **before}, as_json, lambda d: f"{name} is already a {role}; nothing changed")
        return
    lines = _text(auth_file).splitlines(keepends=True)
    start, end = _block(lines, name)
    at = next((i for i in range(start + 1, end) if ROLE_LINE.match(lines[i])), None)
    if at is None:
        raise LedgerInputError(f"NAME: the role of {name!r} is not on a line of its own; edit that entry by hand")
    eol = "\r\n" if lines[at].endswith("\r\n") else "\n" if lines[at].endswith("\n") else ""
    lines[at] = f'{ROLE_LINE.match(lines[at])["indent"]}role = "{role}"{eol}'
    after = {**before, "role": role}
    _apply(db, auth_file, "".join(lines), "user.role", name, before, after)
    emit({"user": name, **after}, as_json, lambda d: f"{name}: {before['role']} → {role}")


@app.command("remove")
@command
def users_remove(name: NameArg, auth_file: AuthFileOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Remove a user (their sessions end on their next page); audited as user.remove."""
    users = _load(auth_file)
    if name not in users:
        raise LedgerInputError(f"NAME: no user {name!r} in {auth_file}; users: {', '.join(sorted(users))}")
    if len(users) == 1:
        raise LedgerInputError(f"NAME: {name!r} is the only user; the dashboard needs at least one (add another first)")
    lines = _text(auth_file).splitlines(keepends=True)
    start, end = _block(lines, name)
    _apply(db, auth_file, "".join(lines[:start] + lines[end:]), "user.remove", name, _fields(users[name]), None)
    emit({"removed": name}, as_json, lambda d: f"removed {name} from {auth_file}")


@app.command("list")
@command
def users_list(auth_file: AuthFileOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The users of the file: name, role and projects (never the hashes)."""
    from trainledger.reports.present import table

    rows = [{"user": n, **_fields(e)} for n, e in sorted(_load(auth_file).items())]
    emit(rows, as_json, lambda r: table([{**x, "projects": ", ".join(x["projects"]) if x["projects"] else "(all)"}
                                          for x in r], ["user", "role", "projects"]))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="users")
