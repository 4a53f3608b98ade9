"""One figure, the same cents on every surface (issue 36, "Done when"; docs/METRICS.md).

A November with shares (a run on half a node), a mid-month price change (the elastic offer, retroactive), two
exchange rates (CNY→USD 0.14, then 0.15 from the 16th), an owned fleet that charges its idle back
(proportional), a failed run resumed on the fleet (recovery), and elastic runs next to the fleet. Presented in
USD, every figure is read from each surface and compared: the monthly export in JSON, CSV and XLSX, the FOCUS
export's sums, the chargeback statements, `trainledger goodput` and the exporter's scrape. Hand-computed
Decimals for each definition live in the definition tests (test_time_utilization, test_waste_reasons,
test_rounding, test_chargeback, ...); this test pins that the surfaces agree with one another to the cent.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from openpyxl import load_workbook
from trainledger.money.metrics.registry import lookup
from trainledger.money.metrics.rounding import cents
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_fleet, add_run, rounding

D = Decimal
UTC = timezone.utc
#: usage figures (hours, ratios) that every surface prints beside the money
USAGE = ("gpu_hours", "node_hours", "time_utilization", "fleet_used_node_hours", "capacity_node_hours",
         "elastic_node_hours")
NOV = datetime(2026, 11, 1, tzinfo=UTC)
CLOSED = ("--now", "2026-12-05T00:00:00Z")


def _ledger(session, cli) -> None:
    add_fleet(session, nodes=2)
    add_run(session, "own-a", NOV + timedelta(days=2), 10, nodes=2, project="a")
    half = add_run(session, "own-half", NOV + timedelta(days=4), 20, nodes=1, project="b")
    half.share = "1/2"  # 4 of the node's 8 GPUs
    add_run(session, "fail1", NOV + timedelta(days=6), 5, nodes=1, project="a", status=RunStatus.failed)
    res = add_run(session, "res1", NOV + timedelta(days=6, hours=7), 6, nodes=1, project="a")
    res.resume_of = "fail1"  # 2 h of recovery on the fleet between them
    add_run(session, "rent1", NOV + timedelta(days=9), 10, nodes=1, offer_name="rtx4090-rent", project="b")
    add_run(session, "rent2", NOV + timedelta(days=19), 10, nodes=1, offer_name="rtx4090-rent", project="b")
    session.commit()
    for args in (("pricing", "set", "rtx4090-rent", "price_per_node_month=4380", "--from", "2026-11-15",
                  "--retroactive", "--yes"),
                 ("fx", "set", "CNY", "USD", "0.14", "--from", "2026-11-01"),
                 ("fx", "set", "CNY", "USD", "0.15", "--from", "2026-11-16"),
                 ("settings", "currency", "USD"),
                 ("fleet", "set", "fleet", "--idle-share", "proportional")):
        r = cli(*args)
        assert r.exit_code == 0, (args, r.output)


def _csv(v) -> str:
    """A JSON value as the CSV writes it."""
    return "" if v is None else str(v)


def _csv_blocks(text: str) -> list[list[dict[str, str]]]:
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [list(csv.DictReader(io.StringIO(b))) for b in blocks]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_every_figure_reads_the_same_on_every_surface(session, cli, tmp_path):
    _ledger(session, cli)
    j = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json", *CLOSED).output)
    s = j["summary"]
    assert s["currency"] == "USD" and len(s["fx_rates"]) == 2  # each charge period at its own rate
    spend, idle = D(s["actual_cost"]), D(s["idle_cost"])
    runs = {r["run_id"]: r for r in j["runs"]}
    assert set(runs) == {"own-a", "own-half", "fail1", "res1", "rent1", "rent2"}
    # the same 10 h on elastic rent: 3,600 per node-month at 0.14 before the 15th, 4,380 at 0.15 after
    assert (runs["rent1"]["cost"], runs["rent2"]["cost"]) == (str(cents(10 * D(3600) / 730 * D("0.14"))),
                                                              str(cents(10 * D(4380) / 730 * D("0.15"))))
    # the export adds up: runs + idle + rounding = spend; projects + idle + rounding = spend
    assert sum(D(r["cost"]) for r in runs.values()) + idle + rounding(j, "runs") == spend
    assert sum(D(p["cost"]) for p in j["projects"]) + idle + rounding(j, "projects") == spend
    # CSV: the same strings
    summary_rows, projects, run_rows = _csv_blocks(cli("report", "monthly", "--month", "2026-11", "--format", "csv",
                                                       *CLOSED).output)[:3]
    got = {r["metric"]: r["value"] for r in summary_rows}
    for key in ("actual_cost", "idle_cost", "waste_cost", "lost_work_cost", "elastic_cost", *USAGE):
        assert got[key] == _csv(s[key]), key
    # every figure of the summary (the glossary's keys), not only these: the CSV prints the JSON's value
    figures = [k for k, v in s.items() if lookup(k) and not isinstance(v, (dict, list))]
    assert len(figures) >= 25, figures  # money, hours, ratios, counts, energy
    assert {k: got[k] for k in figures} == {k: _csv(s[k]) for k in figures}
    assert {r["run_id"]: r["cost"] for r in run_rows if r["run_id"] != "(rounding)"} == {
        k: v["cost"] for k, v in runs.items()}
    assert {p["project"]: p["cost"] for p in projects if p["project"] != "(rounding)"} == {
        p["project"]: p["cost"] for p in j["projects"]}
    # XLSX: the same values, as numbers
    xlsx = tmp_path / "m.xlsx"
    assert cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", xlsx, *CLOSED).exit_code == 0
    wb = load_workbook(xlsx)
    items = {r[0]: r[1] for r in wb["Summary"].iter_rows(min_row=2, values_only=True)}
    assert D(str(items["actual_cost"])) == spend and D(str(items["idle_cost"])) == idle
    for key in figures:  # every figure: the JSON's presented value (a number there, a number or text here)
        assert (items[key] is None and s[key] is None) or D(str(items[key])) == D(str(s[key])), key
    head, *rows = list(wb["Runs"].iter_rows(values_only=True))
    xl_runs = {r[0]: D(str(r[head.index("cost")])) for r in rows if r[0] != "(rounding)"}
    assert xl_runs == {k: D(v["cost"]) for k, v in runs.items()}
    # FOCUS: its unrounded costs sum to the spend, rounded once
    focus = tmp_path / "f.csv"
    assert cli("report", "focus", "--month", "2026-11", "-o", focus).exit_code == 0
    with open(focus, newline="") as fh:
        focus_rows = list(csv.DictReader(fh))
    billed = sum((D(r["BilledCost"]) for r in focus_rows), D(0))
    assert cents(billed) == spend
    # FOCUS per project (SubAccountName): the EffectiveCost of its run rows (an owned fleet bills on its own row,
    # BilledCost 0 on the runs) is the export's project cost, rounded once per project
    for p in j["projects"]:
        rows = [r for r in focus_rows if r["SubAccountName"] == p["project"]]
        assert cents(sum((D(r["EffectiveCost"]) for r in rows), D(0))) - D(p["cost"]) in (D(0), D("0.01"), D("-0.01"))
        assert {r["ResourceId"].rpartition("/")[2] for r in rows} >= {k for k, v in runs.items() if v["project"] == p["project"]}
    # the period report of the month is the monthly report, figure for figure
    period = json.loads(cli("report", "period", "--from", "2026-11", "--to", "2026-11", "--json", *CLOSED).output)
    shared = [k for k in period["summary"] if k in s and lookup(k)]
    assert len(shared) >= 15, shared  # the period report's figures that the monthly report also prints
    assert {k: period["summary"][k] for k in shared} == {k: s[k] for k in shared}
    # chargeback statements: each run line is the export's run line; the statements + idle left + rounding = spend
    out = tmp_path / "cb"
    assert cli("report", "chargeback", "--month", "2026-11", "-o", out, *CLOSED).exit_code == 0
    with open(out / "2026-11-chargeback-summary.csv", newline="") as fh:
        statements = {r["statement"]: r for r in csv.DictReader(fh)}
    assert D(statements["spend"]["total"]) == spend
    assert sum(D(v["total"]) for k, v in statements.items() if k != "spend") == spend
    for project in ("a", "b"):
        st = list(load_workbook(out / f"2026-11-{project}.xlsx")["Runs"].iter_rows(values_only=True))
        lines = {r[0]: D(str(r[9])) for r in st[1:] if r[0] != "(rounding)"}
        assert lines == {k: D(v["cost"]) for k, v in runs.items() if v["project"] == project}, project
    # the goodput account: the same spend; goodput + badput + idle = spend (each rounded on its own, so within
    # the rounding of three figures); waste = badput + idle, the export's waste
    g = json.loads(cli("goodput", "--month", "2026-11", "--json", *CLOSED).output)["totals"]
    assert D(g["spend"]) == spend
    assert abs(D(g["goodput_cost"]) + D(g["badput_cost"]) + D(g["account_idle_cost"]) - spend) <= D("0.02")
    assert abs(D(s["waste_cost"]) - (D(g["badput_cost"]) + D(g["account_idle_cost"]))) <= D("0.01")
    # the account's idle is one figure: waste's reason "idle" in the export, the fleets' idle less recovery
    assert D(g["account_idle_cost"]) == D(s["waste_by_reason"]["idle"])
    assert abs(D(g["account_idle_cost"]) - (D(s["idle_cost"]) - D(s["waste_by_reason"]["recovery"]))) <= D("0.01")
    assert D(g["cost"]["recovery"]) > 0  # the fleet's 2 h between fail1 and res1
    assert period["summary"]["account_idle_cost"] == s["waste_by_reason"]["idle"]
    # a project's waste is its run lines' badput: the goodput account's project badput less the recovery it moved
    # out of the fleet's idle (the export keeps recovery in idle, in no project's cost: docs/GOODPUT.md)
    acct = json.loads(cli("goodput", "--month", "2026-11", "--json", *CLOSED).output)
    line_badput = {p["project"]: D(p["badput_cost"]) - D(p["cost"]["recovery"]) for p in acct["projects"]}
    assert D(next(p for p in acct["projects"] if p["project"] == "a")["cost"]["recovery"]) > 0
    for p in j["projects"]:
        assert abs(D(p["waste_cost"]) - line_badput[p["project"]]) <= D("0.01"), p["project"]


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_exporter_publishes_the_monthly_reports_figures(session, cli, ledger_url):
    from trainledger.reports.metrics import month_metrics

    _ledger(session, cli)
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    j = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json", "--now", now.isoformat()).output)
    fams = {f.name: f for f in month_metrics(session, now)}
    team = {s.name: s.value for f in ("trainledger_cost_to_date", "trainledger_idle_cost_to_date")
            for s in fams[f].samples if s.labels.get("scope", "team") == "team"}
    assert cents(D(repr(team["trainledger_cost_to_date"]))) == D(j["summary"]["actual_cost"])
    assert cents(D(repr(team["trainledger_idle_cost_to_date"]))) == D(j["summary"]["idle_cost"])
    projects = {s.labels["project"]: s.value for s in fams["trainledger_cost_to_date"].samples
                if s.labels.get("scope") == "project"}
    assert {k: cents(D(repr(v))) for k, v in projects.items()} == {p["project"]: D(p["cost"]) for p in j["projects"]}
    (util,) = fams["trainledger_time_utilization_ratio"].samples
    assert D(repr(util.value)).quantize(D("0.0001")) == D(str(j["summary"]["time_utilization"]))
    (gpu,) = fams["trainledger_gpu_seconds_to_date"].samples
    assert (D(repr(gpu.value)) / 3600).quantize(D("0.001")) == D(str(j["summary"]["gpu_hours"]))
    waste = sum((D(repr(s.value)) for s in fams["trainledger_waste_cost_to_date"].samples), D(0))
    assert abs(waste - D(j["summary"]["waste_cost"])) < D("0.005") + D("1e-9")
    assert session.get(Run, "own-half").share == "1/2"


@pytest.mark.slow
@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_dashboard_shows_the_same_cents_in_a_browser(session, cli, ledger_url, tmp_path):
    """The Overview's money, GPU-hours and time utilization cards in real Chromium: the monthly export's figures."""
    from playwright.sync_api import expect, sync_playwright
    from trainledger.app.views.ui import card, pct
    from trainledger.reports.present import fmt_cell

    from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle

    need_chromium()
    _ledger(session, cli)
    session.close()
    s = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json", *CLOSED).output)["summary"]
    want = {card(k, "USD"): fmt_cell(k, D(s[k])) for k in ("actual_cost", "idle_cost", "waste_cost", "own_cost",
                                                         "elastic_cost")}
    want.update({card("gpu_hours"): fmt_cell("gpu_hours", s["gpu_hours"]),
                 card("time_utilization"): pct(s["time_utilization"])})
    assert list(want)[:3] == ["Spend (USD)", "Idle cost (USD)", "Waste (USD)"]  # the labels the layer gives
    with serve(tmp_path, ledger_url, env={"TRAINLEDGER_NOW": "2026-12-05T00:00:00Z"}) as served, \
            sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{served.base}/?month=2026-11")
            for label, value in want.items():
                shown = page.get_by_test_id("stMetric").filter(
                    has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True))
                expect(shown.get_by_test_id("stMetricValue")).to_have_text(value, timeout=WAIT_MS)
            settle(page)
            expect(page.get_by_test_id("stException")).to_have_count(0)
        finally:
            browser.close()
