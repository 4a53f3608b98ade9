"""Lost work since the last checkpoint, costed at the run's own rates (SQLite and PostgreSQL).

A run that ends failed, crashed or cancelled loses the work since its last
checkpoint (since its start when it never checkpointed). These tests build runs
through the real models and read the figures back through the monthly report,
the export, ``runs show`` and the rollup check.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import text
from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.money.goodput.account import on_grid
from trainledger.money.goodput.goodput_ledger import report_account
from trainledger.money.goodput.waste import waste_by_reason, waste_cost
from trainledger.money.rates import costs
from trainledger.reports.export import presented_report, render
from trainledger.runs.registry import reap_stale, show_run
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_fleet, add_run, offer, rounding

D = Decimal
UTC = timezone.utc
NOV = datetime(2026, 11, 1, tzinfo=UTC)


def _checkpoint(session: Session, run_id: str, at: datetime, step: int = 100) -> Run:
    run = session.get(Run, run_id)
    run.last_checkpoint_at, run.last_checkpoint_step, run.last_checkpoint_path = at, step, f"/ckpt/{step}"
    session.flush()
    return run


def test_a_crash_after_a_checkpoint_loses_exactly_the_gpu_hours_since_it(session):
    start = NOV + timedelta(days=3, hours=10)
    add_run(session, "el", start, 3.75, nodes=2, offer_name="rtx4090-rent", status=RunStatus.crashed)
    run = _checkpoint(session, "el", start + timedelta(hours=2.5))
    session.commit()
    assert (run.lost_from, run.lost_until) == (start + timedelta(hours=2.5), start + timedelta(hours=3.75))
    rep = monthly_report(session, "2026-11")
    line = next(r for r in rep.runs if r.run_id == "el")
    # 1.25 h after the checkpoint × 2 nodes × 8 GPUs
    assert line.lost_gpu_hours == D(20)
    # elastic: the run's bill (4 billed hours × 2 nodes at 3600/730 per node-hour) shared by time: 1.25 of 3.75 h
    bill = costs.elastic_run_cost(offer(session, "rtx4090-rent"), 2, D("3.75"))
    assert costs.cents(line.cost) == costs.cents(bill) == D("39.45")
    assert costs.cents(line.lost_work_cost) == costs.cents(bill / 3) == D("13.15")
    s = rep.summary
    assert s["lost_work_cost"] == line.lost_work_cost and "waste_cost" not in s  # waste: the goodput account's
    assert s["failed_run_cost"] == line.cost  # the whole run still counts as a run that did not succeed
    m = report_account(session, rep).months[0]
    assert waste_by_reason(m)["lost_work"] == on_grid(line.lost_work_cost)


def test_on_an_owned_fleet_lost_work_is_allocated_by_node_hours(session):
    add_fleet(session, 8)
    start = NOV + timedelta(days=5)
    add_run(session, "own", start, 10, nodes=4, status=RunStatus.cancelled)
    _checkpoint(session, "own", start + timedelta(hours=7.5))
    add_run(session, "ok", start, 20, nodes=2)
    session.commit()
    rep = monthly_report(session, "2026-11")
    runs = {r.run_id: r for r in rep.runs}
    # 2.5 h × 4 nodes = 10 of the run's 40 node-hours: a quarter of its allocation
    assert runs["own"].lost_gpu_hours == D(80)
    assert runs["own"].lost_work_cost == runs["own"].cost / 4
    assert runs["ok"].lost_work_cost == 0 and runs["ok"].lost_gpu_hours == 0
    assert waste_by_reason(report_account(session, rep).months[0])["lost_work"] == on_grid(runs["own"].lost_work_cost)


def test_waste_adds_up_by_reason_to_the_cent(session):
    add_fleet(session, 8)
    t = NOV + timedelta(days=1, hours=3)
    add_run(session, "s1", t, 30, nodes=8, tokens=10**9)
    add_run(session, "f1", t + timedelta(days=2), 7.3, nodes=2, status=RunStatus.failed)
    add_run(session, "c1", t + timedelta(days=3), 11.1, nodes=3, status=RunStatus.crashed)
    add_run(session, "x1", t + timedelta(days=4), 2.2, nodes=1, status=RunStatus.cancelled, project="p2")
    add_run(session, "f2", t + timedelta(days=5), 9.9, nodes=4, status=RunStatus.failed, project="p2")
    _checkpoint(session, "f2", t + timedelta(days=5, hours=6.1))
    add_run(session, "e1", t + timedelta(days=6), 5.55, nodes=2, status=RunStatus.failed, offer_name="rtx4090-rent")
    session.commit()
    rep = monthly_report(session, "2026-11")
    s, runs = rep.summary, {r.run_id: r for r in rep.runs}
    account = report_account(session, rep)
    m = account.months[0]
    by = waste_by_reason(m)
    assert list(by) == ["startup", "data_wait", "checkpoint_save", "checkpoint_restore", "eval", "lost_work",
                        "recovery", "straggler_wait", "unattributed", "idle"]
    # never checkpointed: the whole run; checkpointed: the part after it; idle: the fleet's idle cost
    assert by["lost_work"] == sum((on_grid(runs[k].cost) for k in ("f1", "c1", "x1", "e1")), D(0)) + on_grid(
        runs["f2"].lost_work_cost)
    assert runs["f2"].lost_work_cost < runs["f2"].cost
    assert costs.cents(by["idle"]) == costs.cents(s["idle_cost"])
    # no phases recorded: everything else the runs bought is unattributed, none of it goodput
    assert by["unattributed"] + by["lost_work"] == sum((on_grid(r.cost) for r in rep.runs), D(0))
    assert sum(by.values(), D(0)) == waste_cost(m) == m.spend  # no goodput: the whole spend is waste
    assert s["failed_run_cost"] == sum((runs[k].cost for k in ("f1", "c1", "x1", "f2", "e1")), D(0))
    # presented (cents): the reasons (+ rounding) add up to the presented waste exactly
    lines = presented_report(rep, account)
    p = lines["summary"]
    assert sum(D(v) for v in p["waste_by_reason"].values()) == D(p["waste_cost"]) == costs.cents(waste_cost(m))
    assert p["waste_by_reason"]["idle"] == p["idle_cost"]
    # and the per-run lost work adds up to the summary's; the projects' waste is their runs' badput
    assert sum(D(r["lost_work_cost"]) for r in lines["runs"]) + rounding(lines, "runs", "lost_work_cost") == D(
        p["lost_work_cost"])
    assert costs.cents(sum((pr["lost_work_cost"] for pr in rep.projects), D(0))) == costs.cents(s["lost_work_cost"])
    assert {pr["project"]: pr["waste_cost"] for pr in lines["projects"]} == {
        pr["project"]: str(costs.cents(pr["cost"])) for pr in rep.projects}


def test_lost_work_is_split_at_the_month_boundary(session):
    start = datetime(2026, 10, 31, 20, tzinfo=UTC)
    add_run(session, "x", start, 10, nodes=1, offer_name="rtx4090-rent", status=RunStatus.failed)
    _checkpoint(session, "x", start + timedelta(hours=3))  # 23:00 Oct 31; the run ends 06:00 Nov 1
    session.commit()
    oct_, nov = (monthly_report(session, m) for m in ("2026-10", "2026-11"))
    lo, ln = (next(r for r in rep.runs if r.run_id == "x") for rep in (oct_, nov))
    assert (lo.lost_gpu_hours, ln.lost_gpu_hours) == (D(8), D(48))  # 1 h and 6 h × 8 GPUs
    whole = costs.elastic_run_cost(offer(session, "rtx4090-rent"), 1, D(10))
    assert costs.cents(lo.lost_work_cost + ln.lost_work_cost) == costs.cents(whole * 7 / 10)
    assert costs.cents(lo.cost + ln.cost) == costs.cents(whole)
    shown = show_run(session, "x")
    assert shown["lost_gpu_hours"] == D(56) and shown["lost_hours"] == D(7)
    assert shown["lost_work_cost"] == lo.lost_work_cost + ln.lost_work_cost and shown["lost_since"] == "checkpoint"


def test_a_ledger_without_checkpoints_loses_whole_runs(session):
    add_fleet(session, 8)
    add_run(session, "f", NOV + timedelta(days=2), 5, nodes=2, status=RunStatus.failed)
    add_run(session, "c", NOV + timedelta(days=3), 4, nodes=1, status=RunStatus.cancelled)
    add_run(session, "s", NOV + timedelta(days=4), 6, nodes=8)
    session.commit()
    rep = monthly_report(session, "2026-11")
    s = rep.summary
    assert s["lost_work_cost"] == s["failed_run_cost"]
    assert waste_by_reason(report_account(session, rep).months[0])["lost_work"] == sum(
        (on_grid(r.cost) for r in rep.runs if r.run_id in ("f", "c")), D(0))
    assert sum((r.lost_gpu_hours for r in rep.runs), D(0)) == D(2 * 5 * 8 + 4 * 8)


def test_reaping_a_run_that_checkpointed_loses_only_the_work_after_it(session):
    start = NOV + timedelta(days=9)
    run = add_run(session, "live", start, 1, nodes=1, status=RunStatus.running)
    run.ended_at, run.heartbeat_at = None, start + timedelta(hours=5)
    _checkpoint(session, "live", start + timedelta(hours=4))
    session.commit()
    assert run.lost_from is None  # still running: nothing lost yet
    assert reap_stale(session, now=start + timedelta(hours=6)) == 1
    session.commit()
    session.expire_all()
    run = session.get(Run, "live")
    assert run.status == RunStatus.crashed and run.ended_at == start + timedelta(hours=5)
    assert (run.lost_from, run.lost_until) == (start + timedelta(hours=4), start + timedelta(hours=5))
    line = next(r for r in monthly_report(session, "2026-11").runs if r.run_id == "live")
    assert line.lost_gpu_hours == D(8)
    assert rollup.check(session) == []


def test_a_resume_chain_reads_as_one_job(session):
    start = NOV + timedelta(days=12)
    add_run(session, "a", start, 6, nodes=2, offer_name="rtx4090-rent", status=RunStatus.crashed)
    _checkpoint(session, "a", start + timedelta(hours=5), step=500)
    b = add_run(session, "b", start + timedelta(hours=7), 3, nodes=2, offer_name="rtx4090-rent", status=RunStatus.cancelled)
    b.resume_of = "a"
    c = add_run(session, "c", start + timedelta(hours=11), 4, nodes=2, offer_name="rtx4090-rent")
    c.resume_of = "b"
    session.commit()
    shown = {r: show_run(session, r) for r in ("a", "b", "c")}
    chain = shown["b"]["resume_chain"]
    assert [r["id"] for r in chain["runs"]] == ["a", "b", "c"] == [r["id"] for r in shown["a"]["resume_chain"]["runs"]]
    assert chain["cost"] == sum((shown[r]["cost_actual"] for r in "abc"), D(0))
    assert chain["lost_work_cost"] == shown["a"]["lost_work_cost"] + shown["b"]["lost_work_cost"]
    assert shown["a"]["lost_gpu_hours"] == D(16) and shown["b"]["lost_gpu_hours"] == D(48)  # 1 h and 3 h × 16 GPUs
    assert shown["c"]["lost_work_cost"] is None and chain["node_hours"] == D(2 * (6 + 3 + 4))


def test_cli_show_export_and_rollup_check_carry_lost_work(cli, ledger_url):
    from trainledger.store.db import make_engine

    engine = make_engine(ledger_url)
    with Session(engine) as s:
        add_run(s, "k", NOV + timedelta(days=4), 8, nodes=2, offer_name="rtx4090-rent", status=RunStatus.failed)
        _checkpoint(s, "k", NOV + timedelta(days=4, hours=6))
        s.commit()
    shown = json.loads(cli("runs", "show", "k", "--json").output)
    assert (shown["lost_gpu_hours"], shown["lost_since"], shown["last_checkpoint_step"]) == (32.0, "checkpoint", 100)
    assert shown["lost_work_cost"] == str(costs.cents(costs.elastic_run_cost(offer_row(engine), 2, D(8)) / 4))
    out = cli("report", "monthly", "--month", "2026-11", "--format", "json")
    rep = json.loads(out.output)
    assert rep["summary"]["lost_work_cost"] == shown["lost_work_cost"] == rep["runs"][0]["lost_work_cost"]
    assert rep["summary"]["waste_by_reason"]["lost_work"] == shown["lost_work_cost"]
    csv = cli("report", "monthly", "--month", "2026-11", "--format", "csv").output
    assert f"waste_by_reason.lost_work,{shown['lost_work_cost']}" in csv.splitlines()
    assert cli("db", "rollup").exit_code == 0
    # a raw SQL write behind the ledger's back: the check finds it, a rebuild mends it
    with engine.begin() as c:
        c.execute(text("UPDATE run SET last_checkpoint_at = NULL WHERE id = 'k'"))
    bad = cli("db", "rollup")
    assert bad.exit_code == 1 and "run k: stored lost interval" in bad.output
    assert cli("db", "rollup", "--rebuild").exit_code == 0 and cli("db", "rollup").exit_code == 0
    again = json.loads(cli("runs", "show", "k", "--json").output)
    assert again["lost_gpu_hours"] == 128.0 and again["lost_since"] == "start"
    engine.dispose()


def offer_row(engine):
    with Session(engine) as s:
        return offer(s, "rtx4090-rent")


@pytest.mark.new_ledger  # migrates from an empty database
def test_upgrading_a_ledger_to_0004_backfills_lost_work(ledger_url):
    """A ledger at revision 0003 with a rollup built: upgrading sets the lost interval of its failed runs and
    the lost facts of their rollup rows, so the report and the check agree with a fresh ledger."""
    from alembic import command
    from trainledger.store.db import HEAD_REVISION, alembic_config, make_engine, upgrade_schema

    engine = make_engine(ledger_url)
    with Session(engine) as s:
        add_fleet(s, 8)
        add_run(s, "f", NOV + timedelta(days=2), 5, nodes=2, status=RunStatus.failed)
        add_run(s, "e", NOV + timedelta(days=3), 2.5, nodes=1, status=RunStatus.crashed, offer_name="rtx4090-rent")
        add_run(s, "s", NOV + timedelta(days=4), 6, nodes=8)
        s.commit()
        before = monthly_report(s, "2026-11").summary
    command.downgrade(alembic_config(engine), "0003")
    assert upgrade_schema(engine) == HEAD_REVISION  # through 0004 and every later revision
    with Session(engine) as s:
        assert rollup.check(s) == []
        f = s.get(Run, "f")
        assert (f.lost_from, f.lost_until) == (f.started_at, f.ended_at)
        after = monthly_report(s, "2026-11").summary
    assert after["lost_work_cost"] == before["failed_run_cost"] == after["failed_run_cost"]
    assert (after["lost_work_cost"], after["actual_cost"]) == (before["failed_run_cost"], before["actual_cost"])
    engine.dispose()


def test_render_csv_flattens_the_breakdown(session):
    add_run(session, "f", NOV + timedelta(days=2), 5, nodes=2, status=RunStatus.failed, offer_name="rtx4090-rent")
    session.commit()
    rep = monthly_report(session, "2026-11")
    rows = render(presented_report(rep, report_account(session, rep)), "csv").decode().split("\n\n")[0].splitlines()
    keys = [r.split(",")[0] for r in rows]
    assert keys[keys.index("lost_work_cost") + 1:keys.index("waste_cost") + 11] == ["waste_cost"] + [
        f"waste_by_reason.{k}" for k in ("startup", "data_wait", "checkpoint_save", "checkpoint_restore", "eval",
                                         "lost_work", "recovery", "straggler_wait", "unattributed", "idle")]
