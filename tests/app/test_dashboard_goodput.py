"""Issue #25 on the dashboard: the Goodput page's figures are the CLI's (``trainledger goodput ...``) to the cent."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal

from typer.testing import CliRunner

from tests.app.helpers import DEMO_NOW, MONTH, make_app, metrics, run_page

D = Decimal


def _cli(url: str, *args: str) -> dict:
    from trainledger.cli.commands import app

    r = CliRunner().invoke(app, [*args, "--db", url, "--json", "--now", DEMO_NOW.isoformat()])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _table(at, first_column: str):
    return next(d.value for d in at.dataframe if list(d.value.columns)[0] == first_column)


def test_idle_heat_map_shows_the_clis_figures(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    at = run_page(make_app(), "goodput")
    want = _cli(demo_url, "goodput", "idle", "--month", MONTH)
    m = metrics(at)
    assert m["Idle cost (CNY)"] == f"{D(want['idle_cost']):,.2f}" and D(want["idle_cost"]) > 0
    assert m["of which recovery (CNY)"] == f"{D(want['recovery_cost']):,.2f}"
    days = _table(at, "day")
    assert list(days["day"]) == [d["day"] for d in want["days"]]
    assert [D(x.replace(",", "")) for x in days["idle cost (CNY)"]] == [D(d["idle_cost"]) for d in want["days"]]
    assert sum(D(d["idle_cost"]) for d in want["days"]) == D(want["idle_cost"])
    assert list(days["idle node-hours"]) == [d["idle_node_hours"] for d in want["days"]]
    # the month's idle cost is the monthly report's, as the Overview shows it
    at.switch_page("pages/overview.py").run()
    assert metrics(at)["Idle cost (CNY)"] == m["Idle cost (CNY)"]


def test_idle_heat_map_in_another_currency(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    at = run_page(make_app(currency="USD"), "goodput")
    want = _cli(demo_url, "goodput", "idle", "--month", MONTH, "--currency", "USD")
    assert want["currency"] == "USD"
    assert metrics(at)["Idle cost (USD)"] == f"{D(want['idle_cost']):,.2f}"
    days = _table(at, "day")
    assert [D(x.replace(",", "")) for x in days["idle cost (USD)"]] == [D(d["idle_cost"]) for d in want["days"]]
    m = _account(demo_url, currency="USD").months[0]
    assert m.currency == "USD" and metrics(at)["Spend (USD)"] == _money(m.spend)
    assert metrics(at)["Goodput (USD)"] == _money(m.goodput) and metrics(at)["Badput (USD)"] == _money(m.badput)


def _account(url: str, month: str = MONTH, currency=None):
    from trainledger.money.goodput.account import goodput_account

    from tests.app.helpers import with_session

    return with_session(url, lambda s: goodput_account(s, month=month, currency=currency, now=DEMO_NOW))


def _money(d) -> str:
    from trainledger.money.rates.costs import cents

    return f"{cents(D(d)):,.2f}"


def test_overview_says_what_the_spend_bought(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    at = run_page(make_app(), "overview")
    m = _account(demo_url).months[0]
    line = next(x.value for x in at.markdown if x.value.startswith("**Goodput"))
    assert line.startswith(f"**Goodput:** of {_money(m.spend)} CNY, {_money(m.goodput)} bought kept training progress: "
                           f"**{D(m.goodput_pct).quantize(D('0.1'), rounding=ROUND_HALF_UP)}%**")
    assert m.goodput > 0 and metrics(at)["Spend (CNY)"] == _money(m.spend)


def test_goodput_page_shows_the_account(demo_url, app_env, monkeypatch):
    from trainledger.money.goodput.account import BADPUT, Category

    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    at = run_page(make_app(), "goodput")
    acct = _account(demo_url)
    m = acct.months[0]
    shown = metrics(at)
    assert [shown[k] for k in ("Spend (CNY)", "Goodput (CNY)", "Badput (CNY)", "Idle less recovery (CNY)")] == [
        _money(x) for x in (m.spend, m.goodput, m.badput, m.idle)]
    assert shown["Goodput %"] == f"{D(m.goodput_pct).quantize(D('0.1'), rounding=ROUND_HALF_UP)}%"
    projects = _table(at, "project")
    assert list(projects["project"]) == [p["project"] or "(no project)" for p in acct.projects]
    for cat in Category:
        assert list(projects[cat.value.replace("_", " ")]) == [_money(p["cost"][cat.value]) for p in acct.projects]
    runs = _table(at, "run")
    ranked = sorted(acct.runs, key=lambda r: (-r.badput_cost, r.run_id))[:50]
    assert list(runs["run"]) == [r.run_id for r in ranked]
    assert list(runs["badput (CNY)"]) == [_money(sum((r.cost[c] for c in BADPUT), D(0))) for r in ranked]
    assert list(runs["cost (CNY)"]) == [_money(r.total_cost) for r in ranked]


def test_run_detail_shows_its_phases_per_node(demo_url, app_env, monkeypatch):
    from sqlmodel import select
    from trainledger.money.goodput.account import phase_timeline
    from trainledger.store.models import RunPhase

    from tests.app.helpers import with_session

    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    run_id = with_session(demo_url, lambda s: s.exec(select(RunPhase.run_id).order_by(RunPhase.run_id)).first())
    want = with_session(demo_url, lambda s: phase_timeline(s, run_id))
    at = run_page(make_app(run=run_id), "runs")
    table = next(d.value for d in at.dataframe if list(d.value.columns)[:2] == ["node", "phase"])
    assert len(want) > 0 and len(table) == len(want)
    assert [(r["node"], r["phase"], r["count"]) for r in want] == list(zip(table["node"], table["phase"], table["count"]))
    assert [D(repr(r["seconds"])) for r in want] == [D(repr(x)) for x in table["seconds"]]


def test_goodput_page_on_day_3_is_to_date(tmp_path_factory, app_env, monkeypatch):
    """On 2026-12-03 the month is to date: every figure says so, and equals the account and idle map at that instant."""
    from tests.app.test_dashboard_month_to_date import DAY3, LABEL, build_day3
    from tests.app.test_dashboard_month_to_date import MONTH as DEC

    url = build_day3(f"sqlite:///{tmp_path_factory.mktemp('gp-day3') / 'ledger.db'}")
    monkeypatch.setenv("TRAINLEDGER_NOW", DAY3.isoformat())
    app_env(url)
    at = run_page(make_app(DEC), "goodput")
    from trainledger.money.goodput.account import goodput_account
    from trainledger.money.goodput.occupancy import month_occupancy

    from tests.app.helpers import with_session

    m = with_session(url, lambda s: goodput_account(s, month=DEC, now=DAY3)).months[0]
    occ = with_session(url, lambda s: month_occupancy(s, DEC, now=DAY3))
    shown = metrics(at)
    assert shown["Spend, to date (CNY)"] == _money(m.spend) and shown["Goodput, to date (CNY)"] == _money(m.goodput)
    assert shown["Idle cost, to date (CNY)"] == _money(occ.idle_cost)
    assert occ.period == LABEL and len(occ.hours) == 2 * 24 + 8  # 00:00 on the 1st to 07:07:30 on the 3rd
    assert any(LABEL in x.value for x in at.info)
    at.switch_page("pages/overview.py").run()
    line = next(x.value for x in at.markdown if x.value.startswith("**Goodput"))
    assert line.startswith(f"**Goodput ({LABEL}):** of {_money(m.spend)} CNY")


def test_idle_with_an_owner_lists_the_chains_recovery(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", DEMO_NOW.isoformat())
    app_env(demo_url)
    at = run_page(make_app("2026-08"), "goodput")
    want = _cli(demo_url, "goodput", "idle", "--month", "2026-08")
    assert want["recovery"] and D(want["recovery_cost"]) > 0
    table = _table(at, "chain")
    assert list(table["resumed run"]) == [r["run_id"] for r in want["recovery"]]
    assert list(table["recovery (CNY)"]) == [_money(r["recovery_cost"]) for r in want["recovery"]]
    assert metrics(at)["of which recovery (CNY)"] == _money(want["recovery_cost"])
    assert sum(D(h["recovery_cost"]) for h in want["hours"]) == D(want["recovery_cost"])
