"""Spend by project with idle as its own line: the lines add up to the month's spend to the cent."""

from __future__ import annotations

from typing import Any

from ledger.money.costs import cents, round_preserving_sum
from ledger.money.monthly import MonthlyReport

NO_PROJECT = "(no project)"
IDLE = "idle"


def spend_by_project(rep: MonthlyReport) -> list[dict[str, Any]]:
    """``[{"line", "cost"}]``: each project of the month (``(no project)`` for runs without one), then ``idle``
    (fleet node-hours no run used), in cents; Σ lines == the month's spend (``actual_cost``) in cents exactly.

    The project costs are the monthly report's (runs costed at the same rates as the totals); the rounding
    is the export's (largest remainder against the rounded spend), so these are the figures it shows."""
    s = rep.summary
    idle = cents(s["idle_cost"])
    names = [p["project"] or NO_PROJECT for p in rep.projects]
    shares = round_preserving_sum([p["cost"] for p in rep.projects], total=cents(s["actual_cost"]) - idle)
    lines = [{"line": n, "cost": c} for n, c in zip(names, shares)]
    return lines + [{"line": IDLE, "cost": idle}]

