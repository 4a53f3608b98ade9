"""Every command exits with one line on a full or read-only disk, and ``--json`` means JSON (issue 24, item 6).

The target is a real tmpfs filled to the last byte (ENOSPC from the kernel) or remounted read-only
(EROFS); the commands run as real processes on a SQLite and a PostgreSQL ledger. A failed write leaves
nothing behind: no partial file, no temporary file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.conftest import BACKENDS, PG_ADMIN, _pg_admin
from tests.tmpfs import mounted

REPO = Path(__file__).resolve().parents[1]
#: real `trainledger` processes writing into small mounted file systems: the full suite's, not the day-to-day
#: tier's (issue 38: the fast tier within 3 minutes)
pytestmark = pytest.mark.slow
MONTH = "2026-11"


@pytest.fixture
def full_disk(tmp_path):
    """A 256 KiB tmpfs, filled up."""
    for disk in mounted(tmp_path / "full", "256k"):
        disk.fill()
        yield disk


def _cli(url: str, *args, stdout=subprocess.PIPE, env_extra=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRAINLEDGER_NOW": "2026-12-02T00:00:00Z", **(env_extra or {})}
    env.pop("TRAINLEDGER_DB_URL", None)
    return subprocess.run([sys.executable, "-m", "trainledger.cli", *map(str, args), "--db", url], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, timeout=300)


@pytest.fixture(scope="module")
def _demo_made():
    """The demo history (no sweep) up to ``MONTH``, made once per backend for this file: {backend: url}. Tests read
    copies of it (:func:`demo_ledger`): `trainledger demo` is the same real process each time, 1.5 CPU-s."""
    made: dict[str, str] = {}
    yield made
    if "postgresql" in made:
        admin = _pg_admin()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{made["postgresql"].rsplit("/", 1)[1]}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def demo_ledger(request, _demo_made, tmp_path, tmp_path_factory):
    """A copy of the demo ledger of this file (:func:`_demo_made`): a SQLite file copied, a PostgreSQL database made
    from it with ``CREATE DATABASE ... TEMPLATE``; the copy is the test's to write to."""
    backend = request.param
    if backend == "postgresql" and os.environ.get("TRAINLEDGER_SKIP_PG") == "1" and not os.environ.get("CI"):
        pytest.skip("TRAINLEDGER_SKIP_PG=1")
    if backend not in _demo_made:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('demo-ledger') / 'ledger.db'}"
        else:
            name = f"tl_demo_{uuid.uuid4().hex[:12]}"
            with _pg_admin().connect() as c:
                c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{request.getfixturevalue("_pg_template")}"'))
            url = f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
        r = _cli(url, "demo", "--no-sweep", "--end-month", MONTH, env_extra={"XDG_DATA_HOME": str(tmp_path / "xdg")})
        assert r.returncode == 0, r.stderr
        _demo_made[backend] = url
    source = _demo_made[backend]
    if backend == "sqlite":
        shutil.copyfile(source.removeprefix("sqlite:///"), tmp_path / "ledger.db")
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    name = f"tl_test_{uuid.uuid4().hex[:12]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{source.rsplit("/", 1)[1]}"'))
    yield f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _one_line_error(r: subprocess.CompletedProcess, *expected: str) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and all(e in lines[0] for e in expected), lines
    return lines[0]


@pytest.mark.parametrize("args", [["db", "backup", "--out", "{dir}/ledger.bak"],
                                  ["report", "monthly", "--month", MONTH, "-o", "{dir}/month.csv"],
                                  ["report", "monthly", "--month", MONTH, "--format", "xlsx", "-o", "{dir}/month.xlsx"],
                                  ["report", "focus", "--month", MONTH, "-o", "{dir}/focus.csv"]],
                         ids=["backup", "monthly-csv", "monthly-xlsx", "focus"])
def test_a_full_disk_is_one_line_and_leaves_nothing(demo_ledger, full_disk, args):
    r = _cli(demo_ledger, *[a.format(dir=full_disk.dir) for a in args])
    _one_line_error(r, str(full_disk.dir))
    assert full_disk.files() == []


def test_a_read_only_folder_is_one_line(demo_ledger, tmp_path):
    for disk in mounted(tmp_path / "ro", "256k"):
        subprocess.run(["mount", "-o", "remount,ro", str(disk.dir)], check=True)
        _one_line_error(_cli(demo_ledger, "db", "backup", "--out", disk.dir / "ledger.bak"), "Read-only file system")
        _one_line_error(_cli(demo_ledger, "db", "backup", "--out", disk.dir / "sub" / "ledger.bak"),
                        "Read-only file system")
        assert disk.files() == []


def test_standard_output_on_a_full_disk_is_one_line(demo_ledger, full_disk, tmp_path):
    full_disk.free()
    with open(full_disk.dir / "month.csv", "w") as out:
        full_disk.fill()
        r = _cli(demo_ledger, "report", "monthly", "--month", MONTH, stdout=out)
    _one_line_error(r, "standard output", "No space left on device")


def test_json_means_json_everywhere(demo_ledger, tmp_path):
    r = _cli(demo_ledger, "report", "monthly", "--month", MONTH, "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)  # today: CSV
    assert report["summary"]["month"] == MONTH and len(report["runs"]) > 0
    as_csv = _cli(demo_ledger, "report", "monthly", "--month", MONTH, "--format", "json")
    assert json.loads(as_csv.stdout) == report
    r = _cli(demo_ledger, "db", "backup", "--out", tmp_path / "ledger.bak", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"backup": str(tmp_path / "ledger.bak"), "bytes": (tmp_path / "ledger.bak").stat().st_size}
    r = _cli(demo_ledger, "db", "upgrade", "--json")
    assert r.returncode == 0 and set(json.loads(r.stdout)) == {"ledger", "revision"}, r.stderr
