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
