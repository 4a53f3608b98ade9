"""One rounding rule (issue 26, item 6; docs/MONEY.md, "Rounding"): outside an export every figure is its
exact value half-up to the cent on its own, so identical inputs read identically everywhere, and a table
whose lines must add up to a total shown beside them carries an explicit rounding line.

Two runs of exactly the same cost, 1 node × 10 h on rtx4090-rent each (10 × 3,600 ÷ 730 = 49.3150…): the
largest-remainder method gave them 49.32 and 49.31 to reach the rounded total 98.63.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from trainledger.money.account.monthly import monthly_report
from trainledger.money.account.spend import ROUNDING, spend_by_project
from trainledger.money.rates.costs import cents

from tests.helpers import add_run

UTC = timezone.utc
ONE = 10 * Decimal(3600) / 730


def _twins(s) -> None:
    add_run(s, "twin-a", datetime(2025, 11, 3, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent", project="a")
    add_run(s, "twin-b", datetime(2025, 11, 4, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent", project="b")
    s.commit()


def test_spend_by_project_rounds_each_line_on_its_own_and_shows_the_rounding(session):
    _twins(session)
    lines = spend_by_project(monthly_report(session, "2025-11"))
    assert cents(2 * ONE) == Decimal("98.63") and cents(ONE) == Decimal("49.32")
    assert lines == [{"line": "a", "cost": Decimal("49.32")}, {"line": "b", "cost": Decimal("49.32")},
                     {"line": "idle", "cost": Decimal("0.00")}, {"line": ROUNDING, "cost": Decimal("-0.01")}]


def _triplets(s) -> None:
    """Three identical 10-hour jobs of one project (issue 36: the export showed 49.31, 49.31 and 49.32)."""
    for i, day in enumerate((3, 4, 5)):
        add_run(s, f"same-{i}", datetime(2025, 11, day, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent",
                project="a")
    s.commit()


def test_identical_runs_show_identical_cents_on_every_surface_and_one_rounding_line(session, cli, tmp_path):
    import csv
    import io
    import json

    from openpyxl import load_workbook

    _triplets(session)
    each, total = cents(ONE), cents(3 * ONE)  # 49.3150684… → 49.32; 147.9452… → 147.95
    assert (each, total) == (Decimal("49.32"), Decimal("147.95"))
    rest = total - 3 * each  # -0.01: the rounding line, never a cent taken from one run
    now = ("--now", "2025-12-05T00:00:00Z")
    monthly = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json", *now).output)
    assert [r["cost"] for r in monthly["runs"]] == [str(each)] * 3
    assert [p["cost"] for p in monthly["projects"]] == [str(total)]  # the project is its exact cost, rounded once
    assert monthly["rounding"] == {"runs": {"cost": str(rest)}}
    assert monthly["summary"]["actual_cost"] == str(total)
    rows = list(csv.reader(io.StringIO(cli("report", "monthly", "--month", "2025-11", "--format", "csv",
                                           *now).output)))
    runs_block = rows[rows.index(next(r for r in rows if r and r[0] == "run_id")):]
    cost_col = runs_block[0].index("cost")
    assert [r[cost_col] for r in runs_block[1:] if r] == [str(each)] * 3 + [str(rest)]
    assert runs_block[-1][0] == "(rounding)"
    xlsx = tmp_path / "m.xlsx"
    assert cli("report", "monthly", "--month", "2025-11", "--format", "xlsx", "-o", xlsx, *now).exit_code == 0
    sheet = list(load_workbook(xlsx)["Runs"].iter_rows(values_only=True))
    assert [Decimal(str(r[cost_col])) for r in sheet[1:]] == [each] * 3 + [rest]
    # the chargeback statement: the same run lines, its own rounding line, and the project's total
    out = tmp_path / "cb"
    assert cli("report", "chargeback", "--month", "2025-11", "-o", out, *now).exit_code == 0
    runs = list(load_workbook(out / "2025-11-a.xlsx")["Runs"].iter_rows(values_only=True))
    assert [(r[0], Decimal(str(r[9]))) for r in runs[1:]] == [
        ("same-0", each), ("same-1", each), ("same-2", each), ("(rounding)", rest)]
    items = dict(load_workbook(out / "2025-11-a.xlsx")["Statement"].iter_rows(min_row=2, values_only=True))
    assert (Decimal(str(items["run_cost"])), Decimal(str(items["total"]))) == (total, total)
    # runs show: the same cents per run
    shown = json.loads(cli("runs", "show", "same-1", "--json", *now).output)
    assert shown["cost_actual"] == str(each)
