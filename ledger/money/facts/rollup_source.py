"""What the monthly rollup reads besides the runs: the display time zone, the elastic billing rules,
measured energy and the charge-period cuts per node type (:mod:`trainledger.money.facts.rollup`)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import (
    delete,
    select,
)
from sqlalchemy.engine import Connection
from trainledger.money.facts.rollup_facts import _utc, rule_key
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.months import (
    cached_month_bounds,
    date_start,
    month_of,
)
from trainledger.store.models import (
    CarbonIntensity,
    FxRate,
    NodeType,
    Offer,
    OfferKind,
    OfferPrice,
    Run,
    RunNode,
    Setting,
)

MARKER = "rollup:tz"  # setting: the time zone the rollup is built in (absent: not built)
CUTS_MARKER = "rollup:cuts"  # setting: the charge-period cuts per node type the slices carry


# --- reading the catalog and runs ------------------------------------------------

def _timezone(conn: Connection) -> str:
    from trainledger.store.settings import DEFAULTS

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


def measured_kwh(conn: Connection, run_ids: Optional[Iterable[str]] = None) -> dict[str, Decimal]:
    """Σ RunNode.energy_kwh of ended runs whose every node has an energy figure (exact: :func:`exact_kwh`)."""
    q = (select(RunNode.run_id, RunNode.energy_kwh, Run.nodes)
         .join(Run, Run.id == RunNode.run_id).where(Run.ended_at.is_not(None)))
    if run_ids is not None:
        q = q.where(RunNode.run_id.in_(list(run_ids)))
    return exact_kwh(conn.execute(q))
