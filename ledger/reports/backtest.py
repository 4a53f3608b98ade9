"""The forecast's back-test: ``trainledger forecast --backtest``.

For every month of the ledger that has ended, the forecast
(:func:`trainledger.money.outlook.forecast.forecast`) is made as it would have been made at
the end of the month's 7th, 14th and 21st day, and compared with what the month
actually cost (:func:`trainledger.money.account.monthly.monthly_report`).

"As it would have been made" means on the ledger as it stood then: the runs are
copied into a scratch SQLite ledger (catalog, fleets, settings, projects, users,
runs and their nodes; no metric samples), then **cut** at each instant, latest
first: runs that had not started are removed, runs that were going on are made
``running`` with their heartbeat at that instant (tokens by their share of the
time; measured energy only counts for ended runs), and the rollup is rebuilt.
Cutting an already cut ledger at an earlier instant gives the same ledger as
cutting the original there, so one copy serves every instant.
"""

from __future__ import annotations

import statistics
import tempfile
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Optional

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.engine import Connection
from sqlmodel import Session, SQLModel
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.money.outlook.forecast import DEFAULT_WINDOW_DAYS, FIGURES, forecast
from trainledger.money.rates import costs
from trainledger.money.rates.months import date_start, month_bounds, month_of, months_between, run_interval, time_share
from trainledger.store.db import make_engine
from trainledger.store.models import (
    AuditLog,
    MetricSample,
    RollupMonth,
    RollupPeak,
    RollupSlice,
    Run,
    RunNode,
    RunPhase,
    RunStatus,
    Setting,
)
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

DEFAULT_DAYS = (7, 14, 21)
SKIPPED_TABLES = {MetricSample.__tablename__, RollupSlice.__tablename__, RollupMonth.__tablename__,
                  RollupPeak.__tablename__, RunPhase.__tablename__,  # phases: the forecast does not read them
                  AuditLog.__tablename__}  # nor the audit log


def backtest(session: Session, *, days: Iterable[int] = DEFAULT_DAYS, window_days: int = DEFAULT_WINDOW_DAYS,
             months: Optional[list[str]] = None, now: Optional[datetime] = None) -> dict[str, Any]:
    """Forecast every ended month (or ``months``) from its first ``days`` days; errors against the actual month."""
    now = now or utcnow()
    tz = display_timezone(session)
    days = sorted({int(d) for d in days})
    if not days or days[0] < 1 or days[-1] > 27:
        raise LedgerInputError(f"--days: days of the month to forecast from, 1 to 27, got {days!r}")
    months = _ended_months(session, tz, now) if months is None else months
    if not months:
        raise LedgerInputError("backtest: no month of this ledger has ended yet; nothing to test the forecast on")
    actual = {m: monthly_report(session, m, now=now, lines=False) for m in months}
    instants = sorted(((date_start(month_bounds(m, tz)[0].astimezone(tz).date() + timedelta(days=d), tz), m, d)
                       for m in months for d in days), reverse=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainledger-backtest-") as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'asof.db'}", upgrade=False)
        try:
            SQLModel.metadata.create_all(engine)
            with Session(engine) as copy:
                _copy(session.connection(), copy.connection(), min(instants)[0] - timedelta(days=window_days + 1))
                copy.commit()
                for t, m, d in instants:
                    _cut(copy, t, now)
                    f = forecast(copy, m, now=t, window_days=window_days)
                    rows.extend(_compare(f, actual[m], m, d, t))
        finally:
            engine.dispose()
    rows.sort(key=lambda r: (r["month"], r["day"], FIGURES.index(r["figure"]) if r["figure"] in FIGURES else 9, r["project"] or ""))
    return {"timezone": str(tz), "window_days": window_days, "days": days, "months": months,
            "rows": rows, "summary": _summary(rows, days)}


def _ended_months(session: Session, tz, now: datetime) -> list[str]:
    first = session.scalar(select(func.min(Run.started_at)))
    if first is None:
        return []
    current = month_of(now, tz)
    return [m for m in months_between(month_of(first, tz), current) if m != current]


def _copy(src: Connection, dst: Connection, since: datetime) -> None:
    """The ledger's rows into an empty scratch ledger: runs still going or ended after ``since`` and their
    nodes; catalog, fleets, projects, users and settings whole; no samples, no rollup, no rollup markers."""
    for table in SQLModel.metadata.sorted_tables:
        if table.name in SKIPPED_TABLES:
            continue
        q = select(table)
        if table.name == Run.__tablename__:
            q = q.where(or_(table.c.ended_at.is_(None), table.c.ended_at > since))
        elif table.name == RunNode.__tablename__:
            q = q.join(Run.__table__, Run.__table__.c.id == table.c.run_id).where(
                or_(Run.__table__.c.ended_at.is_(None), Run.__table__.c.ended_at > since))
        elif table.name == Setting.__tablename__:
            q = q.where(~table.c.key.startswith("rollup:"))
        rows = [dict(r._mapping) for r in src.execute(q)]
        for i in range(0, len(rows), 5000):
            dst.execute(table.insert(), rows[i:i + 5000])


def _cut(copy: Session, t: datetime, source_now: datetime) -> None:
    """The scratch ledger as it stood at ``t``: later runs removed, runs going on at ``t`` running, heartbeat ``t``."""
    late = select(Run.id).where(or_(Run.started_at >= t, and_(Run.started_at.is_(None), Run.created_at >= t)))
    copy.execute(delete(RunNode).where(RunNode.run_id.in_(late)))
    copy.execute(delete(Run).where(Run.id.in_(late)))
    for run in copy.exec(select(Run).where(Run.started_at < t, or_(Run.ended_at.is_(None), Run.ended_at > t))).scalars():
        iv = run_interval(run.started_at, run.ended_at, getattr(run.status, "value", run.status), run.heartbeat_at, source_now)
        if iv is None or iv[1] <= t:
            continue
        if run.tokens is not None:
            run.tokens = int(run.tokens * time_share(iv[0], iv[1], t))
        run.status, run.ended_at, run.heartbeat_at = RunStatus.running, None, t
        run.exit_code, run.error, run.final_loss = None, None, None
    copy.flush()
    rollup.rebuild(copy.connection())
    copy.commit()


def _compare(f: dict[str, Any], rep, month: str, day: int, t: datetime) -> list[dict[str, Any]]:
    s = rep.summary
    actual = {"spend": s["actual_cost"], "idle_cost": s["idle_cost"], "gpu_hours": s["gpu_hours"], "node_hours": s["node_hours"]}
    pairs = [(fig, None, f[fig], actual[fig]) for fig in FIGURES]
    by_project = {p["project"]: p["cost"] for p in rep.projects}
    pairs += [("project_cost", p["project"], p["cost"], by_project.get(p["project"], Decimal(0))) for p in f["projects"]]
    out = []
    for fig, project, got, real in pairs:
        err = (got["expected"] - real) / real * 100 if real else None
        shown = costs.cents if fig in ("spend", "idle_cost", "project_cost") else _hours  # a table for people
        out.append({"month": month, "day": day, "as_of": t, "figure": fig, "project": project,
                    "forecast": shown(got["expected"]), "p10": shown(got["p10"]), "p90": shown(got["p90"]),
                    "actual": shown(real), "error_pct": err, "in_range": got["p10"] <= real <= got["p90"]})
    return out


def _hours(x: Decimal) -> Decimal:
    return Decimal(x).quantize(Decimal("0.001"))


def _summary(rows: list[dict[str, Any]], days: list[int]) -> list[dict[str, Any]]:
    """Per day and figure: median and largest absolute error (%), and how often the actual fell in p10-p90."""
    out = []
    for d in days:
        for fig in (*FIGURES, "project_cost"):
            sel = [r for r in rows if r["day"] == d and r["figure"] == fig]
            errs = [abs(r["error_pct"]) for r in sel if r["error_pct"] is not None]
            if not sel:
                continue
            out.append({"day": d, "figure": fig, "forecasts": len(sel),
                        "median_abs_error_pct": statistics.median(errs) if errs else None,
                        "max_abs_error_pct": max(errs) if errs else None,
                        "in_range": sum(r["in_range"] for r in sel)})
    return out
