"""Sweep progress (trainledger.runs.sweep.sweep_progress) on the Strategies page, and `trainledger demo` with its
background sweep: the history is deterministic, the sweep's real runs share one sweep id, and stopping
the sweep leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy import func
from sqlmodel import Session, select
from trainledger.cli.commands import app
from trainledger.demo import DEMO_SWEEP, DEMO_SWEEP_STEPS
from trainledger.reports.weekly import strategy_comparison
from trainledger.runs.sweep import PLAN_PREFIX, SweepRequest, record_plan, sweep_progress
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import MetricSample, Run, RunStatus, Setting
from trainledger.store.types import utcnow
from typer.testing import CliRunner

from tests.app.helpers import DEMO_NOW, MONTH, REPO, make_app, plain, run_page
from tests.helpers import add_run
from tests.tracking.conftest import processes_of_run, wait_for

SWEEP_ID = "sweep-live-1"


def _live_sweep(session, driver_pid: int) -> dict[str, str]:
    """A plan of five strategies: three measured, tp at step 4 of 10, 3d not started."""
    req = SweepRequest(config=REPO / "trainer" / "configs" / "dp.yaml", strategies=list(DEMO_SWEEP), steps=10,
                       sweep_id=SWEEP_ID)
    record_plan(session, req, driver_pid)
    t0 = utcnow() - timedelta(minutes=5)
    ids = {}
    for i, strat in enumerate(["dp", "zero2", "pp", "tp"]):
        r = add_run(session, f"live-{strat}", t0 + timedelta(seconds=30 * i), 0.005, nodes=1,
                    offer_name="rtx4090-rent", tokens=10 * 2048)
        r.strategy, r.sweep_id, r.created_at, r.dp, r.tp, r.pp, r.zero_stage = strat, SWEEP_ID, r.started_at, 2, 1, 1, 0
        r.micro_batch, r.grad_accum, r.seq_len, r.config = 4, 2, 128, {"train": {"steps": 10}}
        if strat == "tp":
            r.status, r.ended_at, r.heartbeat_at, r.tokens = RunStatus.running, None, utcnow(), None
            session.add(MetricSample(run_id=r.id, node="", gpu=-1, metric="tokens", ts=utcnow(), value=4 * 2048))
        else:
            r.tokens_per_s, r.steps = 1000.0 * (i + 1), 10
        ids[strat] = r.id
    session.flush()
    return ids


def test_sweep_progress_counts_what_the_comparison_shows(session):
    _live_sweep(session, os.getpid())
    p = sweep_progress(session, SWEEP_ID)
    assert (p["total"], p["measured"], p["state"]) == (5, 3, "running")
    assert [s["strategy"] for s in p["running"]] == ["tp"] and [s["strategy"] for s in p["waiting"]] == ["3d"]
    assert p["measured"] == len(strategy_comparison(session, sweep_id=SWEEP_ID)["rows"])
    # the driver is gone with 3d not started: stopped
    plan = json.loads(session.get(Setting, PLAN_PREFIX + SWEEP_ID).value)
    session.get(Setting, PLAN_PREFIX + SWEEP_ID).value = json.dumps({**plan, "pid": 2**22 + 1, "pid_start": None})
    session.exec(select(Run).where(Run.id == "live-tp")).one().status = RunStatus.failed
    session.flush()
    p = sweep_progress(session, SWEEP_ID)
    assert (p["state"], p["measured"], [s["strategy"] for s in p["not_measured"]]) == ("stopped", 3, ["tp"])


def test_strategies_page_shows_a_live_sweeps_progress(sqlite_url, app_env):
    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        ids = _live_sweep(s, os.getpid())
    app_env(sqlite_url)
    at = run_page(make_app(sweep=SWEEP_ID), "strategies")
    assert at.selectbox(key="strategies_sweep").value == SWEEP_ID
    assert [plain(i.value) for i in at.info] == [
        f"**3 of 5 strategies measured** · running: tp (run {ids['tp']}, step 4 of 10) · waiting: 3d"]
    table = at.dataframe[0].value
    assert sorted(table["run"]) == sorted([ids["dp"], ids["zero2"], ids["pp"]])
    assert not at.warning  # the running strategy is in the progress line, not under "not measured"

    with session_scope(engine) as s:  # tp finishes, 3d starts
        tp = s.get(Run, ids["tp"])
        tp.status, tp.ended_at, tp.tokens_per_s, tp.steps = RunStatus.succeeded, utcnow(), 500.0, 10
        r = add_run(s, "live-3d", utcnow(), 0.001, nodes=1, offer_name="rtx4090-rent", status=RunStatus.queued)
        r.strategy, r.sweep_id, r.ended_at = "3d", SWEEP_ID, None
    at.run()
    assert [plain(i.value) for i in at.info] == ["**4 of 5 strategies measured** · starting: 3d (run live-3d)"]
    assert len(at.dataframe[0].value) == 4
    engine.dispose()


# --- trainledger demo --------------------------------------------------------------------------------

def _demo_json(url: str, *args: str) -> dict:
    r = CliRunner().invoke(app, ["demo", "--db", url, "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_demo_without_sweep_is_deterministic(tmp_path):
    from trainledger.demo import generate_demo

    first = _demo_json(f"sqlite:///{tmp_path / 'a.db'}", "--end-month", MONTH, "--no-sweep")
    second = _demo_json(f"sqlite:///{tmp_path / 'b.db'}", "--end-month", MONTH, "--no-sweep")
    engine = make_engine(f"sqlite:///{tmp_path / 'c.db'}")
    with session_scope(engine) as s:
        expected = generate_demo(s, end_month=MONTH, now=DEMO_NOW)  # the dashboard tests' fixed clock
    # each names the ledger it filled (the demo's own unless --db), and is otherwise the same
    assert (first.pop("ledger"), second.pop("ledger")) == (f"sqlite:///{tmp_path / 'a.db'}",
                                                           f"sqlite:///{tmp_path / 'b.db'}")
    assert first == second == {**expected, "sweep": None}
    with Session(engine) as s:  # the counts are the ledger's
        runs, samples = (s.exec(select(func.count()).select_from(m)).one() for m in (Run, MetricSample))
    assert (first["runs"], first["months"], first["samples"]) == (runs, 6, samples) and runs > 100
    # a history that ends before this month gets no sweep either (its runs would be dated now)
    third = _demo_json(f"sqlite:///{tmp_path / 'd.db'}", "--end-month", MONTH)
    assert third["sweep"]["started"] is False and "before this month" in third["sweep"]["reason"]
    engine = make_engine(f"sqlite:///{tmp_path / 'd.db'}")
    with Session(engine) as s:
        assert not s.exec(select(Setting).where(Setting.key.startswith(PLAN_PREFIX))).all()
        assert all(rid.startswith("demo-") for rid in s.exec(select(Run.id)).all())
    engine.dispose()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_demo_starts_a_real_sweep_in_the_background(tmp_path, run_env):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    env = {**os.environ, **run_env}
    env.pop("TRAINLEDGER_DB_URL", None)
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "demo", "--db", url, "--json"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    sweep = d["sweep"]
    assert d["runs"] > 0 and sweep["started"] is True and sweep["strategies"] == list(DEMO_SWEEP)
    assert sweep["steps"] == DEMO_SWEEP_STEPS and sweep["sweep_id"].startswith("sweep-")
    driver = sweep["pid"]
    engine = make_engine(url)
    run_ids: list[str] = []
    try:
        with Session(engine) as s:  # the plan is in the ledger before `demo` returns
            assert sweep_progress(s, sweep["sweep_id"])["total"] == len(DEMO_SWEEP)

        def two_runs():
            with Session(engine) as s:
                rows = s.exec(select(Run).where(Run.sweep_id == sweep["sweep_id"]).order_by(Run.created_at)).all()
            run_ids[:] = [r.id for r in rows]
            return rows if len(rows) >= 2 else None

        rows = wait_for(two_runs, 180, "the sweep's second run", interval=0.5)
        first = rows[0]
        assert (first.strategy, first.status, first.steps, first.sweep_id) == ("dp", RunStatus.succeeded, 10, sweep["sweep_id"])
        assert rows[1].strategy == "zero2" and rows[1].name == f"{sweep['sweep_id']}-zero2"
        with Session(engine) as s:
            p = sweep_progress(s, sweep["sweep_id"])
            assert (p["measured"], p["total"], p["state"]) == (1, 5, "running")
    finally:
        # stop the sweep: SIGTERM to its driver cancels the running strategy and starts no other
        os.kill(driver, signal.SIGTERM)
        wait_for(lambda: not _alive(driver), 60, "the sweep's driver to exit")
        with Session(engine) as s:
            run_ids[:] = s.exec(select(Run.id).where(Run.sweep_id == sweep["sweep_id"])).all()
        for rid in run_ids:
            wait_for(lambda: not processes_of_run(rid), 30, f"no processes of run {rid}")
    with Session(engine) as s:
        p = sweep_progress(s, sweep["sweep_id"])
        statuses = [r.status for r in s.exec(select(Run).where(Run.sweep_id == sweep["sweep_id"]).order_by(Run.created_at)).all()]
    assert len(statuses) == 2 and statuses[0] == RunStatus.succeeded
    assert statuses[1] not in (RunStatus.queued, RunStatus.running)
    assert (p["state"], p["stopped_by"], [w["strategy"] for w in p["waiting"]]) == ("stopped", "SIGTERM", ["pp", "tp", "3d"])
    engine.dispose()
