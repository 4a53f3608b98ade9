"""The goodput account: its time split, its money split, and its identities (SQLite and PostgreSQL).

Per run the categories add up to its cost exactly; per month goodput + badput + idle = spend exactly, and idle
is the monthly report's idle less what recovery took from it (to the cent). Bad phase data is clipped and
reported, never raised.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.demo import generate_demo
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.account import (
    BADPUT,
    CATEGORIES,
    Category,
    PhaseTotal,
    account_seconds,
    goodput_account,
    on_grid,
    split_cost,
)
from trainledger.money.rates import costs
from trainledger.money.rates.months import months_between
from trainledger.sources.record import phases as ph
from trainledger.sources.record.journal import Journal, sync_journal
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import Run, RunPhase, RunStatus

from tests.helpers import add_fleet, add_run, month_account_identities

D = Decimal
UTC = timezone.utc
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
DEMO_MONTHS = months_between("2026-07", "2026-12")


def _rows(**phases) -> dict[str, PhaseTotal]:
    return {k: PhaseTotal(*v) if isinstance(v, tuple) else PhaseTotal(v, 1) for k, v in phases.items()}


def test_a_run_s_time_splits_by_its_phases_and_the_rest_is_unattributed():
    rows = _rows(startup=100.0, step=700.0, data=50.0, eval=30.0, checkpoint_save=20.0)
    out = account_seconds(D(1000), D(0), 2, {"n0": rows}, False)
    # one node reported for a 2-node run: its figures stand for both
    assert out == {Category.productive: D(1400), Category.startup: D(200), Category.data_wait: D(100),
                   Category.checkpoint_save: D(40), Category.checkpoint_restore: D(0), Category.eval: D(60),
                   Category.lost_work: D(0), Category.recovery: D(0), Category.straggler_wait: D(0),
                   Category.unattributed: D(200)}


def test_an_interrupted_run_keeps_its_checkpoint_s_figures_and_loses_the_rest():
    rows = {"startup": PhaseTotal(100.0, 1, 100.0, 1), "step": PhaseTotal(800.0, 80, 500.0, 50),
            "checkpoint_save": PhaseTotal(20.0, 2, 10.0, 1)}
    out = account_seconds(D(1000), D(350), 1, {"n0": rows}, True, recovery_s=D(90))
    assert (out[Category.productive], out[Category.startup], out[Category.checkpoint_save]) == (D(500), D(100), D(10))
    assert (out[Category.lost_work], out[Category.recovery], out[Category.unattributed]) == (D(350), D(90), D(40))
    assert sum(out.values()) == D(1000 + 90)


def test_the_first_step_s_excess_over_the_typical_step_is_start_up():
    # 11 steps, 700 s: the first 100 s, the other 10 take 600 s (60 s each): 40 s of warm-up
    rows = _rows(startup=100.0, step=(700.0, 11), first_step=100.0)
    out = account_seconds(D(1000), D(0), 2, {"n0": rows}, False)
    assert (out[Category.productive], out[Category.startup], out[Category.unattributed]) == (D(1320), D(280), D(400))
    # interrupted: the 5 steps kept at the checkpoint took 430 s; the other 4: 330 / 4 = 82.5 s; 17.5 s of warm-up
    rows = {"startup": PhaseTotal(100.0, 1, 100.0, 1), "step": PhaseTotal(800.0, 11, 430.0, 5),
            "first_step": PhaseTotal(100.0, 1, 100.0, 1)}
    out = account_seconds(D(1000), D(400), 1, {"n0": rows}, True)
    assert (out[Category.productive], out[Category.startup], out[Category.unattributed]) == (
        D("412.5"), D("117.5"), D(70))
    # a first step no slower than the others, a single step, no first_step row: no warm-up
    for rows in (_rows(step=(700.0, 11), first_step=50.0), _rows(step=(100.0, 1), first_step=100.0),
                 _rows(step=(700.0, 11))):
        assert account_seconds(D(1000), D(0), 1, {"n0": rows}, False)[Category.startup] == 0
    # a third of 10 s: on the µs grid (floored), nothing lost: 7 s − (5 s / 3) = 5.333333 s
    out = account_seconds(D(20), D(0), 1, {"n0": _rows(step=(12.0, 4), first_step=7.0)}, False)
    assert (out[Category.startup], out[Category.productive]) == (D("5.333333"), D("6.666667"))
    assert sum(out.values()) == D(20)


def test_the_writer_records_the_first_step_only_when_it_began_with_a_step_start():
    agg = ph.PhaseAggregator(1000.0)
    agg.feed([(ph.STEP_BEGIN, None, 1010.0), (ph.BEGIN, "data", 1010.0), (ph.END, "data", 1012.0),
              (ph.STEP_END, None, 1030.0), (ph.STEP_BEGIN, None, 1031.0), (ph.STEP_END, None, 1035.0)])
    rows = agg.rows()
    # the first step: 1010 → 1031 less its 2 s data wait; a user's phase of that name stays a custom one
    assert rows["first_step"][:2] == [19.0, 1] and rows["step"][:2] == [23.0, 2]
    assert ph.phase_name("first_step") == "custom:first_step"
    logs = ph.PhaseAggregator(1000.0)  # run.log only: the first log ends start-up, which holds the first step
    logs.feed([(ph.STEP_END, None, 1010.0), (ph.STEP_END, None, 1012.0), (ph.STEP_END, None, 1014.0)])
    assert "first_step" not in logs.rows() and logs.rows()["startup"][:2] == [10.0, 1]


def test_a_run_seen_only_by_the_wrapper_is_all_unattributed_never_guessed():
    out = account_seconds(D(3600), D(0), 4, {}, False)
    assert out[Category.unattributed] == D(4 * 3600) and sum(out.values()) == D(4 * 3600)


def test_phases_longer_than_the_run_are_clipped_and_reported():
    quality: list[str] = []
    rows = _rows(startup=-5.0, step=900.0, eval=400.0, checkpoint_restore=200.0)
    out = account_seconds(D(1000), D(0), 1, {"n0": rows}, False, quality=quality)
    # restore, then eval take their time first; steps get what is left
    assert (out[Category.checkpoint_restore], out[Category.eval], out[Category.productive]) == (D(200), D(400), D(400))
    assert out[Category.startup] == 0 and out[Category.unattributed] == 0 and sum(out.values()) == D(1000)
    assert any("negative" in q for q in quality) and any("productive 900.000000s exceeds" in q for q in quality)
    quality = []
    out = account_seconds(D(100), D(250), 1, {}, True, quality=quality)
    assert out[Category.lost_work] == D(100) and sum(out.values()) == D(100) and "clipped" in quality[0]


def test_a_cost_splits_exactly_with_the_remainder_to_the_largest_category():
    cost = D(100) / D(3)  # 33.33…: 28 digits; the account's money is on the 1e-12 grid
    weights = {Category.productive: D(7), Category.eval: D(1), Category.startup: D(1)}
    out = split_cost(cost, D("1.11"), weights)
    assert sum(out.values()) == on_grid(cost) == D("33.333333333333") and out[Category.lost_work] == D("1.11")
    assert out[Category.eval] == out[Category.startup] == D("3.580370370370")  # (33.333333333333 − 1.11) / 9, floored
    assert out[Category.productive] == on_grid(cost) - D("1.11") - 2 * D("3.580370370370")
    assert split_cost(D(10), D(0), {})[Category.unattributed] == D(10)


def test_the_aggregator_takes_nested_phases_out_of_steps_and_clips_bad_events():
    agg = ph.PhaseAggregator(1000.0)
    agg.feed([(ph.BEGIN, "checkpoint_restore", 1002.0), (ph.END, "checkpoint_restore", 1005.0),
              (ph.STEP_BEGIN, None, 1010.0), (ph.BEGIN, "data", 1010.0), (ph.END, "data", 1011.0),
              (ph.RANKS, (4.0, 2.0, 2.0, 4.0), 1015.0), (ph.STEP_END, None, 1015.0),
              (ph.BEGIN, "eval", 1015.0), (ph.END, "eval", 1018.0),
              (ph.BEGIN, "checkpoint_save", 1018.0), (ph.END, "checkpoint_save", 1020.0), (ph.CHECKPOINT, None, 1020.0),
              (ph.STEP_BEGIN, None, 1020.0), (ph.END, "nothing", 1021.0), (ph.STEP_END, None, 1019.0),
              (ph.BEGIN, "eval", 1022.0), (ph.BEGIN, "eval", 1023.0), (ph.END, "eval", 1024.0)])
    rows = agg.rows()
    assert rows["startup"][:2] == [7.0, 1]  # 10 s to the first step, less the 3 s restore
    assert rows["straggler_wait"][:2] == [1.0, 1]  # (0 + 2 + 2 + 0) / 4
    # step 1: 1010 → 1020 less data 1, straggler 1, eval 3, save 2 = 3; step 2 ended "at 1019" (held at 1021)
    assert rows["step"][2:4] == [3.0, 1]
    assert rows["eval"][:2] == [5.0, 3]  # 3 + the overlapping one closed at 1023 (1) + 1
    assert {k: v[1] for k, v in rows.items() if k.startswith("quality:")} == {
        "quality:end_without_begin": 1, "quality:out_of_order": 1, "quality:overlapping": 1}


def test_a_journal_replayed_twice_sets_the_same_phase_rows(ledger_url, tmp_path):
    engine = make_engine(ledger_url)
    journal = Journal(tmp_path, "ph-1")
    now = datetime.now(UTC).isoformat()
    journal.append([{"type": "run", "fields": {"status": "running", "node_type": "rtx4090-8x", "nodes": 1,
                                               "gpus_per_node": 8, "started_at": now}},
                    {"type": "phases", "node": "h0", "rows": {"eval": [3.5, 2, 1.5, 1, now, now], "step": [9.0, 9]}},
                    {"type": "phases", "node": "h0", "rows": {"eval": [4.5, 3, 1.5, 1, now, now]}}])
    assert sync_journal(engine, journal) == 3
    journal.mark_applied(0)
    assert sync_journal(engine, journal) == 3
    with Session(engine) as s:
        rows = {r.phase: (r.seconds, r.count, r.ckpt_seconds) for r in s.exec(select(RunPhase)).all()}
    assert rows == {"eval": (4.5, 3, 1.5), "step": (9.0, 9, None)}
    engine.dispose()


@pytest.fixture
def demo_session(ledger_url):
    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        generate_demo(s, end_month=DEMO_MONTHS[-1], now=NOW)
    with Session(engine) as s:
        yield s
    engine.dispose()


@pytest.mark.slow
def test_the_identities_hold_for_every_run_and_month_of_the_demo(demo_session):
    s = demo_session
    recovered = 0
    for month in DEMO_MONTHS:
        rep, report, m, lines = month_account_identities(s, month, NOW)
        recovery = sum((r.recovery_cost for r in rep.runs), D(0))
        assert {r.run_id for r in rep.runs} >= set(lines)
        for r in rep.runs:
            if r.run_id not in lines:  # a restart gap in a month before the resumed run's first: recovery alone
                assert r.resume_of and r.run_cost == 0 and sum(r.seconds.values()) == r.seconds[Category.recovery] > 0
                assert sum(r.cost.values()) == r.total_cost == r.recovery_cost
                continue
            assert sum(r.cost.values()) == r.total_cost == on_grid(lines[r.run_id].cost) + r.recovery_cost
            assert r.cost[Category.lost_work] == on_grid(lines[r.run_id].lost_work_cost)
            assert r.recovery_cost == 0 or r.resume_of is not None
            assert all(v >= 0 for v in r.cost.values()) and not r.data_quality
        recovered += recovery > 0
        assert m.by_category[Category.productive] > 0 and all(m.by_category[c] >= 0 for c in BADPUT)
    assert recovered >= 1  # the demo's restart chains hold capacity between attempts


def test_the_cli_shows_each_category_s_node_seconds_beside_its_money(cli, ledger_url):
    """A 100 s run on an owned node: its categories cost cents or less, and their time still shows."""
    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        add_fleet(s, 8)
        add_run(s, "tiny", datetime(2026, 12, 9, tzinfo=UTC), 100 / 3600, nodes=1, project="tiny")
        for phase, secs, count in (("startup", 6.0, 1), ("step", 80.0, 4), ("first_step", 26.0, 1), ("data", 1.5, 1),
                                   ("eval", 2.0, 1)):
            s.add(RunPhase(run_id="tiny", node="h0", phase=phase, seconds=secs, count=count))
    engine.dispose()
    args = ("goodput", "--month", "2026-12", "--project", "tiny", "--now", "2026-12-10T12:00:00Z")
    text = cli(*args)
    assert text.exit_code == 0, text.output
    # an owned node-hour in December: (120,000 / 36 + 6.67) / 744 fixed + 4.0 kW × 0.5 energy; the run: 100 s
    cost = D(100) / 3600 * ((D(120_000) / 36 + D("6.67")) / 744 + 2)
    # steps: the first 26 s, the other three 54 s (18 s each): 8 s of warm-up; 100 − 6 − 8 − 72 − 1.5 − 2 = 10.5
    seconds = {"productive": D(72), "startup": D(14), "data_wait": D("1.5"), "eval": D(2), "unattributed": D("10.5")}
    shown = {line.split()[0]: line.split()[1:] for line in text.output.splitlines()
             if line.split() and line.split()[0] in {c.value for c in CATEGORIES} and len(line.split()) == 4}
    assert shown == {c.value: [str(costs.cents(cost * seconds.get(c.value, 0) / 100)),
                               {"productive": "0.02", "startup": "0.004", "eval": "0.001", "unattributed": "0.003"}.get(
                                   c.value, "0"), f"{seconds.get(c.value, D(0)):.1f}"] for c in CATEGORIES}
    assert shown["eval"] == ["0.00", "0.001", "2.0"] and shown["data_wait"] == ["0.00", "0", "1.5"]
    run_line = next(line for line in text.output.splitlines() if line.startswith("tiny "))
    assert run_line.split()[-2:] == ["28.0", "startup"]  # badput node-seconds, the largest badput category
    data = json.loads(cli(*args, "--json").output)
    assert data["totals"]["node_seconds"] == {c.value: format(seconds.get(c.value, D(0)).normalize(), "f")
                                              for c in CATEGORIES}
    assert data["projects"][0]["node_seconds"] == data["totals"]["node_seconds"]


def test_the_cli_prints_the_api_s_figures_and_refuses_bad_input(cli, ledger_url):
    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        add_fleet(s, 8)
        add_run(s, "a", datetime(2026, 11, 3, tzinfo=UTC), 10, nodes=2, status=RunStatus.failed)
        s.get(Run, "a").last_checkpoint_at = datetime(2026, 11, 3, 6, tzinfo=UTC)
        add_run(s, "b", datetime(2026, 11, 3, 12, tzinfo=UTC), 5, nodes=2)
        s.get(Run, "b").resume_of = "a"
    res = cli("goodput", "--month", "2026-11", "--json", "--now", "2026-12-02T00:00:00Z")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    with Session(engine) as s:
        rep = goodput_account(s, month="2026-11", now=datetime(2026, 12, 2, tzinfo=UTC))
    engine.dispose()
    (m,) = data["months"]
    assert m["spend"] == str(costs.cents(rep.months[0].spend)) and m["runs"] == 2
    runs = {r["run_id"]: r for r in data["runs"]}
    # a: 4 h after its checkpoint lost of 10 h; b: resumed 2 h after a ended, on an owned fleet: recovery
    assert runs["a"]["node_hours"]["lost_work"] == 8.0 and runs["a"]["node_hours"]["unattributed"] == 12.0
    assert runs["b"]["node_hours"]["recovery"] == 4.0 and D(runs["b"]["recovery_cost"]) > 0
    assert set(runs["a"]["cost"]) == {c.value for c in CATEGORIES}
    text = cli("goodput", "show", "--month", "2026-11", "--now", "2026-12-02T00:00:00Z")
    assert text.exit_code == 0 and "bought kept training progress" in text.output and "recovery" in text.output
    for args, field in ((["--month", "2026-13"], "--month"), (["--run", "../x"], "--run"),
                        (["--project", "nope"], "--project")):
        bad = cli("goodput", *args)
        assert bad.exit_code == 2 and field in bad.output and "Traceback" not in bad.output


def test_the_monthly_export_and_focus_carry_goodput_and_badput_per_run(session):
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.reports.export import presented_report
    from trainledger.reports.focus import focus_export
    from trainledger.reports.goodput_columns import run_goodput

    add_fleet(session, 8)
    add_run(session, "a", datetime(2026, 11, 3, tzinfo=UTC), 10, nodes=2, status=RunStatus.failed)
    session.get(Run, "a").last_checkpoint_at = datetime(2026, 11, 3, 6, tzinfo=UTC)
    add_run(session, "b", datetime(2026, 11, 30, 20, tzinfo=UTC), 8, nodes=2, offer_name="rtx4090-rent")
    session.add(RunPhase(run_id="b", node="h", phase="step", seconds=6 * 3600.0, count=10))
    session.commit()
    now = datetime(2026, 12, 3, tzinfo=UTC)
    rep = monthly_report(session, "2026-11", now=now)
    split = run_goodput(session, rep, now)
    p = presented_report(rep, report_account(session, rep, now))
    runs = {r["run_id"]: r for r in p["runs"]}
    assert runs["a"]["goodput_cost"] == "0.00" and runs["a"]["badput_cost"] == runs["a"]["cost"]
    b = runs["b"]
    assert D(b["goodput_cost"]) + D(b["badput_cost"]) == D(b["cost"]) and D(b["goodput_cost"]) > 0
    # b runs 4 h in November, its steps 6 of its 8 h: its November cost splits 3:1
    assert abs(split["b"][0] - rep.runs[1].cost * 3 / 4) < D("1e-9")
    rows = [r for r in focus_export(session, "2026-11", now=now).rows if r["x_RunId"]]
    assert all(r["x_GoodputCost"] + r["x_BadputCost"] == r["EffectiveCost"] for r in rows)
    assert costs.cents(sum((r["x_GoodputCost"] for r in rows), D(0))) == costs.cents(split["a"][0] + split["b"][0])


def test_a_running_run_is_to_date_and_a_run_across_months_has_an_account_in_each(session):
    add_fleet(session, 8)
    start = datetime(2026, 11, 30, 18, tzinfo=UTC)
    run = add_run(session, "live", start, 1, nodes=4)
    run.status, run.ended_at = RunStatus.running, None
    session.add(RunPhase(run_id="live", node="h", phase="step", seconds=20 * 3600.0, count=100))
    session.add(RunPhase(run_id="live", node="h", phase="quality:out_of_order", seconds=0.0, count=3))
    session.commit()
    now = datetime(2026, 12, 1, 6, tzinfo=UTC)  # 12 h into the run: 6 in November, 6 in December
    rep = goodput_account(session, run_id="live", now=now)
    assert [m.month for m in rep.months] == ["2026-11", "2026-12"] and [r.month for r in rep.runs] == ["2026-11",
                                                                                                      "2026-12"]
    nov, dec = rep.runs
    assert nov.end == dec.start == datetime(2026, 12, 1, tzinfo=UTC) and dec.end == now
    for r in rep.runs:
        # 20 h of steps measured in a 12 h run: clipped to the run, reported, never a failed identity
        assert r.seconds[Category.productive] == D(6 * 3600 * 4) and r.seconds[Category.unattributed] == 0
        assert sum(r.cost.values()) == r.total_cost == r.run_cost
        assert any("3 × out_of_order" in q for q in r.data_quality)
        assert any("exceeds the run's remaining" in q for q in r.data_quality)
    for m in rep.months:
        assert m.goodput + m.badput + m.idle == m.spend and abs(m.identity_residual) < D("1e-9")
    assert rep.months[1].period.startswith("to date")


def test_recovery_is_priced_at_the_fleet_s_own_idle_rate_not_the_node_type_s(session):
    """November 2026 (720 h, UTC). Fleet own2: 2 nodes of rtx4090-8x under rtx4090-own, 1,440 node-hours held.
    ``a`` (2 nodes, 10 h, failed) and ``b`` (2 nodes, 5 h, resumes ``a`` 5 h after it ended) draw 30 node-hours
    from it; ``e`` runs 1 node × 100 h on elastic rent of the same node type. The fleet's idle: 1,410 node-hours
    at its idle rate, fixed ÷ 720 + 0.8 kW × 0.5 CNY/kWh (data/pricing.toml). b's recovery, 5 h × 2 nodes, is
    priced at that rate; the node type's rate of before, idle ÷ (1,440 − 30 − 100) node-hours, counted e's
    elastic node-hours as if they had been drawn from the fleet."""
    add_fleet(session, 2, name="own2")
    add_run(session, "a", datetime(2026, 11, 3, tzinfo=UTC), 10, nodes=2, status=RunStatus.failed)
    session.get(Run, "a").last_checkpoint_at = datetime(2026, 11, 3, 6, tzinfo=UTC)
    add_run(session, "b", datetime(2026, 11, 3, 15, tzinfo=UTC), 5, nodes=2)
    session.get(Run, "b").resume_of = "a"
    add_run(session, "e", datetime(2026, 11, 10, tzinfo=UTC), 100, nodes=1, offer_name="rtx4090-rent")
    session.commit()
    rep = goodput_account(session, month="2026-11", now=datetime(2026, 12, 2, tzinfo=UTC))
    idle_rate = (D(120_000) / 36 + D("6.67")) / 720 + D("0.8") * D("0.5")  # 5.0388935185185185… CNY per node-hour
    b = next(r for r in rep.runs if r.run_id == "b")
    assert b.seconds[Category.recovery] == 5 * 3600 * 2
    assert b.recovery_cost == b.cost[Category.recovery] == on_grid(10 * idle_rate) == D("50.388935185185")
    node_type_rate = 1410 * idle_rate / (1440 - 30 - 100)  # 5.42…: what it was priced at before
    assert on_grid(10 * node_type_rate) == D("54.235418787108") != b.recovery_cost
    (m,) = rep.months
    assert m.goodput + m.badput + m.idle == m.spend
    # idle left = the fleet's idle less the recovery: (1,410 − 10) node-hours at the fleet's rate, to the cent
    assert costs.cents(m.idle) == costs.cents(1400 * idle_rate) == D("7054.45")
