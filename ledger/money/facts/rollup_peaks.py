"""Peak concurrent nodes per month and node type (``rollup_peak``) of the monthly rollup
(:mod:`trainledger.money.facts.rollup`): swept in Python or by the database, kept in step incrementally."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any, Iterable, Optional

from sqlalchemy import (
    and_,
    func,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Connection
from trainledger.money.allocation.shares import UNITS, peak_nodes
from trainledger.money.facts.rollup_facts import SliceFact
from trainledger.store.models import (
    RollupPeak,
    RollupSlice,
)

ALL = -1  # rollup_peak.offer_key of the whole node type


def _insert(conn: Connection, table: Any):
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)



def _scope_slices(conn: Connection, month: str, nt: int, offer_key: int, held,
                  window: Optional[tuple[datetime, datetime]] = None) -> list[tuple[datetime, datetime, int]]:
    """The scope's slices as (start, end, ``held``): one query for whole nodes and for node units."""
    t = RollupSlice.__table__
    q = select(t.c.start_at, t.c.end_at, held).where(t.c.month == month, t.c.node_type_id == nt)
    if offer_key == 0:
        q = q.where(t.c.offer_id.is_(None))
    elif offer_key != ALL:
        q = q.where(t.c.offer_id == offer_key)
    if window is not None:
        q = q.where(t.c.start_at < window[1], t.c.end_at > window[0])
    return [tuple(r) for r in conn.execute(q)]


def _scope_rows(conn: Connection, month: str, nt: int, offer_key: int,
                window: Optional[tuple[datetime, datetime]] = None) -> list[tuple[datetime, datetime, int]]:
    """The scope's slices as (start, end, whole nodes)."""
    return _scope_slices(conn, month, nt, offer_key, RollupSlice.__table__.c.nodes, window)


def _scope_units(conn: Connection, month: str, nt: int, offer_key: int,
                 window: Optional[tuple[datetime, datetime]] = None) -> list[tuple[datetime, datetime, int]]:
    """The scope's slices as (start, end, nodes held in node units)."""
    return _scope_slices(conn, month, nt, offer_key, held_units(RollupSlice.__table__), window)


def held_units(t: Any) -> Any:
    """A slice's nodes held in node units (:mod:`trainledger.money.allocation.shares`), as SQL: ``held``, else nodes × UNITS."""
    return func.coalesce(t.c.held, t.c.nodes * UNITS)


def peak_of(intervals: Iterable[tuple[datetime, datetime, int]],
            window: Optional[tuple[datetime, datetime]] = None) -> int:
    """Peak whole nodes in use of intervals in node units: :func:`sweep_peak`, a node partly held counted."""
    return peak_nodes(sweep_peak(intervals, window))


def sweep_peak(intervals: Iterable[tuple[datetime, datetime, int]],
               window: Optional[tuple[datetime, datetime]] = None) -> int:
    """Largest number of nodes in use at one instant (ends before starts at a tie); only
    instants inside ``window`` count when one is given."""
    events: list[tuple[datetime, int]] = []
    for s, e, n in intervals:
        if e > s:
            events.append((s, n))
            events.append((e, -n))
    events.sort(key=lambda x: (x[0], x[1]))
    peak = cur = 0
    for t, delta in events:
        cur += delta
        if window is None or window[0] <= t < window[1]:
            peak = max(peak, cur)
    return peak


def _set_peak(conn: Connection, scope: tuple[str, int, int], value: Optional[int] = None,
              at_least: Optional[int] = None) -> None:
    t = RollupPeak.__table__
    month, nt, ok = scope
    where = and_(t.c.month == month, t.c.node_type_id == nt, t.c.offer_key == ok)
    conn.execute(_insert(conn, t).values(month=month, node_type_id=nt, offer_key=ok, peak=0).on_conflict_do_nothing())
    old = conn.execute(select(t.c.peak).where(where).with_for_update()).scalar() or 0
    new = value if value is not None else max(old, at_least or 0)
    if new != old:
        conn.execute(update(t).where(where).values(peak=new))


def _recompute_peak(conn: Connection, scope: tuple[str, int, int]) -> None:
    month, nt, ok = scope
    _set_peak(conn, scope, value=peak_of(_scope_units(conn, month, nt, ok)))


def scope_peak_sql(conn: Connection, scope: tuple[str, int, int]) -> int:
    """:func:`sweep_peak` of a scope's stored slices, computed by the database: the running sum of the
    start (+nodes) and end (−nodes) events in (time, delta) order, ends first at a tie, and its maximum.
    The same number in bounded memory, for scopes of any size (a bulk import's months)."""
    month, nt, ok = scope
    t = RollupSlice.__table__
    cond = [t.c.month == month, t.c.node_type_id == nt, t.c.end_at > t.c.start_at]
    if ok == 0:
        cond.append(t.c.offer_id.is_(None))
    elif ok != ALL:
        cond.append(t.c.offer_id == ok)
    events = union_all(select(t.c.start_at.label("at"), held_units(t).label("delta")).where(*cond),
                       select(t.c.end_at.label("at"), (-held_units(t)).label("delta")).where(*cond)).subquery()
    running = select(func.sum(events.c.delta).over(order_by=(events.c.at, events.c.delta), rows=(None, 0))
                     .label("cur")).subquery()
    return peak_nodes(max(0, int(conn.execute(select(func.max(running.c.cur))).scalar() or 0)))


def _apply_peaks(conn: Connection, old: list[SliceFact], new: list[SliceFact]) -> None:
    old_iv = {s.interval for s in old}
    new_iv = {s.interval for s in new}
    if old_iv == new_iv:
        return
    removed: dict[tuple, int] = defaultdict(int)
    added: dict[tuple, list] = defaultdict(list)
    for iv in old_iv - new_iv:
        for ok in (iv[2], ALL):
            removed[(iv[0], iv[1], ok)] += 1
    for iv in new_iv - old_iv:
        for ok in (iv[2], ALL):
            added[(iv[0], iv[1], ok)].append(iv)
    for scope in sorted(set(removed) | set(added)):
        if removed.get(scope) or len(added[scope]) > 32:
            _recompute_peak(conn, scope)
            continue
        # only additions: the peak can only grow, and only inside the new intervals
        best = 0
        for (_, _, _, a, b, _) in added[scope]:
            if b > a:
                best = max(best, peak_of(_scope_units(conn, scope[0], scope[1], scope[2], (a, b)), (a, b)))
        _set_peak(conn, scope, at_least=best)
