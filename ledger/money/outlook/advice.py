"""Advice that pays: the checkpoint interval each run family should use, from the ledger's own interruptions.

A *family* is the runs of one node type on one node count (``rtx4090-8x × 2``). Over a window of
months (default: the 3 months ending with ``--month``, in the display time zone), per family:

* **exposure** E: the family's run wall time in the window (runs that ended in it, start to end);
* **interruptions** k: its runs that ended ``failed``, ``crashed`` or ``cancelled`` in the window (the
  runs whose work since their last checkpoint is lost work in the monthly report);
* **MTBI** = E ÷ k (the maximum-likelihood estimate of the mean of exponentially distributed times
  between interruptions, successful runs counted as censored exposure); none when k = 0;
* **save time** δ: the measured mean blocking checkpoint save, Σ seconds ÷ Σ saves of the family's
  ``checkpoint_save`` phase rows (``run_phase``: ``run.checkpoint(seconds=)``, ``run.phase("checkpoint_save")``,
  the callbacks' ``on_save``), or ``--save-seconds`` as an assumption;
* **current interval**: the family's wall time of runs that saved ÷ their saves (per node, averaged);
* **suggested interval** (Young/Daly, first order) τ* = sqrt(2 · MTBI · δ).

**What each interval would have cost** (a replay of the window's runs, per month they ended in):
checkpoints at τ, 2τ, ... after each run's start; an interrupted run of wall time t loses
t − τ·⌊t/τ⌋ (all of t with no checkpoint), every run pays ⌊t/τ⌋ saves of δ; both priced at the
family's cost per node-hour in that month (Σ its runs' monthly-report cost ÷ their node-hours) × its
nodes. ``measured_lost_work_cost`` is the monthly report's own lost work of those runs, for comparison.
Assumptions, first order: interruptions independent of the interval and of each other (exponential),
the save blocks training for δ and restarts cost the same under both intervals (they are not in the
comparison), the run's wall time does not stretch with more or fewer saves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlalchemy import func, select
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.goodput_core import PHASE_SAVE
from trainledger.money.rates import costs
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.months import month_bounds, month_of, months_between
from trainledger.store.models import WASTE_STATUSES, NodeType, Run, RunPhase, RunStatus
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

SAVE_PHASE = PHASE_SAVE  # the phase a blocking checkpoint save is recorded under
WINDOW_MONTHS = 3
INTERRUPTED = tuple(s.value for s in WASTE_STATUSES)
MICRO = Decimal("0.000001")


def young_daly_interval_hours(mtbi_hours: Decimal, save_hours: Decimal) -> Decimal:
    """Young/Daly's first-order optimal checkpoint interval τ* = sqrt(2 · MTBI · δ) (hours in, hours out)."""
    return (2 * Decimal(mtbi_hours) * Decimal(save_hours)).sqrt()


def replay(wall_hours: list[Decimal], interrupted: list[bool], interval_hours: Optional[Decimal]
           ) -> tuple[Decimal, int]:
    """Lost hours and saves of runs of ``wall_hours`` had they checkpointed every ``interval_hours`` (None: never):
    an interrupted run loses t − τ·⌊t/τ⌋, every run saves ⌊t/τ⌋ times."""
    lost, saves = ZERO, 0
    for t, hit in zip(wall_hours, interrupted):
        n = int(t // interval_hours) if interval_hours else 0
        saves += n
        if hit:
            lost += t - interval_hours * n if interval_hours else t
    return lost, saves


@dataclass
class _Family:
    node_type: str
    nodes: int
    runs: list[tuple[str, str, str, Decimal]] = field(default_factory=list)  # (run id, month ended, status, wall h)
    save_seconds: Decimal = ZERO
    saves: int = 0
    saved_wall_hours: Decimal = ZERO  # wall time of the runs that saved
    node_saves: Decimal = ZERO  # saves per run (Σ over nodes ÷ nodes reporting), summed

    @property
    def exposure_hours(self) -> Decimal:
        return sum((r[3] for r in self.runs), ZERO)

    @property
    def interruptions(self) -> int:
        return sum(1 for r in self.runs if r[2] in INTERRUPTED)


def window(month: str, months: int = WINDOW_MONTHS) -> list[str]:
    """The ``months`` months ending with ``month``."""
    y, m = int(month[:4]), int(month[5:7])
    idx = y * 12 + m - 1 - (months - 1)
    return months_between(f"{idx // 12:04d}-{idx % 12 + 1:02d}", month)


def _families(session: Session, start: datetime, end: datetime, tz: Any) -> dict[tuple[str, int], _Family]:
    """The runs that ended in [start, end), by family, with their wall hours and the month they ended in."""
    out: dict[tuple[str, int], _Family] = {}
    rows = session.exec(select(Run.id, NodeType.name, Run.nodes, Run.status, Run.started_at, Run.ended_at)
                        .join(NodeType, NodeType.id == Run.node_type_id)
                        .where(Run.started_at.is_not(None), Run.ended_at.is_not(None), Run.ended_at >= start,
                               Run.ended_at < end, Run.status != RunStatus.running)).all()
    for rid, nt, nodes, status, s, e in rows:
        fam = out.setdefault((nt, nodes), _Family(nt, nodes))
        fam.runs.append((rid, month_of(e, tz), getattr(status, "value", status), costs.hours_between(s, e)))
    return out


def _measure_saves(session: Session, fams: dict[tuple[str, int], _Family]) -> None:
    """Each family's checkpoint saves from ``run_phase`` (aggregated in SQL per run)."""
    by_run = {r[0]: (f, r[3]) for f in fams.values() for r in f.runs}
    ids = sorted(by_run)
    for i in range(0, len(ids), 500):
        q = (select(RunPhase.run_id, func.sum(RunPhase.seconds), func.sum(RunPhase.count), func.count())
             .where(RunPhase.run_id.in_(ids[i:i + 500]), RunPhase.phase == SAVE_PHASE).group_by(RunPhase.run_id))
        for rid, secs, count, nodes in session.exec(q):
            if not count:
                continue
            fam, wall = by_run[rid]
            fam.save_seconds += Decimal(repr(float(secs)))
            fam.saves += int(count)
            fam.saved_wall_hours += wall
            fam.node_saves += Decimal(int(count)) / Decimal(nodes)


def _lines(session: Session, months: list[str], run_ids: set[str], currency: Optional[str], now: datetime
           ) -> tuple[dict[tuple[str, str], tuple[Decimal, Decimal, Decimal]], str]:
    """(month, run id) → (cost, node-hours, lost work cost) of the run's line in that month (the monthly
    report's), and the currency of the reports."""
    out, cur = {}, ""
    for m in months:
        rep = monthly_report(session, m, lines=run_ids, projects=False, now=now, currency=currency)
        cur = rep.currency
        for line in rep.runs:
            out[(m, line.run_id)] = (line.cost, line.node_hours, line.lost_work_cost)
    return out, cur


def _month_rows(fam: _Family, months: list[str], lines: dict, intervals: dict[str, Optional[Decimal]],
                save_h: Optional[Decimal]) -> list[dict[str, Any]]:
    rows = []
    for m in months:
        runs = [r for r in fam.runs if r[1] == m]
        mine = [lines[(m, r[0])] for r in fam.runs if (m, r[0]) in lines]  # the family's lines in the month
        node_hours = sum((x[1] for x in mine), ZERO)
        rate = sum((x[0] for x in mine), ZERO) / node_hours if node_hours else None
        row: dict[str, Any] = {"month": m, "runs": len(runs), "interruptions": sum(1 for r in runs if r[2] in INTERRUPTED),
                               "cost_per_node_hour": rate,
                               "measured_lost_work_cost": sum((x[2] for x in mine), ZERO)}
        for name, tau in intervals.items():
            lost_h, saves = replay([r[3] for r in runs], [r[2] in INTERRUPTED for r in runs], tau)
            ckpt_h = saves * save_h if save_h is not None else None
            row[f"{name}_lost_work_cost"] = lost_h * fam.nodes * rate if rate is not None else None
            row[f"{name}_checkpoint_cost"] = (ckpt_h * fam.nodes * rate if rate is not None and ckpt_h is not None
                                              else None)
        rows.append(row)
    return rows


def _advise_family(fam: _Family, months: list[str], lines: dict, save_seconds: Optional[Decimal]) -> dict[str, Any]:
    k = fam.interruptions
    mtbi = fam.exposure_hours / k if k else None
    measured_save = (fam.save_seconds / fam.saves).quantize(MICRO) if fam.saves else None  # µs, as measured
    save_s = save_seconds if save_seconds is not None else measured_save
    current = fam.saved_wall_hours / fam.node_saves if fam.node_saves else None
    suggested = young_daly_interval_hours(mtbi, save_s / 3600) if mtbi is not None and save_s else None
    out = {"node_type": fam.node_type, "nodes": fam.nodes, "runs": len(fam.runs), "interruptions": k,
           "exposure_hours": fam.exposure_hours, "mtbi_hours": mtbi, "save_seconds": save_s,
           "save_seconds_basis": "assumed" if save_seconds is not None else ("measured" if measured_save else None),
           "current_interval_hours": current, "suggested_interval_hours": suggested, "note": _note(k, save_s, current)}
    rows = _month_rows(fam, months, lines, {"current": current, "suggested": suggested},
                       save_s / 3600 if save_s is not None else None)
    out["months"] = rows
    for name in ("current", "suggested"):
        for what in ("lost_work_cost", "checkpoint_cost"):
            vals = [r[f"{name}_{what}"] for r in rows]
            out[f"{name}_monthly_{what}"] = (sum(vals, ZERO) / len(vals)) if vals and None not in vals else None
    cur, sug = out["current_monthly_lost_work_cost"], out["suggested_monthly_lost_work_cost"]
    cur_ck, sug_ck = out["current_monthly_checkpoint_cost"], out["suggested_monthly_checkpoint_cost"]
    out["monthly_saving_cost"] = ((cur + (cur_ck or ZERO)) - (sug + sug_ck) if None not in (cur, sug, sug_ck) else None)
    return out


def _note(k: int, save_s: Optional[Decimal], current: Optional[Decimal]) -> str:
    if not k:
        return "no interruption in the window: no MTBI, nothing to advise"
    if not save_s:
        return ("no checkpoint save time measured: record saves (run.checkpoint(seconds=...) or "
                "run.phase('checkpoint_save')) or pass --save-seconds")
    return "" if current is not None else "no checkpoint recorded: every interruption lost the whole run"


def advise(session: Session, month: Optional[str] = None, *, months: int = WINDOW_MONTHS,
           save_seconds: Optional[Decimal] = None, currency: Optional[str] = None,
           now: Optional[datetime] = None) -> dict[str, Any]:
    """Per run family: MTBI, measured save time, current and suggested (Young/Daly) checkpoint intervals, and the
    lost-work and checkpoint cost per month each would have given over the window (see the module docstring)."""
    now = now or utcnow()
    tz = display_timezone(session)
    month = month or month_of(now, tz)
    if months < 1:
        raise LedgerInputError(f"--months: expected 1 or more, got {months}")
    if save_seconds is not None and save_seconds <= 0:
        raise LedgerInputError(f"--save-seconds: expected a positive number of seconds, got {save_seconds}")
    ms = window(month, months)
    start, end = month_bounds(ms[0], tz)[0], min(month_bounds(ms[-1], tz)[1], now)
    fams = _families(session, start, end, tz)
    _measure_saves(session, fams)
    ids = {r[0] for f in fams.values() for r in f.runs}
    lines, cur = _lines(session, ms, ids, currency, now)
    out = [_advise_family(f, ms, lines, save_seconds) for _, f in sorted(fams.items())]
    return {"months": ms, "timezone": str(tz), "currency": cur,
            "model": "tau* = sqrt(2 * MTBI * save time) (Young/Daly, first order)", "families": out}
