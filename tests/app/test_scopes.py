"""Project scopes (issue 40 item 3, docs/SCOPES.md): a user scoped to projects sees only them, on every page.

On the demo ledger (projects ``demo-finetune``, ``demo-pretrain`` and ``hand``): ``fin`` is scoped to
``demo-finetune``, ``two`` to ``demo-finetune`` and ``hand``, ``lead`` sees every project. What a scoped user
is shown equals the lines ``trainledger report monthly --json`` gives for their projects; no name or id of
another project is in anything the page sent (:func:`tests.app.scopes.rendered`) or in any download.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal

import pytest
from trainledger.reports.present import fmt_cell

from tests.app.helpers import MONTH, metrics
from tests.app.scopes import (
    A,
    B,
    C,
    cli_report,
    download_capture,
    downloads,
    leaks,
    open_page,
    project_names,
    readable,
    rendered,
    sign_in_scoped,
)

PAGES = ["overview", "runs", "goodput", "export", "rent_vs_own", "roi", "invoices", "planner", "strategies", "launch",
         "settings"]
TEAM_ONLY = {"rent_vs_own": "Rent vs own", "roi": "Monthly ROI", "invoices": "Invoices", "planner": "Planner",
             "strategies": "Strategies", "launch": "Launch"}
NOTE = "Team totals need team scope"


@pytest.fixture(scope="module")
def scoped_url(demo_url, tmp_path_factory) -> str:
    """A copy of the demo ledger (signing in writes a session row)."""
    path = tmp_path_factory.mktemp("scoped") / "ledger.db"
    shutil.copy(demo_url.removeprefix("sqlite:///"), path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def report(scoped_url) -> dict:
    return cli_report(scoped_url)


@pytest.fixture(scope="module")
def others(scoped_url) -> dict[str, set[str]]:
    return project_names(scoped_url)


@pytest.fixture
def scoped(scoped_url, app_env, tmp_path, monkeypatch):
    return sign_in_scoped(scoped_url, app_env, tmp_path, monkeypatch)


def table_with(at, *columns: str):
    """The first table of the page with these columns."""
    return next(d.value for d in at.dataframe if set(columns) <= set(d.value.columns))


def line_of(report: dict, project: str) -> dict:
    return next(p for p in report["projects"] if p["project"] == project)


@pytest.mark.parametrize("page", PAGES)
def test_no_page_shows_another_projects_name_or_run(scoped, others, page):
    at = open_page("fin", page)
    assert leaks(rendered(at), others[B] | others[C]) == [], page
    if page in TEAM_ONLY:  # a page of team totals: its title and the note, nothing else
        assert [t.value for t in at.title] == [TEAM_ONLY[page]] and any(NOTE in i.value for i in at.info)
        assert not at.metric and not at.dataframe and all(b.key == "sign_out" for b in at.button)


def test_the_overview_shows_the_projects_line_of_the_monthly_report(scoped, report):
    at = open_page("fin", "overview")
    line = line_of(report, A)
    assert metrics(at) == {f"{A}: spend (CNY)": fmt_cell("cost", line["cost"]),
                           f"{A}: GPU-hours": fmt_cell("gpu_hours", line["gpu_hours"]),
                           f"{A}: runs": f"{line['runs']:,}", f"{A}: waste (CNY)": fmt_cell("waste_cost", line["waste_cost"])}
    table = table_with(at, "project", "runs", "tokens")
    assert list(table["project"]) == [A] and list(table["runs"]) == [line["runs"]]
    assert any(NOTE in i.value for i in at.info)
    budgets = table_with(at, "project", "spent to date (CNY)")
    assert list(budgets["project"]) == [A]


def test_two_projects_see_both_lines_and_no_team_totals(scoped, report):
    at = open_page("two", "overview")
    shown = metrics(at)
    for p in (A, C):
        assert shown[f"{p}: spend (CNY)"] == fmt_cell("cost", line_of(report, p)["cost"])
    assert not any(k.startswith(("Spend", "Idle", "Waste")) for k in shown), shown  # the team's cards


def test_a_team_lead_sees_every_project_and_the_totals(scoped, report):
    at = open_page("lead", "overview")
    shown = metrics(at)
    assert shown["Spend (CNY)"] == fmt_cell("actual_cost", report["summary"]["actual_cost"])
    assert not any(NOTE in i.value for i in at.info)
    text = rendered(at)
    assert A in text and B in text
    runs = open_page("lead", "runs", scope="all")
    assert {A, B, C} <= set(table_with(runs, "id", "project")["project"])


def test_the_runs_page_lists_exactly_the_projects_runs(scoped, report):
    at = open_page("fin", "runs")
    table = table_with(at, "id", "project")
    assert set(table["project"]) == {A}
    assert set(table["id"]) == {r["run_id"] for r in report["runs"] if r["project"] == A}
    for r in report["runs"]:  # each run's cost: its line of the monthly report
        if r["project"] == A:
            assert Decimal(str(table.loc[table["id"] == r["run_id"], "cost (CNY)"].iloc[0])) == Decimal(r["cost"])
    assert at.selectbox(key="runs_project").options == ["All", A]
    everywhere = open_page("fin", "runs", scope="all", order="expensive")
    assert set(table_with(everywhere, "id", "project")["project"]) == {A}


def test_the_export_downloads_hold_only_the_projects_lines(scoped, report, others, monkeypatch):
    files = download_capture(monkeypatch)
    at = open_page("fin", "export")
    got = downloads(at, files)
    assert set(got) == {"Download CSV", "Download XLSX", "Download JSON", "Statement XLSX", "Statement HTML (printable)"}
    for label, data in got.items():
        assert leaks(readable(data), others[B] | others[C]) == [], label
    exported = json.loads(got["Download JSON"])
    assert exported["projects"] == [line_of(report, A)]
    assert exported["runs"] == [r for r in report["runs"] if r["project"] == A]
    assert "actual_cost" not in exported["summary"] and exported["summary"]["projects"] == A
    assert "idle" not in readable(got["Download CSV"]).split("\n\n")[0]  # the summary block: no team totals
    html = got["Statement HTML (printable)"].decode()
    assert f"Chargeback statement: {A}" in html and "month's spend (" not in html


def test_a_team_lead_downloads_the_clis_bytes(scoped, monkeypatch):
    from trainledger.app.queries import data

    files = download_capture(monkeypatch)
    got = downloads(open_page("lead", "export"), files)
    assert got["Download CSV"] == data.export_bytes(scoped, MONTH, "csv", "CNY")
    assert "Summary CSV" in got


def test_the_scope_is_part_of_every_cache_key(scoped):
    """One user's cached frame never serves another: the lead, then the scoped user, then the lead again."""
    assert B in rendered(open_page("lead", "runs"))
    assert B not in rendered(open_page("fin", "runs"))
    assert B in rendered(open_page("lead", "runs"))


def test_goodput_shows_the_projects_badput_and_runs(scoped, report):
    at = open_page("fin", "goodput")
    ranked = table_with(at, "run", "badput (CNY)")
    assert set(ranked["run"]) == {r["run_id"] for r in report["runs"] if r["project"] == A}
    by_project = table_with(at, "project", "goodput %")
    assert list(by_project["project"]) == [A]
    assert any(NOTE in i.value for i in at.info) and not at.metric  # the month's goodput cards are team totals
