"""Presenting money in another currency: the exchange rate in force for each charge period.

Rates live in ``fx_rate`` (:mod:`trainledger.store.catalog.fx`): 1 base = rate quote, from the
start of a day in the display time zone until the pair's next rate. A charge
period (a month cut where a rate takes effect, :mod:`trainledger.money.facts.rollup`) has
one rate in force for the whole period; the report converts each period's
offers at it (:func:`convert_offer`: every money field × rate), so every
figure and identity is computed in the presented currency. The reverse pair
serves too (1 ÷ its rate), the later-dated of the two winning. No rate in
force is a one-line error naming the pair, the day and the command that adds
it: a figure is never shown unconverted under another currency's code.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.months import date_start
from trainledger.store.models import CURRENCY_FIELDS, FxRate


@dataclass(frozen=True)
class RateUsed:
    """A rate applied: 1 ``base`` = ``rate`` ``quote`` (``inverse``: taken as 1 ÷ the reverse pair's rate)."""

    base: str
    quote: str
    rate: Decimal
    valid_from: Any  # the day the rate row starts
    inverse: bool = False


class RateBook:
    """Every exchange rate of the ledger, by pair, to pick the one in force at an instant."""

    def __init__(self, rows: list[FxRate], tz: ZoneInfo):
        self._by_pair: dict[tuple[str, str], list[tuple[datetime, FxRate]]] = {}
        for r in sorted(rows, key=lambda r: r.valid_from):
            self._by_pair.setdefault((r.base, r.quote), []).append((date_start(r.valid_from, tz), r))
        self._starts = {k: [t for t, _ in v] for k, v in self._by_pair.items()}
        self.tz = tz

    def _in_force(self, base: str, quote: str, at: datetime) -> Optional[tuple[datetime, FxRate]]:
        rows = self._by_pair.get((base, quote))
        if not rows:
            return None
        i = bisect_right(self._starts[(base, quote)], at)
        return rows[i - 1] if i else None

    def rate(self, base: str, quote: str, at: datetime) -> Optional[RateUsed]:
        """The rate from ``base`` to ``quote`` in force at ``at`` (None when there is none)."""
        direct, reverse = self._in_force(base, quote, at), self._in_force(quote, base, at)
        if direct is not None and (reverse is None or direct[0] >= reverse[0]):
            return RateUsed(base, quote, direct[1].rate, direct[1].valid_from)
        if reverse is not None:
            return RateUsed(base, quote, costs.inverse_rate(reverse[1].rate), reverse[1].valid_from, inverse=True)
        return None

    def missing(self, base: str, quote: str, at: datetime) -> str:
        day = at.astimezone(self.tz).date().isoformat()
        return (f"--currency: no {base}→{quote} exchange rate in force on {day} ({self.tz}); add one with "
                f"`trainledger fx set {base} {quote} RATE --from {day}` (or `fx import rates.csv`)")


def load_rates(session: Session, tz: ZoneInfo) -> RateBook:
    return RateBook(list(session.exec(select(FxRate))), tz)


class PricedOffer(SimpleNamespace):
    """A read-only copy of an offer at one price version, its money fields converted to the presented
    currency. Without a rate in force, reading a money field raises the one-line error: an offer that
    a report never prices needs no rate."""

    def __getattr__(self, name: str) -> Any:
        missing = self.__dict__.get("fx_missing")
        if missing and name in CURRENCY_FIELDS:
            raise LedgerInputError(missing)
        raise AttributeError(name)


def convert_offer(offer: Any, book: Optional[RateBook], target: Optional[str], at: datetime) -> PricedOffer:
    """``offer`` (a row or a copy) with its money fields × the rate from its currency to ``target`` at ``at``.

    ``target`` None or the offer's own currency: an unconverted copy (``fx`` None).
    """
    data = dict(vars(offer)) if not hasattr(offer, "model_dump") else offer.model_dump()
    data.pop("_sa_instance_state", None)
    source = data.get("currency")
    data["source_currency"] = source
    data["fx"] = None
    if not target or target == source:
        return PricedOffer(**data)
    used = book.rate(source, target, at) if book is not None else None
    data["currency"] = target
    if used is None:
        data["fx_missing"] = (book.missing(source, target, at) if book is not None
                              else f"--currency: no {source}→{target} exchange rate")
        for f in CURRENCY_FIELDS:
            data.pop(f, None)
        return PricedOffer(**data)
    for f in CURRENCY_FIELDS:
        if data.get(f) is not None:
            data[f] = costs.convert(data[f], used.rate)
    data["fx"] = used
    return PricedOffer(**data)


@dataclass
class Conversion:
    """The presented currency of a report and the rates applied to its charge periods."""

    target: Optional[str]
    book: Optional[RateBook]
    used: dict[tuple[RateUsed, datetime, datetime], None] = field(default_factory=dict)

    def note(self, offers: list[Any], start: datetime, end: datetime) -> None:
        """Record the rates of the offers a charge period [start, end) was priced with."""
        for o in offers:
            fx = getattr(o, "fx", None) if o is not None else None
            if fx is not None:
                self.used[(fx, start, end)] = None

    def rates_used(self, tz: ZoneInfo) -> list[dict[str, Any]]:
        """One entry per rate: the pair, the rate, the day its row starts, the charge periods it converted."""
        out: dict[RateUsed, list[str]] = {}
        for fx, s, e in sorted(self.used, key=lambda k: (k[0].base, k[1])):
            out.setdefault(fx, []).append(f"{s.astimezone(tz):%Y-%m-%d %H:%M} to {e.astimezone(tz):%Y-%m-%d %H:%M}")
        return [{"from": fx.base, "to": fx.quote, "rate": fx.rate, "rate_valid_from": fx.valid_from,
                 "inverse_of": f"{fx.quote}→{fx.base}" if fx.inverse else None, "charge_periods": periods}
                for fx, periods in out.items()]


def at_list_prices(session: Session, offers: list[Any], currency: Optional[str] = None,
                   now: Optional[datetime] = None) -> list[Any]:
    """Offers at their list prices (their newest version) in the presentation currency (``currency``, else the
    Settings one), converted at the rate in force ``now``: the what-ifs (cost compare, the Planner, "cost under
    every offer", the strategy comparison). Unconverted when no presentation currency is set."""
    from trainledger.store.settings import display_timezone, presentation_currency
    from trainledger.store.types import utcnow

    target = presentation_currency(session, currency)
    if not target:
        return list(offers)
    book = load_rates(session, display_timezone(session))
    return [convert_offer(o, book, target, now or utcnow()) for o in offers]
