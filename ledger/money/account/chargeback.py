"""Chargeback: what each project owes for a month, its runs plus its share of idle (exact figures).

:func:`chargeback` reads the month's charges (:func:`trainledger.money.account.monthly.month_charges`: the
monthly report and each fleet's charge periods), shares every fixed-cost fleet's idle under its
policy (:mod:`trainledger.money.allocation.idle_share`) and gathers, per project: its run lines (GPU-hours, cost,
lost work), its share of idle and its total. Identity, whatever the policies:

    Σ projects' totals + the idle left unshared = the month's spend (``actual_cost``)

exact in Decimal up to the run lines (which add up to the groups the spend is costed from); the
statements' presented figures (:mod:`trainledger.reports.chargeback`) add up to the spend to the cent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.month_lines import RunSlice
from trainledger.money.account.monthly import month_charges
from trainledger.money.allocation.idle_share import NO_PROJECT, IdleCharge, IdleSharing, share_idle
from trainledger.money.rates.costs import ZERO


@dataclass
class IdlePart:
    """A project's part of one origin charge (one fleet's idle in one charge period)."""

    offer: str
    start: datetime
    end: datetime
    policy: str
    ratio: Decimal
    amount: Decimal


@dataclass
class Statement:
    project: str  # NO_PROJECT for runs without one
    runs: list[RunSlice] = field(default_factory=list)  # one line per run in the month
    idle: list[IdlePart] = field(default_factory=list)

    @property
    def run_cost(self) -> Decimal:
        return sum((r.cost for r in self.runs), ZERO)

    @property
    def idle_share(self) -> Decimal:
        return sum((p.amount for p in self.idle), ZERO)

    @property
    def total(self) -> Decimal:
        return self.run_cost + self.idle_share

    @property
    def gpu_hours(self) -> Decimal:
        return sum((r.gpu_hours for r in self.runs), ZERO)

    @property
    def lost_work(self) -> Decimal:
        return sum((r.lost_work_cost for r in self.runs), ZERO)


@dataclass
class Chargeback:
    month: str
    currency: str
    timezone: str
    spend: Decimal  # the monthly report's actual_cost
    idle: Decimal  # the month's idle (shared or not)
    unshared_idle: Decimal  # what stays its own line
    statements: list[Statement]
    sharing: IdleSharing
    summary: dict[str, Any]  # the monthly report's summary (period, fx rates, ...)
    charges: Any = field(default=None, repr=False)  # the MonthCharges it was made from (the FOCUS export)
    #: runs no offer can cost (no node type, or none for it): listed with their node-hours, charged to no one
    not_costed: list = field(default_factory=list)

    def statement(self, project: str) -> Statement:
        for s in self.statements:
            if s.project == project:
                return s
        names = ", ".join(s.project for s in self.statements) or "none"
        raise LedgerInputError(f"--project: {project!r} has nothing to pay in {self.month}; projects: {names}")


def chargeback(session: Session, month: str, *, currency: Optional[str] = None,
               now: Optional[datetime] = None) -> Chargeback:
    """The month's chargeback: one statement per project that ran or takes a share of idle."""
    charges = month_charges(session, month, currency=currency, now=now)
    return from_charges(session, charges)


def from_charges(session: Session, charges: Any) -> Chargeback:
    rep = charges.report
    sharing = share_idle(session, charges)
    by: dict[str, Statement] = {}
    for line in rep.runs:
        name = line.project or NO_PROJECT
        by.setdefault(name, Statement(name)).runs.append(line)
    for c in sharing.charges:
        for s in c.shares:
            by.setdefault(s.project, Statement(s.project)).idle.append(_part(c, s.ratio, s.amount))
    s = rep.summary
    return Chargeback(rep.month, rep.currency, rep.timezone, s["actual_cost"], s["idle_cost"], sharing.unshared,
                      [by[k] for k in sorted(by, key=lambda k: (k == NO_PROJECT, k))], sharing, s, charges,
                      list(rep.not_costed))


def _part(c: IdleCharge, ratio: Decimal, amount: Decimal) -> IdlePart:
    return IdlePart(c.offer.name, c.start, c.end, c.policy, ratio, amount)
