"""A month's goodput totals, stored with the fingerprint of the ledger state they were computed from (issue 39 item 6).

Most surfaces show only a month's totals (:class:`~trainledger.money.goodput.goodput_core.MonthAccount`: spend,
goodput, badput, idle, by category, ETTR …) and, in the monthly summary, each project's waste; the Goodput page also
the runs summed per project and the runs of most badput, and the idle heat map the runs charged recovery
(:class:`MonthTotals`' ``projects``, ``ranked`` and ``recovered``, stored with the totals since format 2); computing them
means the month's whole account, every run line (seconds at 100,000 runs). :func:`month_totals` and
:func:`month_summary` read them from ``goodput_month`` (migration 0021) when the row's fingerprint still matches
the ledger, else compute them with the account's own code (``monthly_report(..., lines=True)`` and
:func:`~trainledger.money.goodput.goodput_ledger.month_account`) and store them. The figures are the computed ones
to the last digit: Decimals are stored as their exact strings.

**Stored** only for a month that is over at ``now`` (display time zone) and that no live run (status ``running``,
started before the month's end) touches; a month to date is always computed. Storing never fails the caller: it runs
in a savepoint, and a write that loses a race or a read-only engine skips it.

**The fingerprint** (:func:`fingerprint`, sha256) hashes, in this order: :data:`FORMAT`, ``trainledger.__version__``,
the month, the presentation currency (resolved: argument, environment, config file, setting), the display time zone,
and the rows, every column but surrogate ids, in a fixed order, of

1. ``rollup_month`` and ``rollup_peak`` of the month;
2. ``rollup_slice`` of the month (each run's facts there: interval, status, node type, offer, project, nodes, share,
   node-µs, billed hours, kWh, lost work …);
3. ``run``, the columns the report and the account read (status, start, end, heartbeat, last checkpoint, nodes,
   GPUs per node, node type, offer, project, share, lost interval, ``resume_of``) of: the runs with a slice in the
   month, the runs they resume, and every resumed run whose recovery gap can touch the month (the account's own
   query: started after the month's start, resuming a run started before its end) with the run it resumes;
4. ``run_phase`` of the runs with a slice in the month (run, node, phase, seconds, count, checkpoint totals);
5. every row of every other table of the schema (``SQLModel.metadata``) but :data:`NOT_HASHED`: offers, price
   versions, node types, fleets (with their idle-share policy), projects, users, FX rates, carbon intensities,
   settings (time zone, currency, the rollup's billing rules and charge-period cuts), Slurm mappings, budgets,
   invoice mappings … so a configuration table added later is covered without a change here.

Complete because the month's account reads nothing else: the report reads the rollup's rows of the month (1, 2;
live runs are excluded above), the run rows of its lines, and the configuration (5) at read time; the account reads
the run rows (3: its own and its chain neighbours for recovery gaps, including gaps of runs with no cost in the
month) and their phases (4). Everything a run row, ``run_node`` (measured energy) or a price change contributes
reaches the month through its slices (2), which the rollup keeps in step in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from operator import itemgetter
from typing import Any, Callable, Optional, TypeVar

from sqlalchemy import delete, func, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import aliased
from sqlmodel import Session, SQLModel
from trainledger.money.account.ended import is_storable  # the rule lives beside the remembered reports
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.money.goodput.goodput_core import (
    CATEGORIES,
    RANKED,
    Category,
    MonthAccount,
    RunAccount,
    group_accounts,
    ranked_by_badput,
)
from trainledger.money.goodput.goodput_ledger import month_account
from trainledger.money.goodput.waste import project_waste
from trainledger.money.rates.months import check_month, month_bounds
from trainledger.store.models import GoodputMonth, RollupMonth, RollupPeak, RollupSlice, Run, RunPhase
from trainledger.store.settings import display_timezone, presentation_currency
from trainledger.store.types import utcnow
from trainledger.store.unchanged import remembered

log = logging.getLogger(__name__)
T = TypeVar("T")

#: bumped when the stored payload or what the fingerprint covers changes: every stored row is then recomputed
FORMAT = "goodput-month/2"
#: tables the fingerprint does not hash whole: the month's own data (hashed by month above), and logs, sessions,
#: caches and planner or invoice data that no month's account reads
NOT_HASHED = frozenset({"run", "run_node", "metric_sample", "rollup_slice", "rollup_month", "rollup_peak", "run_phase",
                        "goodput_month", "month_lines", "audit_log", "dashboard_session", "oidc_login", "invoice", "invoice_line",
                        "plan_calibration", "run_prediction"})
#: the run columns the monthly report and the account read (besides what the slices carry)
RUN_COLUMNS = ("id", "status", "started_at", "ended_at", "heartbeat_at", "last_checkpoint_at", "nodes", "gpus_per_node",
               "node_type_id", "offer_id", "project_id", "share", "lost_from", "lost_until", "resume_of")
_PHASE_COLUMNS = ("run_id", "node", "phase", "seconds", "count", "ckpt_seconds", "ckpt_count")


@dataclass
class MonthTotals:
    """A month's totals: its account, each project's waste (the summary's per-project ``waste_cost``), its runs
    summed per project (``GoodputReport.projects``: :func:`~trainledger.money.goodput.goodput_core.group_accounts`)
    and its :data:`~trainledger.money.goodput.goodput_core.RANKED` runs of most badput (``ranked_by_badput``)."""

    account: MonthAccount
    project_waste: dict[str, Decimal] = field(default_factory=dict)
    stored: bool = False  # read back from goodput_month (False: computed by this call)
    projects: Optional[list[dict[str, Any]]] = None  # None: not computed (a month to date read from its account)
    ranked: Optional[list[RunAccount]] = None
    recovered: Optional[list[RunAccount]] = None  # :func:`recovered_runs`: the runs charged recovery in the month
    #: the ledger state's fingerprint they were read back or stored under (None: not stored); what else is stored per
    #: ledger state reads it to skip hashing the month again (``trainledger.money.outlook.outlook_store``)
    fingerprint: Optional[str] = field(default=None, compare=False)


def month_totals(session: Session, month: str, currency: Optional[str] = None,
                 now: Optional[datetime] = None) -> MonthAccount:
    """The month's :class:`MonthAccount`, equal to the one the whole account computes, field for field."""
    return month_summary(session, month, currency=currency, now=now).account


def month_summary(session: Session, month: str, *, currency: Optional[str] = None,
                  now: Optional[datetime] = None) -> MonthTotals:
    """The month's totals: the stored ones while their fingerprint matches, else computed (and stored when the month
    is over and no live run touches it)."""
    now = now or utcnow()
    month = check_month(month)
    key = presentation_currency(session, currency) or ""
    def read(fp: str) -> Optional[MonthTotals]:
        got = _read(session, month, key, fp)
        if got is not None:
            got.fingerprint = fp
        return got

    def store(fp: str, totals: MonthTotals) -> None:
        _store(session, month, key, fp, totals)
        totals.fingerprint = fp

    return read_or_compute(session, lambda: fingerprint(session, month, key, now), read,
                           lambda: _compute(session, month, currency, now), store)


def read_or_compute(session: Session, fingerprint_of: Callable[[], Optional[str]],
                    read: Callable[[str], Optional[T]], compute: Callable[[], T],
                    store: Callable[[str, T], None]) -> T:
    """A stored figure while its fingerprint matches (``read`` of the fingerprint), else computed and, when the month
    may be stored and nothing was committed meanwhile (PostgreSQL: each statement reads the latest state), stored."""
    fp = fingerprint_of()
    if fp is not None:
        got = read(fp)
        if got is not None:
            return got
        rollup.ensure(session)  # the rollup's upkeep the report would do (a first build, cuts written behind it) …
        fp = fingerprint_of()  # … done first: this is the state computed from
    value = compute()
    if fp is not None and fingerprint_of() == fp:
        store(fp, value)
    return value


def _compute(session: Session, month: str, currency: Optional[str], now: datetime) -> MonthTotals:
    rep = monthly_report(session, month, now=now, currency=currency, lines=True, projects=False)
    macc, accounts = month_account(session, rep, now)
    return MonthTotals(macc, project_waste(accounts), projects=group_accounts(accounts, "project"),
                       ranked=ranked_by_badput(accounts, RANKED), recovered=recovered_runs(accounts, month))


def recovered_runs(accounts: list[RunAccount], month: str) -> list[RunAccount]:
    """The month's runs that resume an interrupted one and were charged recovery (where idle with an owner sits:
    ``trainledger.money.goodput.occupancy.recovery_spans``), in the account's order."""
    return [a for a in accounts if a.month == month and a.resume_of and a.cost[Category.recovery] > 0]


# --- the fingerprint ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _version() -> str:
    import trainledger

    return str(trainledger.__version__)


def fingerprint(session: Session, month: str, currency_key: str, now: datetime, *, head: str = FORMAT,
                run_columns: tuple[str, ...] = RUN_COLUMNS) -> Optional[str]:
    """The sha256 of everything the month's account depends on (the module's docstring lists it); None when the
    month may not be stored (to date, or a live run touches it). This session's pending run changes are folded into
    the rollup first (``rollup.sync``). ``head`` and ``run_columns``: another stored figure's format and the run
    columns it reads (``trainledger.reports.month_lines_store``: every column of the runs, for their lines).
    Remembered per database connection while the database proves nothing was committed since it was hashed
    (``trainledger.store.unchanged``): the same hash, without reading the month's rows again."""
    rollup.sync(session)
    if not is_storable(session, month, now):
        return None
    return remembered(session.connection(), ("fingerprint", month, currency_key, head, run_columns),
                      lambda: _hash(session, month, currency_key, head, run_columns))


def _hash(session: Session, month: str, currency_key: str, head: str, run_columns: tuple[str, ...]) -> str:
    conn = session.connection()
    tz = display_timezone(session)
    lo, hi = month_bounds(month, tz)
    h = hashlib.sha256()
    _feed(h, "head", [(head, _version(), month, currency_key, str(tz))])
    for table, key in ((RollupMonth.__table__, ("charge_from", "node_type_id", "offer_key", "project_key", "status")),
                       (RollupPeak.__table__, ("node_type_id", "offer_key")),
                       (RollupSlice.__table__, ("run_id", "charge_from"))):
        cols = [c for c in table.columns if c.name != "id"]
        _feed(h, table.name, _raw(conn, select(*cols).where(table.c.month == month), [c.name for c in cols], key))
    in_month = select(RollupSlice.run_id).where(RollupSlice.month == month)
    _feed(h, "run", _run_rows(conn, in_month, lo, hi, run_columns))
    ph = RunPhase.__table__
    _feed(h, "run_phase", _raw(conn, select(*(ph.c[k] for k in _PHASE_COLUMNS)).where(ph.c.run_id.in_(in_month)),
                               _PHASE_COLUMNS, ("run_id", "node", "phase")))
    for table in SQLModel.metadata.sorted_tables:
        if table.name in NOT_HASHED:
            continue
        order = list(table.primary_key.columns) or list(table.columns)
        _feed(h, table.name, _raw(conn, select(table).order_by(*order)))
    return h.hexdigest()


def _raw(conn: Any, stmt: Any, names: Any = (), key: tuple[str, ...] = ()) -> list[tuple]:
    """The statement's rows as the driver returns them (no type conversion: the stored values themselves), sorted by
    the ``key`` columns (unique) when given (sorting here is cheaper than in the database)."""
    res = conn.execute(stmt)
    try:
        rows = res.cursor.fetchall() if res.cursor is not None else []
    finally:
        res.close()
    if key:
        rows.sort(key=itemgetter(*(list(names).index(k) for k in key)))
    return rows


def _run_rows(conn: Any, in_month: Any, lo: datetime, hi: datetime,
              run_columns: tuple[str, ...] = RUN_COLUMNS) -> list[tuple]:
    """The ``run_columns`` (``id`` first, ``resume_of`` among them) of the runs the month's account reads, by id: those
    with a slice in the month, the runs they resume, and each resumed run whose recovery gap can reach into the month
    with the run it resumes (the account's own gap query: started after the month's start, resuming a run started
    before its end)."""
    cols = [Run.__table__.c[k] for k in run_columns]
    rows = _raw(conn, select(*cols).where(Run.id.in_(in_month)))
    have = {r[0] for r in rows}
    prev = aliased(Run)
    # coalesce(x, x): no index on the start times, so the database walks the (few) resumed runs by ``resume_of``
    # (> "": the index's range; an empty ``resume_of`` resumes nothing, as in the account)
    gaps = _raw(conn, select(Run.id, prev.id).join(prev, prev.id == Run.resume_of).where(
        Run.resume_of > "", func.coalesce(Run.started_at, Run.started_at) > lo,
        func.coalesce(prev.started_at, prev.started_at) < hi))
    resumed = run_columns.index("resume_of")
    more = sorted(({r[resumed] for r in rows if r[resumed]} | {i for g in gaps for i in g}) - have)
    for i in range(0, len(more), 900):
        rows += _raw(conn, select(*cols).where(Run.id.in_(more[i:i + 900])))
    rows.sort(key=itemgetter(0))
    return rows


def _feed(h: Any, name: str, rows: Any) -> None:
    """A named block of rows into the hash: its name, its row count and the rows' exact ``repr``."""
    h.update(f"\x1e{name}\x1f{len(rows)}\x1f".encode())
    h.update(repr(rows).encode())


# --- stored rows -------------------------------------------------------------------------------------------------

def _payload(month: str, key: str, t: MonthTotals) -> str:
    m = t.account
    return json.dumps({
        "format": FORMAT, "month": month, "currency_key": key, "currency": m.currency,
        "spend": str(m.spend), "goodput": str(m.goodput), "badput": str(m.badput), "idle": str(m.idle),
        "by_category": {c.value: str(m.by_category[c]) for c in CATEGORIES},
        "seconds": {c.value: str(m.seconds[c]) for c in CATEGORIES},
        "goodput_pct": None if m.goodput_pct is None else str(m.goodput_pct),
        "ettr": None if m.ettr is None else str(m.ettr), "period": m.period, "runs": m.runs,
        "identity_residual": str(m.identity_residual),
        "project_waste": sorted([p, str(v)] for p, v in t.project_waste.items()),
        "projects": [_tagged(p) for p in t.projects or []], "ranked": [_run_to(r) for r in t.ranked or []],
        "recovered": [_run_to(r) for r in t.recovered or []]},
        sort_keys=True)


# a project line's and a run line's values as JSON: Decimals as their exact strings, datetimes as ISO text, floats
# (a line's ETTR) as JSON numbers (Python writes the shortest text that reads back to the same float)
def _tagged(v: Any) -> Any:
    if isinstance(v, Decimal):
        return {"$d": str(v)}
    if isinstance(v, datetime):
        return {"$t": v.isoformat()}
    if isinstance(v, dict):
        return {str(getattr(k, "value", k)): _tagged(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_tagged(x) for x in v]
    if v is None or isinstance(v, (str, int, float)):
        return v
    raise TypeError(f"not storable: {type(v).__name__}")


def _untagged(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"$d"}:
            return exact_decimal(v["$d"])
        if set(v) == {"$t"}:
            return datetime.fromisoformat(v["$t"])
        return {k: _untagged(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_untagged(x) for x in v]
    return v


def _run_to(r: RunAccount) -> dict[str, Any]:
    return {f.name: _tagged(getattr(r, f.name)) for f in fields(RunAccount)}


def _run_from(d: Any) -> RunAccount:
    if not isinstance(d, dict) or set(d) != {f.name for f in fields(RunAccount)}:
        raise ValueError("a run line of another shape")
    v = {k: _untagged(x) for k, x in d.items()}
    v["seconds"], v["cost"] = _categories(d["seconds"], tagged=True), _categories(d["cost"], tagged=True)
    return RunAccount(**v)


def _digest(fp: str, payload: str, head: str = FORMAT) -> str:
    return hashlib.sha256(f"{head}\x1f{fp}\x1f{payload}".encode()).hexdigest()


def exact_decimal(text: Any) -> Decimal:
    if not isinstance(text, str):
        raise ValueError(f"not a decimal string: {text!r}")
    d = Decimal(text)
    if not d.is_finite():
        raise ValueError(f"not a finite decimal: {text!r}")
    return d


def _categories(d: Any, tagged: bool = False) -> dict[Category, Decimal]:
    if not isinstance(d, dict) or set(d) != {c.value for c in CATEGORIES}:
        raise ValueError("categories differ")
    return {c: exact_decimal(d[c.value]["$d"] if tagged else d[c.value]) for c in CATEGORIES}


def _parse(month: str, key: str, payload: str) -> MonthTotals:
    """The stored payload back as figures; ValueError for anything not written by :func:`_payload` for this month."""
    p = json.loads(payload)
    if not isinstance(p, dict) or (p.get("format"), p.get("month"), p.get("currency_key")) != (FORMAT, month, key):
        raise ValueError("a payload of another format, month or currency")
    if not isinstance(p["currency"], str) or not isinstance(p["period"], str) or type(p["runs"]) is not int:
        raise ValueError("malformed payload")
    opt = {k: None if p[k] is None else exact_decimal(p[k]) for k in ("goodput_pct", "ettr")}
    acc = MonthAccount(month=month, currency=p["currency"], spend=exact_decimal(p["spend"]), goodput=exact_decimal(p["goodput"]),
                       badput=exact_decimal(p["badput"]), idle=exact_decimal(p["idle"]), by_category=_categories(p["by_category"]),
                       seconds=_categories(p["seconds"]), goodput_pct=opt["goodput_pct"], ettr=opt["ettr"],
                       period=p["period"], runs=p["runs"], identity_residual=exact_decimal(p["identity_residual"]))
    waste = {str(name): exact_decimal(v) for name, v in p["project_waste"]}
    projects, ranked = [_untagged(x) for x in p["projects"]], [_run_from(x) for x in p["ranked"]]
    recovered = [_run_from(x) for x in p["recovered"]]
    if acc.goodput + acc.badput + acc.idle != acc.spend:  # the account's identity, exact: else not ours
        raise ValueError("goodput + badput + idle != spend")
    return MonthTotals(acc, waste, stored=True, projects=projects, ranked=ranked, recovered=recovered)


def _read(session: Session, month: str, key: str, fp: str) -> Optional[MonthTotals]:
    payload = stored_payload(session, GoodputMonth.__table__, month, key, fp)
    if payload is None:
        return None
    try:
        return _parse(month, key, payload)
    except (ValueError, TypeError, KeyError, InvalidOperation) as exc:
        log.warning("goodput_month %s %r: stored figures unreadable (%s); computed again", month, key, exc)
        return None


def _store(session: Session, month: str, key: str, fp: str, totals: MonthTotals) -> None:
    store_payload(session, GoodputMonth.__table__, month, key, fp, _payload(month, key, totals))


def stored_payload(session: Session, t: Any, month: str, key: str, fp: str, head: str = FORMAT) -> Optional[str]:
    """The payload of table ``t``'s row for (month, currency key) when its fingerprint is ``fp`` and its digest (of
    ``head``, the fingerprint and the payload) holds; None otherwise (a damaged row is logged, then recomputed)."""
    row = session.connection().execute(select(t.c.fingerprint, t.c.digest, t.c.payload)
                                       .where(t.c.month == month, t.c.currency == key)).first()
    if row is None or row.fingerprint != fp:
        return None
    if row.digest != _digest(fp, row.payload, head):
        log.warning("%s %s %r: stored figures damaged; computed again", t.name, month, key)
        return None
    return row.payload


def store_payload(session: Session, t: Any, month: str, key: str, fp: str, payload: str, head: str = FORMAT) -> None:
    """Upsert table ``t``'s row for (month, currency key) in a savepoint; a lost race or a read-only ledger leaves it
    unstored (never raises)."""
    try:
        with session.begin_nested():
            conn = session.connection()
            conn.execute(delete(t).where(t.c.month == month, t.c.currency == key))
            conn.execute(insert(t).values(month=month, currency=key, fingerprint=fp, digest=_digest(fp, payload, head),
                                          payload=payload, computed_at=utcnow()))
    except SQLAlchemyError as exc:
        log.info("%s %s %r not stored: %s", t.name, month, key, str(exc).splitlines()[0])


__all__ = ["FORMAT", "NOT_HASHED", "MonthTotals", "exact_decimal", "fingerprint", "is_storable", "month_summary", "month_totals",
           "read_or_compute", "recovered_runs", "store_payload", "stored_payload"]
