"""Where idle sits (trainledger.money.goodput.occupancy): the fleets' occupancy hour by hour, on SQLite and PostgreSQL.

Every expected figure is computed here from the runs as written (not read back from the module): held
node-hours from the fleet's size, used from each run's start, end and nodes, idle cost at the offer's idle rate.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from trainledger.money.account.monthly import SLICE_QUANTUM, monthly_report
from trainledger.money.goodput.occupancy import by_day, heat_map, month_occupancy
from trainledger.money.rates.costs import ZERO, cents, round_preserving_sum
from trainledger.store.catalog import prices
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_fleet, add_run, offer

D = Decimal
UTC = timezone.utc
NOV = datetime(2026, 11, 1, tzinfo=UTC)  # 30 days = 720 h
FIXED = D(120000) / 36 + D("6.67")  # rtx4090-own: fixed cost per node-month
IDLE_RATE = FIXED / 720 + D("0.8") * D("0.5")  # per idle node-hour: fixed + idle 0.8 kW × 0.5 per kWh

#: (id, start, hours, nodes, offer): on the 8-node owned fleet unless rented; b1 and n1 start off the hour
RUNS = [("a1", NOV + timedelta(days=2), 100, 8, "rtx4090-own"),
        ("b1", NOV + timedelta(days=9, minutes=30), 10, 2, "rtx4090-own"),
        ("n1", NOV + timedelta(days=20, hours=3, minutes=15), 5.25, 3, None),  # no offer: draws on the fleet
        ("e1", NOV + timedelta(days=9), 30, 4, "rtx4090-rent")]  # rented: not the fleet's


def _ledger(session) -> None:
    add_fleet(session, 8)
    for rid, start, hours, nodes, off in RUNS:
        add_run(session, rid, start, hours, nodes=nodes, offer_name=off)


def _used(hour_start: datetime, end: datetime | None = None) -> D:
    """Fleet node-hours in use in the hour from ``hour_start``, from RUNS."""
    a, b = hour_start, min(hour_start + timedelta(hours=1), end or hour_start + timedelta(hours=1))
    total = ZERO
    for _, start, hours, nodes, off in RUNS:
        if off == "rtx4090-rent":
            continue
        s, e = max(a, start), min(b, start + timedelta(hours=hours))
        if e > s:
            total += nodes * D((e - s).total_seconds()) / 3600
    return total


def test_the_hours_of_a_month_add_up_to_its_idle_cost_to_the_cent(session):
    _ledger(session)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    rep = monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    assert len(occ.hours) == 720 and occ.period == ""
    starts = [NOV + timedelta(hours=k) for k in range(720)]
    assert [h.start for h in occ.hours] == starts
    assert all(h.held_node_hours == 8 for h in occ.hours)
    assert [h.used_node_hours for h in occ.hours] == [_used(t) for t in starts]
    exact = [((8 - _used(t)) * IDLE_RATE).quantize(SLICE_QUANTUM) for t in starts]
    assert [h.idle_cost for h in occ.hours] == round_preserving_sum(exact, total=cents(sum(exact, ZERO)))
    # the identity: Σ hours == the monthly report's idle cost, to the cent
    assert sum(h.idle_cost for h in occ.hours) == cents(rep.summary["idle_cost"]) == occ.idle_cost
    assert occ.idle_cost == cents((5760 - 800 - 20 - D("15.75")) * IDLE_RATE)
    # b1 starts at 00:30 on the 10th: half an hour of 2 nodes in its first hour
    h = occ.hours[9 * 24]
    assert (h.day, h.hour, h.used_node_hours, h.idle_node_hours) == ("2026-11-10", 0, D(1), D(7))
    t = occ.totals()
    assert t["used_node_hours"] == 800 + 20 + D("15.75") and t["held_node_hours"] == 5760
    assert occ.fleets == [{"offer": "rtx4090-own", "kind": "own", "fleets": ["fleet"], "held_node_hours": D(5760),
                           "used_node_hours": t["used_node_hours"], "idle_node_hours": t["idle_node_hours"],
                           "idle_cost": rep.node_types[0].idle_cost}]
    days = by_day(occ)
    assert len(days) == 30 and sum(d["idle_cost"] for d in days) == occ.idle_cost
    assert days[2]["idle_cost"] == 0 and days[2]["used_node_hours"] == 192  # a1 holds all 8 nodes all day


def test_a_month_to_date_stops_at_now_and_still_adds_up(session):
    _ledger(session)
    running = add_run(session, "live", NOV + timedelta(days=10, hours=6), 1, nodes=4)
    running.status, running.ended_at = RunStatus.running, None
    session.flush()
    now = NOV + timedelta(days=10, hours=8, minutes=30)
    occ = month_occupancy(session, "2026-11", now=now)
    rep = monthly_report(session, "2026-11", now=now)
    assert occ.period == "to date (11 of 30 days)"
    assert len(occ.hours) == 10 * 24 + 9 and occ.hours[-1].held_node_hours == 4  # 08:00-08:30 of 8 nodes
    assert occ.hours[-1].used_node_hours == 2 and occ.hours[-2].used_node_hours == 4  # the live run, to now
    assert sum(h.idle_cost for h in occ.hours) == cents(rep.summary["idle_cost"])
    assert sum(h.held_node_hours for h in occ.hours) == cents(rep.summary["capacity_node_hours"])


def test_a_price_change_mid_month_prices_each_hour_at_its_own_rate(session):
    """A new own price from the 15th: a charge period each side; hours before it at the old idle rate, after at the new."""
    _ledger(session)
    own = offer(session, "rtx4090-own")
    values = {**prices.price_values(own), "operations_per_node_month": D("726.67")}  # +720 per node-month
    prices.apply_version(session, prices.plan_version(session, own, values, datetime(2026, 11, 15, 12, 30, tzinfo=UTC)),
                         retroactive=True)
    session.flush()
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    rep = monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    assert sum(h.idle_cost for h in occ.hours) == cents(rep.summary["idle_cost"])
    new_rate = IDLE_RATE + D(720) / 720
    starts = [NOV + timedelta(hours=k) for k in range(720)]
    cut = datetime(2026, 11, 15, 12, 30, tzinfo=UTC)
    exact = []
    for t in starts:
        idle = 8 - _used(t)
        if t + timedelta(hours=1) <= cut:
            exact.append(idle * IDLE_RATE)
        elif t >= cut:
            exact.append(idle * new_rate)
        else:  # the hour the price changes in: half at each rate (no run in it)
            assert idle == 8
            exact.append(4 * IDLE_RATE + 4 * new_rate)
    assert [h.idle_cost for h in occ.hours] == round_preserving_sum(exact, total=cents(sum(exact, ZERO)))


def test_overuse_hours_have_no_idle_and_the_month_still_adds_up(session):
    """Runs using more nodes than the fleet in some hours: those hours idle 0, the rest share the month's idle."""
    add_fleet(session, 4)
    add_run(session, "big", NOV + timedelta(days=1), 2, nodes=6)  # 2 nodes over the fleet for 2 h
    add_run(session, "small", NOV + timedelta(days=3), 10, nodes=1)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    rep = monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    over = [h for h in occ.hours if h.used_node_hours > h.held_node_hours]
    assert len(over) == 2 and all(h.idle_node_hours == 0 and h.idle_cost == 0 for h in over)
    assert sum(h.idle_cost for h in occ.hours) == cents(rep.summary["idle_cost"])


def test_heat_map_cells_are_local_days_and_hours(session):
    from trainledger.store.settings import set_setting

    set_setting(session, "timezone", "Asia/Shanghai")  # UTC+8: the month starts at 16:00 UTC on Oct 31
    _ledger(session)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    assert occ.hours[0].start == datetime(2026, 10, 31, 16, tzinfo=UTC) and (occ.hours[0].day, occ.hours[0].hour) == (
        "2026-11-01", 0)
    cells = heat_map(occ)
    assert len(cells) == 720 and {c["hour"] for c in cells} == set(range(24))
    assert sum(c["idle_cost"] for c in cells) == occ.idle_cost == cents(
        monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC)).summary["idle_cost"])
    a1 = next(c for c in heat_map(occ, "used_node_hours") if (c["day"], c["hour"]) == ("2026-11-03", 8))
    assert a1["used_node_hours"] == 8  # a1 starts at 00:00 UTC on the 3rd = 08:00 in Shanghai


def test_cli_goodput_idle_json_matches_the_ledger(cli, session):
    _ledger(session)
    session.commit()
    r = cli("goodput", "idle", "--month", "2026-11", "--json", "--now", "2026-12-05T00:00:00Z")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    session.expire_all()
    rep = monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    session.commit()  # end the read, so the CLI can use the ledger again (SQLite)
    assert out["idle_cost"] == str(cents(rep.summary["idle_cost"]))
    assert sum(D(h["idle_cost"]) for h in out["hours"]) == D(out["idle_cost"])
    assert len(out["hours"]) == 720 and len(out["days"]) == 30 and len(out["hours_of_day"]) == 24
    text = cli("goodput", "idle", "--month", "2026-11", "--now", "2026-12-05T00:00:00Z")
    assert text.exit_code == 0, text.output
    assert re.search(rf"^idle_cost +{cents(rep.summary['idle_cost']):,.2f}$", text.stdout, re.M)


def test_cli_goodput_idle_bad_month_is_one_line_exit_2(cli):
    r = cli("goodput", "idle", "--month", "2026-13")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "--month" in r.output


def test_a_month_without_fleets_has_no_idle(session):
    add_run(session, "e1", NOV + timedelta(days=1), 2, nodes=2, offer_name="rtx4090-rent")
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    assert occ.idle_cost == 0 and all(h.held_node_hours == 0 and h.idle_cost == 0 for h in occ.hours)
    assert session.get(Run, "e1") is not None


def test_every_demo_month_adds_up_in_its_own_currency_and_in_usd(ledger_url):
    """The demo (six months, own fleet, elastic and reserved runs, failures) and its hand-built runs: for every month,
    Σ hours' idle cost == the monthly report's idle cost to the cent, in CNY and converted to USD."""
    from trainledger.money.goodput.account import Category, goodput_account

    from tests.app.helpers import DEMO_NOW, build_ledger, with_session

    build_ledger(ledger_url)

    def check(s):
        recovered = 0
        for month in ("2026-06", "2026-07", "2026-08", "2026-09", "2026-10", "2026-11"):
            for currency in (None, "USD"):
                occ = month_occupancy(s, month, now=DEMO_NOW, currency=currency)
                rep = monthly_report(s, month, now=DEMO_NOW, currency=currency, lines=False)
                assert rep.summary["idle_cost"] > 0
                assert sum(h.idle_cost for h in occ.hours) == cents(rep.summary["idle_cost"]) == occ.idle_cost
                assert occ.currency == rep.currency == (currency or "CNY")
                assert sum(h.held_node_hours for h in occ.hours) == sum(
                    n.capacity_node_hours for n in rep.node_types if n.idle_cost or n.capacity_node_hours)
                # the chains' recovery (the goodput account's) lies inside the month's idle, hour by hour
                acct = goodput_account(s, month=month, currency=currency, now=DEMO_NOW).months[0]
                assert sum(h.recovery_cost for h in occ.hours) == cents(acct.by_category[Category.recovery])
                assert all(h.recovery_cost <= h.idle_cost for h in occ.hours)
                assert cents(sum((r["recovery_cost"] for r in occ.recovery), D(0))) == cents(
                    acct.by_category[Category.recovery])
                assert {r["run_id"] for r in occ.recovery} == {
                    a.run_id for a in goodput_account(s, month=month, currency=currency, now=DEMO_NOW).runs
                    if a.cost[Category.recovery] > 0}
                # the account's idle = idle − recovery, exact; each side rounded to cents on its own: within a cent
                assert abs(cents(acct.idle) - (occ.idle_cost - sum(h.recovery_cost for h in occ.hours))) <= D("0.01")
                recovered += acct.by_category[Category.recovery] > 0
        assert recovered >= 2  # the demo's restart chains on the owned fleet

    with_session(ledger_url, check)


def test_recovery_spans_mark_their_hours_idle_as_the_chains(session):
    from trainledger.money.goodput.occupancy import RecoverySpan, attribute_recovery

    _ledger(session)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    gap = (NOV + timedelta(days=12, hours=1, minutes=30), NOV + timedelta(days=12, hours=4))  # 2.5 h, 2 nodes
    cost = D("2.5") * 2 * IDLE_RATE
    attribute_recovery(occ, [RecoverySpan("c1", "c1-2", 2, *gap, cost)])
    marked = [h for h in occ.hours if h.recovery_cost]
    assert [(h.day, h.hour) for h in marked] == [("2026-11-13", 1), ("2026-11-13", 2), ("2026-11-13", 3)]
    exact = [(cost / 5).quantize(SLICE_QUANTUM), (2 * cost / 5).quantize(SLICE_QUANTUM), (2 * cost / 5).quantize(SLICE_QUANTUM)]
    assert [h.recovery_cost for h in marked] == round_preserving_sum(exact, total=cents(cost))
    assert sum(h.recovery_cost for h in occ.hours) == cents(cost)
    assert all(h.recovery_cost <= h.idle_cost for h in marked)


def test_recovery_goes_to_the_hours_the_fleet_had_idle(session):
    """A gap during which a1 held the whole fleet for its first two hours: its cost lies in the two idle hours."""
    from trainledger.money.goodput.occupancy import RecoverySpan, attribute_recovery

    _ledger(session)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    a1_end = NOV + timedelta(days=2, hours=100)  # Nov 7, 04:00
    cost = D(4) * 2 * IDLE_RATE
    attribute_recovery(occ, [RecoverySpan("c1", "c1-2", 2, a1_end - timedelta(hours=2), a1_end + timedelta(hours=2),
                                          cost)])
    marked = [(h.day, h.hour, h.recovery_cost) for h in occ.hours if h.recovery_cost]
    half = (cost / 2).quantize(SLICE_QUANTUM)
    c4, c5 = round_preserving_sum([half, half], total=cents(cost))
    assert marked == [("2026-11-07", 4, c4), ("2026-11-07", 5, c5)]
    assert sum(r for *_, r in marked) == cents(cost)


def test_recovery_beyond_an_hours_idle_moves_to_the_spans_other_idle_hours(session):
    """8 nodes' gap over two hours, one with 8 idle nodes and one with 1 (a 7-node run in it): the hour with
    1 idle node takes at most its idle cost; what is left goes where idle is left, never beyond it."""
    from trainledger.money.goodput.occupancy import RecoverySpan, attribute_recovery

    add_fleet(session, 8)
    t = NOV + timedelta(days=4)
    add_run(session, "busy", t + timedelta(hours=1), 1, nodes=7)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    cost = D("9") * IDLE_RATE  # recovery priced for 9 node-hours (the account's rate × the gap's held nodes)
    attribute_recovery(occ, [RecoverySpan("c1", "c1-2", 8, t, t + timedelta(hours=2), cost)])
    h0, h1 = occ.hours[4 * 24], occ.hours[4 * 24 + 1]
    assert h1.idle_node_hours == 1 and h0.idle_node_hours == 8
    # weights: 8 and 1 node-hours: 8/9 and 1/9 of the cost = exactly each hour's idle cost
    assert (h0.recovery_cost, h1.recovery_cost) == (h0.idle_cost, h1.idle_cost)
    assert sum(h.recovery_cost for h in occ.hours) == cents(cost)

    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    attribute_recovery(occ, [RecoverySpan("c1", "c1-2", 8, t, t + timedelta(hours=2), D(12) * IDLE_RATE)])
    h0, h1, h2 = occ.hours[4 * 24: 4 * 24 + 3]
    assert (h0.recovery_cost, h1.recovery_cost) == (h0.idle_cost, h1.idle_cost)  # both hours full
    # the 3 node-hours beyond the gap's idle go to the month's other idle hours, by the idle each has
    assert sum(h.recovery_cost for h in occ.hours) == cents(D(12) * IDLE_RATE)
    assert all(h.recovery_cost <= h.idle_cost for h in occ.hours)


def test_a_dst_month_has_its_repeated_hour_twice_and_one_heat_map_cell(session):
    from trainledger.store.settings import set_setting

    set_setting(session, "timezone", "America/New_York")  # 2026-11-01: 02:00 EDT → 01:00 EST, a 721-hour month
    add_fleet(session, 8)
    occ = month_occupancy(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC))
    assert len(occ.hours) == 721 and [(h.day, h.hour) for h in occ.hours[:3]] == [
        ("2026-11-01", 0), ("2026-11-01", 1), ("2026-11-01", 1)]
    cells = heat_map(occ, "held_node_hours")
    assert len(cells) == 720 and cells[1] == {"day": "2026-11-01", "hour": 1, "held_node_hours": 16}
    assert occ.idle_cost == cents(monthly_report(session, "2026-11", now=datetime(2026, 12, 5, tzinfo=UTC)
                                                 ).summary["idle_cost"]) == sum(h.idle_cost for h in occ.hours)
