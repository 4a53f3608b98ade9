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
"""

from __future__ import annotations

import contextlib
import json
import logging
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable, Iterator, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import (
    String,
    and_,
    bindparam,
    delete,
    event,
    func,
    select,
    text,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session as SASession

from ledger.money import costs
from ledger.money.costs import ZERO
from ledger.money.months import (
    cached_month_bounds,
    date_start,
    lost_interval,
    month_bounds,
    month_of,
    months_of,
    run_interval,
    time_share,
)
from ledger.store.models import (
    CarbonIntensity,
    FxRate,
    NodeType,
    Offer,
    OfferKind,
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

US_PER_HOUR = 3_600_000_000
GRID = Decimal("1e-12")
ALL = -1  # rollup_peak.offer_key of the whole node type
MARKER = "rollup:tz"  # setting: the time zone the rollup is built in (absent: not built)
RULES_MARKER = "rollup:rules"  # setting: the elastic billing rules per node type the slices carry
CUTS_MARKER = "rollup:cuts"  # setting: the charge-period cuts per node type the slices carry
BATCH = 20_000
_PENDING = "trainledger_rollup_pending"
_REBUILD = "trainledger_rollup_rebuild"
_RULES = "trainledger_rollup_rules"
_CUTS = "trainledger_rollup_cuts"
_DEFER_PEAKS = "trainledger_rollup_defer_peaks"


# --- facts --------------------------------------------------------------------

INTS = ("slices", "node_us", "gpu_us", "tokens", "util_slices", "util_us", "util_w", "mfu_us", "mfu_w",
        "kwh_slices", "kwh_node_us", "lost_node_us", "lost_gpu_us", "lost_ckpt_node_us", "lost_ckpt_gpu_us")


class Facts:
    """Additive facts of a set of run slices (all exact: integers or 1e-12-grid Decimals).

    Integers (in :data:`INTS` order, kept in one list for fast sums): slices, node-µs,
    GPU-µs, tokens, slices with a measured GPU-Util, their GPU-µs, Σ round(GPU-Util ×
    GPU-µs), the same two for MFU, measured slices and their node-µs, and lost work
    (:func:`ledger.money.months.lost_interval`): node-µs and GPU-µs lost by runs that
    never checkpointed (``lost_*``: their whole slice) and by runs that did
    (``lost_ckpt_*``: the part after the last checkpoint). Then ``kwh`` (measured
    energy of the measured slices), ``billed`` (billing rule → billed node-hours),
    ``sources`` (GPU-Util source → slices) and the billed node-hours of the lost
    parts (``lost_billed``, ``lost_ckpt_billed``: the run's bill shared by time).
    """

    __slots__ = ("n", "kwh", "billed", "sources", "lost_billed", "lost_ckpt_billed")
    INTS = INTS

    def __init__(self, n: Optional[list[int]] = None, kwh: Decimal = ZERO, billed: Optional[dict[str, Decimal]] = None,
                 sources: Optional[dict[str, int]] = None, lost_billed: Optional[dict[str, Decimal]] = None,
                 lost_ckpt_billed: Optional[dict[str, Decimal]] = None, **ints: int):
        self.n = n if n is not None else [0] * len(INTS)
        for k, v in ints.items():
            self.n[_IDX[k]] = v
        self.kwh = kwh
        self.billed = billed if billed is not None else {}
        self.sources = sources if sources is not None else {}
        self.lost_billed = lost_billed if lost_billed is not None else {}
        self.lost_ckpt_billed = lost_ckpt_billed if lost_ckpt_billed is not None else {}

    def add(self, other: "Facts", sign: int = 1) -> None:
        if sign == 1:
            self.n = [x + y for x, y in zip(self.n, other.n)]
        else:
            self.n = [x - y for x, y in zip(self.n, other.n)]
        if other.kwh:
            self.kwh += sign * other.kwh
        for attr in ("billed", "lost_billed", "lost_ckpt_billed"):
            theirs = getattr(other, attr)
            if theirs:
                b = getattr(self, attr)
                for r, v in theirs.items():
                    b[r] = b.get(r, ZERO) + sign * v
        if other.sources:
            c = self.sources
            for r, k in other.sources.items():
                c[r] = c.get(r, 0) + sign * k

    def is_zero(self) -> bool:
        return (not any(self.n) and self.kwh == 0 and all(c == 0 for c in self.sources.values())
                and all(v == 0 for b in (self.billed, self.lost_billed, self.lost_ckpt_billed) for v in b.values()))

    @property
    def node_hours(self) -> Decimal:
        return Decimal(self.node_us) / US_PER_HOUR

    @property
    def gpu_hours(self) -> Decimal:
        return Decimal(self.gpu_us) / US_PER_HOUR

    @property
    def useful_gpu_hours(self) -> Optional[Decimal]:
        return Decimal(self.util_w) / US_PER_HOUR if self.util_slices else None

    @property
    def unmeasured_node_hours(self) -> Decimal:
        return Decimal(self.node_us - self.kwh_node_us) / US_PER_HOUR

    @property
    def lost_gpu_hours(self) -> Decimal:
        """GPU-hours of lost work, checkpointed or not."""
        return Decimal(self.lost_gpu_us + self.lost_ckpt_gpu_us) / US_PER_HOUR

    def lost(self, since_checkpoint: bool) -> "Facts":
        """The lost part as facts to cost like any slice (node-µs, GPU-µs, billed node-hours): of the runs
        that never checkpointed, or (``since_checkpoint``) of those that did."""
        n = [0] * len(INTS)
        if since_checkpoint:
            n[_NODE_US], n[_GPU_US], billed = self.lost_ckpt_node_us, self.lost_ckpt_gpu_us, self.lost_ckpt_billed
        else:
            n[_NODE_US], n[_GPU_US], billed = self.lost_node_us, self.lost_gpu_us, self.lost_billed
        return Facts(n, billed=billed)

    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(zip(INTS, self.n))
        out["kwh"] = _dtext(self.kwh)
        out["billed"] = _billed_text(self.billed)
        out["util_sources"] = json.dumps({k: c for k, c in sorted(self.sources.items()) if c}, sort_keys=True)
        out["lost_billed"] = _billed_text(self.lost_billed)
        out["lost_ckpt_billed"] = _billed_text(self.lost_ckpt_billed)
        return out

    @classmethod
    def from_row(cls, row: Any) -> "Facts":
        m = row._mapping
        return cls.from_parts([int(m[k] or 0) for k in INTS], *(m[k] for k in TEXTS))

    @classmethod
    def from_parts(cls, ints: list[int], kwh: Optional[str], billed: Optional[str], sources: Optional[str],
                   lost_billed: Optional[str] = None, lost_ckpt_billed: Optional[str] = None) -> "Facts":
        return cls(ints, Decimal(kwh) if kwh and kwh != "0" else ZERO, _decimals(billed), dict(_json(sources)),
                   _decimals(lost_billed), _decimals(lost_ckpt_billed))

    def __repr__(self) -> str:
        return f"Facts({self.values()})"


#: the text facts, in the order :meth:`Facts.from_parts` takes them
TEXTS = ("kwh", "billed", "util_sources", "lost_billed", "lost_ckpt_billed")


def _json(text_: Optional[str]) -> dict:
    return json.loads(text_) if text_ and text_ != "{}" else {}


def _decimals(text_: Optional[str]) -> dict[str, Decimal]:
    return {r: Decimal(v) for r, v in _json(text_).items()}


def _int_property(i: int) -> property:
    def get(self: Facts) -> int:
        return self.n[i]

    def set_(self: Facts, v: int) -> None:
        self.n[i] = v
    return property(get, set_)


_IDX = {k: i for i, k in enumerate(INTS)}
for _k, _i in _IDX.items():
    setattr(Facts, _k, _int_property(_i))
(_SLICES, _NODE_US, _GPU_US, _TOKENS, _UTIL_SLICES, _UTIL_US, _UTIL_W, _MFU_US, _MFU_W, _KWH_SLICES,
 _KWH_NODE_US, _LOST_NODE_US, _LOST_GPU_US, _LOST_CKPT_NODE_US, _LOST_CKPT_GPU_US) = range(len(INTS))


def _dtext(d: Decimal) -> str:
    return str(d.quantize(GRID)) if d else "0"


def _billed_text(b: dict[str, Decimal]) -> str:
    return json.dumps({r: _dtext(v) for r, v in sorted(b.items()) if v}, sort_keys=True)


def rule_key(granularity: Optional[Decimal], minimum: Optional[Decimal]) -> str:
    """Billing rule of an elastic offer: ``granularity|minimum`` (hours; empty = none)."""
    def norm(x: Optional[Decimal]) -> str:
        return "" if x is None or Decimal(x) == 0 else format(Decimal(x).normalize(), "f")
    return f"{norm(granularity)}|{norm(minimum)}"


def offer_rule(offer: Any) -> str:
    return rule_key(offer.billing_granularity_hours, offer.minimum_hours)


@lru_cache(maxsize=256)
def _parse_rule(key: str) -> tuple[Optional[Decimal], Optional[Decimal]]:
    g, m = key.split("|")
    return (Decimal(g) if g else None), (Decimal(m) if m else None)


@dataclass
class SliceFact:
    """One run's part of one charge period (``charge_from``: the period's start) of one month."""

    run_id: str
    month: str
    node_type_id: int
    offer_id: Optional[int]
    project_id: Optional[int]
    status: str
    start: datetime
    end: datetime
    nodes: int
    gpus_per_node: int
    split: bool  # the run crosses a month boundary
    facts: Facts
    charge_from: datetime

    @property
    def key(self) -> tuple:
        return (self.month, self.charge_from, self.node_type_id, self.offer_id or 0, self.project_id or 0, self.status)

    @property
    def interval(self) -> tuple:
        return (self.month, self.node_type_id, self.offer_id or 0, self.start, self.end, self.nodes)

    def comparable(self) -> tuple:
        return (self.key, self.start, self.end, self.nodes, self.gpus_per_node, self.split,
                tuple(sorted(self.facts.values().items())))


#: columns of ``run`` a slice is computed from (in this order)
RUN_COLUMNS = (Run.id, Run.status, Run.node_type_id, Run.offer_id, Run.project_id, Run.nodes, Run.gpus_per_node,
               Run.started_at, Run.ended_at, Run.heartbeat_at, Run.tokens, Run.gpu_util_mean, Run.mfu, Run.util_source,
               Run.last_checkpoint_at)


_RAW = {"status", "started_at", "ended_at", "heartbeat_at", "last_checkpoint_at"}
#: the same, with timestamps and status read raw (no per-value type processing; see :func:`_run_row`)
RAW_RUN_COLUMNS = tuple(type_coerce(c, String).label(c.key) if c.key in _RAW else c for c in RUN_COLUMNS)


def _utc(v: Any) -> Optional[datetime]:
    if v is None:
        return None
    if isinstance(v, str):
        v = datetime.fromisoformat(v)
    return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)


def _run_row(row: Any) -> tuple:
    """A row of :data:`RAW_RUN_COLUMNS` as :func:`slices_of_run` takes it (aware UTC timestamps)."""
    r = tuple(row)
    return (*r[:7], _utc(r[7]), _utc(r[8]), _utc(r[9]), *r[10:14], _utc(r[14]))


def _micros(a: datetime, b: datetime) -> int:
    d = b - a
    return max(0, (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds)


def _q(x: Decimal) -> Decimal:
    return x.quantize(GRID)


def is_live(status: Any, ended: Optional[datetime]) -> bool:
    """A run whose costed interval still grows (running, no end): added at read time, never stored."""
    return getattr(status, "value", status) == RunStatus.running.value and ended is None


def _pieces(a: datetime, b: datetime, ms: datetime, cuts: tuple[datetime, ...]) -> list[tuple[datetime, datetime, datetime]]:
    """``[a, b]`` (inside one month starting at ``ms``) cut at ``cuts``: (start, end, charge period start) each."""
    if not cuts:
        return [(a, b, ms)]
    i = bisect_right(cuts, a)
    period = cuts[i - 1] if i and cuts[i - 1] > ms else ms
    out = []
    for c in cuts[i:bisect_left(cuts, b)]:
        out.append((a, c, period))
        a = period = c
    out.append((a, b, period))
    return out


def slices_of_run(row: tuple, tz: ZoneInfo, rules: Iterable[str], run_kwh: Optional[Decimal] = None,
                  now: Optional[datetime] = None, only_month: Optional[str] = None,
                  cuts: tuple[datetime, ...] = ()) -> list[SliceFact]:
    """The charge-period slices of one run (``row`` in :data:`RUN_COLUMNS` order): one per month it
    touches, cut again at ``cuts`` (sorted instants where its node type's prices, rates or intensity change).

    A live run is sliced only when ``now`` is given (its interval ends there).
    A run's slices add up to the run exactly: node-µs and GPU-µs are integers,
    tokens telescope with ``int``, and billed node-hours and kWh telescope on
    a 1e-12 grid. So does its lost work (:func:`_add_lost`).
    """
    (rid, status, nt_id, offer_id, project_id, nodes, gpn, started, ended, hb, tokens, util, mfu_, usrc, ckpt) = row
    status_v = getattr(status, "value", status)
    if is_live(status_v, ended) and now is None:
        return []
    interval = run_interval(started, ended, status_v, hb, now or started)
    if interval is None:
        return []
    s, e = interval
    total_h = costs.hours_between(s, e)
    billed_total = {r: Decimal(nodes) * costs.billed_hours(total_h, *_parse_rule(r)) for r in rules}
    lost = lost_interval(status_v, interval, ckpt)
    util_d = Decimal(str(util)) if util is not None else None
    mfu_d = Decimal(str(mfu_)) if mfu_ is not None else None

    def share(t: datetime) -> Decimal:
        return time_share(s, e, t)

    out = []
    for month, ms, me in months_of(s, e, tz):
        if only_month is not None and month != only_month:
            continue
        a, b = max(s, ms), min(e, me)
        if b <= a and not (s == e and ms <= s < me):
            continue
        split = s < ms or e > me
        for pa, pb, period in _pieces(a, b, ms, cuts):
            f = _piece_facts(pa, pb, nodes, gpn, util_d, mfu_d)
            n = f.n
            if pa == s and pb == e:  # the whole run (the common case)
                if tokens is not None:
                    n[_TOKENS] = tokens
                if run_kwh is not None:
                    f.kwh = _q(run_kwh)
                    n[_KWH_SLICES], n[_KWH_NODE_US] = 1, n[_NODE_US]
                f.billed = {r: _q(bt) for r, bt in billed_total.items()}
            else:
                sa, sb = share(pa), share(pb)
                if tokens is not None:
                    n[_TOKENS] = int(tokens * sb) - int(tokens * sa)
                if run_kwh is not None:
                    f.kwh = _q(run_kwh * sb) - _q(run_kwh * sa)
                    n[_KWH_SLICES], n[_KWH_NODE_US] = 1, n[_NODE_US]
                f.billed = {r: _q(bt * sb) - _q(bt * sa) for r, bt in billed_total.items()}
            if lost is not None:
                _add_lost(f, (pa, pb), lost[0], share, billed_total, nodes, gpn, ckpt is not None)
            if usrc:
                f.sources = {usrc: 1}
            out.append(SliceFact(rid, month, nt_id, offer_id, project_id, status_v, pa, pb, nodes, gpn, split, f, period))
    return out


def _piece_facts(a: datetime, b: datetime, nodes: int, gpn: int, util_d: Optional[Decimal],
                 mfu_d: Optional[Decimal]) -> Facts:
    """The time-weighted facts of one slice [a, b]: node-µs, GPU-µs, GPU-Util and MFU weights."""
    node_us = nodes * _micros(a, b)
    gpu_us = node_us * gpn
    f = Facts([1, node_us, gpu_us] + [0] * (len(INTS) - 3))
    n = f.n
    if util_d is not None:
        n[_UTIL_SLICES], n[_UTIL_US], n[_UTIL_W] = 1, gpu_us, int((util_d * gpu_us).to_integral_value())
    if mfu_d is not None and gpu_us:
        n[_MFU_US], n[_MFU_W] = gpu_us, int((mfu_d * gpu_us).to_integral_value())
    return f


def _add_lost(f: Facts, slice_: tuple[datetime, datetime], lost_from: datetime, share: Any,
              billed_total: dict[str, Decimal], nodes: int, gpn: int, checkpointed: bool) -> None:
    """The lost part of one slice, ``[max(slice start, lost_from), slice end]``: its node-µs and GPU-µs,
    and its billed node-hours = the run's bill × the lost part's share of the run's time, on the same
    telescoping grid as the slice's bill (a run that lost everything has lost exactly its bill)."""
    a, b = slice_
    la = max(a, lost_from)
    if la >= b:
        return
    node_us = nodes * _micros(la, b)
    billed = {r: _q(bt * share(b)) - _q(bt * share(la)) for r, bt in billed_total.items()}
    if checkpointed:
        f.n[_LOST_CKPT_NODE_US], f.n[_LOST_CKPT_GPU_US], f.lost_ckpt_billed = node_us, node_us * gpn, billed
    else:
        f.n[_LOST_NODE_US], f.n[_LOST_GPU_US], f.lost_billed = node_us, node_us * gpn, billed


# --- reading the catalog and runs ------------------------------------------------

def _timezone(conn: Connection) -> str:
    from ledger.store.settings import DEFAULTS

    v = conn.execute(select(Setting.value).where(Setting.key == "timezone")).scalar()
    return v or DEFAULTS["timezone"]


def _marker(conn: Connection) -> Optional[str]:
    return conn.execute(select(Setting.value).where(Setting.key == MARKER)).scalar()


def elastic_rules(conn: Connection) -> dict[int, set[str]]:
    """Billing rules of the elastic offers (every price version of them), per node type."""
    out: dict[int, set[str]] = defaultdict(set)
    for o in conn.execute(select(Offer.node_type_id, Offer.billing_granularity_hours, Offer.minimum_hours)
                          .where(Offer.kind == OfferKind.rent_elastic)):
        out[o[0]].add(rule_key(o[1], o[2]))
    for o in conn.execute(select(Offer.node_type_id, OfferPrice.billing_granularity_hours, OfferPrice.minimum_hours)
                          .join(Offer, Offer.id == OfferPrice.offer_id).where(Offer.kind == OfferKind.rent_elastic)):
        out[o[0]].add(rule_key(o[1], o[2]))
    return out


def exact_kwh(rows: Iterable[tuple[str, Optional[float], int]]) -> dict[str, Decimal]:
    """Σ energy per run from ``(run_id, RunNode.energy_kwh, Run.nodes)`` rows, for runs whose every node has a figure.

    Each stored float is taken at its shortest exact decimal (``Decimal(repr(x))``)
    and the sum is a Decimal, so it is exact and the same on every backend and in
    any row order. Never a SQL ``SUM`` over the float column: SQLite (compensated
    summation) and PostgreSQL (plain) round such a sum differently, and at large
    totals the money built on it then differed between the backends.
    """
    total: dict[str, Decimal] = defaultdict(lambda: ZERO)
    seen: dict[str, int] = defaultdict(int)
    missing: set[str] = set()
    nodes_of: dict[str, int] = {}
    for rid, kwh, nodes in rows:
        seen[rid] += 1
        nodes_of[rid] = nodes
        if kwh is None:
            missing.add(rid)
        else:
            total[rid] += Decimal(repr(float(kwh)))
    return {rid: total[rid] for rid, n in seen.items() if rid not in missing and n >= nodes_of[rid]}
# --- charge periods ------------------------------------------------------------------

Cuts = dict[int, tuple[datetime, ...]]


def charge_cuts(conn: Connection, tz: ZoneInfo) -> Cuts:
    """Per node type, the sorted instants inside months (display time zone ``tz``) where its charge
    periods change: a price version of one of its offers (all but each offer's first, which also
    covers the time before it), an exchange rate of a pair that touches one of its offers'
    currencies, or a carbon intensity for it or for every node type (each one: before the first,
    the documented default applies)."""
    offers = conn.execute(select(Offer.id, Offer.node_type_id, Offer.currency)).all()
    nts = {nt for _, nt, _ in offers} | set(conn.execute(select(NodeType.id)).scalars())
    out: dict[int, set[datetime]] = defaultdict(set)
    first: dict[int, datetime] = {}
    later: list[tuple[int, datetime]] = []
    for oid, vf in conn.execute(select(OfferPrice.offer_id, OfferPrice.valid_from).order_by(OfferPrice.offer_id,
                                                                                            OfferPrice.valid_from)):
        vf = _utc(vf)
        if oid in first:
            later.append((oid, vf))
        else:
            first[oid] = vf
    nt_of = {oid: nt for oid, nt, _ in offers}
    for oid, vf in later:
        if oid in nt_of:
            out[nt_of[oid]].add(vf)
    currencies: dict[int, set[str]] = defaultdict(set)
    for _, nt, cur in offers:
        currencies[nt].add(cur)
    for base, quote, d in conn.execute(select(FxRate.base, FxRate.quote, FxRate.valid_from).distinct()):
        t = date_start(_day(d), tz)
        for nt, curs in currencies.items():
            if base in curs or quote in curs:
                out[nt].add(t)
    for key, d in conn.execute(select(CarbonIntensity.node_type_key, CarbonIntensity.valid_from)):
        t = date_start(_day(d), tz)
        for nt in (nts if key == 0 else [key]):
            out[nt].add(t)
    return {nt: tuple(sorted(t for t in ts if cached_month_start(t, tz) != t)) for nt, ts in sorted(out.items())
            if any(cached_month_start(t, tz) != t for t in ts)}


def _day(v: Any) -> date:
    return date.fromisoformat(v) if isinstance(v, str) else v


def cached_month_start(t: datetime, tz: ZoneInfo) -> datetime:
    """The start of the month (in ``tz``) that contains instant ``t``."""
    return cached_month_bounds(month_of(t, tz), tz)[0]


def _cuts_text(cuts: Cuts) -> str:
    return json.dumps({str(nt): [t.isoformat() for t in ts] for nt, ts in sorted(cuts.items()) if ts}, sort_keys=True)


@lru_cache(maxsize=32)
def _parse_cuts(text_: str) -> Cuts:
    return {int(nt): tuple(datetime.fromisoformat(t) for t in ts) for nt, ts in json.loads(text_).items()}


def _cuts_marker(conn: Connection) -> Cuts:
    """The cuts the stored slices carry (empty when none were ever set)."""
    v = conn.execute(select(Setting.value).where(Setting.key == CUTS_MARKER)).scalar()
    return _parse_cuts(v) if v else {}


def _set_cuts_marker(conn: Connection, cuts: Cuts) -> None:
    t = Setting.__table__
    conn.execute(delete(t).where(t.c.key == CUTS_MARKER))
    if any(cuts.values()):
        conn.execute(t.insert().values(key=CUTS_MARKER, value=_cuts_text(cuts)))


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


def measured_kwh(conn: Connection, run_ids: Optional[Iterable[str]] = None) -> dict[str, Decimal]:
    """Σ RunNode.energy_kwh of ended runs whose every node has an energy figure (exact: :func:`exact_kwh`)."""
    q = (select(RunNode.run_id, RunNode.energy_kwh, Run.nodes)
         .join(Run, Run.id == RunNode.run_id).where(Run.ended_at.is_not(None)))
    if run_ids is not None:
        q = q.where(RunNode.run_id.in_(list(run_ids)))
    return exact_kwh(conn.execute(q))


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
                 RollupSlice.nodes, RollupSlice.gpus_per_node, RollupSlice.split,
                 *(getattr(RollupSlice, k) for k in Facts.INTS), *(getattr(RollupSlice, k) for k in TEXTS))


def _slice_from_row(r: Any) -> SliceFact:
    return SliceFact(r.run_id, r.month, r.node_type_id, r.offer_id, r.project_id, r.status, r.start_at, r.end_at,
                     r.nodes, r.gpus_per_node, bool(r.split), Facts.from_row(r), r.charge_from)


def _slice_values(s: SliceFact) -> dict[str, Any]:
    return {"run_id": s.run_id, "month": s.month, "charge_from": s.charge_from, "node_type_id": s.node_type_id,
            "offer_id": s.offer_id,
            "project_id": s.project_id, "status": s.status, "start_at": s.start, "end_at": s.end,
            "nodes": s.nodes, "gpus_per_node": s.gpus_per_node, "split": s.split, **s.facts.values()}


def _insert(conn: Connection, table: Any):
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


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


def _scope_rows(conn: Connection, month: str, nt: int, offer_key: int,
                window: Optional[tuple[datetime, datetime]] = None) -> list[tuple[datetime, datetime, int]]:
    t = RollupSlice.__table__
    q = select(t.c.start_at, t.c.end_at, t.c.nodes).where(t.c.month == month, t.c.node_type_id == nt)
    if offer_key == 0:
        q = q.where(t.c.offer_id.is_(None))
    elif offer_key != ALL:
        q = q.where(t.c.offer_id == offer_key)
    if window is not None:
        q = q.where(t.c.start_at < window[1], t.c.end_at > window[0])
    return [tuple(r) for r in conn.execute(q)]


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
    _set_peak(conn, scope, value=sweep_peak(_scope_rows(conn, month, nt, ok)))


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
    events = union_all(select(t.c.start_at.label("at"), t.c.nodes.label("delta")).where(*cond),
                       select(t.c.end_at.label("at"), (-t.c.nodes).label("delta")).where(*cond)).subquery()
    running = select(func.sum(events.c.delta).over(order_by=(events.c.at, events.c.delta), rows=(None, 0))
                     .label("cur")).subquery()
    return max(0, int(conn.execute(select(func.max(running.c.cur))).scalar() or 0))


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
                best = max(best, sweep_peak(_scope_rows(conn, scope[0], scope[1], scope[2], (a, b)), (a, b)))
        _set_peak(conn, scope, at_least=best)


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
            scopes[(s.month, s.node_type_id, ok)].append((s.start, s.end, s.nodes))
    conn.execute(dm)
    conn.execute(dp)
    if groups:
        conn.execute(mt.insert(), [_month_values(k, f) for k, f in sorted(groups.items())])
    if scopes:
        conn.execute(pt.insert(), [{"month": k[0], "node_type_id": k[1], "offer_key": k[2], "peak": sweep_peak(v)}
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
        for s, e, n, off in conn.execute(select(st.c.start_at, st.c.end_at, st.c.nodes, st.c.offer_id)
                                         .where(st.c.month == month, st.c.node_type_id == nt)):
            scopes[off or 0].append((s, e, n))
            scopes[ALL].append((s, e, n))
        peaks += [{"month": month, "node_type_id": nt, "offer_key": ok, "peak": sweep_peak(v)} for ok, v in scopes.items()]
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


# --- the lost interval stored on each run ---------------------------------------------

def run_lost_interval(status: Any, started: Any, ended: Any, heartbeat: Any,
                      last_checkpoint: Any) -> tuple[Optional[datetime], Optional[datetime]]:
    """``(lost_from, lost_until)`` of a run from its row (:func:`ledger.money.months.lost_interval`); Nones
    when it lost nothing."""
    status_v = getattr(status, "value", status)
    started, ended, heartbeat = _utc(started), _utc(ended), _utc(heartbeat)
    iv = run_interval(started, ended, status_v, heartbeat, ended or heartbeat or started) if started else None
    lost = lost_interval(status_v, iv, _utc(last_checkpoint))
    return lost if lost is not None else (None, None)


def keep_lost(run: Run) -> None:
    """Set ``run.lost_from``/``lost_until`` from its other columns (called for every ORM write of a run)."""
    lf, lu = run_lost_interval(run.status, run.started_at, run.ended_at, run.heartbeat_at, run.last_checkpoint_at)
    if _utc(run.lost_from) != lf:
        run.lost_from = lf
    if _utc(run.lost_until) != lu:
        run.lost_until = lu


_LOST_COLUMNS = (Run.id, type_coerce(Run.status, String), Run.started_at, Run.ended_at, Run.heartbeat_at,
                 Run.last_checkpoint_at, Run.lost_from, Run.lost_until)


def lost_mismatches(conn: Connection, fix: bool = False) -> list[str]:
    """Runs whose stored lost interval differs from the one their columns give (a raw SQL write);
    ``fix`` rewrites them (``db rollup --rebuild``)."""
    out = []
    for rid, st, s, e, hb, ck, lf, lu in conn.execute(select(*_LOST_COLUMNS)):
        want = run_lost_interval(st, s, e, hb, ck)
        if (_utc(lf), _utc(lu)) != want:
            out.append(f"run {rid}: stored lost interval {lf} → {lu} != recomputed {want[0]} → {want[1]}")
            if fix:
                conn.execute(update(Run).where(Run.id == rid).values(lost_from=want[0], lost_until=want[1]))
    return out


# --- session integration ------------------------------------------------------------

def touch(session: SASession, run_ids: Iterable[str]) -> None:
    """Mark runs changed by a Core statement (the ORM ones are tracked automatically)."""
    session.info.setdefault(_PENDING, set()).update(run_ids)


@event.listens_for(SASession, "before_flush")
def _collect(session: SASession, flush_context: Any, instances: Any) -> None:
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


@event.listens_for(SASession, "before_commit")
def _before_commit(session: SASession) -> None:
    # commit() flushes only after this hook: unflushed changes are collected by the flush in sync()
    if (session.info.get(_PENDING) or session.info.get(_REBUILD) or session.info.get(_RULES) or session.info.get(_CUTS)
            or session.new or session.dirty or session.deleted):
        sync(session)


@event.listens_for(SASession, "after_soft_rollback")
def _after_rollback(session: SASession, previous_transaction: Any) -> None:
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

    def peak(self, node_type_id: int, offer_keys: Optional[set[int]] = None) -> int:
        """Peak concurrent nodes of a node type, live runs included; with ``offer_keys`` only
        runs recorded with those offers (0 = recorded without an offer)."""
        nt = node_type_id
        present = {ok for (n, ok) in self._peaks if n == nt and ok != ALL}
        present |= {s.offer_id or 0 for s in self.live if s.node_type_id == nt}
        keys = None if offer_keys is None or present <= offer_keys else set(offer_keys)
        if keys is None:
            fixed = self._peaks.get((nt, ALL), 0)
        elif len(keys) == 1:
            fixed = self._peaks.get((nt, next(iter(keys))), 0)
        else:  # a union of recorded offers: swept from the slices
            fixed = sweep_peak(iv for ok in sorted(keys) for iv in _scope_rows(self._conn, self.month, nt, ok))
        live = [(s.start, s.end, s.nodes) for s in self.live
                if s.node_type_id == nt and (keys is None or (s.offer_id or 0) in keys)]
        if not live:
            return fixed
        # the live runs can only raise the peak inside their own span
        window = (min(s for s, _, _ in live), max(e for _, e, _ in live))
        if window[1] <= window[0]:
            return fixed
        rows = [iv for ok in ([ALL] if keys is None else sorted(keys))
                for iv in _scope_rows(self._conn, self.month, nt, ok, window)]
        return max(fixed, sweep_peak(rows + live, window))


def live_slices(conn: Connection, month: str, tz: ZoneInfo, now: datetime, me: datetime) -> list[SliceFact]:
    rules = elastic_rules(conn)
    cuts = _cuts_marker(conn)
    out = []
    for row in conn.execute(select(*RAW_RUN_COLUMNS).where(Run.status == RunStatus.running, Run.ended_at.is_(None),
                                                       Run.started_at.is_not(None), Run.started_at < me)):
        out.extend(slices_of_run(_run_row(row), tz, rules.get(row[2], ()), None, now=now, only_month=month,
                                 cuts=cuts.get(row[2], ())))
    return out


def month_facts(session: SASession, month: str, tz: ZoneInfo, now: datetime) -> MonthFacts:
    ensure(session)
    conn = session.connection()
    ms, me = month_bounds(month, tz)
    mt, pt = RollupMonth.__table__, RollupPeak.__table__
    periods: dict[datetime, dict[tuple, Facts]] = defaultdict(dict)
    cols = (mt.c.charge_from, mt.c.node_type_id, mt.c.offer_key, mt.c.project_key, mt.c.status,
            *(mt.c[k] for k in INTS), *(mt.c[k] for k in TEXTS))
    n = len(INTS)
    for r in conn.execute(select(*cols).where(mt.c.month == month)):
        periods[r[0]][(r[1], r[2] or None, r[3] or None, r[4])] = Facts.from_parts(list(r[5:5 + n]), *r[5 + n:])
    live = live_slices(conn, month, tz, now, me)
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
    peaks = {(r.node_type_id, r.offer_key): r.peak for r in conn.execute(select(pt).where(pt.c.month == month))}
    cuts = {nt: inside for nt, ts in _cuts_marker(conn).items() if (inside := tuple(t for t in ts if ms < t < me))}
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
    out = [_slice_from_row(r) for r in session.connection().execute(q)]
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
                want_scopes[(s.month, s.node_type_id, ok)].append((s.start, s.end, s.nodes))
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
        w = sweep_peak(want_scopes.get(k, []))
        if w != have_peaks.get(k, 0):
            problems.append(f"rollup_peak {k}: stored {have_peaks.get(k, 0)} != recomputed {w}")
    return problems
