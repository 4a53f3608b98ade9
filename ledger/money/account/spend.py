"""Spend by project with idle as its own line: the lines add up to the month's spend to the cent.

Rounding (docs/MONEY.md, "Rounding"): each line is its exact cost rounded half-up to the cent on its own,
so a project reads the same here as in every other table (the budgets, the forecast); the half-cents
the lines leave against the rounded spend are an explicit ``rounding`` line, never a cent moved
between projects.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable

from trainledger.money.account.monthly import MonthlyReport
from trainledger.money.rates.costs import ZERO, cents

NO_PROJECT = "(no project)"
IDLE = "idle"
ROUNDING = "rounding"


def spend_by_project(rep: MonthlyReport) -> list[dict[str, Any]]:
    """``[{"line", "cost"}]``: each project of the month (``(no project)`` for runs without one), then ``idle``
    (fleet node-hours no run used), in cents, then ``rounding`` when the lines need it; Σ lines == the month's
    spend (``actual_cost``) in cents exactly.

    The project costs are the monthly report's (runs costed at the same rates as the totals), each rounded
    half-up: the same cents as the budget table and the forecast show for the project."""
    return spend_by_project_months([rep])


def spend_by_project_months(reports: Iterable[MonthlyReport]) -> list[dict[str, Any]]:
    """The same lines over several months (a quarter's, a year to date's whole months: the Overview's "Spend by
    project" for a period): each project's line and idle are the months' lines added up (each month's cents, so a
    quarter reads as its months' tables summed), and ``rounding`` is what they leave against the months' exact
    spend summed and rounded once (the period report's spend): Σ lines == that spend in cents exactly."""
    projects: dict[str, Decimal] = {}
    idle = spend = ZERO
    for rep in reports:
        for p in rep.projects:
            projects[p["project"] or ""] = projects.get(p["project"] or "", ZERO) + cents(p["cost"])
        idle += cents(rep.summary["idle_cost"])
        spend += rep.summary["actual_cost"]
    lines = [{"line": name or NO_PROJECT, "cost": projects[name]} for name in sorted(projects)]
    lines.append({"line": IDLE, "cost": idle})
    rest = cents(spend) - sum((x["cost"] for x in lines), ZERO)
    return lines + ([{"line": ROUNDING, "cost": rest}] if rest else [])
