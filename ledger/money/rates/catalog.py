"""What the ledger holds and how it is priced, for one period: node types, offers and fleets.

Read once per report as plain read-only copies (attribute reads on ORM rows are
slow), with the rules every report shares: which offer a run without one is
costed under (:func:`default_offer`), which offer a ``--own/--rent/--reserved``
flag names (:func:`pick_offer`), and the node-hours a set of fleets holds in a
window (:func:`fleet_capacity`).

Prices have versions (``offer_price``): :func:`priced_catalog` gives the catalog
of one charge period, each offer at the version in force at the period's start
(an offer's first version also covers the time before it; an offer with no
version is priced at its own fields) and converted to the presented currency.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Optional
from zoneinfo import ZoneInfo

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.fx import RateBook, convert_offer
from trainledger.money.rates.months import date_start
from trainledger.store.models import PRICE_FIELDS, Fleet, NodeType, Offer, OfferKind, OfferPrice


@dataclass
class Catalog:
    """Node types and offers by id (plain copies of the rows)."""

    node_types: dict[int, NodeType]
    offers: dict[int, Offer]

    def offers_for(self, node_type_id: int, kind: OfferKind) -> list[Offer]:
        """The node type's offers of one kind, presets first, then by name."""
        return sorted((o for o in self.offers.values() if o.node_type_id == node_type_id and o.kind == kind),
                      key=lambda o: (o.source != "preset", o.name))


def load_catalog(session: Session) -> Catalog:
    """Node types and offers as plain read-only copies."""
    return Catalog({n.id: SimpleNamespace(**n.model_dump()) for n in session.exec(select(NodeType)).all()},
                   {o.id: SimpleNamespace(**o.model_dump()) for o in session.exec(select(Offer)).all()})


Versions = dict[int, tuple[list[datetime], list[dict]]]  # offer id → (valid_from list, price values), oldest first


def load_versions(session: Session) -> Versions:
    """Every offer's price versions, oldest first."""
    out: dict[int, tuple[list[datetime], list[dict]]] = {}
    cols = [getattr(OfferPrice, f) for f in PRICE_FIELDS]
    for row in session.exec(select(OfferPrice.offer_id, OfferPrice.valid_from, OfferPrice.version, *cols)
                            .order_by(OfferPrice.offer_id, OfferPrice.valid_from)):
        starts, values = out.setdefault(row[0], ([], []))
        starts.append(row[1])
        values.append({**dict(zip(PRICE_FIELDS, row[3:])), "price_version": row[2]})
    return out


def price_at(versions: Versions, offer_id: int, at: datetime) -> Optional[dict]:
    """The price fields of ``offer_id`` in force at ``at`` (its first version before it began; None: no version)."""
    found = versions.get(offer_id)
    if not found:
        return None
    starts, values = found
    i = bisect_right(starts, at)
    return values[max(i - 1, 0)]


def priced_catalog(cat: Catalog, versions: Versions, at: datetime, book: Optional[RateBook] = None,
                   target: Optional[str] = None) -> Catalog:
    """The catalog of the charge period starting at ``at``: every offer at its version in force then, its
    money in ``target`` (at the rate in force then; None: the offer's own currency)."""
    offers = {}
    for oid, o in cat.offers.items():
        prices = price_at(versions, oid, at)
        base = SimpleNamespace(**{**vars(o), **prices}) if prices is not None else o
        offers[oid] = convert_offer(base, book, target, at)
    return Catalog(cat.node_types, offers)


def pick_offer(cat: Catalog, name: Optional[str], node_type_id: int, kind: OfferKind, flag: str) -> Optional[Offer]:
    """The offer named by ``flag`` (``--own``, ``--rent``, ``--reserved``) for a node type, else its default of ``kind``."""
    if name:
        for o in cat.offers.values():
            if o.name == name:
                if o.kind != kind:
                    raise LedgerInputError(f"{flag}: offer {name!r} is {o.kind.value}, not {kind.value}")
                if o.node_type_id != node_type_id:
                    continue
                return o
        names = [o.name for o in cat.offers.values() if o.kind == kind]
        raise LedgerInputError(f"{flag}: no {kind.value} offer named {name!r}; use one of {', '.join(sorted(names)) or '(none: pricing import one)'}")
    found = cat.offers_for(node_type_id, kind)
    return found[0] if found else None


def default_offer(cat: Catalog, nt_id: int, fleets_by_offer: dict[int, list[Fleet]]) -> Optional[Offer]:
    """A run without an offer uses its node type's fleet if one is held, else elastic rent."""
    for o in cat.offers_for(nt_id, OfferKind.own) + cat.offers_for(nt_id, OfferKind.rent_reserved):
        if fleets_by_offer.get(o.id):
            return o
    for kind in (OfferKind.rent_elastic, OfferKind.own, OfferKind.rent_reserved):
        found = cat.offers_for(nt_id, kind)
        if found:
            return found[0]
    return None


def fleets_by_offer(session: Session, start: datetime, end: datetime, tz: ZoneInfo,
                    fleets: Optional[list[Fleet]] = None) -> dict[int, list[Fleet]]:
    """Fleets held at some time in [start, end) (a day of slack on both sides), by offer id. ``fleets``: every fleet,
    read once for several periods (:func:`all_fleets`; the fleets are configuration, a few rows)."""
    first, last = start.astimezone(tz).date() - timedelta(days=1), end.astimezone(tz).date() + timedelta(days=1)
    out: dict[int, list[Fleet]] = defaultdict(list)
    for f in all_fleets(session) if fleets is None else fleets:
        if f.valid_from < last and (f.valid_to is None or f.valid_to > first):
            out[f.offer_id].append(f)
    return out


def all_fleets(session: Session) -> list[Fleet]:
    """Every fleet row, in id order."""
    return list(session.exec(select(Fleet).order_by(Fleet.id)).all())


def fleet_capacity(fleets: list[Fleet], start: datetime, end: datetime, tz: ZoneInfo) -> Decimal:
    """Node-hours the fleets hold in [start, end): Σ nodes × hours of each fleet's validity inside it."""
    cap = ZERO
    for f in fleets:
        fs = max(start, date_start(f.valid_from, tz))
        fe = min(end, date_start(f.valid_to, tz)) if f.valid_to else end
        if fe > fs:
            cap += costs.hours_between(fs, fe) * f.node_count
    return cap


def combine_bases(bases: list[str]) -> str:
    """The power basis of several fleets: ``measured`` when all were, ``nominal`` when none was, else ``mixed``."""
    if bases and all(b == "measured" for b in bases):
        return "measured"
    return "mixed" if any(b != "nominal" for b in bases) else "nominal"


def own_energy_kwh(offer: Offer, measured_kwh: Decimal, unmeasured_busy_node_hours: Decimal, busy_node_hours: Decimal,
                   capacity_node_hours: Decimal, measured_all: bool) -> tuple[Optional[Decimal], str]:
    """The kWh that replaces an own fleet's nominal power term (:func:`costs.fleet_energy_kwh`), and its basis.

    ``(None, "nominal")`` when the offer is not ``own``; callers pass only fleets with a measured run.
    """
    if offer.kind != OfferKind.own:
        return None, "nominal"
    kwh = costs.fleet_energy_kwh(measured_kwh, unmeasured_busy_node_hours, Decimal(capacity_node_hours) - busy_node_hours,
                                 offer.power_kw_load, offer.power_kw_idle)
    return kwh, "measured" if measured_all else "mixed"
