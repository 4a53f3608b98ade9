"""Spend by project with idle as its own line: the lines add up to the month's spend to the cent.

Rounding (docs/MONEY.md, "Rounding"): each line is its exact cost rounded half-up to the cent on its own,
so a project reads the same here as in every other table (the budgets, the forecast); the half-cents
the lines leave against the rounded spend are an explicit ``rounding`` line, never a cent moved
between projects.
"""

from __future__ import annotations

from typing import Any

from ledger.money.costs import ZERO, cents
from ledger.money.monthly import MonthlyReport

NO_PROJECT = "(no project)"
IDLE = "idle"
ROUNDING = "rounding"


def spend_by_project(rep: MonthlyReport) -> list[dict[str, Any]]:
    """``[{"line", "cost"}]``: each project of the month (``(no project)`` for runs without one), then ``idle``
    (fleet node-hours no run used), in cents, then ``rounding`` when the lines need it; Σ lines == the month's
    spend (``actual_cost``) in cents exactly.

    The project costs are the monthly report's (runs costed at the same rates as the totals), each rounded
    half-up: the same cents as the budget table and the forecast show for the project."""
    s = rep.summary
    lines = [{"line": p["project"] or NO_PROJECT, "cost": cents(p["cost"])} for p in rep.projects]
    lines.append({"line": IDLE, "cost": cents(s["idle_cost"])})
    rest = cents(s["actual_cost"]) - sum((x["cost"] for x in lines), ZERO)
    return lines + ([{"line": ROUNDING, "cost": rest}] if rest else [])
