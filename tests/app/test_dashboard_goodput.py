"""Issue #25 on the dashboard: the Goodput page's figures are the CLI's (``trainledger goodput ...``) to the cent."""

from __future__ import annotations

import json
from decimal import Decimal

from typer.testing import CliRunner

from tests.app.helpers import DEMO_NOW, MONTH, make_app, metrics, run_page

D = Decimal


def _cli(url: str, *args: str) -> dict:
    from ledger.cli.main import app

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
    assert [D(x.replace(",", "")) for x in days["idle (CNY)"]] == [D(d["idle_cost"]) for d in want["days"]]
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
    assert [D(x.replace(",", "")) for x in days["idle (USD)"]] == [D(d["idle_cost"]) for d in want["days"]]
