"""Pre-aggregated monthly usage: the numbers behind ``report monthly`` without a pass over every run.

Three tables, kept in step with the ``run`` and ``run_node`` rows in the same
transaction that changes them:

* ``rollup_slice``: one row per run and charge period that the run touches: its
  clipped interval and the additive facts of that slice (node-µs, GPU-µs, tokens,
  GPU-Util and MFU weights, measured kWh, billed node-hours under every elastic
  billing rule of its node type);
* ``rollup_month``: the same facts summed per charge period, node type, offer (as
  recorded on the run), project and status;
* ``rollup_peak``: per month and node type (and per recorded offer), the peak
  number of nodes in use at one instant, for fleets sized by peak use.

Every fact is an integer or a Decimal on a 1e-12 grid, so sums are exact and
do not depend on the order of addition: a month read from ``rollup_month``
equals the same month summed from its slices (``check`` verifies it, and the
tests do on SQLite and PostgreSQL). Prices are *not* stored: a price edit needs
no rebuild; a new elastic billing rule (granularity, minimum) is back-filled.

A *charge period* is a calendar month (display time zone) cut at the instants
where something that prices it changes for the node type: a price version of one
of its offers (every version but an offer's first), an exchange rate touching
an offer's currency, or a grid carbon intensity. A month with no such instant is
one charge period (``charge_from`` = the month's start), so its rows are those of
a plain monthly rollup. A run that spans a cut is split there exactly as at a
month boundary (:func:`slices_of_run`). The cuts the slices carry are kept in
the ``rollup:cuts`` setting; a new or removed cut recomputes the slices it
touches (:func:`refresh_cuts`).

Runs still running (no end yet) change every second, so they are not stored;
:func:`month_facts` adds them at read time. ORM writes are tracked by session
events (``before_flush`` collects the touched run ids; they are folded in before
commit and before any read of the rollup in the same session). Core ``UPDATE``s
of runs must call :func:`touch`. The display time zone changing rebuilds all.

The parts live in modules of their own: the facts and slices (:mod:`trainledger.money.facts.rollup_facts`), what
is read besides the runs (:mod:`trainledger.money.facts.rollup_source`), the peaks (:mod:`trainledger.money.facts.rollup_peaks`)
and the lost interval (:mod:`trainledger.money.facts.rollup_lost`); their names are re-exported here.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Iterable, Iterator, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import (
    String,
    and_,
    bindparam,
    delete,
    func,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session as SASession
from trainledger.money.facts.rollup_facts import (  # noqa: F401  (re-exported: ``rollup.X`` keeps working)
    _IDX,
    GRID,
    INTS,
    RAW_RUN_COLUMNS,
    RUN_COLUMN_INDEX,
    RUN_COLUMNS,
    TEXTS,
    US_PER_HOUR,
    Facts,
    SliceFact,
    _add_lost,
    _billed_text,
    _decimals,
    _dtext,
    _json,
    _micros,
    _parse_rule,
    _piece_facts,
    _pieces,
    _q,
    _run_row,
    _utc,
    facts_of_rows,
    is_live,
    offer_rule,
    rule_key,
    slices_of_run,
)
from trainledger.money.facts.rollup_lost import _LOST_COLUMNS, keep_lost, lost_mismatches, run_lost_interval  # noqa: F401
from trainledger.money.facts.rollup_peaks import (  # noqa: F401
    ALL,
    _apply_peaks,
    _insert,
    _recompute_peak,
    _scope_rows,
    _scope_units,
    _set_peak,
    held_units,
    peak_of,
    scope_peak_sql,
    sweep_peak,
)
from trainledger.money.facts.rollup_source import (  # noqa: F401
    CUTS_MARKER,
    MARKER,
    Cuts,
    _cuts_marker,
    _cuts_text,
    _day,
    _marker,
    _parse_cuts,
    _set_cuts_marker,
    _timezone,
    cached_month_start,
    charge_cuts,
    elastic_rules,
    exact_kwh,
    measured_kwh,
)
from trainledger.money.rates.months import (
    month_bounds,
    month_of,
)
from trainledger.store.models import (
    CarbonIntensity,
    FxRate,
    Offer,
    OfferPrice,
    RollupMonth,
    RollupPeak,
    RollupSlice,
    Run,
    RunNode,
    RunStatus,
    Setting,
)

log = logging.getLogger(__name__)

RULES_MARKER = "rollup:rules"  # setting: the elastic billing rules per node type the slices carry
BATCH = 20_000
_PENDING = "trainledger_rollup_pending"
_REBUILD = "trainledger_rollup_rebuild"
_RULES = "trainledger_rollup_rules"
_CUTS = "trainledger_rollup_cuts"
_DEFER_PEAKS = "trainledger_rollup_defer_peaks"


def refresh_cuts(conn: Connection) -> int:
    """Bring the slices in line with the current charge-period cuts (a price version, exchange rate or
    intensity was added, moved or removed): only runs with a slice after a changed instant in its month
    are recomputed. Returns the runs recomputed."""
    tz = ZoneInfo(_timezone(conn))
    new, old = charge_cuts(conn, tz), _cuts_marker(conn)
    if new == old:
        return 0
    _lock(conn)
    _set_cuts_marker(conn, new)
    st = RollupSlice.__table__
    ids: set[str] = set()
    for nt in sorted(set(new) | set(old)):
        for t in sorted(set(new.get(nt, ())) ^ set(old.get(nt, ()))):
            # every slice from t to the month's end changes its charge period (a run across t is also split)
            ids.update(conn.execute(select(st.c.run_id).where(st.c.month == month_of(t, tz), st.c.node_type_id == nt,
                                                              st.c.end_at >= t)).scalars())
    refresh_runs(conn, ids)
    return len(ids)


def _compute(conn: Connection, run_ids: list[str], tz: ZoneInfo, rules: dict[int, set[str]]) -> list[SliceFact]:
    out: list[SliceFact] = []
    cuts = _cuts_marker(conn)
    for i in range(0, len(run_ids), 500):
        chunk = run_ids[i:i + 500]
        kwh = measured_kwh(conn, chunk)
        for row in conn.execute(select(*RAW_RUN_COLUMNS).where(Run.id.in_(chunk))):
            row = _run_row(row)
            out.extend(slices_of_run(row, tz, rules.get(row[2], ()), kwh.get(row[0]), cuts=cuts.get(row[2], ())))
    return out


SLICE_COLUMNS = (RollupSlice.run_id, RollupSlice.month, RollupSlice.charge_from, RollupSlice.node_type_id, RollupSlice.offer_id,
                 RollupSlice.project_id, RollupSlice.status, RollupSlice.start_at, RollupSlice.end_at,
                 RollupSlice.nodes, RollupSlice.gpus_per_node, RollupSlice.split, RollupSlice.held,
                 *(getattr(RollupSlice, k) for k in Facts.INTS), *(getattr(RollupSlice, k) for k in TEXTS))


def _slice_from_row(r: Any) -> SliceFact:
    return SliceFact(r.run_id, r.month, r.node_type_id, r.offer_id, r.project_id, r.status, r.start_at, r.end_at,
                     r.nodes, r.gpus_per_node, bool(r.split), Facts.from_row(r), r.charge_from, r.held)


#: where a slice row's facts start: after the slice's own columns of :data:`SLICE_COLUMNS`
_SLICE_FACTS_AT = len(SLICE_COLUMNS) - len(Facts.INTS) - len(TEXTS)


def _slices_of_rows(rows: list) -> list[SliceFact]:
    """:func:`_slice_from_row` of many rows, their facts' JSON texts decoded in one call (:func:`facts_of_rows`)."""
    return [SliceFact(r.run_id, r.month, r.node_type_id, r.offer_id, r.project_id, r.status, r.start_at, r.end_at,
                      r.nodes, r.gpus_per_node, bool(r.split), f, r.charge_from, r.held)
            for r, f in zip(rows, facts_of_rows(rows, _SLICE_FACTS_AT))]


def _slice_values(s: SliceFact) -> dict[str, Any]:
    return {"run_id": s.run_id, "month": s.month, "charge_from": s.charge_from, "node_type_id": s.node_type_id,
            "offer_id": s.offer_id,
            "project_id": s.project_id, "status": s.status, "start_at": s.start, "end_at": s.end,
            "nodes": s.nodes, "gpus_per_node": s.gpus_per_node, "split": s.split, "held": s.held, **s.facts.values()}


# --- applying changes ------------------------------------------------------------

@lru_cache(maxsize=4)
def _month_statements(dialect: str) -> tuple:
    """(insert-if-missing, read for update, update, delete) of one rollup_month row, by bound parameters:
    compiled once per dialect and reused for every group (building them per group cost more than running them)."""
    t = RollupMonth.__table__
    keys = ("month", "charge_from", "node_type_id", "offer_key", "project_key", "status")
    where = and_(*(t.c[k] == bindparam(f"k_{k}") for k in keys))
    facts = list(Facts().values())
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    ins = dialect_insert(t).values({k: bindparam(f"k_{k}") for k in keys}
                                   | {f: bindparam(f"v_{f}") for f in facts}).on_conflict_do_nothing()
    sel = select(t).where(where).with_for_update()
    upd = update(t).where(where).values({f: bindparam(f"v_{f}") for f in facts})
    return ins, sel, upd, delete(t).where(where)


def _apply_month(conn: Connection, deltas: dict[tuple, Facts]) -> None:
    ins, sel, upd, dele = _month_statements(conn.dialect.name)
    zero = {f"v_{k}": v for k, v in Facts().values().items()}
    for key in sorted(deltas):
        d = deltas[key]
        if d.is_zero():
            continue
        month, charge_from, nt, ok, pk, status = key
        k = {"k_month": month, "k_charge_from": charge_from, "k_node_type_id": nt, "k_offer_key": ok,
             "k_project_key": pk, "k_status": status}
        conn.execute(ins, {**k, **zero})
        row = conn.execute(sel, k).one()
        f = Facts.from_row(row)
        f.add(d)
        if f.slices == 0 and f.is_zero():
            conn.execute(dele, k)
        else:
            conn.execute(upd, {**k, **{f"v_{c}": v for c, v in f.values().items()}})


def refresh_runs(conn: Connection, run_ids: Iterable[str], defer_peaks: Optional[set] = None) -> int:
    """Bring the rollup in line with the current rows of these runs; returns slices changed.

    ``defer_peaks``: collect the peak scopes these changes touch into this set
    instead of updating ``rollup_peak`` now (:func:`bulk` recomputes each once).
    """
    ids = sorted(set(run_ids))
    if not ids:
        return 0
    tz = ZoneInfo(_timezone(conn))
    rules = elastic_rules(conn)
    st = RollupSlice.__table__
    old: list[SliceFact] = []
    for i in range(0, len(ids), 500):
        old.extend(_slice_from_row(r) for r in conn.execute(select(*SLICE_COLUMNS).where(st.c.run_id.in_(ids[i:i + 500]))))
    new = _compute(conn, ids, tz, rules)
    if len(old) == len(new) and sorted(s.comparable() for s in old) == sorted(s.comparable() for s in new):
        return 0
    for i in range(0, len(ids), 500):
        conn.execute(delete(st).where(st.c.run_id.in_(ids[i:i + 500])))
    if new:
        conn.execute(st.insert(), [_slice_values(s) for s in new])
    deltas: dict[tuple, Facts] = defaultdict(Facts)
    for s in old:
        deltas[s.key].add(s.facts, -1)
    for s in new:
        deltas[s.key].add(s.facts)
    _apply_month(conn, deltas)
    if defer_peaks is None:
        _apply_peaks(conn, old, new)
    else:
        defer_peaks.update((iv[0], iv[1], ok) for iv in {s.interval for s in old} ^ {s.interval for s in new}
                           for ok in (iv[2], ALL))
    return len(old) + len(new)


def _rules_marker(conn: Connection) -> dict[str, list[str]]:
    v = conn.execute(select(Setting.value).where(Setting.key == RULES_MARKER)).scalar()
    return json.loads(v) if v else {}


def _set_rules_marker(conn: Connection, rules: dict[int, set[str]]) -> None:
    t = Setting.__table__
    conn.execute(delete(t).where(t.c.key == RULES_MARKER))
    conn.execute(t.insert().values(key=RULES_MARKER, value=json.dumps({str(k): sorted(v) for k, v in sorted(rules.items()) if v})))


def backfill_rules(conn: Connection, node_type_ids: Optional[Iterable[int]] = None) -> int:
    """Recompute the slices of node types whose elastic billing rules changed (an elastic offer
    with a new granularity or minimum was added, or the last offer with a rule went away).
    A price change alone changes no stored fact. Returns the runs recomputed."""
    rules = elastic_rules(conn)
    stored = _rules_marker(conn)
    st = RollupSlice.__table__
    tz = ZoneInfo(_timezone(conn))
    done = 0
    for nt in sorted(set(node_type_ids) if node_type_ids is not None else set(rules) | {int(k) for k in stored}):
        if set(stored.get(str(nt), [])) == rules.get(nt, set()):
            continue
        _lock(conn)
        ids = [r[0] for r in conn.execute(select(st.c.run_id).where(st.c.node_type_id == nt).distinct())]
        for i in range(0, len(ids), BATCH):
            _rebuild_runs(conn, ids[i:i + BATCH], tz, rules)
        for month in sorted({r[0] for r in conn.execute(select(st.c.month).where(st.c.node_type_id == nt).distinct())}):
            _rebuild_month_rows(conn, month, nt)
        done += len(ids)
    _set_rules_marker(conn, rules)
    return done


def _rebuild_runs(conn: Connection, ids: list[str], tz: ZoneInfo, rules: dict[int, set[str]]) -> None:
    st = RollupSlice.__table__
    new = _compute(conn, ids, tz, rules)
    for i in range(0, len(ids), 500):
        conn.execute(delete(st).where(st.c.run_id.in_(ids[i:i + 500])))
    if new:
        conn.execute(st.insert(), [_slice_values(s) for s in new])


def _rebuild_month_rows(conn: Connection, month: str, nt: Optional[int] = None) -> None:
    """Recompute rollup_month and rollup_peak of one month (optionally one node type) from the slices."""
    st, mt, pt = RollupSlice.__table__, RollupMonth.__table__, RollupPeak.__table__
    q = select(*SLICE_COLUMNS).where(st.c.month == month)
    dm, dp = delete(mt).where(mt.c.month == month), delete(pt).where(pt.c.month == month)
    if nt is not None:
        q, dm, dp = q.where(st.c.node_type_id == nt), dm.where(mt.c.node_type_id == nt), dp.where(pt.c.node_type_id == nt)
    groups: dict[tuple, Facts] = defaultdict(Facts)
    scopes: dict[tuple, list] = defaultdict(list)
    for r in conn.execute(q):
        s = _slice_from_row(r)
        groups[s.key].add(s.facts)
        for ok in (s.offer_id or 0, ALL):
            scopes[(s.month, s.node_type_id, ok)].append((s.start, s.end, s.units))
    conn.execute(dm)
    conn.execute(dp)
    if groups:
        conn.execute(mt.insert(), [_month_values(k, f) for k, f in sorted(groups.items())])
    if scopes:
        conn.execute(pt.insert(), [{"month": k[0], "node_type_id": k[1], "offer_key": k[2], "peak": peak_of(v)}
                                   for k, v in sorted(scopes.items())])


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(7241001)"))


def rebuild(conn: Connection, progress: Any = None) -> int:
    """Rebuild the whole rollup from the run rows (first use, time zone change, ``db rollup --rebuild``).

    Stored lost intervals that a raw SQL write left behind are rewritten first.
    Returns the number of runs read. ``progress(done, total)`` is called per batch.
    """
    if isinstance(conn, SASession):
        conn = conn.connection()
    _lock(conn)
    lost_mismatches(conn, fix=True)
    tz_name = _timezone(conn)
    tz = ZoneInfo(tz_name)
    rules = elastic_rules(conn)
    cuts = charge_cuts(conn, tz)
    st, mt, pt = RollupSlice.__table__, RollupMonth.__table__, RollupPeak.__table__
    for t in (pt, mt, st):
        conn.execute(delete(t))
    _set_cuts_marker(conn, cuts)
    total = conn.execute(select(func.count()).select_from(Run)).scalar() or 0
    kwh = measured_kwh(conn)
    groups: dict[tuple, Facts] = defaultdict(Facts)
    done = 0
    last = ""
    while True:
        rows = [_run_row(r) for r in conn.execute(select(*RAW_RUN_COLUMNS).where(Run.id > last).order_by(Run.id).limit(BATCH))]
        if not rows:
            break
        batch: list[SliceFact] = []
        for row in rows:
            batch.extend(slices_of_run(tuple(row), tz, rules.get(row[2], ()), kwh.get(row[0]), cuts=cuts.get(row[2], ())))
        if batch:
            conn.execute(st.insert(), [_slice_values(s) for s in batch])
        for s in batch:
            groups[s.key].add(s.facts)
        last = rows[-1][0]
        done += len(rows)
        if progress:
            progress(done, total)
    if groups:
        vals = [_month_values(k, f) for k, f in sorted(groups.items())]
        for i in range(0, len(vals), BATCH):
            conn.execute(mt.insert(), vals[i:i + BATCH])
    # peaks: one sweep per month and node type, from the stored slices
    peaks = []
    for month, nt in sorted({(k[0], k[2]) for k in groups}):
        scopes: dict[int, list] = defaultdict(list)
        for s, e, n, off in conn.execute(select(st.c.start_at, st.c.end_at, held_units(st), st.c.offer_id)
                                         .where(st.c.month == month, st.c.node_type_id == nt)):
            scopes[off or 0].append((s, e, n))
            scopes[ALL].append((s, e, n))
        peaks += [{"month": month, "node_type_id": nt, "offer_key": ok, "peak": peak_of(v)} for ok, v in scopes.items()]
    if peaks:
        conn.execute(pt.insert(), peaks)
    _set_rules_marker(conn, rules)
    _set_marker(conn, tz_name)
    return done


def _month_values(key: tuple, f: Facts) -> dict[str, Any]:
    """A ``rollup_month`` row of group ``key`` (:attr:`SliceFact.key`)."""
    return {"month": key[0], "charge_from": key[1], "node_type_id": key[2], "offer_key": key[3], "project_key": key[4],
            "status": key[5], **f.values()}


def _set_marker(conn: Connection, tz_name: str) -> None:
    t = Setting.__table__
    conn.execute(delete(t).where(t.c.key == MARKER))
    conn.execute(t.insert().values(key=MARKER, value=tz_name))


# --- session integration ------------------------------------------------------------

def touch(session: SASession, run_ids: Iterable[str]) -> None:
    """Mark runs changed by a Core statement (the ORM ones are tracked automatically)."""
    session.info.setdefault(_PENDING, set()).update(run_ids)


def collect(session: SASession, flush_context: Any, instances: Any) -> None:
    pending = None
    for obj in (*session.new, *session.dirty, *session.deleted):
        if isinstance(obj, Run):
            pending = pending if pending is not None else session.info.setdefault(_PENDING, set())
            pending.add(obj.id)
            if obj not in session.deleted:
                keep_lost(obj)
        elif isinstance(obj, RunNode):
            pending = pending if pending is not None else session.info.setdefault(_PENDING, set())
            pending.add(obj.run_id)
        elif isinstance(obj, Offer):
            session.info.setdefault(_RULES, set()).add(obj.node_type_id)
            session.info[_CUTS] = True  # its currency or node type may have changed
        elif isinstance(obj, (OfferPrice, FxRate, CarbonIntensity)):
            session.info[_CUTS] = True
            if isinstance(obj, OfferPrice):  # a version may carry a new billing rule: check every node type
                session.info.setdefault(_RULES, set()).add(None)
        elif isinstance(obj, Setting) and obj.key == "timezone":
            session.info[_REBUILD] = True


def before_commit(session: SASession) -> None:
    # commit() flushes only after this hook: unflushed changes are collected by the flush in sync()
    if (session.info.get(_PENDING) or session.info.get(_REBUILD) or session.info.get(_RULES) or session.info.get(_CUTS)
            or session.new or session.dirty or session.deleted):
        sync(session)


def after_rollback(session: SASession, previous_transaction: Any) -> None:
    for k in (_PENDING, _REBUILD, _RULES, _CUTS):
        session.info.pop(k, None)


def sync(session: SASession) -> None:
    """Fold this session's pending run changes into the rollup (build it if it is missing or stale)."""
    session.flush()
    conn = session.connection()
    pending = session.info.pop(_PENDING, set())
    rebuild_flag = session.info.pop(_REBUILD, False)
    rules_nts = session.info.pop(_RULES, set())
    cuts_flag = session.info.pop(_CUTS, False)
    if not _has_tables(conn):
        return
    marker = _marker(conn)
    if marker is None:
        return  # not built yet (pending changes included): the first read builds it
    if rebuild_flag or marker != _timezone(conn):
        log.info("rebuilding the monthly rollup (time zone %s)", _timezone(conn))
        rebuild(conn)
        return
    if rules_nts:
        backfill_rules(conn, None if None in rules_nts else rules_nts)
    if cuts_flag:
        refresh_cuts(conn)
    if pending:
        refresh_runs(conn, pending, session.info.get(_DEFER_PEAKS))


def _has_tables(conn: Connection) -> bool:
    key = "trainledger_rollup_tables"
    if conn.info.get(key):
        return True
    from sqlalchemy import inspect

    ok = inspect(conn).has_table(RollupMonth.__tablename__)
    if ok:
        conn.info[key] = True
    return ok


@contextlib.contextmanager
def bulk(session: SASession) -> Iterator[None]:
    """Many runs written in one transaction (an import): the peaks of the touched months are recomputed
    once, at the end, rather than at every :func:`sync` (the other facts are folded in as usual)."""
    scopes: set = session.info.setdefault(_DEFER_PEAKS, set())
    try:
        yield
        sync(session)
        conn = session.connection()
        for scope in sorted(scopes):
            _set_peak(conn, scope, value=scope_peak_sql(conn, scope))
    finally:
        session.info.pop(_DEFER_PEAKS, None)


def ensure(session: SASession) -> None:
    """Before reading: fold pending changes and build the rollup if it is missing or stale."""
    sync(session)
    conn = session.connection()
    if not _has_tables(conn):
        raise RuntimeError("the ledger schema is older than this trainledger: run `trainledger db upgrade`")
    if _marker(conn) != _timezone(conn):
        log.info("building the monthly rollup (first use or time zone change)")
        rebuild(conn)
    else:
        refresh_cuts(conn)  # price versions, rates or intensities written behind the session events


# --- reading ---------------------------------------------------------------------

@dataclass
class MonthFacts:
    """What the cost engine needs for one month: facts per group (per charge period and summed), peaks,
    live slices, and the instants where each node type's charge periods change inside the month."""

    month: str
    groups: dict[tuple[int, Optional[int], Optional[int], str], Facts]  # (node type, offer, project, status)
    live: list[SliceFact]
    _peaks: dict[tuple[int, int], int]
    _conn: Connection
    periods: dict[datetime, dict[tuple[int, Optional[int], Optional[int], str], Facts]] = None  # type: ignore[assignment]
    cuts: dict[int, tuple[datetime, ...]] = None  # type: ignore[assignment]  # node type → cuts inside the month
    _peak_memo: dict = field(default_factory=dict)  # (node type, offer keys) → peak: each figure computed once

    def peak(self, node_type_id: int, offer_keys: Optional[set[int]] = None) -> int:
        """Peak concurrent nodes of a node type, live runs included; with ``offer_keys`` only
        runs recorded with those offers (0 = recorded without an offer). Computed once per month's facts:
        the report's node type, fleet and alternatives ask for the same peaks."""
        key = (node_type_id, None if offer_keys is None else frozenset(offer_keys))
        if key not in self._peak_memo:
            self._peak_memo[key] = self._peak(node_type_id, offer_keys)
        return self._peak_memo[key]

    def _peak(self, node_type_id: int, offer_keys: Optional[set[int]]) -> int:
        nt = node_type_id
        present = {ok for (n, ok) in self._peaks if n == nt and ok != ALL}
        present |= {s.offer_id or 0 for s in self.live if s.node_type_id == nt}
        keys = None if offer_keys is None or present <= offer_keys else set(offer_keys)
        if keys is None:
            fixed = self._peaks.get((nt, ALL), 0)
        elif len(keys) == 1:
            fixed = self._peaks.get((nt, next(iter(keys))), 0)
        else:  # a union of recorded offers: swept from the slices
            fixed = peak_of(iv for ok in sorted(keys) for iv in _scope_units(self._conn, self.month, nt, ok))
        live = [(s.start, s.end, s.units) for s in self.live
                if s.node_type_id == nt and (keys is None or (s.offer_id or 0) in keys)]
        if not live:
            return fixed
        # the live runs can only raise the peak inside their own span
        window = (min(s for s, _, _ in live), max(e for _, e, _ in live))
        if window[1] <= window[0]:
            return fixed
        rows = [iv for ok in ([ALL] if keys is None else sorted(keys))
                for iv in _scope_units(self._conn, self.month, nt, ok, window)]
        return max(fixed, peak_of(rows + live, window))


def live_slices(conn: Connection, month: str, tz: ZoneInfo, now: datetime, me: datetime) -> list[SliceFact]:
    """The month's slices of the runs still running (up to ``now``): not stored, sliced at read time."""
    return _live_of(conn, [(month, me)], tz, now)[month]


def _live_of(conn: Connection, months: list[tuple[str, datetime]], tz: ZoneInfo, now: datetime
             ) -> dict[str, list[SliceFact]]:
    """:func:`live_slices` of each (month, its end): the running runs read once, each sliced into every month it
    started before the end of."""
    rules = elastic_rules(conn)
    cuts = _cuts_marker(conn)
    out: dict[str, list[SliceFact]] = {m: [] for m, _ in months}
    last = max(me for _, me in months)
    for row in conn.execute(select(*RAW_RUN_COLUMNS).where(Run.status == RunStatus.running, Run.ended_at.is_(None),
                                                       Run.started_at.is_not(None), Run.started_at < last)):
        run = _run_row(row)
        started = run[RUN_COLUMN_INDEX["started_at"]]
        for month, me in months:
            if started < me:
                out[month].extend(slices_of_run(run, tz, rules.get(row[2], ()), None, now=now, only_month=month,
                                                cuts=cuts.get(row[2], ())))
    return out


def month_facts(session: SASession, month: str, tz: ZoneInfo, now: datetime) -> MonthFacts:
    """The month's facts: its ``rollup_month`` rows per charge period, the live runs' slices, peaks and cuts."""
    return months_facts(session, [month], tz, now)[month]


def months_facts(session: SASession, months: Iterable[str], tz: ZoneInfo, now: datetime) -> dict[str, MonthFacts]:
    """:func:`month_facts` of several months (a trend), each read in one query for all of them: the same facts."""
    ensure(session)
    conn = session.connection()
    bounds = {m: month_bounds(m, tz) for m in dict.fromkeys(months)}
    mt, pt = RollupMonth.__table__, RollupPeak.__table__
    periods: dict[str, dict[datetime, dict[tuple, Facts]]] = {m: defaultdict(dict) for m in bounds}
    # charge_from read raw and parsed once per charge period; the facts of all rows parsed in one go; in the order of
    # the table's unique key (the index the query reads)
    cols = (type_coerce(mt.c.charge_from, String), mt.c.node_type_id, mt.c.offer_key, mt.c.project_key, mt.c.status,
            *(mt.c[k] for k in INTS), *(mt.c[k] for k in TEXTS), mt.c.month)
    rows = conn.execute(select(*cols).where(mt.c.month.in_(list(bounds))).order_by(
        mt.c.month, mt.c.charge_from, mt.c.node_type_id, mt.c.offer_key, mt.c.project_key, mt.c.status)).all()
    starts: dict[Any, datetime] = {}
    for r, f in zip(rows, facts_of_rows(rows, 5)):
        ps = starts.get(r[0]) or starts.setdefault(r[0], _utc(r[0]))
        periods[r[-1]][ps][(r[1], r[2] or None, r[3] or None, r[4])] = f
    live = _live_of(conn, [(m, me) for m, (_, me) in bounds.items()], tz, now)
    peaks: dict[str, dict[tuple[int, int], int]] = {m: {} for m in bounds}
    for r in conn.execute(select(pt).where(pt.c.month.in_(list(bounds)))):
        peaks[r.month][(r.node_type_id, r.offer_key)] = r.peak
    cuts = _cuts_marker(conn)
    return {m: _month_facts(m, ms, me, periods[m], live[m], peaks[m], cuts, conn) for m, (ms, me) in bounds.items()}


def _month_facts(month: str, ms: datetime, me: datetime, periods: dict[datetime, dict[tuple, Facts]],
                 live: list[SliceFact], peaks: dict[tuple[int, int], int], all_cuts: Any, conn: Connection) -> MonthFacts:
    for s in live:
        k = (s.node_type_id, s.offer_id, s.project_id, s.status)
        periods[s.charge_from].setdefault(k, Facts()).add(s.facts)
    if len(periods) <= 1:  # one charge period: its groups are the month's
        groups = next(iter(periods.values()), {})
    else:
        groups = defaultdict(Facts)
        for p in sorted(periods):
            for k, f in periods[p].items():
                groups[k].add(f)
        groups = dict(groups)
    cuts = {nt: inside for nt, ts in all_cuts.items() if (inside := tuple(t for t in ts if ms < t < me))}
    return MonthFacts(month, groups, live, peaks, conn, dict(periods), cuts)


def month_slices(session: SASession, month: str, live: list[SliceFact],
                 run_ids: Optional[Iterable[str]] = None) -> list[SliceFact]:
    """The stored slices of a month (optionally only some runs) plus the live ones, in run start order."""
    st = RollupSlice.__table__
    q = (select(*SLICE_COLUMNS).join(Run, Run.id == st.c.run_id).where(st.c.month == month)
         .order_by(Run.started_at, Run.id))
    ids = set(run_ids) if run_ids is not None else None
    if ids is not None:
        q = q.where(st.c.run_id.in_(sorted(ids)))
    out = _slices_of_rows(session.connection().execute(q).all())
    out += [s for s in live if ids is None or s.run_id in ids]
    return out


# --- checking ----------------------------------------------------------------------

def check(session: SASession, months: Optional[Iterable[str]] = None) -> list[str]:
    """Differences between the stored rollup and one recomputed from the run rows (empty = consistent)."""
    ensure(session)
    conn = session.connection()
    tz = ZoneInfo(_timezone(conn))
    rules = elastic_rules(conn)
    cuts = charge_cuts(conn, tz)
    kwh = measured_kwh(conn)
    want_groups: dict[tuple, Facts] = defaultdict(Facts)
    want_scopes: dict[tuple, list] = defaultdict(list)
    wanted_months = set(months) if months is not None else None
    for row in conn.execute(select(*RAW_RUN_COLUMNS)):
        row = _run_row(row)
        for s in slices_of_run(tuple(row), tz, rules.get(row[2], ()), kwh.get(row[0]), cuts=cuts.get(row[2], ())):
            if wanted_months is not None and s.month not in wanted_months:
                continue
            want_groups[s.key].add(s.facts)
            for ok in (s.offer_id or 0, ALL):
                want_scopes[(s.month, s.node_type_id, ok)].append((s.start, s.end, s.units))
    mt, pt = RollupMonth.__table__, RollupPeak.__table__
    have_groups = {(r.month, r.charge_from, r.node_type_id, r.offer_key, r.project_key, r.status): Facts.from_row(r)
                   for r in conn.execute(select(mt)) if wanted_months is None or r.month in wanted_months}
    have_peaks = {(r.month, r.node_type_id, r.offer_key): r.peak for r in conn.execute(select(pt))
                  if wanted_months is None or r.month in wanted_months}
    problems = lost_mismatches(conn)
    if _cuts_marker(conn) != cuts:
        problems.append(f"rollup:cuts: stored {_cuts_text(_cuts_marker(conn))} != current {_cuts_text(cuts)}")
    for k in sorted(set(want_groups) | set(have_groups)):
        w, h = want_groups.get(k, Facts()), have_groups.get(k, Facts())
        if w.values() != h.values():
            problems.append(f"rollup_month {k}: stored {h.values()} != recomputed {w.values()}")
    for k in sorted(set(want_scopes) | set(have_peaks)):
        w = peak_of(want_scopes.get(k, []))
        if w != have_peaks.get(k, 0):
            problems.append(f"rollup_peak {k}: stored {have_peaks.get(k, 0)} != recomputed {w}")
    return problems
