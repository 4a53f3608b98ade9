"""Secrets are never printed: ledger passwords (CLI errors, outputs, scripts, argv, backups) and the
auth file's hashes (any dashboard page).

The local PostgreSQL trusts 127.0.0.1, so a URL with a password reaches a real
ledger: the password is carried through every command and must show nowhere.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from trainledger.app.serving.auth import load_auth_file, make_entry

from tests.app.helpers import make_app, plain, sign_in
from tests.conftest import PG_ADMIN
from tests.helpers import FakePopen
from tests.hostile.conftest import REPO, assert_clean, invoke, run_subprocess

SECRET = "s3cr3tpw"
UNREACHABLE = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:5432/nonexistent_db"
FAST = 1_000


def _no_secret(out, context) -> None:
    assert SECRET not in out.stdout and SECRET not in out.stderr, (context, out.stdout[-300:], out.stderr)
    assert "Traceback" not in out.stdout + out.stderr, context


@pytest.fixture
def pg_with_password(monkeypatch):
    """A new PostgreSQL ledger, addressed with a password (trust authentication ignores it)."""
    if os.environ.get("TRAINLEDGER_SKIP_PG") == "1" and not os.environ.get("CI"):
        pytest.skip("TRAINLEDGER_SKIP_PG=1")
    from trainledger.store.db import get_engine

    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    name = f"tl_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgres@", f"postgres:{SECRET}@", 1)
    assert SECRET in base
    yield f"{base}/{name}"
    get_engine.cache_clear()
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_an_unreachable_ledger_is_one_line_without_the_password(tmp_path, fake_popen, monkeypatch):
    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    csv_file = tmp_path / "runs.csv"
    csv_file.write_text("name,node_type,nodes,start,end,status\na,rtx4090-8x,1,2026-11-01T00:00,2026-11-01T01:00,succeeded\n")
    toml = tmp_path / "p.toml"
    toml.write_text("")
    commands = [["runs", "list"], ["settings"], ["settings", "currency", "USD"], ["db", "upgrade"],
                ["db", "backup", "--out", tmp_path / "b.dump"], ["db", "restore", csv_file], ["report", "monthly", "--month", "2026-11"],
                ["import", csv_file], ["pricing", "list"], ["pricing", "import", toml], ["cost", "compare", "--month", "2026-11"],
                ["launch", REPO / "trainer" / "configs" / "dp.yaml", "--launcher", "slurm"], ["demo", "--no-sweep"],
                ["runs", "reap"], ["runs", "show", "x"], ["report", "weekly"], ["report", "daily"], ["sync"], ["dashboard"]]
    for args in commands:
        out = invoke([*args, "--db", UNREACHABLE])
        assert_clean(out, context=args, codes=(1,))
        assert out.stderr.count("\n") == 1 and "postgres:***@127.0.0.1:5432/nonexistent_db" in out.stderr, (args, out.stderr)
        _no_secret(out, args)
    out = invoke(["runs", "list"], env={"TRAINLEDGER_DB_URL": UNREACHABLE})  # from the environment
    assert out.exit_code == 1 and "***" in out.stderr
    _no_secret(out, "env")
    assert fake_popen == []  # the dashboard did not start


def test_a_real_process_hides_the_password_too():
    out = run_subprocess(["runs", "list", "--db", UNREACHABLE])
    assert out.exit_code == 1 and out.stderr.count("\n") == 1
    _no_secret(out, "subprocess")


def test_a_reachable_ledger_with_a_password_never_prints_it(pg_with_password, tmp_path, monkeypatch):
    import shutil
    import subprocess

    url = pg_with_password
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n == "sbatch" else which(n, *a, **k))
    csv_file = tmp_path / "runs.csv"
    csv_file.write_text("name,node_type,nodes,start,end,status\na,rtx4090-8x,1,2026-11-01T00:00,2026-11-01T01:00,succeeded\n")
    outputs = {}
    for args in (["db", "upgrade"], ["settings"], ["settings", "--json"], ["import", csv_file], ["runs", "list", "--json"],
                 ["report", "monthly", "--month", "2026-11", "--format", "json"], ["pricing", "list", "--json"],
                 ["db", "backup", "--out", tmp_path / "ledger.dump"], ["runs", "reap"]):
        out = invoke(args, url)
        assert_clean(out, context=args, codes=(0,))
        _no_secret(out, args)
        outputs[" ".join(str(a) for a in args[:2])] = out
    assert "postgres:***@" in outputs["db upgrade"].stdout
    if shutil.which("pg_dump"):
        assert SECRET.encode() not in (tmp_path / "ledger.dump").read_bytes()

    # launching: the URL travels in the environment, never in argv, the sbatch script or the run row
    out = invoke(["launch", REPO / "trainer" / "configs" / "dp.yaml", "--launcher", "slurm", "--json"], url)
    assert_clean(out, codes=(0,))
    _no_secret(out, "slurm")
    script = json.loads(out.stdout)["script"]
    assert SECRET not in open(script).read()
    FakePopen.calls = []
    monkeypatch.setattr(subprocess, "Popen", FakePopen)  # record the launch, start nothing
    out = invoke(["launch", REPO / "trainer" / "configs" / "dp.yaml", "--detach", "--json", "--steps", "1"], url)
    assert_clean(out, codes=(0,))
    _no_secret(out, "detach")
    (argv, env, _), = FakePopen.calls
    assert not any(SECRET in a for a in argv) and SECRET in env["TRAINLEDGER_DB_URL"]
    engine = create_engine(url)
    with engine.connect() as c:
        configs = [r[0] for r in c.execute(text("SELECT CAST(config AS TEXT) FROM run WHERE config IS NOT NULL"))]
        settings = [r[0] for r in c.execute(text("SELECT value FROM setting"))]
    engine.dispose()
    assert configs and not any(SECRET in (c or "") for c in configs + settings)


def _page_text(at) -> str:
    """Everything the app sent to the browser: every element's protobuf, recursively."""
    parts = []

    def walk(node):
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(parts)


PAGES = ["overview", "runs", "rent_vs_own", "roi", "strategies", "planner", "launch", "export", "settings"]


def test_no_page_shows_hashes_or_passwords(pg_with_password, app_env, tmp_path, monkeypatch, run_env):
    from trainledger.store.db import make_engine

    make_engine(pg_with_password).dispose()
    app_env(pg_with_password)  # TRAINLEDGER_DB_URL with the password
    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST) + make_entry("bob", "viewer", "bob-pw", iterations=FAST))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users))
    secrets = [SECRET, "alice-pw", "bob-pw", "pbkdf2_sha256"]
    for entry in load_auth_file(users).values():
        secrets += entry.password_hash.split("$")[2:]  # salt and hash, base64
    for user, password in (("alice", "alice-pw"), ("bob", "bob-pw")):
        at = make_app()
        sign_in(at, user, password)
        for page in PAGES:
            if page != "overview":
                at.switch_page(f"pages/{page}.py").run()
            assert not at.exception, (page, [e.value for e in at.exception])
            shown = _page_text(at)
            assert at.title and f'body: "{at.title[0].value}"' in shown  # the walk sees the page
            assert not [s for s in secrets if s in shown], (user, page, [s for s in secrets if s in shown])


def test_an_unreachable_ledger_in_the_dashboard_hides_the_password(app_env):
    app_env(UNREACHABLE)
    at = make_app()
    at.run()
    shown = _page_text(at)
    assert SECRET not in shown
    assert "postgres:***@127.0.0.1:5432/nonexistent_db" in plain(at.error[0].value)
    assert not at.exception
