"""Per-node utilization over time, hour by hour (issue 39 item 3): ``trainledger runs util`` and the dashboard.

From the samples the ledger holds (``metric_sample``: ``gpu_util`` per GPU from NVML or DCGM, ``cpu_util`` of a
CPU-only run's process tree; never a guessed value), each node's **mean over its GPUs and samples in each hour**
(hours of the display time zone, keyed by their UTC start so a DST-repeated hour stays two hours):

* for one run: its nodes;
* for a node type in a month (an owned or reserved fleet's nodes): every run of that node type with samples in the
  month, per host name; an hour with no sample is absent (a gap on the chart), never 0. How much of the fleet was
  held idle is the idle heat map's (``trainledger goodput idle``), not this.

GPU-Util is the busy share NVML/DCGM report, not MFU and not time utilization (docs/METRICS.md).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates.months import month_bounds
from trainledger.store.lookup import get_run
from trainledger.store.models import MetricSample, NodeType, Run
from trainledger.store.settings import display_timezone

METRICS = ("gpu_util", "cpu_util")
#: the most samples one call reads (a month of 10-second samples of 64 GPUs is ~17M: hours are enough here)
MAX_SAMPLES = 5_000_000


def _hour(ts: datetime, tz) -> datetime:
    """The start (UTC) of the display zone's hour that ``ts`` falls in (a zone 30 minutes off UTC: its own hours)."""
    ts = ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    return ts.astimezone(tz).replace(minute=0, second=0, microsecond=0).astimezone(timezone.utc)


def hourly(rows, tz=timezone.utc) -> list[dict[str, Any]]:
    """``(node, metric, ts, value)`` rows → one point per node, metric and hour of ``tz``: the mean of its values
    and their count, oldest first, then by node."""
    sums: dict[tuple[str, str, datetime], list[float]] = defaultdict(lambda: [0.0, 0])
    for node, metric, ts, value in rows:
        acc = sums[(node or "", metric, _hour(ts, tz))]
        acc[0] += float(value)
        acc[1] += 1
    return [{"node": node, "metric": metric, "hour": hour, "util_mean": total / n, "samples": n}
            for (node, metric, hour), (total, n) in sorted(sums.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1]))]


def _read(session: Session, q) -> list:
    rows = session.exec(q.limit(MAX_SAMPLES + 1)).all()
    if len(rows) > MAX_SAMPLES:
        raise LedgerInputError(f"more than {MAX_SAMPLES:,} utilization samples in one view: pick a shorter span")
    return rows


def run_utilization(session: Session, run_id: str) -> dict[str, Any]:
    """One run's nodes, hour by hour."""
    run = get_run(session, run_id)
    rows = _read(session, select(MetricSample.node, MetricSample.metric, MetricSample.ts, MetricSample.value)
                 .where(MetricSample.run_id == run.id, MetricSample.metric.in_(METRICS), MetricSample.value.is_not(None)))
    tz = display_timezone(session)
    points = hourly(rows, tz)
    return {"run_id": run.id, "timezone": str(tz), "points": points,
            "nodes": sorted({p["node"] for p in points}), "metrics": sorted({p["metric"] for p in points})}


def fleet_utilization(session: Session, node_type: str, month: str, now: Optional[datetime] = None) -> dict[str, Any]:
    """Every node of ``node_type`` with samples in ``month`` (display time zone), hour by hour."""
    nt = session.exec(select(NodeType).where(NodeType.name == node_type)).first()
    if nt is None:
        known = ", ".join(session.exec(select(NodeType.name).order_by(NodeType.name)).all())
        raise LedgerInputError(f"--node-type: no node type {node_type!r} in this ledger; known: {known}")
    tz = display_timezone(session)
    start, end = month_bounds(month, tz)
    if now is not None:
        end = min(end, now + timedelta(hours=1))
    runs = select(Run.id).where(Run.node_type_id == nt.id)
    rows = _read(session, select(MetricSample.node, MetricSample.metric, MetricSample.ts, MetricSample.value)
                 .where(MetricSample.run_id.in_(runs), MetricSample.metric.in_(METRICS),
                        MetricSample.value.is_not(None), MetricSample.ts >= start, MetricSample.ts < end))
    points = hourly(rows, tz)
    return {"node_type": nt.name, "month": month, "timezone": str(tz), "points": points,
            "nodes": sorted({p["node"] for p in points}), "metrics": sorted({p["metric"] for p in points})}


def fleet_node_types(session: Session, month: str) -> list[str]:
    """The node types of the owned or reserved fleets held in ``month`` (display time zone), by name."""
    from trainledger.money.rates.periods import month_first, month_last
    from trainledger.store.models import Fleet, Offer

    first, last = month_first(month), month_last(month)
    rows = session.exec(select(NodeType.name).join(Offer, Offer.node_type_id == NodeType.id)
                        .join(Fleet, Fleet.offer_id == Offer.id)
                        .where(Fleet.valid_from <= last, (Fleet.valid_to.is_(None)) | (Fleet.valid_to > first))
                        .distinct()).all()
    return sorted(rows)
