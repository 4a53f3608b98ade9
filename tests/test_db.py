"""Ledger database: URL resolution, SQLite settings, migrations, backup and restore."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import inspect, text
from sqlmodel import Session, func, select
from trainledger.store.db import HEAD_REVISION, current_revision, head_revision, make_engine, redact_url, resolve_url
from trainledger.store.models import Offer, Run

from tests.helpers import add_run


def test_url_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert resolve_url(None) == f"sqlite:///{tmp_path}/trainledger/ledger.db"
    monkeypatch.setenv("TRAINLEDGER_DB_URL", "postgresql://u@h/db")
    assert resolve_url(None) == "postgresql+psycopg://u@h/db"
    assert resolve_url("sqlite:///x.db") == "sqlite:///x.db"
    assert redact_url("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"


def test_sqlite_is_wal_with_busy_timeout(sqlite_url):
    eng = make_engine(sqlite_url)
    with eng.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == 60000
        assert c.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_first_use_upgrades_to_head_and_seeds_presets(engine):
    assert current_revision(engine) == head_revision() == HEAD_REVISION
    tables = set(inspect(engine).get_table_names())
    assert {"node_type", "offer", "fleet", "project", "user_account", "run", "run_node", "metric_sample", "budget", "alembic_version"} <= tables
    with Session(engine) as s:
        assert s.exec(select(func.count()).select_from(Offer)).one() == 3


def test_money_round_trips_exactly(session):
    o = Offer(name="exact", node_type_id=1, kind="rent_elastic", price_per_node_hour=Decimal("1234567.123457"))
    session.add(o)
    session.commit()
    session.expire_all()
    assert session.get(Offer, o.id).price_per_node_hour == Decimal("1234567.123457")


def test_timestamps_come_back_aware_utc(session):
    t = datetime(2026, 11, 3, 9, 30, 1, 123456, tzinfo=timezone(timedelta(hours=8)))
    add_run(session, "ts", t, 1)
    session.commit()
    session.expire_all()
    got = session.get(Run, "ts").started_at
    assert got == t and got.tzinfo == timezone.utc and got.hour == 1


def test_db_upgrade_command_is_idempotent(cli):
    r = cli("db", "upgrade")
    assert r.exit_code == 0 and f"at revision {HEAD_REVISION}" in r.output
    assert cli("db", "upgrade").exit_code == 0


def test_migrations_match_the_models(engine):
    """Autogenerate against head finds nothing: every model change has a migration."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlmodel import SQLModel

    with engine.connect() as c:
        diff = compare_metadata(MigrationContext.configure(c), SQLModel.metadata)
    assert diff == []


def test_backup_and_restore_round_trip(ledger_url, tmp_path, cli):
    if ledger_url.startswith("postgresql") and shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is required (Debian: postgresql-client)")
    assert cli("demo", "--end-month", "2026-11", "--no-sweep").exit_code == 0
    again = cli("demo", "--no-sweep")  # a second demo on a demo ledger adds nothing
    assert again.exit_code == 0 and "already present" in again.output
    before = json.loads(cli("report", "monthly", "--month", "2026-10", "--format", "json").output)
    out = tmp_path / "trainledger.store.backup"
    r = cli("db", "backup", "--out", out)
    assert r.exit_code == 0, r.output
    assert cli("db", "backup", "--out", out).exit_code == 2  # never overwrites
    assert cli("db", "restore", out).exit_code == 2           # target has runs: needs --force
    eng = make_engine(ledger_url)
    with Session(eng) as s:
        s.exec(text("DELETE FROM metric_sample"))
        s.exec(text("DELETE FROM run_node"))
        s.exec(text("DELETE FROM run_phase"))
        s.exec(text("DELETE FROM run"))
        s.commit()
    eng.dispose()
    from trainledger.store.db import get_engine

    get_engine.cache_clear()
    r = cli("db", "restore", out)
    assert r.exit_code == 0, r.output + r.stderr
    get_engine.cache_clear()
    after = json.loads(cli("report", "monthly", "--month", "2026-10", "--format", "json").output)
    assert after == before and len(after["runs"]) > 5


def test_ledger_and_cli_import_without_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['deepspeed'] = None\n"
            "import trainledger.cli, trainledger.money.account.monthly, trainledger.reports.export, trainledger.trainer.shapes, trainledger.trainer.parallel\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_downgrade_to_base_and_upgrade_again(engine):
    from alembic import command
    from trainledger.store.db import alembic_config, upgrade_schema

    command.downgrade(alembic_config(engine), "base")
    assert "run" not in inspect(engine).get_table_names()
    assert upgrade_schema(engine) == HEAD_REVISION
    with Session(engine) as s:
        assert s.exec(select(func.count()).select_from(Offer)).one() == 3


@pytest.mark.new_ledger  # migrates from an empty database
def test_upgrade_from_the_first_migration_keeps_data(ledger_url):
    """A ledger written at revision 0001 upgrades to head with every row and total intact."""
    from trainledger.money.account.monthly import monthly_report
    from trainledger.store.db import upgrade_schema

    eng = make_engine(ledger_url, upgrade=False)
    upgrade_schema(eng, "0001")
    with eng.begin() as c:
        nt = c.execute(text("SELECT id FROM node_type WHERE name = 'rtx4090-8x'")).scalar()
        off = c.execute(text("SELECT id FROM offer WHERE name = 'rtx4090-rent'")).scalar()
        c.execute(text("INSERT INTO run (id, name, launcher, node_type_id, offer_id, nodes, gpus_per_node, strategy, "
                       "model_shape, status, created_at, started_at, ended_at, tokens) VALUES "
                       "('old', 'old run', 'import', :nt, :off, 2, 8, 'zero2', '', 'succeeded', "
                       "'2026-11-02 00:00:00', '2026-11-02 00:00:00', '2026-11-02 10:00:00', 1000)"),
                  {"nt": nt, "off": off})
    assert upgrade_schema(eng) == head_revision()
    with Session(eng) as s:
        run = s.get(Run, "old")
        assert (run.nodes, run.tokens, run.pgid, run.status.value) == (2, 1000, None, "succeeded")
        rep = monthly_report(s, "2026-11")
        assert rep.summary["actual_cost"] == Decimal(3600) / 730 * 20  # the rollup is built on first read
    eng.dispose()


@pytest.mark.new_ledger  # migrates from an empty database
def test_upgrade_to_0006_gives_the_presets_their_link_speeds(ledger_url):
    """A ledger seeded before the planner's link columns (0003) gets the catalog's figures for its presets;
    a node type the user imported keeps them unknown (NULL)."""
    from trainledger.store.db import upgrade_schema

    eng = make_engine(ledger_url, upgrade=False)
    upgrade_schema(eng, "0003")
    with eng.begin() as c:
        assert "intra_node_gbytes_per_s" not in {col["name"] for col in inspect(c).get_columns("node_type")}
        c.execute(text("INSERT INTO node_type (name, gpu_model, gpus_per_node, gpu_memory_gb, peak_bf16_tflops, "
                       "interconnect, network, source) VALUES ('mine', 'L40S', 8, 48, 362, '', '', 'user')"))
    upgrade_schema(eng)
    with eng.connect() as c:
        rows = {r[0]: tuple(r[1:]) for r in c.execute(text(
            "SELECT name, intra_node_gbytes_per_s, intra_node_latency_us, inter_node_gbits_per_s, "
            "inter_node_latency_us FROM node_type"))}
    assert rows["rtx4090-8x"] == (16.0, 10.0, 25.0, 30.0)
    assert rows["h100-8x"] == (450.0, 5.0, 400.0, 5.0)
    assert rows["mine"] == (None, None, None, None)
    eng.dispose()


def test_sqlite_busy_timeout_is_a_setting(tmp_path, monkeypatch, capsys):
    """TRAINLEDGER_SQLITE_BUSY_S: the lock wait of every SQLite engine; a bad value is the default said once on the
    job's side (the API, the wrapper, the trainer), and one line with exit 2 from a CLI command (strict_for)."""
    from sqlalchemy import text
    from trainledger.errors import LedgerInputError
    from trainledger.store import envsettings
    from trainledger.store.db import make_engine, read_only_engine

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    for engine, expected in ((make_engine(url), 60_000),):
        with engine.connect() as c:
            assert c.execute(text("PRAGMA busy_timeout")).scalar() == expected
        engine.dispose()
    monkeypatch.setenv("TRAINLEDGER_SQLITE_BUSY_S", "2.5")
    for engine in (make_engine(url), read_only_engine(url)):
        with engine.connect() as c:
            assert c.execute(text("PRAGMA busy_timeout")).scalar() == 2500
        engine.dispose()
    monkeypatch.setattr(envsettings, "_said", set())
    for bad in ("soon", "0", "-1", "1e9", "nan"):
        monkeypatch.setenv("TRAINLEDGER_SQLITE_BUSY_S", bad)
        engine = make_engine(url)  # the job's side: the default, said once
        with engine.connect() as c:
            assert c.execute(text("PRAGMA busy_timeout")).scalar() == 60_000
        engine.dispose()
        assert capsys.readouterr().err == (f"[trainledger] warning: TRAINLEDGER_SQLITE_BUSY_S={bad!r} is not seconds "
                                           "from 0.001 to 86400; using the default 60\n")
        with envsettings.strict_for(), pytest.raises(LedgerInputError) as err:
            make_engine(url)
        assert str(err.value) == ("TRAINLEDGER_SQLITE_BUSY_S: expected seconds from 0.001 to 86400 such as 60, "
                                  f"got {bad!r}")
    assert envsettings._strict == [False]  # strict only inside
    from trainledger.cli.commands import app as cli_app
    from typer.testing import CliRunner

    out = CliRunner().invoke(cli_app, ["report", "monthly", "--month", "2026-11", "--db", url],
                            env={"TRAINLEDGER_SQLITE_BUSY_S": "soon"})
    assert (out.exit_code, out.stderr) == (2, "error: TRAINLEDGER_SQLITE_BUSY_S: expected seconds from 0.001 to "
                                              "86400 such as 60, got 'soon'\n")
