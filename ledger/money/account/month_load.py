"""Step 1 of the monthly report (:mod:`trainledger.money.account.monthly`): what one month's report reads.

A month's report reads its bounds and the part elapsed (display time zone, ``now``), the ledger's configuration
(:class:`Setup`: the presentation currency and its exchange rates, the catalog and its price versions, carbon
intensities, the ledger currency, the fleets) and the month's pre-aggregated facts (``rollup.month_facts``).

The configuration does not depend on the month: a report of one month reads it for itself (:func:`load_month`); a
run of months costed together (the dashboard's 12-month trend) reads it once and every month's rollup facts in one
query (:class:`Months`), then costs each month with the same steps as a report of that month alone, so each
month's report is the same, figure for figure (tests/test_month_load.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Iterable, Optional
from zoneinfo import ZoneInfo

from sqlmodel import Session
from trainledger.money.facts import rollup
from trainledger.money.rates import carbon, costs
from trainledger.money.rates.catalog import (
    Catalog,
    Versions,
    all_fleets,
    fleets_by_offer,
    load_catalog,
    load_versions,
    priced_catalog,
)
from trainledger.money.rates.fx import Conversion, RateBook, load_rates
from trainledger.money.rates.months import Period, month_period
from trainledger.store.models import Fleet, OfferKind
from trainledger.store.settings import display_timezone, get_setting, presentation_currency


@dataclass
class _Month:
    """What one month's report reads: its bounds, the part elapsed, the catalog, the fleets held and the rollup's facts.

    ``hours`` is the whole month's (fixed costs per node-month are spread over them);
    capacity is counted to ``period.end``: the month's end, or ``now`` while it runs.
    """

    name: str
    tz: ZoneInfo
    start: datetime  # of the month (of the charge period, in a period's view)
    end: datetime
    hours: Decimal  # in the month: fixed costs per node-month are spread over them
    period: Period  # the part of the month elapsed (all of it once it has ended): capacity is counted to its end
    cat: Catalog  # priced at the month's start (at the period's start, in a period's view)
    facts: rollup.MonthFacts
    fleets: dict[int, list[Fleet]]  # by offer id
    currency_setting: str  # the ledger's currency, for a month with no offer in use
    base_cat: Optional[Catalog] = None  # the offers' own fields (priced_catalog starts from them)
    versions: Optional[Versions] = None
    fx: Conversion = field(default_factory=lambda: Conversion(None, None))
    intensities: Optional[carbon.IntensityBook] = None
    span_hours: Optional[Decimal] = None  # of the month (of the charge period): capacity implied by peak use

    def __post_init__(self) -> None:
        if self.span_hours is None:
            self.span_hours = costs.hours_between(self.start, self.capacity_end)

    @property
    def capacity_end(self) -> datetime:
        """Where capacity is counted to: the end of the month (of the charge period), or ``now`` while it runs."""
        return max(self.start, min(self.end, self.period.end))

    def fleets_of(self, node_type_id: int, kind: OfferKind) -> list[Fleet]:
        """The fleets held under offers of one node type and kind, in id order."""
        return sorted((f for off_id, fs in self.fleets.items() for f in fs
                       if self.cat.offers[off_id].node_type_id == node_type_id and self.cat.offers[off_id].kind == kind),
                      key=lambda f: f.id)


@dataclass(frozen=True)
class Setup:
    """The configuration every month's report reads (none of it depends on the month); read-only once loaded."""

    tz: ZoneInfo  # the display time zone
    target: Optional[str]  # the presentation currency (None: the offers' own)
    book: Optional[RateBook]  # the exchange rates, when converting
    base: Catalog  # node types and offers, their own fields
    versions: Versions  # every offer's price versions
    intensities: carbon.IntensityBook
    currency_setting: str  # the ledger's currency, for a month with no offer in use
    fleets: list[Fleet]  # every fleet (each month takes those held in it)


def load_setup(session: Session, currency: Optional[str] = None) -> Setup:
    """The ledger's configuration as a report in ``currency`` (None: the Settings currency once set) reads it."""
    tz = display_timezone(session)
    target = presentation_currency(session, currency)
    return Setup(tz, target, load_rates(session, tz) if target else None, load_catalog(session), load_versions(session),
                 carbon.load_intensities(session, tz), get_setting(session, "currency"), all_fleets(session))


def load_month(session: Session, month: str, now: datetime, currency: Optional[str] = None, *,
               setup: Optional[Setup] = None, facts: Optional[rollup.MonthFacts] = None) -> _Month:
    """What ``month``'s report reads at ``now``: the configuration (``setup``, else read here), the month's catalog
    priced at its start, the fleets held in it and its rollup facts (``facts``, else read here)."""
    s = setup if setup is not None else load_setup(session, currency)
    period = month_period(month, s.tz, now)
    ms, me = period.start, period.month_end
    fx = Conversion(s.target, s.book)  # per month: it notes the rates its charge periods used
    if facts is None:
        facts = rollup.month_facts(session, month, s.tz, now)
    return _Month(month, s.tz, ms, me, period.month_hours, period, priced_catalog(s.base, s.versions, ms, fx.book, s.target),
                  facts, fleets_by_offer(session, ms, me, s.tz, s.fleets), s.currency_setting, s.base, s.versions, fx,
                  s.intensities)


class Months:
    """Several months' reports read together (a trend): the configuration once, every month's rollup facts in one
    query (``rollup.months_facts``), both on the first month asked for. Pass it to ``monthly_report(..., months=)``
    for each of ``months`` with the same ``now`` and ``currency``."""

    def __init__(self, session: Session, months: Iterable[str], *, now: datetime, currency: Optional[str] = None):
        self.session, self.months, self.now, self.currency = session, list(dict.fromkeys(months)), now, currency
        self._setup: Optional[Setup] = None
        self._facts: dict[str, rollup.MonthFacts] = {}

    def load(self, month: str, now: datetime, currency: Optional[str]) -> _Month:
        """:func:`load_month` of one of the months, from what was read for all of them."""
        if month not in self.months or now != self.now or currency != self.currency:
            raise ValueError(f"Months: {month} at {now} in {currency!r} is not one of the months read together")
        if self._setup is None:
            setup = load_setup(self.session, self.currency)  # raises as each month's report would (an unknown zone)
            self._facts = rollup.months_facts(self.session, self.months, setup.tz, self.now)
            self._setup = setup
        return load_month(self.session, month, now, currency, setup=self._setup, facts=self._facts[month])


__all__ = ["Months", "Setup", "_Month", "load_month", "load_setup"]
