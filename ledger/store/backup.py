"""``trainledger db backup|restore``.

SQLite: the online backup API (consistent while runs are writing).
PostgreSQL: ``pg_dump --format=custom`` / ``pg_restore --clean``, run as
argument lists; the password travels in ``PGPASSWORD``, never on the command line.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Optional

from sqlalchemy.engine import make_url

from ledger.errors import LedgerInputError
from ledger.store.db import make_engine, resolve_url


def _pg_args(url: str) -> tuple[list[str], dict[str, str]]:
    u = make_url(url)
    env = dict(os.environ)
    if u.password:
        env["PGPASSWORD"] = u.password
    args = ["--host", u.host or "localhost", "--port", str(u.port or 5432), "--username", u.username or "postgres"]
    return args + ["--dbname", u.database or "postgres"], env


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LedgerInputError(f"{name}: not found on PATH; install the PostgreSQL client tools (Debian: postgresql-client)")
    return path


def _sqlite_copy(src: sqlite3.Connection, dst_path) -> None:
    """Copy a whole SQLite database with the online backup API (consistent under writers)."""
    dst = sqlite3.connect(dst_path)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def backup(db: Optional[str], out: Path) -> Path:
    url = resolve_url(db)
    engine = make_engine(url)  # upgrade first so a backup is always at a known schema
    out = Path(out)
    if out.exists():
        raise LedgerInputError(f"--out: {out} exists; choose a new file name")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    if engine.dialect.name == "sqlite":
        _sqlite_copy(sqlite3.connect(make_url(url).database), tmp)
    else:
        args, env = _pg_args(url)
        proc = subprocess.run([_tool("pg_dump"), "--format=custom", "--file", str(tmp), *args], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise LedgerInputError(f"pg_dump failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    tmp.replace(out)
    return out


def restore(db: Optional[str], file: Path, force: bool = False) -> None:
    from sqlmodel import Session, select

    from ledger.store.models import Run

    url = resolve_url(db)
    file = Path(file)
    if not file.is_file():
        raise LedgerInputError(f"FILE: {file} does not exist")
    engine = make_engine(url)
    with Session(engine) as s:
        if s.exec(select(Run.id).limit(1)).first() is not None and not force:
            raise LedgerInputError("restore: the target ledger has runs; pass --force to replace it, or restore into a new --db")
    if engine.dialect.name == "sqlite":
        engine.dispose()
        try:
            src = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
            src.execute("SELECT count(*) FROM run").fetchone()
        except sqlite3.DatabaseError:
            raise LedgerInputError(f"FILE: {file} is not a trainledger SQLite backup") from None
        _sqlite_copy(src, make_url(url).database)
    else:
        engine.dispose()
        args, env = _pg_args(url)
        proc = subprocess.run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--single-transaction", *args, str(file)],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LedgerInputError(f"pg_restore failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    make_engine(url)  # bring an older backup up to the current schema
