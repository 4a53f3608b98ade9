"""Offer price history: versions of an offer's prices, each in force from its ``valid_from`` (``offer_price``).

An edit of an offer's prices adds a version valid from a given instant (default:
now) instead of overwriting the offer, so every month keeps the prices it was
used at. Rules, each refused with a one-line :class:`LedgerInputError`:

* a version cannot start before the offer's first version ("before the offer existed");
* two versions of one offer cannot start at the same instant with different prices
  (they would overlap); the same prices again are a no-op;
* a version that starts in the past rewrites the months from its start to the next
  version (or now): it needs ``retroactive=True``, and the caller names those months
  (``trainledger.money.rates.pricing.changed_months``) and asks for a confirmation.

The offer row's own price fields mirror its newest version (the list price for
what-ifs). An offer with no version at all (written by hand, e.g. in tests) is
costed at its own fields at every instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import func
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.lookup import by_name
from trainledger.store.models import PRICE_FIELDS, Offer, OfferPrice, Run
from trainledger.store.types import MONEY_SCALE, utcnow

#: how far in the past a valid_from still counts as "now" (the time a command takes to run)
NOW_SLACK = timedelta(minutes=5)
#: where the first version of an offer added to a ledger without runs starts: from the beginning
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def price_values(obj: Any) -> dict[str, Any]:
    """The :data:`PRICE_FIELDS` of an offer, a version or an offer spec, normalised for comparison."""
    out = {}
    for f in PRICE_FIELDS:
        v = getattr(obj, f, None) if not isinstance(obj, dict) else obj.get(f)
        out[f] = Decimal(v).quantize(MONEY_SCALE) if v is not None and f != "depreciation_months" else v
    return out


def versions(session: Session, offer_id: int) -> list[OfferPrice]:
    """An offer's price versions, oldest ``valid_from`` first."""
    return list(session.exec(select(OfferPrice).where(OfferPrice.offer_id == offer_id).order_by(OfferPrice.valid_from)))


def default_first_valid_from(session: Session) -> datetime:
    """Where a new offer's first version starts: the ledger's earliest run, else the beginning (1970-01-01):
    an offer added to an empty ledger covers the history imported after it."""
    first = session.exec(select(func.min(Run.started_at))).one()
    return first if first is not None else EPOCH


def parse_valid_from(text: Optional[str | date | datetime], tz: ZoneInfo, flag: str = "--from") -> Optional[datetime]:
    """``YYYY-MM-DD`` (the start of that day in the display time zone), an ISO date-time (naive = display
    time zone), ``now`` or None (= now) → a UTC instant, or None for now."""
    if text is None or text == "now" or text == "":
        return None
    if isinstance(text, datetime):
        value = text
    elif isinstance(text, date):
        value = datetime(text.year, text.month, text.day)
    else:
        try:
            value = datetime.fromisoformat(str(text).strip())
        except ValueError:
            raise LedgerInputError(f"{flag}: expected YYYY-MM-DD or an ISO date-time such as 2026-12-01T09:00, "
                                   f"got {text!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=tz)
    if not 1970 <= value.year <= 9998:
        raise LedgerInputError(f"{flag}: the year must be 1970 to 9998, got {text!r}")
    return value.astimezone(timezone.utc)


@dataclass
class VersionPlan:
    """What adding a version would do: nothing (same prices), add it, and which months it rewrites."""

    offer: Offer
    valid_from: datetime
    values: dict[str, Any]
    noop: bool
    retroactive_until: Optional[datetime]  # the end of the past it rewrites (None: it starts now or later)
    first: Optional[OfferPrice] = None  # an offer never versioned: its own prices as version 1, written first

    @property
    def retroactive(self) -> bool:
        return self.retroactive_until is not None


def plan_version(session: Session, offer: Offer, values: dict[str, Any], valid_from: Optional[datetime] = None,
                 now: Optional[datetime] = None) -> VersionPlan:
    """Check a new version of ``offer`` with ``values`` from ``valid_from`` (None = now) against its history."""
    now = now or utcnow()
    start = valid_from or now.replace(microsecond=0)  # whole seconds: FOCUS date-times have no fraction
    values = price_values(values)
    history = versions(session, offer.id) if offer.id is not None else []
    first = None
    if not history:  # written by hand, never versioned: its fields have held since the ledger's first run
        first = OfferPrice(offer_id=offer.id, version=1, valid_from=default_first_valid_from(session),
                           note="version 1: the prices before price history", **price_values(offer))
        history = [first]
    if start < history[0].valid_from:
        raise LedgerInputError(
            f"--from: {_when(start)} is before offer {offer.name} existed (its first price is valid from "
            f"{_when(history[0].valid_from)}); a price can change only after that")
    same = next((v for v in history if v.valid_from == start), None)
    in_force = max((v for v in history if v.valid_from <= start), key=lambda v: v.valid_from)
    if same is not None and price_values(same) != values:
        raise LedgerInputError(
            f"--from: offer {offer.name} already has version {same.version} from {_when(start)} with other prices; "
            "versions cannot overlap: pick another instant, or re-import that version's prices")
    noop = price_values(in_force) == values
    later = [v.valid_from for v in history if v.valid_from > start]
    until = min([now, *later]) if start < now - NOW_SLACK else None
    return VersionPlan(offer, start, values, noop, None if noop else until, first)


def apply_version(session: Session, plan: VersionPlan, *, retroactive: bool = False, note: str = "") -> Optional[OfferPrice]:
    """Add the planned version (None when it changes nothing); refuses a past start without ``retroactive``."""
    if plan.noop:
        return None
    if plan.retroactive and not retroactive:
        raise LedgerInputError(
            f"--from: {_when(plan.valid_from)} is in the past; a price from then rewrites months already reported: "
            "pass --retroactive (and confirm) to do it, or leave --from out to change the price from now")
    offer = plan.offer
    if plan.first is not None and not versions(session, offer.id):
        session.add(plan.first)
        session.flush()
    history = versions(session, offer.id)
    same = next((v for v in history if v.valid_from == plan.valid_from), None)
    if same is not None:  # identical to the version at that instant: plan_version said noop
        return None
    in_force = max((v for v in history if v.valid_from <= plan.valid_from), key=lambda v: v.valid_from)
    row = OfferPrice(offer_id=offer.id, version=max((v.version for v in history), default=0) + 1,
                     valid_from=plan.valid_from, note=note[:500], **plan.values)
    session.add(row)
    session.flush()
    mirror_newest(session, offer)
    record_change(session, "offer.price", offer.name, audited_version(in_force), audited_version(row))
    return row


def audited_version(v: OfferPrice) -> dict[str, Any]:
    """A price version as the audit log records it: its number, start and the prices it sets."""
    return {"version": v.version, "valid_from": v.valid_from,
            **{f: val for f, val in price_values(v).items() if val is not None}, "note": v.note}


def add_first_version(session: Session, offer: Offer, valid_from: Optional[datetime] = None, note: str = "") -> OfferPrice:
    """Version 1 of a new offer (its current fields), valid from ``valid_from`` or :func:`default_first_valid_from`."""
    row = OfferPrice(offer_id=offer.id, version=1, valid_from=valid_from or default_first_valid_from(session),
                     note=note[:500], **price_values(offer))
    session.add(row)
    session.flush()
    return row


def mirror_newest(session: Session, offer: Offer) -> None:
    """Copy the newest version's prices onto the offer row (its list price)."""
    history = versions(session, offer.id)
    if history:
        for f, v in price_values(history[-1]).items():
            setattr(offer, f, v)
        session.flush()


def offer_named(session: Session, name: str) -> Offer:
    return by_name(session, Offer, name, "NAME", "offer")


def history(session: Session, name: str) -> dict[str, Any]:
    """``trainledger pricing history NAME``: every version with its validity (valid_to = the next one's start)."""
    o = offer_named(session, name)
    rows = versions(session, o.id)
    out = []
    for i, v in enumerate(rows):
        out.append({"version": v.version, "valid_from": v.valid_from,
                    "valid_to": rows[i + 1].valid_from if i + 1 < len(rows) else None,
                    **{f: val for f, val in price_values(v).items() if val is not None},
                    "created_at": v.created_at, "note": v.note})
    if not out:  # written by hand, never versioned: its fields are its only price
        out.append({"version": None, "valid_from": None, "valid_to": None,
                    **{f: val for f, val in price_values(o).items() if val is not None}, "created_at": None,
                    "note": "no recorded versions: these prices apply at every instant"})
    return {"offer": o.name, "kind": o.kind.value, "currency": o.currency, "versions": out}


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def backdate_first_versions(session: Session, start: datetime) -> int:
    """Let offers that never changed price start at ``start`` (when their only version starts later).

    For a history written after its offers (``trainledger demo``): their prices stood then too.
    """
    moved = 0
    for offer_id in session.exec(select(OfferPrice.offer_id).group_by(OfferPrice.offer_id)
                                 .having(func.count(OfferPrice.id) == 1)).all():
        v = session.exec(select(OfferPrice).where(OfferPrice.offer_id == offer_id)).one()
        if v.valid_from > start:
            v.valid_from = start
            moved += 1
    session.flush()
    return moved
