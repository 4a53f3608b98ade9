"""The dashboard's thin ledger helpers agree with the ledger functions the CLI uses."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from importlib import resources

import pytest
from sqlmodel import Session, select
from trainledger.app.queries import rentown
from trainledger.app.views import offer_form
from trainledger.errors import LedgerInputError
from trainledger.money.account.compare import compare_node_type, compare_offers
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.runs import registry
from trainledger.runs.registry import cost_under_offers, show_run
from trainledger.runs.sweep import list_sweeps
from trainledger.store.catalog.fleets import save_fleet
from trainledger.store.catalog.presets import apply_pricing, parse_pricing
from trainledger.store.db import make_engine
from trainledger.store.models import Fleet, GoodputMonth, NodeType, Offer

from tests.app.helpers import SWEEP


@pytest.fixture
def demo(demo_url):
    engine = make_engine(demo_url)
    with Session(engine) as s:
        yield s
    engine.dispose()


def _offer(session, name):
    return session.exec(select(Offer).where(Offer.name == name)).one()


@pytest.mark.parametrize("u", ["0", "0.25", "0.6", "0.7385", "1"])
def test_compare_offers_on_assumed_copies_equals_compare_node_type(session, u):
    """The page costs detached copies of the offers; unedited, they give the CLI's figures."""
    h100 = resources.files("trainledger.data").joinpath("examples/h100-offers.toml").read_text()
    apply_pricing(session, parse_pricing(h100), source="user", replace=True)
    for nt in ("rtx4090-8x", "h100-8x"):
        expected = compare_node_type(session, nt, Decimal(u))
        got = compare_offers(rentown.assumed_offer(_offer(session, expected["own_offer"])),
                             rentown.assumed_offer(_offer(session, expected["rent_offer"])), Decimal(u), nt)
        assert got == expected


def test_compare_offers_seed_figures(session):
    got = compare_offers(_offer(session, "rtx4090-own"), _offer(session, "rtx4090-rent"), Decimal(1), "rtx4090-8x")
    assert costs.cents(got["own_per_node_month"]) == Decimal("4800.00")
    assert costs.cents(got["rent_per_node_month"]) == Decimal("3600.00")
    assert got["cheaper"] == "rent" and got["renting_always_cheaper"] and round(got["savings_pct"], 2) == 25


def test_assumed_offer_changes_nothing_in_the_ledger(session):
    own = _offer(session, "rtx4090-own")
    edited = rentown.assumed_offer(own, capex_per_node=Decimal("60000"))
    # 60,000 ÷ 36 + 6.67 operations + 4.0 kW × 730 h × 0.5
    assert costs.cents(costs.own_cost_per_node_month(edited)) == Decimal("3133.34")
    assert own.capex_per_node == Decimal("120000") and not session.dirty


def test_cost_under_offers_equals_show_run(demo):
    for run_id in ("hand-elastic-1", "demo-0003", "sweep-a-3d"):
        d = show_run(demo, run_id)
        offers = demo.exec(select(Offer).join(NodeType).where(NodeType.name == d["node_type"])).all()
        assert cost_under_offers(offers, d["nodes"], d["duration_hours"]) == d["cost_under_offers"]
    # hand-elastic-1: 2 nodes × 10 h on rtx4090-rent = 2 × 10 × 3,600 ÷ 730
    under = {u["offer"]: u for u in show_run(demo, "hand-elastic-1")["cost_under_offers"]}
    assert costs.cents(under["rtx4090-rent"]["cost"]) == Decimal("98.63")
    assert under["rtx4090-rent"]["basis"] == "billed node-hours × hourly rate"


def test_sweeps(demo):
    assert [(s["sweep_id"], s["runs"], s["nodes"]) for s in list_sweeps(demo)] == [(SWEEP, 3, 2)]


def test_loss_curve_and_filters(demo):
    run_id = "demo-0001"
    curve = registry.loss_curve(demo, run_id)
    assert len(curve) == 40 and curve == sorted(curve, key=lambda p: p["ts"])
    assert registry.loss_curve(demo, "hand-elastic-1") == []
    f = registry.filter_values(demo)
    assert f["project"] == ["demo-finetune", "demo-pretrain", "hand"] and "3d" in f["strategy"] and "" not in f["strategy"]
    assert registry.run_month_span(demo) == ("2026-06", "2026-11")


def test_peak_sizing_equals_the_reports_own_cost_sized_to_the_peak(session):
    """Without an own fleet, monthly_report sizes owning to the month's peak: one month, same figure."""
    from datetime import datetime, timezone

    from tests.helpers import add_run

    t = datetime(2026, 3, 2, tzinfo=timezone.utc)
    add_run(session, "a", t, 30, nodes=4, offer_name="rtx4090-rent")
    add_run(session, "b", t.replace(day=3), 10, nodes=3, offer_name="rtx4090-rent")  # overlaps a: peak 7
    add_run(session, "c", t.replace(day=20), 5, nodes=2, offer_name="rtx4090-rent")
    rep = monthly_report(session, "2026-03")
    nt = rep.node_types[0]
    assert (nt.own_nodes_from, nt.peak_nodes) == ("peak", 7)
    sizing = rentown.peak_sizing([rep], "rtx4090-8x", _offer(session, "rtx4090-own"))
    assert sizing["peak_nodes"] == 7
    assert sizing["own_for_peak_cost"] == nt.own_cost and sizing["elastic_cost"] == nt.elastic_cost
    assert sizing["months"][0]["time_utilization"] == costs.time_utilization(nt.node_hours, 7 * Decimal(31 * 24))


def test_peak_sizing_uses_one_fleet_for_the_whole_window(demo):
    reports = [monthly_report(demo, m) for m in ("2026-07", "2026-08")]
    own = _offer(demo, "rtx4090-own")
    sizing = rentown.peak_sizing(reports, "rtx4090-8x", own)
    peak = max(r.node_types[0].peak_nodes for r in reports)
    assert sizing["peak_nodes"] == peak
    assert sizing["own_for_peak_cost"] == sum((r["own_for_peak_cost"] for r in sizing["months"]), Decimal(0))
    assert sizing["elastic_cost"] == sum((r.node_types[0].elastic_cost for r in reports), Decimal(0))
    assert sizing["elastic_offers"] == ["rtx4090-rent"]


def test_save_fleet_validates_and_edits(session):
    assert save_fleet(session, "rack", "rtx4090-own", 4, date(2026, 1, 1), None) == "added"
    assert save_fleet(session, "rack-a", "rtx4090-reserved", 6, date(2026, 1, 1), date(2026, 7, 1),
                              original="rack") == "updated"
    f = session.exec(select(Fleet)).one()
    assert (f.name, f.node_count, f.valid_to) == ("rack-a", 6, date(2026, 7, 1))
    for args, needle in [
        (("x", "rtx4090-rent", 1, date(2026, 1, 1), None), "is rent_elastic; a fleet is held under an own or rent_reserved offer"),
        (("x", "nope", 1, date(2026, 1, 1), None), "no offer named 'nope'"),
        (("x", "rtx4090-own", 0, date(2026, 1, 1), None), "must be a positive whole number"),
        (("x", "rtx4090-own", 1, date(2026, 2, 1), date(2026, 1, 1)), "must be after valid from"),
        (("rack-a", "rtx4090-own", 1, date(2026, 1, 1), None), "already exists"),
        (("", "rtx4090-own", 1, date(2026, 1, 1), None), "fleet name"),
    ]:
        with pytest.raises(LedgerInputError, match=needle):
            save_fleet(session, *args)
    assert len(session.exec(select(Fleet)).all()) == 1


def test_offer_form_goes_through_pricing_validation_exactly(session):
    text = offer_form.offer_toml({"name": 'say "hi" =1', "node_type": "rtx4090-8x", "kind": "own", "currency": "CNY",
                               "capex_per_node": "100000.123456", "depreciation_months": "48", "power_kw_load": "3.5",
                               "electricity_price_per_kwh": "0.61", "operations_per_node_month": "10", "notes": "",
                               "residual_value": " "})
    spec = parse_pricing(text, where="offer form")
    apply_pricing(session, spec, source="user", replace=True)
    o = _offer(session, 'say "hi" =1')
    assert o.capex_per_node == Decimal("100000.123456") and o.depreciation_months == 48 and o.residual_value == 0
    assert offer_form.offer_form_defaults(o, "rtx4090-8x")["capex_per_node"] == "100000.123456"
    with pytest.raises(LedgerInputError, match="depreciation_months: Input should be a valid integer"):
        parse_pricing(offer_form.offer_toml({"name": "y", "node_type": "rtx4090-8x", "kind": "own",
                                          "depreciation_months": "3.5"}), where="offer form")



def test_the_forecast_of_an_ended_month_is_the_ledger_s(demo_url, app_env, monkeypatch):
    """``data.forecast`` of a month that has ended passes the page's report of it: the same forecast, every figure and
    day, as ``trainledger forecast`` computes by itself; a month to date computes its own."""
    from trainledger.app.queries import data
    from trainledger.money.outlook.forecast import forecast

    from tests.app.helpers import MONTH

    app_env(demo_url)
    for now, month in (("2027-01-10T00:00:00+00:00", MONTH), ("2026-11-20T08:00:00+00:00", MONTH)):
        monkeypatch.setenv("TRAINLEDGER_NOW", now)
        data.clear_caches()
        got = data.forecast(demo_url, month)
        engine = make_engine(demo_url)
        with Session(engine) as s:
            want = forecast(s, month, now=data.now())
        engine.dispose()
        assert repr(got) == repr(want)
        assert data.report(demo_url, month).is_partial is (now < "2026-12")


def test_the_overview_s_stored_outlook_is_the_ledger_s(demo_url, app_env, monkeypatch):
    """The Overview's forecast and anomalies of a month that has ended, read under the fingerprints its goodput totals
    were read with (``data.known_fingerprints``), computed, then stored and read back: every figure and day as
    ``trainledger forecast`` and ``report anomalies`` compute them; a month to date asks for no month's totals."""
    import json

    from trainledger.app.queries import data
    from trainledger.app.views.anomalies_view import month_anomalies
    from trainledger.money.goodput.month_store import fingerprint
    from trainledger.money.outlook.anomalies import anomalies
    from trainledger.money.outlook.forecast import forecast
    from trainledger.store.settings import presentation_currency

    from tests.app.helpers import MONTH

    app_env(demo_url)
    monkeypatch.setenv("TRAINLEDGER_NOW", "2027-01-10T00:00:00+00:00")
    before = data.add_months(MONTH, -1)
    for _ in range(3):  # the totals and the outlook computed and stored, then read back twice
        data.clear_caches()
        fps = data.known_fingerprints(demo_url, (before, MONTH))
        assert set(fps) == {before, MONTH}
        got_fc, got_an = data.forecast(demo_url, MONTH), month_anomalies(demo_url, MONTH)
        engine = make_engine(demo_url)
        with Session(engine) as s, monkeypatch.context() as m:
            m.setattr("trainledger.money.outlook.outlook_store.read_or_compute", lambda *a, **k: a[8]())
            want_fc, want_an = forecast(s, MONTH, now=data.now()), anomalies(s, MONTH, now=data.now())
            key = presentation_currency(s, None) or ""
            assert fps == {m: fingerprint(s, m, key, data.now()) for m in (before, MONTH)}
            row = s.get(GoodputMonth, (MONTH, key))
            assert set(json.loads(row.payload)["outlook"]) == {"forecast_days", "anomaly_days"}
        engine.dispose()
        assert repr(got_fc) == repr(want_fc) and repr(got_an) == repr(want_an)
    monkeypatch.setenv("TRAINLEDGER_NOW", "2026-11-20T08:00:00+00:00")
    data.clear_caches()
    asked = []
    monkeypatch.setattr(data, "month_totals", lambda *a, **k: asked.append(a))
    assert data.known_fingerprints(demo_url, (before, MONTH)) == {} and asked == []


def test_month_run_lines_are_the_report_s_lines_with_their_account(demo_url, app_env, monkeypatch):
    """``data.month_run_lines`` (from the month's presented lines, stored once the month is over) is each presented
    run line with its exact cost and lost work in cents, its cost per 1M tokens, its badput and its largest reason,
    as computed from the month's report with lines and its goodput account: computed, stored, and to date."""
    import json

    from trainledger.app.queries import data
    from trainledger.money.goodput.waste import run_reason, run_waste
    from trainledger.money.rates.costs import cents, cost_per_million_tokens
    from trainledger.reports.export import presented_report
    from trainledger.reports.present import present

    from tests.app.helpers import MONTH

    def want(month):
        rep, acct = data.report(demo_url, month, True), data.month_goodput(demo_url, month)
        accounts, exact = {a.run_id: a for a in acct.runs}, {r.run_id: r for r in rep.runs}
        out = []
        for r in presented_report(rep, acct)["runs"]:
            a, e = accounts.get(r["run_id"]), exact[r["run_id"]]
            per = cost_per_million_tokens(e.cost, e.tokens) if e.tokens else None
            out.append({**r, "cost": str(cents(e.cost)), "lost_work_cost": str(cents(e.lost_work_cost)),
                        "cost_per_1m_tokens": None if per is None else present("cost_per_1m_tokens", per),
                        "waste_cost": str(cents(run_waste(a))) if a else None,
                        "waste_reason": run_reason(a) if a else None})
        return out

    app_env(demo_url)
    stored = []
    for now in ("2027-01-10T00:00:00+00:00", "2027-01-10T00:00:00+00:00", "2026-11-20T08:00:00+00:00"):
        monkeypatch.setenv("TRAINLEDGER_NOW", now)
        data.clear_caches()  # the first: computed and stored (unless an earlier test did); the second: read back
        stored.append(data.month_lines(demo_url, MONTH).stored)
        got = data.month_run_lines(demo_url, MONTH)
        assert got and json.dumps(got) == json.dumps(want(MONTH)), now
        assert any(r["cost_per_1m_tokens"] for r in got) and any(r["waste_reason"] for r in got)
    assert stored[1:] == [True, False]  # read back once over; November to date: never stored
