"""Concurrent writers, as a busy team runs them: real `trainledger import` processes started at the same instant.

* First use: eight imports start together on a ledger that does not exist yet (a new SQLite file, a
  new PostgreSQL database without a schema). Creation, migration and preset seeding are one
  serialized step, so every process finds the presets (`--node-type rtx4090-8x` is known) and all
  8 × 50 runs land.
* PostgreSQL, a ledger in use: ten imports whose runs share new project and user names start
  together (twice as many processes as names, so every name is raced for). Projects and users are
  created with INSERT ... ON CONFLICT DO NOTHING, so no process fails on the unique index
  (`ix_project_name`), none prints a traceback, and all 500 runs land with one project row per name.

The processes import the CLI first, then wait for a start file (a barrier), so their first
statements meet; the tests poll for states, never sleep a fixed time.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.hostile.conftest import REPO

pytestmark = pytest.mark.slow  # many real CLI processes at once: not in `tests/run.sh --fast`

BARRIER = """
import sys, time
from pathlib import Path
from trainledger.cli.commands import main   # the import cost is paid before the barrier
go = Path(sys.argv[1])
deadline = time.monotonic() + 300
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.002)
sys.argv = ["trainledger", *sys.argv[2:]]
main()
"""


def write_csv(path: Path, prefix: str, n: int, projects: list[str]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "name", "project", "user", "nodes", "start", "end", "status"])
        for i in range(n):
            day = 1 + i % 27
            w.writerow([f"{prefix}-{i:04d}", f"run {i}", projects[i % len(projects)], f"user-{i % 7}", 1 + i % 4,
                        f"2026-11-{day:02d}T00:00:00+00:00", f"2026-11-{day:02d}T0{1 + i % 8}:30:00+00:00",
                        "succeeded"])
    return path


def run_together(tmp_path: Path, commands: list[list[str]], env: dict[str, str], timeout_s: float = 600):
    """Start every command (``trainledger ARGS``) as its own process, release them at once, wait for all."""
    go = tmp_path / f"go-{uuid.uuid4().hex[:6]}"
    procs = [subprocess.Popen([sys.executable, "-c", BARRIER, str(go), *cmd], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for cmd in commands]
    go.touch()
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout_s)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRAINLEDGER_DB_URL"}
    env["PYTHONPATH"] = str(REPO)
    return env


def _counts(url: str) -> tuple[int, int, int, int]:
    eng = create_engine(url)
    try:
        with eng.connect() as c:
            return tuple(c.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                         for t in ("run", "project", "user_account", "node_type"))
    finally:
        eng.dispose()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_eight_imports_into_a_ledger_that_does_not_exist_yet(backend, tmp_path, request):
    url = (f"sqlite:///{tmp_path / 'new' / 'ledger.db'}" if backend == "sqlite"
           else request.getfixturevalue("new_pg_url"))
    files = [write_csv(tmp_path / f"part{i}.csv", f"first-{i}", 50, [f"proj-{i % 3}"]) for i in range(8)]
    results = run_together(tmp_path, [["import", str(f), "--node-type", "rtx4090-8x", "--db", url] for f in files], _env())
    for code, out, err in results:
        assert code == 0 and "Traceback" not in err, err
    runs, projects, users, node_types = _counts(url)
    assert runs == 8 * 50
    assert projects == 3 and users == 7
    assert node_types >= 1


def test_ten_concurrent_imports_sharing_new_project_names_on_postgresql(tmp_path, new_pg_url):
    url = new_pg_url
    first = subprocess.run([sys.executable, "-m", "trainledger.cli", "db", "upgrade", "--db", url], cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    shared = [f"shared-{i}" for i in range(5)]  # every import creates these: the unique index is contended
    # ten processes (twenty until issue 38: each is a whole CLI start, ~1 CPU-s, and ten already race per name)
    files = [write_csv(tmp_path / f"team{i}.csv", f"team-{i}", 50, shared) for i in range(10)]
    results = run_together(tmp_path, [["import", str(f), "--node-type", "rtx4090-8x", "--db", url] for f in files], _env())
    failures = [(code, err.strip().splitlines()[-1:] if err.strip() else "") for code, _, err in results if code != 0]
    assert failures == []
    assert all("Traceback" not in err and "IntegrityError" not in err for _, _, err in results)
    runs, projects, users, _ = _counts(url)
    assert (runs, projects, users) == (10 * 50, 5, 7)
    check = subprocess.run([sys.executable, "-m", "trainledger.cli", "db", "rollup", "--db", url], cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "rollup consistent" in check.stdout, check.stderr


def test_the_same_file_imported_four_times_at_once_is_one_line_at_worst(tmp_path, new_pg_url):
    """Four imports of one file race for the same run ids: each imports it, finds it imported, or loses the race
    with one line (exit 1, nothing written); never a traceback, and the runs are there once."""
    url = new_pg_url
    first = subprocess.run([sys.executable, "-m", "trainledger.cli", "db", "upgrade", "--db", url], cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    f = write_csv(tmp_path / "same.csv", "same", 50, ["p"])
    results = run_together(tmp_path, [["import", str(f), "--node-type", "rtx4090-8x", "--db", url]] * 4, _env())
    for code, _, err in results:
        assert "Traceback" not in err, err
        assert code == 0 or (code == 1 and len(err.strip().splitlines()) == 1
                             and "another writer changed the ledger at the same time" in err), (code, err)
    assert any(code == 0 for code, _, _ in results)
    assert _counts(url)[0] == 50
