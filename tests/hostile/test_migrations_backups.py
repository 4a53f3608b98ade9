"""Migrations keep data; `db backup` / `db restore` bring every row back (SQLite and PostgreSQL).

* A ledger written at the first migration (0001) with a bit of everything (settings, projects,
  users, a fleet, runs of every status and offer kind, one across a month boundary, per-node
  figures, series) upgrades to head with every row unchanged, and every monthly total equal to
  the same data written at head (plus hand-checked figures).
* A backup restored into a new ledger, or with --force over a changed one, equals the original
  row for row and total for total; a bad backup file is one line, exit 2, and changes nothing;
  SQLite's online backup is consistent while a writer holds a transaction open.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import create_engine, inspect, text
from trainledger.store.db import get_engine, head_revision, make_engine, upgrade_schema

from tests.conftest import PG_ADMIN
from tests.helpers import rounding
from tests.hostile.conftest import assert_clean, assert_refused, invoke, snapshot, unchanged

MONTHS = ["2026-09", "2026-10", "2026-11", "2026-12"]
AFTER_MONTHS = datetime(2027, 1, 1, tzinfo=timezone.utc)
RUNS = [  # id, offer, status, start (UTC), hours, nodes, tokens, project, user
    ("old-rent-ok", "rtx4090-rent", "succeeded", datetime(2026, 10, 2, 0, 0), 10, 2, 1_000_000, "llm", "alice"),
    ("old-rent-fail", "rtx4090-rent", "failed", datetime(2026, 10, 5, 3, 30), 2.5, 1, None, "llm", "bob"),
    ("old-own-a", "rtx4090-own", "succeeded", datetime(2026, 10, 10, 0, 0), 48, 2, 5_000_000, "chat", "alice"),
    ("old-own-cross", "rtx4090-own", "crashed", datetime(2026, 10, 31, 12, 0), 30, 1, 7_000, "chat", "carol"),
    ("old-reserved", "rtx4090-reserved", "cancelled", datetime(2026, 11, 3, 8, 0), 5, 1, None, None, None),
    ("old-no-offer", None, "succeeded", datetime(2026, 11, 20, 0, 0), 1.25, 4, 123, "llm", None),
    ("old-rent-dec", "rtx4090-rent", "succeeded", datetime(2026, 11, 30, 20, 0), 6, 2, 10, "llm", "alice"),
]


def write_history(url: str) -> None:
    """The same rows at any revision ≥ 0001: raw SQL with the columns of the first migration only."""
    eng = create_engine(url)
    with eng.begin() as c:
        ids = lambda table: {n: i for i, n in c.execute(text(f"SELECT id, name FROM {table}"))}  # noqa: E731
        offers = ids("offer")
        nt = ids("node_type")["rtx4090-8x"]
        for table, names in (("project", ["llm", "chat"]), ("user_account", ["alice", "bob", "carol"])):
            for n in names:
                c.execute(text(f"INSERT INTO {table} (name{', role' if table == 'user_account' else ''}) "
                               f"VALUES (:n{', :r' if table == 'user_account' else ''})"), {"n": n, "r": "viewer"})
        projects, users = ids("project"), ids("user_account")
        c.execute(text("INSERT INTO setting (key, value) VALUES ('timezone', 'Asia/Shanghai')"))
        c.execute(text("INSERT INTO fleet (name, offer_id, node_count, valid_from, valid_to) "
                       "VALUES ('rack-a', :o, 2, '2026-10-01', NULL)"), {"o": offers["rtx4090-own"]})
        for rid, offer, status, start, hours, nodes, tokens, project, user in RUNS:
            end = start + timedelta(hours=hours)
            c.execute(text(
                "INSERT INTO run (id, name, project_id, user_id, launcher, node_type_id, offer_id, nodes, gpus_per_node, "
                "world_size, strategy, dp, zero_stage, micro_batch, grad_accum, model_shape, params, config, status, "
                "created_at, started_at, ended_at, heartbeat_at, steps, tokens, gpu_util_mean, mfu, util_source, "
                "final_loss, exit_code, error, hostname) VALUES (:id, :name, :p, :u, 'import', :nt, :o, :nodes, 8, "
                ":world, 'zero2', :world, 2, 4, 8, 'tiny', 123456789012, :config, :status, :start, :start, :end, :end, "
                "100, :tokens, 0.75, NULL, 'nvml', 2.5, :code, :error, 'node-1')"),
                {"id": rid, "name": f"run {rid}", "p": projects.get(project), "u": users.get(user), "nt": nt,
                 "o": offers.get(offer), "nodes": nodes, "world": nodes * 8, "config": json.dumps({"lr": 0.001, "id": rid}),
                 "status": status, "start": start, "end": end, "tokens": tokens,
                 "code": 0 if status == "succeeded" else 1, "error": None if status == "succeeded" else "boom"})
        for rank in range(2):
            c.execute(text("INSERT INTO run_node (run_id, hostname, node_rank, gpu_util_mean, gpu_util_p95, util_source, "
                           "mem_peak_bytes, energy_kwh, straggler) VALUES ('old-own-a', :h, :r, 0.8, 0.9, 'dcgm', "
                           "20000000000, 12.5, :s)"), {"h": f"node-{rank}", "r": rank, "s": rank == 1})
        for i in range(5):
            c.execute(text("INSERT INTO metric_sample (run_id, node, gpu, metric, ts, value) VALUES "
                           "('old-own-a', 'node-0', -1, 'gpu_util', :ts, :v)"),
                      {"ts": datetime(2026, 10, 10, 1, i), "v": None if i == 3 else i / 10})
    eng.dispose()


def rows_of(url: str, tables: dict[str, list[str]]) -> dict[str, list[tuple]]:
    """Rows of ``tables`` (only the given columns), ordered by primary key."""
    eng = create_engine(url)
    out = {}
    with eng.connect() as c:
        for table, cols in tables.items():
            pk = [col for col in inspect(eng).get_pk_constraint(table)["constrained_columns"]]
            out[table] = [tuple(r) for r in c.execute(text(
                f'SELECT {", ".join(cols)} FROM "{table}" ORDER BY {", ".join(pk)}'))]
    eng.dispose()
    return out


def reports(url: str) -> dict[str, dict]:
    from sqlmodel import Session
    from trainledger.money.account.monthly import monthly_report
    from trainledger.reports.export import presented_report

    get_engine.cache_clear()
    eng = make_engine(url)
    with Session(eng) as s:
        # whole months, whenever the test runs (a month not ended would be to date: it changes every second)
        out = {m: json.loads(json.dumps(presented_report(monthly_report(s, m, now=AFTER_MONTHS)), default=str)) for m in MONTHS}
    eng.dispose()
    return out


@pytest.fixture
def second_url(ledger_url, tmp_path):
    """Another empty ledger on the same backend (a second SQLite file, or a second PostgreSQL database)."""
    if ledger_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'second.db'}"
        return
    name = f"tl_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    yield f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    get_engine.cache_clear()
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.mark.new_ledger  # migrates from an empty database
def test_every_row_and_total_survive_the_upgrade_from_the_first_migration(ledger_url, second_url):
    old = make_engine(ledger_url, upgrade=False)
    upgrade_schema(old, "0001")
    old.dispose()
    write_history(ledger_url)
    eng = create_engine(ledger_url)
    tables_0001 = {t: [c["name"] for c in inspect(eng).get_columns(t)] for t in inspect(eng).get_table_names()
                   if t != "alembic_version"}
    eng.dispose()
    before = rows_of(ledger_url, tables_0001)
    assert len(before["run"]) == len(RUNS) and len(before["run_node"]) == 2 and len(before["metric_sample"]) == 5

    upgraded = make_engine(ledger_url, upgrade=False)
    assert upgrade_schema(upgraded) == head_revision()
    upgraded.dispose()
    assert rows_of(ledger_url, tables_0001) == before  # every row, every column of 0001, unchanged

    make_engine(second_url).dispose()  # the same history written at head
    write_history(second_url)
    after, reference = reports(ledger_url), reports(second_url)
    assert after == reference
    # hand-checked: 2 nodes × 10 h on rtx4090-rent at 3,600/730 per node-hour = 98.63; the fleet of
    # 2 own nodes is held from 2026-10-01, so October has an own cost and idle cost > 0
    oct_runs = {r["run_id"]: r for r in after["2026-10"]["runs"]}
    assert oct_runs["old-rent-ok"]["cost"] == "98.63"
    assert set(oct_runs) == {"old-rent-ok", "old-rent-fail", "old-own-a", "old-own-cross"}
    assert "old-own-cross" in {r["run_id"] for r in after["2026-11"]["runs"]}  # split at the month boundary
    for m in MONTHS:
        s = after[m]["summary"]
        total = sum(Decimal(r["cost"]) for r in after[m]["runs"]) + Decimal(s["idle_cost"]) + rounding(after[m], "runs")
        assert total == Decimal(s["actual_cost"]), m  # run lines + idle + rounding = the month's cost, to the cent
    assert Decimal(after["2026-10"]["summary"]["idle_cost"]) > 0 and after["2026-09"]["runs"] == []


def test_backup_and_restore_round_trip_row_for_row(ledger_url, second_url, tmp_path):
    if ledger_url.startswith("postgresql") and shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is required (Debian: postgresql-client)")
    make_engine(ledger_url).dispose()
    write_history(ledger_url)
    original, original_reports = snapshot(ledger_url), reports(ledger_url)
    out_file = tmp_path / "trainledger.store.backup"
    assert_clean(invoke(["db", "backup", "--out", out_file], ledger_url), codes=(0,))
    assert_refused(invoke(["db", "backup", "--out", out_file], ledger_url), "--out", "exists")

    # into a new ledger
    assert_clean(invoke(["db", "restore", out_file], second_url), codes=(0,))
    get_engine.cache_clear()
    assert snapshot(second_url) == original and reports(second_url) == original_reports

    # over a changed ledger: refused without --force (nothing changes), then everything comes back
    eng = create_engine(ledger_url)
    with eng.begin() as c:
        c.execute(text("DELETE FROM metric_sample"))
        c.execute(text("DELETE FROM run WHERE id = 'old-rent-dec'"))
        c.execute(text("UPDATE setting SET value = 'UTC' WHERE key = 'timezone'"))
        c.execute(text("INSERT INTO project (name) VALUES ('after-backup')"))
    eng.dispose()
    get_engine.cache_clear()
    changed = snapshot(ledger_url)
    assert_refused(invoke(["db", "restore", out_file], ledger_url), "--force")
    unchanged(ledger_url, changed)
    assert_clean(invoke(["db", "restore", out_file, "--force"], ledger_url), codes=(0,))
    get_engine.cache_clear()
    assert snapshot(ledger_url) == original and reports(ledger_url) == original_reports


@pytest.mark.parametrize("body", [b"", b"not a backup at all", b"SQLite format 3\x00" + b"\x00" * 100, b"PGDMP\x01\x0e"])
def test_a_bad_backup_file_changes_nothing(ledger_url, tmp_path, body):
    make_engine(ledger_url).dispose()
    write_history(ledger_url)
    before = snapshot(ledger_url)
    bad = tmp_path / "bad.backup"
    bad.write_bytes(body)
    out = invoke(["db", "restore", bad, "--force"], ledger_url)
    assert_refused(out, context=body)
    assert "FILE" in out.stderr or "pg_restore" in out.stderr, out.stderr
    get_engine.cache_clear()
    unchanged(ledger_url, before, context=body)
    assert_refused(invoke(["db", "restore", tmp_path / "missing.backup"], ledger_url), "does not exist")


def test_sqlite_backup_is_online_and_consistent(sqlite_url, tmp_path):
    """A writer commits rows all through the backup: the backup completes, is intact, and holds a committed state."""
    make_engine(sqlite_url).dispose()
    write_history(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    stop, written = threading.Event(), []

    def writer():
        con = sqlite3.connect(path, isolation_level=None, timeout=60)
        while not stop.is_set():
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO project (name) VALUES (?)", (f"w{len(written)}",))
            con.execute("INSERT INTO user_account (name, role) VALUES (?, 'viewer')", (f"w{len(written)}",))
            con.execute("COMMIT")
            written.append(1)
        con.close()

    t = threading.Thread(target=writer)
    t.start()
    try:
        while len(written) < 20:
            time.sleep(0.01)
        out = invoke(["db", "backup", "--out", tmp_path / "online.db"], sqlite_url)
        assert_clean(out, codes=(0,))
        during = len(written)
    finally:
        stop.set()
        t.join()
    assert during > 20
    copy = sqlite3.connect(tmp_path / "online.db")
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    projects = copy.execute("SELECT count(*) FROM project WHERE name LIKE 'w%'").fetchone()[0]
    users = copy.execute("SELECT count(*) FROM user_account WHERE name LIKE 'w%'").fetchone()[0]
    assert 20 <= projects == users <= len(written)  # both rows of each commit, or neither
    assert copy.execute("SELECT count(*) FROM run").fetchone() == (len(RUNS),)
    copy.close()
    assert not os.path.exists(tmp_path / "online.db.part")
