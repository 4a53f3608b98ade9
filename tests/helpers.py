"""Small builders for tests: runs and fleets written through the real models."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Optional

from sqlmodel import Session, select
from trainledger.store.lookup import get_or_create
from trainledger.store.models import Fleet, NodeType, Offer, Project, Run, RunStatus, User

UTC = timezone.utc


def offer(session: Session, name: str) -> Offer:
    return session.exec(select(Offer).where(Offer.name == name)).one()


def node_type(session: Session, name: str = "rtx4090-8x") -> NodeType:
    return session.exec(select(NodeType).where(NodeType.name == name)).one()


def add_run(session: Session, run_id: str, start: datetime, hours: float, nodes: int = 2, *,
            offer_name: Optional[str] = "rtx4090-own", status: RunStatus = RunStatus.succeeded,
            project: str = "p1", user: str = "u1", tokens: Optional[int] = None,
            gpu_util: Optional[float] = None, node_type_name: str = "rtx4090-8x") -> Run:
    nt = node_type(session, node_type_name)
    run = Run(id=run_id, name=run_id, node_type_id=nt.id, nodes=nodes, gpus_per_node=nt.gpus_per_node,
              offer_id=offer(session, offer_name).id if offer_name else None, status=status,
              started_at=start, ended_at=start + timedelta(hours=hours), heartbeat_at=start + timedelta(hours=hours),
              tokens=tokens, gpu_util_mean=gpu_util, util_source="nvml" if gpu_util is not None else None,
              project_id=get_or_create(session, Project, project), user_id=get_or_create(session, User, user))
    session.add(run)
    session.flush()
    return run


def add_fleet(session: Session, nodes: int = 8, offer_name: str = "rtx4090-own",
              valid_from: date = date(2020, 1, 1), valid_to: Optional[date] = None, name: str = "fleet") -> Fleet:
    f = Fleet(name=name, offer_id=offer(session, offer_name).id, node_count=nodes, valid_from=valid_from, valid_to=valid_to)
    session.add(f)
    session.flush()
    return f


class FakePopen:
    """Stands in for ``subprocess.Popen``: records ``(argv, env, other kwargs)`` (positional arguments
    after argv under ``"positional"``), starts nothing, exits 0."""

    calls: list = []

    def __init__(self, argv, *args, env=None, **kw):
        FakePopen.calls.append((argv, env, {**kw, "positional": args} if args else kw))
        self.pid = 2**22 + len(FakePopen.calls)  # beyond pid_max on most systems: no real process
        self.returncode = 0

    def wait(self, timeout=None):
        return 0

    def poll(self):
        return 0

    def send_signal(self, sig):
        pass


def offer_price(url: str, name: str = "rtx4090-rent"):
    """An offer's monthly price, read through a fresh engine (what another process would see)."""
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    with Session(engine) as s:
        price = s.exec(select(Offer.price_per_node_month).where(Offer.name == name)).one()
    engine.dispose()
    return price


#: one elastic offer on the RTX 4090 node type at 10 CNY per node-hour from 2025-01-01 (`pricing import`)
RENT_OFFER_TOML = """
[[offer]]
name = "gpu-rent"
node_type = "rtx4090-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "10"
valid_from = 2025-01-01
"""


def month_account_identities(session, month: str, now):
    """The goodput account and the monthly report of ``month`` at ``now``, with the identities every ledger keeps:
    goodput + badput + idle = spend = the report's cost (on the money grid); idle = the report's idle less the
    recovery it became; lost work as the report's. Returns (account, report, the month's account, report lines by run)."""
    from decimal import Decimal

    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.account import Category, goodput_account, on_grid
    from trainledger.money.rates import costs

    rep = goodput_account(session, month=month, now=now)
    report = monthly_report(session, month, now=now)
    (m,) = rep.months
    assert m.goodput + m.badput + m.idle == m.spend == on_grid(report.summary["actual_cost"])
    recovery = sum((r.recovery_cost for r in rep.runs), Decimal(0))
    assert costs.cents(m.idle) == costs.cents(report.summary["idle_cost"] - recovery)
    assert abs(m.identity_residual) < Decimal("1e-9")
    assert costs.cents(m.by_category[Category.lost_work]) == costs.cents(report.summary["lost_work_cost"])
    return rep, report, m, {r.run_id: r for r in report.runs}


def rounding(p: dict, table: str, column: str = "cost"):
    """The rounding line of a presented monthly export's table (``presented_report``): 0 when its cents add up."""
    from decimal import Decimal

    return Decimal(p.get("rounding", {}).get(table, {}).get(column, "0"))


#: "now" of :func:`waste_month`: November 2026 to date, 708 of its 720 hours
WASTE_NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def waste_month(session: Session) -> None:
    """Issue 36's month of waste (tests/test_waste_reasons.py): fleet 2 × rtx4090-own; ``fail`` 1 node × 10 h,
    failed without a checkpoint; ``slow`` 2 nodes × 20 h, its node h0's phases 14 h of steps, 2 h of straggler wait
    and 1 h of data wait; ``imp`` 1 node × 5 h without phases; the rest of the fleet idle."""
    from trainledger.store.models import RunPhase

    add_fleet(session, 2)
    add_run(session, "fail", datetime(2026, 11, 2, tzinfo=UTC), 10, nodes=1, status=RunStatus.failed)
    add_run(session, "slow", datetime(2026, 11, 3, tzinfo=UTC), 20, nodes=2)
    for phase, hours, count in (("step", 14, 1000), ("straggler_wait", 2, 1000), ("data", 1, 1000)):
        session.add(RunPhase(run_id="slow", node="h0", phase=phase, seconds=hours * 3600.0, count=count))
    add_run(session, "imp", datetime(2026, 11, 5, tzinfo=UTC), 5, nodes=1)
    session.flush()


def presented_month(session: Session, month: str, now: Optional[datetime] = None, **kw) -> dict:
    """``report monthly``'s presented export: the monthly report with its goodput account (its waste = badput +
    idle, each run line's goodput and badput), as the CLI and the dashboard present it."""
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.reports.export import presented_report

    rep = monthly_report(session, month, now=now, **kw)
    return presented_report(rep, report_account(session, rep, now))


def three_november_runs(session: Session) -> None:
    """A 2-node owned fleet; in 2026-11 a succeeded and a failed run on it (projects a, b) and a rented one (a)."""
    add_fleet(session, nodes=2)
    nov = datetime(2026, 11, 3, tzinfo=timezone.utc)
    add_run(session, "own-ok", nov, 10, nodes=1, project="a", tokens=10**9, gpu_util=0.5)
    add_run(session, "own-failed", nov, 5, nodes=1, project="b", status=RunStatus.failed)
    add_run(session, "rent", nov, 7, nodes=1, offer_name="rtx4090-rent", project="a")
    session.commit()
