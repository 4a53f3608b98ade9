"""Spend by project with idle as its own line (trainledger.money.account.spend), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from trainledger.money.account.monthly import monthly_report
from trainledger.money.account.spend import IDLE, NO_PROJECT, ROUNDING, spend_by_project
from trainledger.money.rates.costs import cents
from trainledger.reports.export import presented_report
from trainledger.store.models import RunStatus

from tests.helpers import add_fleet, add_run

D = Decimal
NOV = datetime(2026, 11, 1, tzinfo=timezone.utc)  # 30 days = 720 h
FIXED = D(120000) / 36 + D("6.67")  # rtx4090-own: fixed cost per node-month (as tests/test_accounting.py)
BUSY = FIXED / 720 + D("4.0") * D("0.5")  # per busy node-hour: fixed + load 4.0 kW × 0.5 per kWh
IDLE_RATE = FIXED / 720 + D("0.8") * D("0.5")  # per idle node-hour: fixed + idle 0.8 kW × 0.5
RENT = D(3600) / 730  # rtx4090-rent per node-hour, billed per started hour


def _ledger(session) -> None:
    """Two projects and a run without one on an owned fleet of 8 nodes (idle the rest), one project also renting."""
    add_fleet(session, 8)
    add_run(session, "a1", NOV + timedelta(days=2), 100, nodes=8, project="alpha")
    add_run(session, "b1", NOV + timedelta(days=9), 10, nodes=2, status=RunStatus.failed, project="beta")
    add_run(session, "b2", NOV + timedelta(days=12), 2.5, nodes=2, project="beta", offer_name="rtx4090-rent")
    orphan = add_run(session, "n1", NOV + timedelta(days=20), 5, nodes=1)
    orphan.project_id = None
    session.flush()


def test_project_lines_and_idle_add_up_to_the_spend(session):
    _ledger(session)
    rep = monthly_report(session, "2026-11")
    lines = spend_by_project(rep)
    # from the inputs: 825 busy node-hours of 5,760 on the fleet, 2 × 3 billed hours rented
    exact = {NO_PROJECT: 5 * BUSY, "alpha": 800 * BUSY, "beta": 20 * BUSY + 6 * RENT}
    idle = cents((5760 - 825) * IDLE_RATE)
    spend = cents(FIXED * 8 + (D(825) * 4 + D(4935) * D("0.8")) * D("0.5") + 6 * RENT)
    assert cents(rep.summary["actual_cost"]) == spend
    # each line half-up on its own (docs/MONEY.md, Rounding); what they leave against the spend, a rounding line
    rest = spend - idle - sum((cents(v) for v in exact.values()), D(0))
    assert lines == [{"line": k, "cost": cents(v)} for k, v in exact.items()] + [{"line": IDLE, "cost": idle}] + (
        [{"line": ROUNDING, "cost": rest}] if rest else [])
    assert sum(x["cost"] for x in lines) == spend  # to the cent, exactly
    # the export shows the same cents (one rounding rule, issue 36) and the same rounding line, as its
    # "(rounding)" line of the projects table
    p = presented_report(rep)
    assert [D(x["cost"]) for x in p["projects"]] == [cents(v) for v in exact.values()]
    assert D(p["summary"]["idle_cost"]) == idle
    assert D(p.get("rounding", {}).get("projects", {}).get("cost", "0")) == rest


def test_a_month_with_only_a_fleet_is_all_idle(session):
    add_fleet(session, 2)
    rep = monthly_report(session, "2026-11")
    lines = spend_by_project(rep)
    assert lines == [{"line": IDLE, "cost": cents(2 * 720 * IDLE_RATE)}]
    assert sum(x["cost"] for x in lines) == cents(rep.summary["actual_cost"])


def test_a_quarters_lines_are_its_months_lines_summed(session):
    """2026-Q3 (July and August 744 h, September 720 h): alpha runs 8 nodes × 100 h and beta 2 nodes × 10 h in each
    month on the 8-node owned fleet. The quarter's line of a project is its three monthly lines added up (each
    month half-up to the cent); what they leave against the quarter's spend (rounded once) is the rounding line."""
    from trainledger.money.account.spend import spend_by_project_months
    from trainledger.money.rates import periods as P
    from trainledger.reports.periods import period_report

    add_fleet(session, 8)
    hours = {"2026-07": 744, "2026-08": 744, "2026-09": 720}
    for month in hours:
        start = datetime.fromisoformat(f"{month}-03T00:00:00+00:00")
        add_run(session, f"a-{month}", start, 100, nodes=8, project="alpha")
        add_run(session, f"b-{month}", start + timedelta(days=10), 10, nodes=2, project="beta")
    session.commit()
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    reps = [monthly_report(session, m, now=now) for m in hours]
    lines = {x["line"]: x["cost"] for x in spend_by_project_months(reps)}
    busy = {m: FIXED / h + D("4.0") * D("0.5") for m, h in hours.items()}  # per busy node-hour that month
    for name, node_hours in (("alpha", 800), ("beta", 20)):
        monthly = [next(x["cost"] for x in spend_by_project(r) if x["line"] == name) for r in reps]
        assert monthly == [cents(node_hours * busy[m]) for m in hours]  # by hand from the seed prices
        assert lines[name] == sum(monthly)
    assert (lines["alpha"], lines["beta"]) == (D("15693.91"), D("392.36"))
    assert lines["idle"] == sum(cents(r.summary["idle_cost"]) for r in reps)
    quarter = period_report(session, P.quarter_period("2026-Q3"), now=now, compare=False)
    assert sum(lines.values(), D(0)) == cents(quarter["summary"]["actual_cost"]) == cents(
        sum((r.summary["actual_cost"] for r in reps), D(0)))
