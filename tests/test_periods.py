"""Report periods (trainledger.money.rates.periods) and their totals (trainledger.reports.periods, `trainledger report period`).

The totals of a period are the monthly reports of its whole months plus the daily reports of the days left
over: checked here against those reports themselves on the dashboard tests' demo ledger (2026-06..2026-11 and
a few hand-built runs), exactly (Decimal), and through the CLI (`--json`, `--format csv`) to the cent.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal as D

import pytest
from trainledger.cli.commands import app as cli
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.account import goodput_account
from trainledger.money.goodput.waste import waste_cost
from trainledger.money.rates import periods as P
from trainledger.money.rates.costs import cents
from trainledger.reports.daily import daily_report
from trainledger.reports.periods import period_report, presented_period
from typer.testing import CliRunner

from tests.app.helpers import build_ledger, with_session

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)  # the demo's clock: December has begun (half a day)
TODAY = NOW.date()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> str:
    return build_ledger(f"sqlite:///{tmp_path_factory.mktemp('periods') / 'ledger.db'}")


# --- the periods ----------------------------------------------------------------------------

def test_month_quarter_ytd_and_range_are_days_first_to_last():
    assert P.month_period("2026-02") == P.ReportPeriod("month", date(2026, 2, 1), date(2026, 2, 28), "2026-02")
    assert P.quarter_period("2026-Q4") == P.ReportPeriod("quarter", date(2026, 10, 1), date(2026, 12, 31), "2026-Q4")
    assert P.ytd_period(2026, TODAY) == P.ReportPeriod("ytd", date(2026, 1, 1), date(2026, 12, 1), "2026 to date")
    assert P.ytd_period(2025, TODAY).label == "2025" and P.ytd_period(2025, TODAY).last == date(2025, 12, 31)
    assert P.quarter_period("2026-Q4").flags() == "--from 2026-10-01 --to 2026-12-31"
    # --from/--to: months are their first and last day; a whole month, quarter or year to date is named so
    assert P.parse_range("2026-10", "2026-12") == P.quarter_period("2026-Q4")
    assert P.parse_range("2026-11-01", "2026-11-30") == P.month_period("2026-11")
    assert P.parse_range("2026-01", "2026-12-01", today=TODAY) == P.ytd_period(2026, TODAY)
    r = P.parse_range("2026-10-15", "2026-11-20")
    assert (r.kind, r.days, r.label) == ("range", 37, "2026-10-15 to 2026-11-20")


@pytest.mark.parametrize("args, message", [
    (("2026-13", "2026-12"), "--from: expected YYYY-MM such as 2026-11, got '2026-13'"),
    (("2026-11-31", "2026-12-01"), "--from: expected a day YYYY-MM-DD or a month YYYY-MM such as 2026-11-05 or 2026-11, got '2026-11-31'"),
    (("2026-11-05", "x"), "--to: expected a day YYYY-MM-DD or a month YYYY-MM such as 2026-11-05 or 2026-11, got 'x'"),
    (("0000-01-01", "2026-01-01"), "--from: expected a day YYYY-MM-DD or a month YYYY-MM"),
    (("2026-11-05", "2026-11-01"), "--to: 2026-11-01 is before --from 2026-11-05"),
    (("1970-01", "9998-12"), "--to: at most 3700 days from --from"),
])
def test_bad_bounds_are_one_line_naming_the_flag(args, message):
    with pytest.raises(LedgerInputError) as exc:
        P.parse_range(*args)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


@pytest.mark.parametrize("check, text, message", [
    (P.check_quarter, "2026-Q5", "?quarter=: expected YYYY-Qn such as 2026-Q4, got '2026-Q5'"),
    (P.check_quarter, "9999-Q1", "?quarter=: the year must be 1970 to 9998, got '9999-Q1'"),
    (P.check_year, "20x6", "?year=: expected a year 1970 to 9998 such as 2026, got '20x6'"),
    (P.check_day, "2026-02-30", "?from=: expected a day YYYY-MM-DD such as 2026-11-05, got '2026-02-30'"),
])
def test_bad_period_parameters_are_one_line(check, text, message):
    flag = message.split(":")[0]
    with pytest.raises(LedgerInputError, match="^" + message.replace("?", r"\?").replace("(", r"\(") + "$"):
        check(text, flag)


def test_the_period_before_has_the_same_length():
    assert P.previous(P.month_period("2026-10"), TODAY) == P.month_period("2026-09")
    assert P.previous(P.month_period("2026-03"), TODAY) == P.month_period("2026-02")
    assert P.previous(P.quarter_period("2026-Q1"), TODAY) == P.quarter_period("2025-Q4")
    r = P.previous(P.parse_range("2026-10-15", "2026-11-20"), TODAY)
    assert (r.first, r.last) == (date(2026, 9, 8), date(2026, 10, 14))
    # a period that has not ended: as many days of the one before as it has begun (today whole)
    m = P.previous(P.month_period("2026-12"), TODAY)
    assert (m.first, m.last, m.label) == (date(2026, 11, 1), date(2026, 11, 1), "2026-11, first 1 day")
    q = P.previous(P.quarter_period("2026-Q4"), TODAY)
    assert (q.first, q.last) == (date(2026, 7, 1), date(2026, 8, 31))  # 62 days: October, November, 1 December
    y = P.previous(P.ytd_period(2026, TODAY), TODAY)
    assert (y.first, y.last) == (date(2025, 1, 1), date(2025, 12, 1))


def test_pieces_are_whole_months_and_left_over_days():
    assert P.pieces(P.quarter_period("2026-Q4"), TODAY) == P.Pieces(("2026-10", "2026-11", "2026-12"), ())
    p = P.pieces(P.parse_range("2026-10-30", "2026-12-02"), TODAY)
    assert p.months == ("2026-11", "2026-12") and p.days == (date(2026, 10, 30), date(2026, 10, 31))
    p = P.pieces(P.parse_range("2026-11-28", "2026-11-30"), TODAY)
    assert p.months == () and p.days == (date(2026, 11, 28), date(2026, 11, 29), date(2026, 11, 30))


# --- the totals -------------------------------------------------------------------------------

def test_a_quarter_is_the_sum_of_its_monthly_reports(ledger):
    def check(s):
        rep = period_report(s, P.quarter_period("2026-Q4"), now=NOW)
        months = [monthly_report(s, m, lines=False, now=NOW).summary for m in ("2026-10", "2026-11", "2026-12")]
        total = {k: sum((m[k] for m in months), D(0)) for k in ("actual_cost", "idle_cost", "gpu_hours",
                                                                   "own_cost", "elastic_cost")}
        # waste: each month's badput + idle (its goodput account), summed
        total["waste_cost"] = sum((waste_cost(goodput_account(s, month=m, now=NOW).months[0])
                                   for m in ("2026-10", "2026-11", "2026-12")), D(0))
        for k, v in total.items():
            assert rep["summary"][k] == v, k
        savings = sum((m["savings_vs_alternative"] for m in months), D(0))
        assert rep["summary"]["roi"] == savings / total["actual_cost"]
        assert rep["summary"]["tokens"] == sum(m["tokens"] for m in months)
        assert rep["whole_months"] and rep["is_partial"] and rep["months"] == ["2026-10", "2026-11", "2026-12"]
        # the quarter before, cut to as many days: July and August whole
        before = [monthly_report(s, m, lines=False, now=NOW).summary["actual_cost"] for m in ("2026-07", "2026-08")]
        assert rep["previous"]["summary"]["actual_cost"] == sum(before, D(0))
        assert rep["change"]["actual_cost"] == (total["actual_cost"] - sum(before, D(0))) / sum(before, D(0))
        return rep, total

    rep, total = with_session(ledger, check)
    assert cents(total["actual_cost"]) == D("71598.87")  # the demo's quarter to date, as `report period` prints it
    assert presented_period(rep)["summary"]["actual_cost"] == "71598.87"


def test_a_range_adds_the_daily_reports_of_its_left_over_days(ledger):
    def check(s):
        rep = period_report(s, P.parse_range("2026-10-30", "2026-11-30"), now=NOW)
        days = [daily_report(s, d, now=NOW)["summary"] for d in ("2026-10-30", "2026-10-31")]
        nov = monthly_report(s, "2026-11", lines=False, now=NOW).summary
        assert rep["summary"]["actual_cost"] == nov["actual_cost"] + sum((d["spend"] for d in days), D(0))
        assert rep["summary"]["gpu_hours"] == nov["gpu_hours"] + sum((d["gpu_hours"] for d in days), D(0))
        assert not rep["whole_months"] and rep["summary"]["idle_cost"] is None and rep["summary"]["roi"] is None
        assert rep["months"] == ["2026-11"] and rep["days"] == ["2026-10-30", "2026-10-31"]

    with_session(ledger, check)


def test_no_rows_of_zeros_before_the_first_run_and_no_change_against_nothing(ledger):
    """Issue 39 item 7: a year to date of a ledger whose first run is in June lists June onwards (January to May are
    ``empty_months``, each a monthly report of no spend and no GPU-hours), and has no change against the year before,
    which has nothing recorded: it says so. A quarter whose quarter before has data compares with it."""
    def check(s):
        ytd = period_report(s, P.ytd_period(2026, TODAY), now=NOW)
        months = {m: monthly_report(s, m, lines=False, now=NOW).summary for m in ytd["months"]}
        first = next(m for m in ytd["months"] if months[m]["actual_cost"] or months[m]["gpu_hours"])
        before = ytd["months"][:ytd["months"].index(first)]
        assert first == "2026-06" and ytd["empty_months"] == before
        assert all(months[m]["actual_cost"] == 0 and months[m]["gpu_hours"] == 0 for m in before)
        assert [r["month"].split(" ")[0] for r in ytd["by_month"]] == ytd["months"][len(before):]
        assert ytd["summary"]["actual_cost"] == sum((v["actual_cost"] for v in months.values()), D(0))
        assert period_report(s, P.ytd_period(2025, TODAY), now=NOW, compare=False)["summary"]["actual_cost"] == 0
        assert ytd["previous"] is None and set(ytd["change"].values()) == {None}
        assert ytd["previous_missing"] == "2025-01-01 to 2025-12-01 has no spend and no GPU-hours in the ledger"
        q2 = period_report(s, P.quarter_period("2026-Q2"), now=NOW)
        assert q2["empty_months"] == ["2026-04", "2026-05"] and [r["month"] for r in q2["by_month"]] == ["2026-06"]
        assert q2["previous_missing"] == "2026-Q1 (2026-01-01 to 2026-03-31) has no spend and no GPU-hours in the ledger"
        q3 = period_report(s, P.quarter_period("2026-Q3"), now=NOW)
        assert q3["empty_months"] == [] and "previous_missing" not in q3
        assert q3["previous"]["summary"]["actual_cost"] == monthly_report(s, "2026-06", lines=False, now=NOW).summary["actual_cost"] > 0

    with_session(ledger, check)
    out = CliRunner().invoke(cli, ["report", "period", "--db", ledger, "--now", NOW.isoformat(), "--from", "2026-01",
                                   "--to", "2026-12"])
    assert out.exit_code == 0, out.output
    rng = with_session(ledger, lambda s: period_report(s, P.parse_range("2026-01-01", "2026-12-31"), now=NOW))
    assert rng["previous_missing"] == ("2025-01-01 to 2025-12-31, first 335 days (2025-01-01 to 2025-12-01) has no "
                                       "spend and no GPU-hours in the ledger")
    assert f"\nno change shown: {rng['previous_missing']}\n" in out.output


def test_the_cli_prints_the_same_figures(ledger):
    runner = CliRunner()
    base = ["report", "period", "--db", ledger, "--now", NOW.isoformat()]
    out = runner.invoke(cli, [*base, "--from", "2026-10", "--to", "2026-12", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    want = with_session(ledger, lambda s: presented_period(period_report(s, P.quarter_period("2026-Q4"), now=NOW)))
    assert data == json.loads(json.dumps(want))
    assert data["summary"]["actual_cost"] == "71598.87" and data["change"]["actual_cost_pct"] == 5.5
    csv_out = runner.invoke(cli, [*base, "--from", "2026-10", "--to", "2026-12", "--format", "csv"])
    assert csv_out.exit_code == 0 and "actual_cost,71598.87,67853.83,5.5\n" in csv_out.output
    table = runner.invoke(cli, [*base, "--from", "2026-10-30", "--to", "2026-11-30"])
    assert table.exit_code == 0 and "only for whole months" in table.output
    bad = runner.invoke(cli, [*base, "--from", "2026-12-05", "--to", "2026-12-09"])
    assert bad.exit_code == 2 and bad.stderr == "error: --from: 2026-12-05 has not begun yet in UTC\n"
