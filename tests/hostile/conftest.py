"""Helpers for the hostile-input tests: run the CLI as a user would, check the one-line error, snapshot the ledger.

``trainledger`` runs in-process (Typer's CliRunner calls the same ``main`` as
the console script, with exceptions caught as a user's terminal would show
them); a few tests confirm the same outcome in a real subprocess.

Every fuzz test keeps one ledger per backend for all of its examples (a fresh
database per example would cost seconds each), so it compares snapshots taken
before and after each example: a refused input must leave every row as it was.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy import text
from sqlmodel import SQLModel

from tests import summaries
from tests.app.conftest import app_env, run_env, shard_cache  # noqa: F401  (the dashboard fixtures, here too)

REPO = Path(__file__).resolve().parents[2]

#: the hypothesis profile of this suite: moderate example counts, no deadline (a CLI call
#: takes tens of ms; PostgreSQL more), one ledger shared by the examples of a test
FUZZ = settings(max_examples=int(os.environ.get("TRAINLEDGER_FUZZ_EXAMPLES", "50")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much],
                derandomize=os.environ.get("TRAINLEDGER_FUZZ_RANDOM") != "1")

#: totals over the session, printed at the end (inputs generated, tracebacks, partial writes)
STATS = {"inputs": 0, "tracebacks": 0, "partial_writes": 0}


@dataclass
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    exception: Optional[BaseException]

    @property
    def traceback(self) -> bool:
        """An exception escaped the command (a user would see a traceback)."""
        unexpected = self.exception is not None and not isinstance(self.exception, SystemExit)
        return unexpected or "Traceback" in self.stdout or "Traceback" in self.stderr


@functools.lru_cache(maxsize=4)
def _command(app):
    import typer.main

    return typer.main.get_command(app)


def invoke(args: list[Any], db: Optional[str] = None, env: Optional[dict[str, str]] = None) -> Outcome:
    """``trainledger ARGS [--db DB]`` in this process, as the console script would run it."""
    import typer.testing
    from trainledger.cli.commands import app
    from typer.testing import CliRunner

    argv = [str(a) for a in args] + (["--db", db] if db else [])
    with mock.patch.object(typer.testing, "_get_command", _command):  # Typer rebuilds the click tree per call: 0.1 s
        r = CliRunner().invoke(app, argv, env=env, catch_exceptions=True)
    STATS["inputs"] += 1
    out = Outcome(r.exit_code, r.stdout, r.stderr, r.exception)
    if out.traceback:
        STATS["tracebacks"] += 1
    return out


def run_subprocess(args: list[Any], env: Optional[dict[str, str]] = None, timeout: float = 120) -> Outcome:
    """``python -m trainledger.cli ARGS``: the real process, its real exit status and streams."""
    full_env = {**os.environ, **(env or {})}
    p = subprocess.run([sys.executable, "-m", "trainledger.cli", *[str(a) for a in args]], capture_output=True,
                       text=True, env=full_env, cwd=REPO, timeout=timeout)
    STATS["inputs"] += 1
    out = Outcome(p.returncode, p.stdout, p.stderr, None)
    if out.traceback:
        STATS["tracebacks"] += 1
    return out


def assert_refused(out: Outcome, *needles: str, context: Any = None) -> None:
    """Exit 2, one line ``error: ...`` on stderr naming the field/flag (every needle), no traceback."""
    where = f"{context!r}: exit {out.exit_code}, exception {out.exception!r}, stderr {out.stderr!r}"
    assert not out.traceback, where
    assert out.exit_code == 2, where
    assert out.stderr.startswith("error: ") and out.stderr.endswith("\n") and out.stderr.count("\n") == 1, where
    for needle in needles:
        assert needle in out.stderr, (needle, where)


def assert_clean(out: Outcome, context: Any = None, codes: tuple[int, ...] = (0, 2)) -> None:
    """No traceback, an expected exit status, and a refusal (exit 2) is one line."""
    where = f"{context!r}: exit {out.exit_code}, exception {out.exception!r}, stderr {out.stderr[-500:]!r}"
    assert not out.traceback, where
    assert out.exit_code in codes, where
    if out.exit_code == 2:
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, where


def snapshot(url: str) -> dict[str, list[tuple]]:
    """Every row of every ledger table (ordered), to prove that a refused input wrote nothing."""
    from trainledger.store.db import get_engine

    engine = get_engine(url)
    out = {}
    with engine.connect() as c:
        for table in SQLModel.metadata.sorted_tables:
            if not engine.dialect.has_table(c, table.name):
                continue
            order = ", ".join(col.name for col in table.primary_key.columns) or "1"
            out[table.name] = [tuple(r) for r in c.execute(text(f'SELECT * FROM "{table.name}" ORDER BY {order}'))]
    return out


def unchanged(url: str, before: dict, context: Any = None) -> None:
    after = snapshot(url)
    if after != before:
        STATS["partial_writes"] += 1
        changed = [t for t in after if after[t] != before.get(t)]
        raise AssertionError(f"{context!r}: a refused input changed the ledger (tables {changed})")


@pytest.fixture
def ledger(ledger_url, monkeypatch):
    """A ledger with the presets (both backends) for a fuzz test; TRAINLEDGER_DB_URL unset."""
    from trainledger.store.db import get_engine

    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    get_engine(ledger_url)  # upgrade + presets once, outside the examples
    yield ledger_url
    get_engine.cache_clear()


@pytest.fixture
def sqlite_ledger(sqlite_url, monkeypatch):
    """A SQLite ledger with the presets, for tests where the backend does not matter."""
    from trainledger.store.db import get_engine

    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    get_engine(sqlite_url)
    yield sqlite_url
    get_engine.cache_clear()


summaries.register("hostile", lambda: dict(STATS))  # the line: tests/summaries.py, over every xdist worker




@pytest.fixture
def pg_databases():
    """A factory of new, empty PostgreSQL databases (no schema yet) on the test server; all dropped afterwards."""
    import uuid

    from sqlalchemy import create_engine
    from trainledger.store.db import get_engine

    from tests.conftest import PG_ADMIN

    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    names: list[str] = []

    def make() -> str:
        name = f"tl_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        names.append(name)
        return f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"

    yield make
    get_engine.cache_clear()
    with admin.connect() as c:
        for name in names:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def new_pg_url(pg_databases) -> str:
    """A new, empty PostgreSQL database (no schema yet): its URL."""
    return pg_databases()
