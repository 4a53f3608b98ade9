"""The goodput account over the ledger: the monthly report's run lines split by category (:mod:`trainledger.money.goodput.account`).

For each month: :func:`trainledger.money.account.monthly.monthly_report` gives every run's cost in the month at its
own prices (``RunSlice.cost``, its ``lost_work_cost``) and the month's spend and idle. Each run's time
account (:func:`trainledger.money.goodput.account.account_seconds`) comes from its interval, its lost interval and its
``run_phase`` rows; the month's part of it is the run's lost time inside the month plus its kept time in
the month, split by its phases in the month (the writer's month-edge rows; without them the month's share
of its kept interval). The line's cost is then split (:func:`~trainledger.money.goodput.account.split_cost`)
so the categories add up to it exactly. ``recovery``: the gap between an interrupted run's end and the start
of the run that resumes it (``resume_of``), inside each month it covers, × its nodes (a month before the
resumed run's first: an account of the gap alone); on an owned or reserved fleet priced at that fleet's own
idle rate of the month (its idle cost ÷ its idle node-hours, for the offer the run drew on; node-hours on
elastic rent of the same node type play no part) and taken out of that fleet's idle (never more than the idle
there is); on elastic rent the gap was not paid (time only). Identity, per month: goodput + badput +
idle = spend, exactly (idle is the report's idle less recovery; ``identity_residual`` is what rounding
of the report's own lines leaves, ~1e-20).
"""

from __future__ import annotations

import gc
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterator, Optional

from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import MonthlyReport, RunSlice, monthly_report
from trainledger.money.goodput.goodput_core import (
    BADPUT,
    CATEGORIES,
    EDGE_MARK,
    NAMED,
    PHASES,
    QUALITY_PREFIX,
    ZERO,
    Category,
    GoodputReport,
    MonthAccount,
    PhaseTotal,
    RunAccount,
    account_seconds,
    goodput_ratio,
    on_grid,
    split_cost,
    sum_categories,
    zero_account,
)
from trainledger.money.rates.costs import hours_between
from trainledger.money.rates.months import (
    check_month,
    lost_interval,
    month_bounds,
    month_of,
    months_between,
    run_interval,
)
from trainledger.store.models import WASTE_STATUSES, NodeType, Offer, Project, Run, RunPhase
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

HUNDRED = Decimal(100)
FIXED_KINDS = ("own", "rent_reserved")
_CHUNK = 900


@dataclass
class _RunInfo:
    id: str
    started: Optional[datetime]
    ended: Optional[datetime]
    status: str
    heartbeat: Optional[datetime]
    last_ckpt: Optional[datetime]
    nodes: int
    resume_of: Optional[str]

    def interval(self, now: datetime) -> Optional[tuple[datetime, datetime]]:
        return run_interval(self.started, self.ended, self.status, self.heartbeat, now)


def _seconds(a: datetime, b: datetime) -> Decimal:
    return hours_between(a, b) * 3600


def _overlap(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> Decimal:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return _seconds(lo, hi) if hi > lo else ZERO


def _load_runs(session: Session, ids: set[str]) -> dict[str, _RunInfo]:
    out: dict[str, _RunInfo] = {}
    ordered = sorted(ids)
    for i in range(0, len(ordered), _CHUNK):
        for r in session.exec(select(Run.id, Run.started_at, Run.ended_at, Run.status, Run.heartbeat_at,
                                     Run.last_checkpoint_at, Run.nodes, Run.resume_of)
                              .where(col(Run.id).in_(ordered[i:i + _CHUNK]))):
            out[r[0]] = _RunInfo(r[0], r[1], r[2], getattr(r[3], "value", r[3]), r[4], r[5], r[6], r[7])
    return out


def _with_ancestors(session: Session, runs: dict[str, _RunInfo]) -> None:
    """Add the runs that the given ones resume (and theirs), for recovery gaps and chain roots."""
    for _ in range(1000):
        missing = {r.resume_of for r in runs.values() if r.resume_of and r.resume_of not in runs}
        if not missing:
            return
        found = _load_runs(session, missing)
        for rid in missing - found.keys():  # resumes a run the ledger does not have: the chain starts here
            runs[rid] = _RunInfo(rid, None, None, "", None, None, 0, None)
        runs.update(found)


def _load_phases(session: Session, ids: list[str]) -> tuple[dict, dict[str, list[str]], dict]:
    """run → node → phase → PhaseTotal, run → the writer's data-quality notes, and run → node → month edge →
    phase → PhaseTotal (the cumulative totals at that instant, ``trainledger.sources.record.phases``' ``<phase>@<edge>`` rows)."""
    phases: dict[str, dict[str, dict[str, PhaseTotal]]] = defaultdict(lambda: defaultdict(dict))
    edges: dict[str, dict[str, dict[datetime, dict[str, PhaseTotal]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(dict)))
    notes: dict[str, list[str]] = defaultdict(list)
    for i in range(0, len(ids), _CHUNK):
        rows = session.exec(select(RunPhase.run_id, RunPhase.node, RunPhase.phase, RunPhase.seconds, RunPhase.count,
                                   RunPhase.ckpt_seconds, RunPhase.ckpt_count)
                            .where(col(RunPhase.run_id).in_(ids[i:i + _CHUNK]))).all()
        for rid, node, phase, secs, count, ck_s, ck_n in rows:
            if phase.startswith(QUALITY_PREFIX):
                notes[rid].append(f"node {node}: {count} × {phase[len(QUALITY_PREFIX):]} (clipped when recorded)")
            elif EDGE_MARK in phase:
                name, _, at = phase.partition(EDGE_MARK)
                try:
                    edge = datetime.fromisoformat(at)
                except ValueError:
                    continue
                edges[rid][node][edge][name] = PhaseTotal(secs or 0.0, count or 0, ck_s, ck_n)
            else:
                phases[rid][node][phase] = PhaseTotal(secs or 0.0, count or 0, ck_s, ck_n)
    return phases, notes, edges


def _phases_between(phases: dict[str, dict[str, PhaseTotal]], edges: dict[str, dict[datetime, dict[str, PhaseTotal]]],
                    interval: tuple[datetime, datetime], part: tuple[datetime, datetime]) -> Optional[dict]:
    """Each node's phase totals inside ``part`` of the run's ``interval``: the totals at ``part``'s end less those
    at its start (0 at the run's start, the run's totals at its end, the writer's month-edge rows between).
    None when the run lies in one part (nothing to split) or a node lacks an edge row (then spread evenly)."""
    lo, hi = part
    if not phases or (lo <= interval[0] and hi >= interval[1]):
        return None
    out: dict[str, dict[str, PhaseTotal]] = {}
    for node, rows in phases.items():
        at = edges.get(node, {})

        def cumulative(x: datetime) -> Optional[dict[str, PhaseTotal]]:
            if x <= interval[0]:
                return {}
            return rows if x >= interval[1] else at.get(x)
        a, b = cumulative(lo), cumulative(hi)
        if a is None or b is None:
            return None
        out[node] = {}
        for name in PHASES:
            if name not in b:
                continue
            hi_row, lo_row = b[name], a.get(name, PhaseTotal(0.0, 0, None if b[name].ckpt_seconds is None else 0.0, 0))
            ck = None if hi_row.ckpt_seconds is None else hi_row.ckpt_seconds - (lo_row.ckpt_seconds or 0.0)
            out[node][name] = PhaseTotal(hi_row.seconds - lo_row.seconds, hi_row.count - lo_row.count, ck,
                                         None if ck is None else (hi_row.ckpt_count or 0) - (lo_row.ckpt_count or 0))
    return out


def _chain_root(runs: dict[str, _RunInfo], rid: str) -> str:
    seen = {rid}
    while runs.get(rid) is not None and runs[rid].resume_of and runs[rid].resume_of not in seen:
        rid = runs[rid].resume_of
        seen.add(rid)
    return rid


def _recovery_gap(runs: dict[str, _RunInfo], run: _RunInfo, now: datetime) -> Optional[tuple[datetime, datetime]]:
    """The held time between the interrupted run this one resumes and this one's start."""
    prev = runs.get(run.resume_of) if run.resume_of else None
    mine = run.interval(now)
    if prev is None or mine is None or prev.status not in {s.value for s in WASTE_STATUSES}:
        return None
    theirs = prev.interval(now)
    if theirs is None or theirs[1] >= mine[0]:
        return None
    return theirs[1], mine[0]


def _idle_rates(rep: MonthlyReport) -> dict[tuple[str, str], tuple[Decimal, Decimal]]:
    """(node type, fixed-cost offer) → (the fleet's idle cost ÷ its idle node-hours in the month, its idle cost):
    each fleet's own rate (``FleetUse.idle_rate``), not one of the node type's node-hours (elastic ones included)."""
    return {(nt.node_type, f.offer): (f.idle_rate, f.idle_cost) for nt in rep.node_types for f in nt.fleets
            if f.idle_rate is not None}


class _MonthBuilder:
    """One month's run accounts from the report's lines."""

    def __init__(self, session: Session, rep: MonthlyReport, now: datetime, tz):
        self.session, self.rep, self.now = session, rep, now
        self.bounds = month_bounds(rep.month, tz)
        ids = {line.run_id for line in rep.runs}
        self.runs = _load_runs(session, ids)
        _with_ancestors(session, self.runs)
        self.phases, self.notes, self.edges = _load_phases(session, sorted(ids))
        self.idle = _idle_rates(rep)
        self.offer_of = {line.run_id: line.offer for line in rep.runs}  # the offer each run's line drew on

    def build(self) -> tuple[MonthAccount, list[RunAccount]]:
        accounts = [self._run(line) for line in self.rep.runs]
        accounts += self._gaps_only(accounts)
        self._price_recovery(accounts)
        return self._month(accounts), accounts

    def _gaps_only(self, accounts: list[RunAccount]) -> list[RunAccount]:
        """Recovery inside this month of chains whose resumed run has no cost in it (it starts in a later month):
        an account with the gap's part of the month and no run cost, so recovery lands where it happened."""
        have = {a.run_id for a in accounts}
        lo, hi = self.bounds
        prev = aliased(Run)
        found = [rid for rid in self.session.exec(
            select(Run.id).join(prev, prev.id == Run.resume_of).where(Run.started_at > lo, prev.started_at < hi))
            if rid not in have]
        if not found:
            return []
        runs = _load_runs(self.session, set(found))
        _with_ancestors(self.session, runs)
        self.runs.update({k: v for k, v in runs.items() if k not in self.runs})
        by_run = {a.run_id: a for a in accounts}
        out = []
        for rid in sorted(found):
            run = self.runs[rid]
            gap = _recovery_gap(self.runs, run, self.now)
            secs = self._recovery_in_month(gap, run)
            if secs <= 0:
                continue
            name, project, node_type, kind = self._describe(rid, by_run.get(run.resume_of))
            seconds = zero_account()
            seconds[Category.recovery] = secs
            out.append(RunAccount(
                run_id=rid, name=name, project=project, status=run.status, node_type=node_type, offer_kind=kind,
                nodes=run.nodes, month=self.rep.month, start=max(gap[0], lo), end=min(gap[1], hi),
                resume_of=run.resume_of, chain=_chain_root(self.runs, rid), seconds=seconds, cost=zero_account(),
                run_cost=ZERO, recovery_cost=ZERO, total_cost=ZERO, goodput_pct=None))
        return out

    def _describe(self, run_id: str, interrupted: Optional[RunAccount]) -> tuple[str, str, str, str]:
        """Name, project, node type and offer kind of a run without a line this month (node type and offer:
        the interrupted run's line when it has one here, else the run's own recorded offer)."""
        row = self.session.exec(select(Run.name, Project.name, NodeType.name, Offer.kind)
                                .outerjoin(Project, Project.id == Run.project_id)
                                .outerjoin(NodeType, NodeType.id == Run.node_type_id)
                                .outerjoin(Offer, Offer.id == Run.offer_id).where(Run.id == run_id)).one()
        if interrupted is not None:
            return row[0] or "", row[1] or "", interrupted.node_type, interrupted.offer_kind
        return row[0] or "", row[1] or "", row[2] or "", getattr(row[3], "value", row[3]) or ""

    def _run(self, line: RunSlice) -> RunAccount:
        run = self.runs[line.run_id]
        interval = run.interval(self.now) or (line.start, line.end)
        lost = lost_interval(run.status, interval, run.last_ckpt)
        gap = _recovery_gap(self.runs, run, self.now)
        quality = list(self.notes.get(run.id, []))
        wall_s = _seconds(*interval)
        lost_s = _seconds(*lost) if lost else ZERO
        part = (line.start, line.end)
        by_month = _phases_between(self.phases.get(run.id, {}), self.edges.get(run.id, {}), interval, part)
        if by_month is not None:  # phases at the time they happened: the month's own time account
            seconds = account_seconds(_overlap(interval, part), _overlap(lost, part) if lost else ZERO, run.nodes,
                                      by_month, lost is not None, ZERO, quality)
            seconds[Category.recovery] = self._recovery_in_month(gap, run)
        else:
            whole = account_seconds(wall_s, lost_s, run.nodes, self.phases.get(run.id, {}), lost is not None,
                                    ZERO, quality)
            seconds = self._in_month(whole, run, interval, lost, gap, part)
        weights = {c: seconds[c] for c in CATEGORIES if c not in (Category.lost_work, Category.recovery)}
        cost = split_cost(line.cost, line.lost_work_cost, weights)
        return RunAccount(
            run_id=run.id, name=line.name, project=line.project, status=line.status, node_type=line.node_type,
            offer_kind=line.offer_kind, nodes=run.nodes, month=self.rep.month, start=line.start, end=line.end,
            resume_of=run.resume_of, chain=_chain_root(self.runs, run.id), seconds=seconds, cost=cost,
            run_cost=on_grid(line.cost), recovery_cost=ZERO, total_cost=on_grid(line.cost), goodput_pct=None,
            data_quality=quality)

    def _in_month(self, whole: dict[Category, Decimal], run: _RunInfo, interval: tuple[datetime, datetime],
                  lost: Optional[tuple[datetime, datetime]], gap: Optional[tuple[datetime, datetime]],
                  part: tuple[datetime, datetime]) -> dict[Category, Decimal]:
        """The month's node-seconds of a run without month-edge rows: its lost time in the month, its kept time
        spread evenly over its kept interval, and the recovery gap's part in the month."""
        n = Decimal(max(1, run.nodes or 1))
        kept = (interval[0], lost[0]) if lost else interval
        kept_s = _seconds(*kept)
        share = (_overlap(kept, part) / kept_s) if kept_s > 0 else ZERO
        out = {c: (whole[c] * share) for c in CATEGORIES}
        out[Category.lost_work] = (_overlap(lost, part) * n) if lost else ZERO
        out[Category.recovery] = self._recovery_in_month(gap, run)
        return out

    def _recovery_in_month(self, gap: Optional[tuple[datetime, datetime]], run: _RunInfo) -> Decimal:
        """The recovery gap's node-seconds inside this month (where it happened, whichever month the run starts)."""
        return _overlap(gap, self.bounds) * Decimal(max(1, run.nodes or 1)) if gap is not None else ZERO

    def _fleet_of(self, a: RunAccount) -> tuple[str, str]:
        """(node type, offer) of the fleet an account's recovery held: its line's offer, else (an account of a gap
        alone) the interrupted run's line's, else the resumed run's recorded offer."""
        offer = self.offer_of.get(a.run_id) or self.offer_of.get(a.resume_of or "")
        if offer is None:
            offer = self.session.exec(select(Offer.name).join(Run, Run.offer_id == Offer.id)
                                      .where(Run.id == a.run_id)).first() or ""
        return a.node_type, offer

    def _price_recovery(self, accounts: list[RunAccount]) -> None:
        """Recovery on a fixed-cost fleet at that fleet's idle rate, never more than its idle in total."""
        wanted: dict[tuple[str, str], Decimal] = defaultdict(lambda: ZERO)
        fleet = {id(a): self._fleet_of(a) for a in accounts
                 if a.seconds[Category.recovery] > 0 and a.offer_kind in FIXED_KINDS}
        for a in accounts:
            if id(a) in fleet and fleet[id(a)] in self.idle:
                wanted[fleet[id(a)]] += a.seconds[Category.recovery] / 3600 * self.idle[fleet[id(a)]][0]
        for a in accounts:
            key = fleet.get(id(a))
            if key is None or not wanted.get(key):
                continue
            rate, idle = self.idle[key]
            price = a.seconds[Category.recovery] / 3600 * rate
            if wanted[key] > idle:  # more recovery than idle (inconsistent data): shared pro rata
                price = idle * price / wanted[key]
                a.data_quality.append("recovery longer than the fleet's idle time: priced pro rata")
            price = on_grid(price)
            a.recovery_cost = price
            a.cost[Category.recovery] = price
            a.total_cost = a.run_cost + price
        for a in accounts:
            a.goodput_pct = _pct(a.cost[Category.productive], a.total_cost)

    def _month(self, accounts: list[RunAccount]) -> MonthAccount:
        s = self.rep.summary
        spend = on_grid(s["actual_cost"])
        by = sum_categories(a.cost for a in accounts)
        secs = sum_categories(a.seconds for a in accounts)
        goodput = by[Category.productive]
        badput = sum((by[c] for c in BADPUT), ZERO)
        total_s = sum(secs.values(), ZERO)
        return MonthAccount(month=self.rep.month, currency=self.rep.currency, spend=spend, goodput=goodput,
                            badput=badput, idle=spend - goodput - badput, by_category=by, seconds=secs,
                            goodput_pct=_pct(goodput, spend), ettr=goodput_ratio(secs[Category.productive], total_s),
                            period=s.get("period", ""), runs=len(self.rep.runs))


def _ratio(x: Optional[Decimal]) -> Optional[float]:
    return None if x is None else float(x.quantize(Decimal("0.0001")))


def run_accounts(session: Session, rep: MonthlyReport, now: Optional[datetime] = None) -> list[RunAccount]:
    """The goodput account of every run line of an already computed monthly report (the exports use it)."""
    lines = {line.run_id for line in rep.runs}
    return [a for a in month_account(session, rep, now)[1] if a.run_id in lines]


def month_account(session: Session, rep: MonthlyReport,
                  now: Optional[datetime] = None) -> tuple[MonthAccount, list[RunAccount]]:
    """The month's account and its runs' (gaps of recovery alone included) from an already computed monthly report
    with its run lines (``lines=True``; without them every run's cost would read as idle: refused)."""
    if rep.summary.get("runs") and not rep.runs:
        raise ValueError("month_account: the monthly report needs its run lines (monthly_report(..., lines=True))")
    with _gc_paused():
        macc, accounts = _MonthBuilder(session, rep, now or utcnow(), display_timezone(session)).build()
    macc.identity_residual = (rep.summary["idle_cost"] - sum((a.recovery_cost for a in accounts), ZERO)) - macc.idle
    return macc, accounts


def report_account(session: Session, rep: MonthlyReport, now: Optional[datetime] = None) -> GoodputReport:
    """``goodput_account(month=rep.month)`` (no project or run filter) from an already computed monthly report with
    its run lines: a command or page that has the report computes the month's account once, from it."""
    macc, accounts = month_account(session, rep, now)
    return GoodputReport(months=[macc], runs=accounts, totals=_totals([macc], accounts, None, None),
                         currency=rep.currency)


def _pct(part: Decimal, whole: Decimal) -> Optional[Decimal]:
    r = goodput_ratio(part, whole)
    return None if r is None else r * HUNDRED


def _months(session: Session, month: Optional[str], run_id: Optional[str], tz, now: datetime) -> list[str]:
    if month:
        return [check_month(month)]
    if run_id:
        run = session.get(Run, run_id)
        if run is None:
            raise LedgerInputError(f"--run: no run {run_id!r} in the ledger")
        iv = run_interval(run.started_at, run.ended_at, getattr(run.status, "value", run.status), run.heartbeat_at,
                          now)
        if iv is None:
            return [month_of(now, tz)]
        return months_between(month_of(iv[0], tz), month_of(iv[1], tz))
    return [month_of(now, tz)]


def build_account(session: Session, *, month: Optional[str] = None, project: Optional[str] = None,
                  run_id: Optional[str] = None, currency: Optional[str] = None,
                  now: Optional[datetime] = None) -> GoodputReport:
    """:func:`trainledger.money.goodput.account.goodput_account`: months, runs (filtered), chains, projects and totals."""
    with _gc_paused():
        return _build(session, month, project, run_id, currency, now or utcnow())


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The account allocates small objects per run beside the report's millions: cyclic GC passes over that heap
    would cost more than the account itself (nothing here makes cycles); collection resumes afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _build(session: Session, month: Optional[str], project: Optional[str], run_id: Optional[str],
           currency: Optional[str], now: datetime) -> GoodputReport:
    tz = display_timezone(session)
    if project is not None and session.exec(select(Project.id).where(Project.name == project)).first() is None:
        raise LedgerInputError(f"--project: no project {project!r} in the ledger")
    months, runs, currency_used = [], [], currency or ""
    for m in _months(session, month, run_id, tz, now):
        rep = monthly_report(session, m, now=now, currency=currency, projects=False)
        macc, accounts = month_account(session, rep, now)
        months.append(macc)
        runs += [a for a in accounts if (project is None or a.project == project) and (run_id is None or a.run_id == run_id)]
        currency_used = rep.currency
    if run_id is not None and not runs:
        raise LedgerInputError(f"--run: run {run_id!r} has no cost in {', '.join(mc.month for mc in months)}")
    return GoodputReport(months=months, runs=runs, totals=_totals(months, runs, project, run_id),
                         currency=currency_used)


def _totals(months: list[MonthAccount], runs: list[RunAccount], project: Optional[str],
            run_id: Optional[str]) -> dict[str, Any]:
    if project is None and run_id is None:
        spend = sum((m.spend for m in months), ZERO)
        by = sum_categories(m.by_category for m in months)
        secs = sum_categories(m.seconds for m in months)
        idle = sum((m.idle for m in months), ZERO)
    else:
        spend = sum((r.total_cost for r in runs), ZERO)
        by = sum_categories(r.cost for r in runs)
        secs = sum_categories(r.seconds for r in runs)
        idle = None
    goodput = by[Category.productive]
    return {"spend": spend, "goodput_cost": goodput, "badput_cost": sum((by[c] for c in BADPUT), ZERO),
            "account_idle_cost": idle, "goodput_pct": _pct(goodput, spend),
            "ettr": _ratio(goodput_ratio(secs[Category.productive], sum(secs.values(), ZERO))),
            "cost": {name: by[c] for c, name in NAMED}, "node_hours": {name: secs[c] / 3600 for c, name in NAMED},
            "node_seconds": {name: secs[c] for c, name in NAMED},
            "scope": "month" if project is None and run_id is None else ("project" if run_id is None else "run")}


def load_timeline(session: Session, run_id: str) -> list[dict[str, Any]]:
    rows = session.exec(select(RunPhase).where(RunPhase.run_id == run_id, ~col(RunPhase.phase).contains(EDGE_MARK))
                        .order_by(RunPhase.node, RunPhase.first_at,
                                                                                    RunPhase.phase)).all()
    return [{"node": r.node, "phase": r.phase, "seconds": r.seconds, "count": r.count, "ckpt_seconds": r.ckpt_seconds,
             "first_at": r.first_at, "last_at": r.last_at} for r in rows]


__all__ = ["build_account", "load_timeline", "month_account", "report_account", "run_accounts", "zero_account"]
