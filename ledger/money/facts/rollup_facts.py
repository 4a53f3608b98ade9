"""The additive facts of the monthly rollup (:mod:`trainledger.money.facts.rollup`): :class:`Facts`, one run's
charge-period slices (:class:`SliceFact`, :func:`slices_of_run`) and the billing-rule keys they carry."""

from __future__ import annotations

import json
import operator
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import String, func, select, type_coerce
from trainledger.money.allocation import shares
from trainledger.money.allocation.shares import UNITS
from trainledger.money.rates import costs
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.months import (
    lost_interval,
    months_of,
    run_interval,
    time_share,
)
from trainledger.store.models import NodeType, Run, RunStatus

US_PER_HOUR = 3_600_000_000
GRID = Decimal("1e-12")


# --- facts --------------------------------------------------------------------

INTS = ("slices", "node_us", "gpu_us", "tokens", "util_slices", "util_us", "util_w", "mfu_us", "mfu_w",
        "kwh_slices", "kwh_node_us", "lost_node_us", "lost_gpu_us", "lost_ckpt_node_us", "lost_ckpt_gpu_us")


class Facts:
    """Additive facts of a set of run slices (all exact: integers or 1e-12-grid Decimals).

    Integers (in :data:`INTS` order, kept in one list for fast sums): slices, node-µs,
    GPU-µs, tokens, slices with a measured GPU-Util, their GPU-µs, Σ round(GPU-Util ×
    GPU-µs), the same two for MFU, measured slices and their node-µs, and lost work
    (:func:`trainledger.money.rates.months.lost_interval`): node-µs and GPU-µs lost by runs that
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
        if sign != 1:
            self.n = list(map(operator.sub, self.n, other.n))
            if other.kwh:
                self.kwh += sign * other.kwh
            for mine, theirs, zero in self._pairs(other):
                for r, v in theirs.items():
                    mine[r] = mine.get(r, zero) + sign * v
            return
        # the common case (a month's groups summed), inline: it runs once per group and surface
        self.n = list(map(operator.add, self.n, other.n))
        if other.kwh:
            self.kwh += other.kwh
        if other.billed:
            mine = self.billed
            for r, v in other.billed.items():
                mine[r] = mine.get(r, ZERO) + v
        if other.lost_billed:
            mine = self.lost_billed
            for r, v in other.lost_billed.items():
                mine[r] = mine.get(r, ZERO) + v
        if other.lost_ckpt_billed:
            mine = self.lost_ckpt_billed
            for r, v in other.lost_ckpt_billed.items():
                mine[r] = mine.get(r, ZERO) + v
        if other.sources:
            mine = self.sources
            for r, k in other.sources.items():
                mine[r] = mine.get(r, 0) + k

    def _pairs(self, other: "Facts") -> list[tuple[dict, dict, Any]]:
        return [(self.billed, other.billed, ZERO), (self.lost_billed, other.lost_billed, ZERO),
                (self.lost_ckpt_billed, other.lost_ckpt_billed, ZERO), (self.sources, other.sources, 0)]

    def is_zero(self) -> bool:
        return (not any(self.n) and self.kwh == 0 and all(c == 0 for c in self.sources.values())
                and all(v == 0 for b in (self.billed, self.lost_billed, self.lost_ckpt_billed) for v in b.values()))

    @property
    def node_hours(self) -> Decimal:
        return Decimal(self.n[_NODE_US]) / US_PER_HOUR

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
            n[_NODE_US], n[_GPU_US], billed = self.n[_LOST_CKPT_NODE_US], self.n[_LOST_CKPT_GPU_US], self.lost_ckpt_billed
        else:
            n[_NODE_US], n[_GPU_US], billed = self.n[_LOST_NODE_US], self.n[_LOST_GPU_US], self.lost_billed
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
        f = cls.__new__(cls)  # no __init__: a month's read builds one per group
        f.n = ints
        f.kwh = Decimal(kwh) if kwh and kwh != "0" else ZERO
        f.billed, f.sources = _decimals(billed), _json(sources)
        f.lost_billed, f.lost_ckpt_billed = _decimals(lost_billed), _decimals(lost_ckpt_billed)
        return f

    def __repr__(self) -> str:
        return f"Facts({self.values()})"


#: the text facts, in the order :meth:`Facts.from_parts` takes them
TEXTS = ("kwh", "billed", "util_sources", "lost_billed", "lost_ckpt_billed")


def facts_of_rows(rows: list, start: int) -> list[Facts]:
    """:meth:`Facts.from_parts` of many rows, each holding the :data:`INTS` from column ``start``, then the
    :data:`TEXTS`: the same facts, with the JSON texts of all the rows decoded in one call (a month's read
    parses thousands of them, and one decode per text cost more than the rest of the read)."""
    j = start + len(INTS)
    docs = _decode("[" + ",".join(t or "{}" for r in rows for t in r[j + 1:j + 5]) + "]")
    out = []
    for i, r in enumerate(rows):
        billed, sources, lost_billed, lost_ckpt_billed = docs[4 * i:4 * i + 4]
        f = Facts.__new__(Facts)
        f.n = list(r[start:j])
        kwh = r[j]
        f.kwh = Decimal(kwh) if kwh and kwh != "0" else ZERO
        f.billed = {k: Decimal(v) for k, v in billed.items()} if billed else {}
        f.sources = sources
        f.lost_billed = {k: Decimal(v) for k, v in lost_billed.items()} if lost_billed else {}
        f.lost_ckpt_billed = {k: Decimal(v) for k, v in lost_ckpt_billed.items()} if lost_ckpt_billed else {}
        out.append(f)
    return out


def _json(text_: Optional[str]) -> dict:
    return _decode(text_) if text_ and text_ != "{}" else {}


def _decimals(text_: Optional[str]) -> dict[str, Decimal]:
    if not text_ or text_ == "{}":
        return {}
    return {r: Decimal(v) for r, v in _decode(text_).items()}


_decode = json.JSONDecoder().decode


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
    held: Optional[int] = None  # nodes × share in node units (:data:`trainledger.money.allocation.shares.UNITS`); None: nodes

    @property
    def units(self) -> int:
        """Nodes held, in node units (what peaks sweep)."""
        return self.held if self.held is not None else self.nodes * UNITS

    @property
    def key(self) -> tuple:
        return (self.month, self.charge_from, self.node_type_id, self.offer_id or 0, self.project_id or 0, self.status)

    @property
    def interval(self) -> tuple:
        return (self.month, self.node_type_id, self.offer_id or 0, self.start, self.end, self.units)

    def comparable(self) -> tuple:
        return (self.key, self.start, self.end, self.nodes, self.gpus_per_node, self.split, self.units,
                tuple(sorted(self.facts.values().items())))


#: the node type key of a run recorded without a node type (``run.node_type_id`` NULL, migration 0018): its
#: slices and groups carry 0, no offer prices it, and the reports show it as "not costed: no node type"
NO_NODE_TYPE_ID = 0

#: columns of ``run`` a slice is computed from (in this order)
RUN_COLUMNS = (Run.id, Run.status, func.coalesce(Run.node_type_id, NO_NODE_TYPE_ID).label("node_type_id"), Run.offer_id, Run.project_id, Run.nodes, Run.gpus_per_node,
               Run.started_at, Run.ended_at, Run.heartbeat_at, Run.tokens, Run.gpu_util_mean, Run.mfu, Run.util_source,
               Run.last_checkpoint_at, Run.share, Run.share_basis,
               select(NodeType.gpus_per_node).where(NodeType.id == Run.node_type_id).scalar_subquery().label("nt_gpus"))


#: a column's place in a row of :data:`RUN_COLUMNS` (and of :func:`_run_row`)
RUN_COLUMN_INDEX = {c.key: i for i, c in enumerate(RUN_COLUMNS)}

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
    return (*r[:7], _utc(r[7]), _utc(r[8]), _utc(r[9]), *r[10:14], _utc(r[14]), *r[15:])


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

    A run that held part of each node (``share``, :mod:`trainledger.money.allocation.shares`) has its node-µs, billed
    node-hours and peak units scaled by the share (telescoping from the run's start, so its slices still add
    up to the run); its GPU-µs are its GPUs held (a MIG or fractional-GPU run's: share × the node type's GPUs).
    """
    (rid, status, nt_id, offer_id, project_id, nodes, gpn, started, ended, hb, tokens, util, mfu_, usrc, ckpt,
     share_t, basis, nt_gpus) = (*row, None, None, None)[:18]
    status_v = getattr(status, "value", status)
    if is_live(status_v, ended) and now is None:
        return []
    interval = run_interval(started, ended, status_v, hb, now or started)
    if interval is None:
        return []
    s, e = interval
    total_h = costs.hours_between(s, e)
    billed_total = {r: shares.scale(Decimal(nodes) * costs.billed_hours(total_h, *_parse_rule(r)), share_t)
                    for r in rules}
    held = shares.held_units(nodes, share_t) if share_t else None
    mig = bool(share_t) and (basis or "").startswith(("mig", "gpu_fraction")) and bool(nt_gpus)  # slices of GPUs

    def node_us(a: datetime, b: datetime) -> int:
        if not share_t:
            return nodes * _micros(a, b)
        return shares.scaled_micros(nodes, _micros(s, b), share_t) - shares.scaled_micros(nodes, _micros(s, a), share_t)

    def gpu_us(a: datetime, b: datetime) -> int:
        if not mig:
            return nodes * _micros(a, b) * gpn
        return (shares.scaled_micros(nodes, _micros(s, b), share_t, nt_gpus)
                - shares.scaled_micros(nodes, _micros(s, a), share_t, nt_gpus))
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
            f = _piece_facts(node_us(pa, pb), gpu_us(pa, pb), util_d, mfu_d)
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
                _add_lost(f, (pa, pb), lost[0], share, billed_total, node_us, gpu_us, ckpt is not None)
            if usrc:
                f.sources = {usrc: 1}
            out.append(SliceFact(rid, month, nt_id, offer_id, project_id, status_v, pa, pb, nodes, gpn, split, f, period,
                                 held))
    return out


def _piece_facts(node_us: int, gpu_us: int, util_d: Optional[Decimal], mfu_d: Optional[Decimal]) -> Facts:
    """The time-weighted facts of one slice: node-µs, GPU-µs, GPU-Util and MFU weights."""
    f = Facts([1, node_us, gpu_us] + [0] * (len(INTS) - 3))
    n = f.n
    if util_d is not None:
        n[_UTIL_SLICES], n[_UTIL_US], n[_UTIL_W] = 1, gpu_us, int((util_d * gpu_us).to_integral_value())
    if mfu_d is not None and gpu_us:
        n[_MFU_US], n[_MFU_W] = gpu_us, int((mfu_d * gpu_us).to_integral_value())
    return f


def _add_lost(f: Facts, slice_: tuple[datetime, datetime], lost_from: datetime, share: Any,
              billed_total: dict[str, Decimal], node_us_of: Any, gpu_us_of: Any, checkpointed: bool) -> None:
    """The lost part of one slice, ``[max(slice start, lost_from), slice end]``: its node-µs and GPU-µs,
    and its billed node-hours = the run's bill × the lost part's share of the run's time, on the same
    telescoping grid as the slice's bill (a run that lost everything has lost exactly its bill)."""
    a, b = slice_
    la = max(a, lost_from)
    if la >= b:
        return
    node_us, gpu_us = node_us_of(la, b), gpu_us_of(la, b)
    billed = {r: _q(bt * share(b)) - _q(bt * share(la)) for r, bt in billed_total.items()}
    if checkpointed:
        f.n[_LOST_CKPT_NODE_US], f.n[_LOST_CKPT_GPU_US], f.lost_ckpt_billed = node_us, gpu_us, billed
    else:
        f.n[_LOST_NODE_US], f.n[_LOST_GPU_US], f.lost_billed = node_us, gpu_us, billed
