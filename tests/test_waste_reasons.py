"""One account of spend (issue 36): waste = the goodput account's badput + idle, defined once
(``trainledger.money.goodput.waste``) and the same on every surface: the monthly export's JSON, the period report
and the exporter's scrape (SQLite and PostgreSQL); the Overview: tests/app/test_dashboard_waste.py.

The month (tests.helpers.waste_month): November 2026 to date at 30 Nov 12:00 UTC (708 of 720 h), fleet 2 ×
rtx4090-own (1,416 node-hours held to date); ``fail`` 1 node × 10 h, failed, never checkpointed (all lost work);
``slow`` 2 nodes × 20 h whose node h0 recorded 14 h of steps, 2 h of straggler wait and 1 h of data wait (3 h
unattributed); ``imp`` 1 node × 5 h, no phases (all unattributed). Owning a node: 120,000 ÷ 36 + 6.67 a month
fixed, 4.0 kW busy and 0.8 kW idle at 0.5 per kWh.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.goodput_ledger import report_account
from trainledger.money.goodput.waste import REASONS, check_reason, run_reason, run_waste, waste_by_reason, waste_cost
from trainledger.money.rates.costs import ZERO, cents

from tests.helpers import WASTE_NOW, waste_month

D = Decimal
FIXED = D(120_000) / 36 + D("6.67")
BUSY = FIXED / 720 + D("4.0") * D("0.5")  # an owned node-hour in a run
IDLE = FIXED / 720 + D("0.8") * D("0.5")  # an idle one
IDLE_NODE_HOURS = 2 * 708 - (10 + 40 + 5)
#: badput: fail's 10 node-hours lost; slow's 40: 4 straggler, 2 data, 6 unattributed (14 h of its 20 × 2 nodes
#: productive); imp's 5 unattributed
WASTE = 27 * BUSY + IDLE_NODE_HOURS * IDLE
assert cents(WASTE) == D("7037.18")  # 179.25 badput + 6,857.93 idle
REASON_CENTS = {"lost_work": D("66.39"), "straggler_wait": D("26.56"), "data_wait": D("13.28"),
                "unattributed": D("73.03"), "idle": D("6857.93")}  # 10, 4, 2, 11 × BUSY; 1,361 × IDLE


def test_waste_is_badput_plus_idle_by_category_and_the_reasons_add_up(session):
    waste_month(session)
    rep = monthly_report(session, "2026-11", now=WASTE_NOW)
    account = report_account(session, rep, WASTE_NOW)
    m = account.months[0]
    assert cents(m.idle) == cents(IDLE_NODE_HOURS * IDLE) and cents(m.badput) == cents(27 * BUSY) == D("179.25")
    assert waste_cost(m) == m.badput + m.idle == m.spend - m.goodput
    assert cents(waste_cost(m)) == cents(WASTE)
    by = waste_by_reason(m)
    assert tuple(by) == REASONS == ("startup", "data_wait", "checkpoint_save", "checkpoint_restore", "eval",
                                    "lost_work", "recovery", "straggler_wait", "unattributed", "idle")
    assert sum(by.values(), ZERO) == waste_cost(m)  # exactly
    assert {k: cents(v) for k, v in by.items() if v} == REASON_CENTS
    assert "waste_cost" not in rep.summary and "waste_by_reason" not in rep.summary  # the monthly report: lost work only
    assert cents(rep.summary["lost_work_cost"]) == cents(10 * BUSY)
    # the ranking: slow (12 × BUSY of badput) before fail (10) before imp (5); each run's largest category its reason
    runs = sorted(account.runs, key=lambda a: (-run_waste(a), a.run_id))
    assert [(a.run_id, cents(run_waste(a)), run_reason(a)) for a in runs] == [
        ("slow", D("79.67"), "unattributed"), ("fail", D("66.39"), "lost_work"), ("imp", D("33.19"), "unattributed")]


def test_the_monthly_json_the_period_and_the_scrape_show_the_same_waste(session, cli):
    waste_month(session)
    session.commit()
    now = WASTE_NOW.isoformat()
    p = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json", "--now", now).output)
    s = p["summary"]
    assert s["waste_cost"] == "7037.18" and s["lost_work_cost"] == "66.39"
    # each reason half-up on its own: 7,037.19 against 7,037.18, so a rounding reason of −0.01
    assert {k: D(v) for k, v in s["waste_by_reason"].items() if D(v)} == {**REASON_CENTS, "rounding": D("-0.01")}
    assert sum((D(v) for v in s["waste_by_reason"].values()), ZERO) == D(s["waste_cost"])
    assert list(s)[list(s).index("lost_work_cost") + 1:][:2] == ["waste_cost", "waste_by_reason"]
    runs = {r["run_id"]: r for r in p["runs"]}
    assert {k: runs[k]["badput_cost"] for k in runs} == {"slow": "79.67", "fail": "66.39", "imp": "33.19"}
    assert [x["waste_cost"] for x in p["projects"]] == [str(cents(27 * BUSY))]  # p1: all three runs' badput
    period = json.loads(cli("report", "period", "--from", "2026-11", "--to", "2026-11", "--json", "--now", now).output)
    assert period["summary"]["waste_cost"] == "7037.18" and period["by_month"][0]["waste_cost"] == "7037.18"
    from prometheus_client import CollectorRegistry, generate_latest
    from trainledger.reports.metrics import month_metrics

    class Once:
        def collect(self):
            return month_metrics(session, WASTE_NOW)

    registry = CollectorRegistry()
    registry.register(Once())
    scraped = {s.labels["reason"]: D(repr(s.value)) for fam in text_string_to_metric_families(
        generate_latest(registry).decode()) for s in fam.samples if s.name == "trainledger_waste_cost_to_date"}
    assert set(scraped) == set(REASONS)
    assert {k: cents(v) for k, v in scraped.items() if v} == REASON_CENTS
    assert cents(sum(scraped.values(), ZERO)) == D("7037.18")


def test_a_waste_link_maps_old_reasons_to_lost_work_and_refuses_idle_in_one_line():
    for old in ("failed", "crashed", "cancelled", "lost_since_checkpoint"):
        assert check_reason(old) == "lost_work"
    assert check_reason("straggler_wait") == "straggler_wait"
    for bad in ("idle", "nope", "productive"):
        with pytest.raises(LedgerInputError, match=r"^\?waste=: expected a badput category \(startup, .*\) or failed, "
                                                   rf"crashed, cancelled, lost_since_checkpoint \(= lost_work\), got "
                                                   rf"'{bad}'; idle is the fleet's, no run's$"):
            check_reason(bad)
