"""Idle charged back: a fleet's idle node-hours shared out to the projects under its policy.

A fixed-cost fleet (own, reserved) is paid whether it is used or not; what no run used is
*idle*, its own line in the monthly report (showback). A fleet can instead charge its idle back
(``trainledger fleet set NAME --idle-share POLICY``, stored in ``fleet.idle_share``):

* ``none`` (the default): idle stays its own line;
* ``proportional``: to the projects whose runs drew on the fleet in the charge period, in
  proportion to their node-hours on it (the fleet's own allocation key, so also to their cost);
* ``even``: in equal parts to those same projects;
* ``weights:<project=w,...>``: to the named projects by their weights, whether they ran or not.

Each *origin charge* is one fixed-cost offer's idle in one charge period (the FOCUS ``Unused``
row); its parts add up to it exactly (Decimal, the last part takes the remainder of the others,
each on :data:`QUANTUM`), so project lines + the idle left unshared = the month's spend, whatever
the policy. An origin charge with nobody to share it with (``proportional``/``even`` and no
project drew on the fleet in that period) stays idle, and says so.

Fleets of one offer with different policies split the offer's idle by their capacity in the period
first. An offer sized by peak use (no fleet configured) has no policy: its idle is never shared.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates.catalog import fleet_capacity
from trainledger.money.rates.costs import ONE, ZERO, round_preserving_sum
from trainledger.store.audit import record_change
from trainledger.store.models import Fleet, Project

NONE, PROPORTIONAL, EVEN, WEIGHTS = "none", "proportional", "even", "weights"
POLICY_HELP = "none | proportional | even | weights:<project=w,...> (e.g. weights:llm=3,vision=1)"
#: exact parts of an origin charge are on this grid (the last part takes the remainder)
QUANTUM = Decimal("1e-12")
#: ratios are written with this many places and add up to exactly 1 per origin charge
RATIO_QUANTUM = Decimal("1e-10")
#: the largest weight of a ``weights:`` policy (weights are relative; a bound keeps the arithmetic exact, issue 37)
MAX_WEIGHT = Decimal("1e12")
#: the name of the line of runs without a project (as in ``trainledger.money.account.spend``)
NO_PROJECT = "(no project)"


@dataclass(frozen=True)
class IdlePolicy:
    kind: str  # none | proportional | even | weights
    weights: tuple[tuple[str, Decimal], ...] = ()

    @property
    def shares(self) -> bool:
        return self.kind != NONE

    def text(self) -> str:
        if self.kind != WEIGHTS:
            return self.kind
        return "weights:" + ",".join(f"{p}={format(w.normalize(), 'f')}" for p, w in self.weights)


SHOWBACK = IdlePolicy(NONE)


def parse_policy(text: Optional[str], flag: str = "--idle-share") -> IdlePolicy:
    """A policy from its text (None or empty: ``none``); a one-line error naming ``flag`` and the forms."""
    raw = (text or "").strip()
    if raw in ("", NONE):
        return SHOWBACK
    if raw in (PROPORTIONAL, EVEN):
        return IdlePolicy(raw)
    if not raw.startswith(WEIGHTS + ":"):
        raise LedgerInputError(f"{flag}: unknown policy {raw!r}; use {POLICY_HELP}")
    weights: dict[str, Decimal] = {}
    for item in raw[len(WEIGHTS) + 1:].split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise LedgerInputError(f"{flag}: {item.strip()!r} is not project=weight; use {POLICY_HELP}")
        try:
            w = Decimal(value.strip())
        except InvalidOperation:
            w = Decimal("NaN")
        if not w.is_finite() or not 0 <= w <= MAX_WEIGHT or (w and w.adjusted() < -12):
            raise LedgerInputError(f"{flag}: the weight of {name!r} must be 0 or a number from 1e-12 to 1e12, "
                                   f"got {value.strip()[:40]!r}")
        if name in weights:
            raise LedgerInputError(f"{flag}: project {name!r} is named twice; give each project one weight")
        weights[name] = w
    if sum(weights.values(), ZERO) <= 0:
        raise LedgerInputError(f"{flag}: the weights sum to zero; give at least one project a weight above 0")
    return IdlePolicy(WEIGHTS, tuple(sorted(weights.items())))


def check_policy(session: Session, text: Optional[str], flag: str = "--idle-share") -> IdlePolicy:
    """:func:`parse_policy`, and a weights policy may only name projects the ledger knows."""
    policy = parse_policy(text, flag)
    if policy.kind == WEIGHTS:
        known = set(session.exec(select(Project.name)).all())
        unknown = [p for p, _ in policy.weights if p not in known]
        if unknown:
            raise LedgerInputError(f"{flag}: unknown project {unknown[0]!r}; weights name projects of this ledger "
                                   f"({', '.join(sorted(known)) or 'none yet'})")
    return policy


def set_fleet_policy(session: Session, fleet: str, text: Optional[str], flag: str = "--idle-share") -> IdlePolicy:
    """Store ``fleet``'s policy (checked first: nothing is written on a bad one)."""
    policy = check_policy(session, text, flag)
    row = session.exec(select(Fleet).where(Fleet.name == fleet)).first()
    if row is None:
        raise LedgerInputError(f"NAME: no fleet named {fleet!r}")
    before = {"idle_share": row.idle_share or "none"}
    row.idle_share = None if policy.kind == NONE else policy.text()
    session.flush()
    record_change(session, "fleet.idle_policy", fleet, before, {"idle_share": row.idle_share or "none"})
    return policy


@dataclass
class Share:
    """One project's part of an origin charge."""

    project: str  # NO_PROJECT for runs without one
    ratio: Decimal  # of the origin charge; Σ ratios = 1 exactly (on RATIO_QUANTUM)
    amount: Decimal  # Σ amounts = the origin's idle exactly
    basis_unit: Optional[str]  # what the ratio was computed from ("Node-Hours", "Projects", "Weight")
    basis_quantity: Optional[Decimal]


@dataclass
class IdleCharge:
    """One origin charge: a fixed-cost offer's idle in one charge period, and how it was shared."""

    offer: Any  # the priced offer (trainledger.money.account.monthly.FleetCharge.offer)
    start: datetime
    end: datetime
    idle: Decimal
    idle_node_hours: Decimal
    policy: str  # the policy text ("none" when not shared; "mixed" never: fleets are split first)
    shares: list[Share] = field(default_factory=list)
    unshared: Decimal = ZERO  # what stays its own idle line
    note: str = ""  # why a part stays unshared

    @property
    def method_id(self) -> str:
        return f"trainledger/idle-share/{self.policy.split(':', 1)[0]}"


@dataclass
class IdleSharing:
    """The month's origin charges and, per project, its share of idle (exact)."""

    charges: list[IdleCharge]

    def by_project(self) -> dict[str, Decimal]:
        out: dict[str, Decimal] = defaultdict(lambda: ZERO)
        for c in self.charges:
            for s in c.shares:
                out[s.project] += s.amount
        return dict(out)

    @property
    def unshared(self) -> Decimal:
        return sum((c.unshared for c in self.charges), ZERO)

    @property
    def shared(self) -> Decimal:
        return sum((s.amount for c in self.charges for s in c.shares), ZERO)

    def policies(self) -> list[str]:
        return sorted({c.policy for c in self.charges})


def share_idle(session: Session, charges: Any) -> IdleSharing:
    """Share each fixed-cost fleet's idle of the month (``charges``: :class:`trainledger.money.account.monthly.MonthCharges`)
    under its fleets' policies; a weights policy naming a project the ledger no longer has is refused."""
    fleets = {f.name: f for f in session.exec(select(Fleet)).all()}
    policies = {name: check_policy(session, f.idle_share, f"fleet {name} idle_share") for name, f in fleets.items()}
    usage = _usage(charges.lines)
    period_end = charges.report.period.end if charges.report.period is not None else charges.end
    tz = _tz(charges.report.timezone)
    out: list[IdleCharge] = []
    for fc in charges.fleets:
        fm = fc.fleet
        idle = fm.idle
        idle_nh = fm.idle_node_hours if not fm.over_capacity else ZERO
        if not idle and not idle_nh:
            continue
        groups = _policy_groups([fleets[n] for n in fc.fleets if n in fleets], policies, fc.start,
                                max(fc.start, min(fc.end, period_end)), tz)
        used = usage.get((fc.start, fc.offer.id), {})
        for policy, part, part_nh in _split(idle, idle_nh, groups):
            out.append(_share_one(fc, policy, part, part_nh, used))
    return IdleSharing(out)


def _tz(name: str):
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def _usage(lines: list[Any]) -> dict[tuple[datetime, int], dict[str, Decimal]]:
    """(charge period start, offer id) → project → node-hours drawn from the fleet (per-period run lines)."""
    out: dict[tuple[datetime, int], dict[str, Decimal]] = defaultdict(lambda: defaultdict(lambda: ZERO))
    for line in lines:
        ch = line.charge
        if ch is None or ch.fleets is None:  # elastic: not drawn from a fleet
            continue
        out[(ch.start, ch.offer.id)][line.project or NO_PROJECT] += line.node_hours
    return out


def _policy_groups(fleets: list[Fleet], policies: dict[str, IdlePolicy], start: datetime, end: datetime,
                   tz: Any) -> list[tuple[IdlePolicy, Decimal]]:
    """The offer's fleets grouped by policy, with their capacity in the period (one group: weight 1)."""
    by: dict[IdlePolicy, list[Fleet]] = defaultdict(list)
    for f in fleets:
        by[policies[f.name]].append(f)
    if len(by) <= 1:
        return [(next(iter(by), SHOWBACK), ONE)]
    groups = [(p, fleet_capacity(fs, start, end, tz)) for p, fs in sorted(by.items(), key=lambda kv: kv[0].text())]
    groups = [(p, cap) for p, cap in groups if cap > 0]
    return groups or [(SHOWBACK, ONE)]


def _split(idle: Decimal, idle_nh: Decimal, groups: list[tuple[IdlePolicy, Decimal]]) -> list[tuple[IdlePolicy, Decimal, Decimal]]:
    if len(groups) == 1:
        return [(groups[0][0], idle, idle_nh)]
    weights = [w for _, w in groups]
    amounts, quantities = exact_parts(idle, weights), exact_parts(idle_nh, weights)
    return [(p, a, q) for (p, _), a, q in zip(groups, amounts, quantities)]


def exact_parts(total: Decimal, weights: list[Decimal]) -> list[Decimal]:
    """``total`` split by ``weights`` (Σ weights > 0): each part on :data:`QUANTUM` but the last, which takes
    the remainder, so Σ parts == total exactly."""
    w_total = sum(weights, ZERO)
    parts = [(total * w / w_total).quantize(QUANTUM) for w in weights[:-1]]
    return parts + [total - sum(parts, ZERO)]


def ratios(weights: list[Decimal]) -> list[Decimal]:
    """Ratios of ``weights`` on :data:`RATIO_QUANTUM` that add up to exactly 1 (largest remainder)."""
    w_total = sum(weights, ZERO)
    return round_preserving_sum([w / w_total for w in weights], quantum=RATIO_QUANTUM, total=ONE)


def _share_one(fc: Any, policy: IdlePolicy, idle: Decimal, idle_nh: Decimal, used: dict[str, Decimal]) -> IdleCharge:
    charge = IdleCharge(fc.offer, fc.start, fc.end, idle, idle_nh, policy.text())
    if policy.kind == NONE:
        charge.unshared = idle
        return charge
    if policy.kind == WEIGHTS:
        named = [(p, w) for p, w in policy.weights if w > 0]
        projects, basis, unit = [p for p, _ in named], [w for _, w in named], "Weight"
    else:
        projects = sorted(p for p, nh in used.items() if nh > 0)
        if not projects:
            charge.policy, charge.unshared = NONE, idle
            charge.note = f"{policy.kind}: no project drew on the fleet in this charge period; idle stays its own line"
            return charge
        if policy.kind == PROPORTIONAL:
            basis, unit = [used[p] for p in projects], "Node-Hours"
        else:
            basis, unit = [ONE] * len(projects), "Projects"
    amounts = exact_parts(idle, basis)
    charge.shares = [Share(p, r, a, unit, b) for p, r, a, b in zip(projects, ratios(basis), amounts, basis)]
    return charge
