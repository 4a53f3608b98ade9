"""Capacity over-use: more nodes of a node type in use at once than its fleets hold (a data-quality warning).

:func:`over_capacity` is pure: run intervals + the fleet's node count in, the peak
and the runs in the over-used stretches out. Intervals are half-open ``[start, end)``:
a run that ends exactly when another starts does not overlap it. A run that held part of each node
(``run.share``, :mod:`trainledger.money.allocation.shares`) counts its share: two 4-GPU runs on one 8-GPU node are one node.
:func:`capacity_warnings` reads one month's runs and fleets from the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, Optional, Sequence

from sqlmodel import Session, col, or_, select
from trainledger.money.allocation import shares
from trainledger.money.rates.catalog import fleets_by_offer, load_catalog
from trainledger.money.rates.months import month_period
from trainledger.store.models import NodeType, OfferKind, Run
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow


@dataclass(frozen=True)
class Interval:
    run_id: str
    start: datetime
    end: datetime  # exclusive
    nodes: int | Fraction  # nodes × share


def over_capacity(intervals: Sequence[Interval], fleet_nodes: int) -> Optional[dict[str, Any]]:
    """Peak concurrent nodes of ``intervals`` and, when it exceeds ``fleet_nodes``, the runs in use while it did.

    Returns None within capacity, else ``{"peak_nodes", "fleet_nodes", "runs"}`` (run ids, sorted). Ends are
    processed before starts at the same instant (half-open intervals)."""
    events = sorted([(iv.start, 1, iv) for iv in intervals if iv.end > iv.start]
                    + [(iv.end, 0, iv) for iv in intervals if iv.end > iv.start],
                    key=lambda e: (e[0], e[1]))
    active: dict[int, Interval] = {}
    in_use, peak, involved = 0, 0, set()
    for _, is_start, iv in events:
        if is_start:
            active[id(iv)] = iv
            in_use += iv.nodes
            peak = max(peak, in_use)
            if in_use > fleet_nodes:
                involved.update(a.run_id for a in active.values())
        else:
            active.pop(id(iv), None)
            in_use -= iv.nodes
    if peak <= fleet_nodes:
        return None
    return {"peak_nodes": _number(peak), "fleet_nodes": fleet_nodes, "runs": sorted(involved)}


def _number(x: int | Fraction) -> int | Decimal:
    """A node count as shown: whole, else a Decimal (a share of a node, to 4 places)."""
    if isinstance(x, Fraction) and x.denominator != 1:
        return (Decimal(x.numerator) / x.denominator).quantize(Decimal("0.0001"))
    return int(x)


def capacity_warnings(session: Session, month: str, *, now: Optional[datetime] = None) -> list[dict[str, Any]]:
    """Per node type with an owned or reserved fleet held in ``month``: a warning when the runs drawing on the
    fleet (recorded with its offer, or with no offer) used more nodes at once than the fleets hold.

    Fleet size: Σ node counts of the node type's fleets held during the month. Running runs count to ``now``.
    Returns ``[{"node_type", "peak_nodes", "fleet_nodes", "runs"}]`` sorted by node type (empty: within capacity).
    """
    tz = display_timezone(session)
    period = month_period(month, tz, now or utcnow())
    start, end = period.start, period.end
    cat = load_catalog(session)
    held = fleets_by_offer(session, start, period.month_end, tz)
    by_nt: dict[int, dict[str, Any]] = {}
    for off_id, fleets in held.items():
        offer = cat.offers.get(off_id)
        if offer is None or offer.kind == OfferKind.rent_elastic:
            continue
        entry = by_nt.setdefault(offer.node_type_id, {"offers": set(), "nodes": 0})
        entry["offers"].add(off_id)
        entry["nodes"] += sum(f.node_count for f in fleets)
    out = []
    for nt_id, entry in by_nt.items():
        rows = session.exec(select(Run.id, Run.started_at, Run.ended_at, Run.nodes, Run.share).where(
            Run.node_type_id == nt_id, col(Run.started_at).is_not(None), Run.started_at < end,
            or_(col(Run.ended_at).is_(None), Run.ended_at > start),
            or_(col(Run.offer_id).is_(None), col(Run.offer_id).in_(sorted(entry["offers"]))))).all()
        intervals = [Interval(rid, max(s, start), min(e or end, end), n * shares.parse(sh) if sh else n)
                     for rid, s, e, n, sh in rows]
        found = over_capacity(intervals, entry["nodes"])
        if found:
            name = session.get(NodeType, nt_id).name
            out.append({"node_type": name, **found})
    return sorted(out, key=lambda w: w["node_type"])


def warning_text(w: dict[str, Any]) -> str:
    """One line: ``node type X: peak N nodes in use > fleet of M nodes (runs a, b)``."""
    return (f"capacity over-use: node type {w['node_type']}: peak {w['peak_nodes']} nodes in use > fleet of "
            f"{w['fleet_nodes']} nodes (runs {', '.join(w['runs'])}); check the runs' node counts, times or the fleet size")
