"""Time utilization has one definition in the monthly report, the daily report and a period (SQLite and PostgreSQL).

Time utilization = node-hours that runs drew from fixed-cost fleets (own, reserved; each at most its capacity)
÷ those fleets' capacity node-hours. Node-hours on elastic rent are reported apart (``elastic_node_hours``) and
are in no utilization. Before, the monthly report divided all node-hours (elastic ones included) by the
fleets' capacity while the daily report counted fleet node-hours only, so a period mixed both.

November 2026 (720 h, UTC). Fleet own2: 2 nodes of rtx4090-8x under rtx4090-own, 2 × 720 = 1,440 node-hours held
(48 a day). Drawn from it: f1 2 nodes × 6 h on Nov 10 (12 node-hours), f2 1 node × 30 h from Nov 20 00:00
(24 node-hours on Nov 20, 6 on Nov 21): 42 in the month. On elastic rent (rtx4090-rent, the same node type):
e1 4 nodes × 5 h on Nov 10 (20 node-hours), e2 3 nodes × 10 h on Nov 15 (30): 50 in the month.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import periods as P
from trainledger.reports.daily import daily_report
from trainledger.reports.periods import period_report

from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc
NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


def _november(session) -> None:
    add_fleet(session, 2, name="own2")
    add_run(session, "f1", datetime(2026, 11, 10, tzinfo=UTC), 6, nodes=2)
    add_run(session, "f2", datetime(2026, 11, 20, tzinfo=UTC), 30, nodes=1)
    add_run(session, "e1", datetime(2026, 11, 10, 2, tzinfo=UTC), 5, nodes=4, offer_name="rtx4090-rent")
    add_run(session, "e2", datetime(2026, 11, 15, tzinfo=UTC), 10, nodes=3, offer_name="rtx4090-rent")
    session.commit()


def test_month_day_and_period_count_fleet_node_hours_over_fleet_capacity_with_elastic_apart(session):
    _november(session)
    rep = monthly_report(session, "2026-11", now=NOW)
    s = rep.summary
    assert s["node_hours"] == 42 + 50
    assert (s["fleet_used_node_hours"], s["capacity_node_hours"], s["elastic_node_hours"]) == (42, 1440, 50)
    assert s["time_utilization"] == D(42) / D(1440) == D(7) / D(240)  # not (42 + 50) ÷ 1,440
    (nt,) = rep.node_types
    assert (nt.fleet_used_node_hours, nt.capacity_node_hours, nt.elastic_node_hours) == (42, 1440, 50)
    assert nt.time_utilization == D(7) / D(240)
    (fleet,) = nt.fleets
    assert (fleet.offer, fleet.kind, fleet.capacity_node_hours, fleet.used_node_hours, fleet.idle_node_hours) == (
        "rtx4090-own", "own", 1440, 42, 1398)

    # one day: Nov 10 held 48 node-hours, f1 drew 12; e1's 20 elastic node-hours are apart
    day = daily_report(session, date(2026, 11, 10), now=NOW)["summary"]
    assert (day["fleet_used_node_hours"], day["available_node_hours"], day["elastic_node_hours"]) == (12, 48, 20)
    assert day["node_hours"] == 12 + 20 and day["time_utilization"] == D(12) / D(48) == D(1) / D(4)

    # the days of the month add up to the month, figure by figure
    days = [daily_report(session, date(2026, 11, 1) + timedelta(days=i), now=NOW)["summary"] for i in range(30)]
    assert sum(d["fleet_used_node_hours"] for d in days) == 42 and sum(d["available_node_hours"] for d in days) == 1440
    assert sum(d["elastic_node_hours"] for d in days) == 50

    # a period sums fleet node-hours and capacity of its pieces: the day alone, the month, the month + Dec 1
    one_day = period_report(session, P.parse_range("2026-11-10", "2026-11-10"), now=NOW, compare=False)["summary"]
    assert one_day["time_utilization"] == D(1) / D(4) and one_day["elastic_node_hours"] == 20
    month = period_report(session, P.month_period("2026-11"), now=NOW, compare=False)["summary"]
    assert (month["fleet_used_node_hours"], month["capacity_node_hours"], month["elastic_node_hours"]) == (42, 1440, 50)
    assert month["time_utilization"] == D(7) / D(240)
    longer = period_report(session, P.parse_range("2026-11-01", "2026-12-01"), now=NOW, compare=False)["summary"]
    # Dec 1 (a left-over day): the fleet held 48 node-hours, no run drew on it
    assert (longer["fleet_used_node_hours"], longer["capacity_node_hours"], longer["elastic_node_hours"]) == (
        42, 1488, 50)
    assert longer["time_utilization"] == D(42) / D(1488) == D(7) / D(248)
