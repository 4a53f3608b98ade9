"""Several months' reports read together (``trainledger.money.account.month_load.Months``, the dashboard's trend).

Each month's report with the configuration and the rollup facts read once for all the months equals the report of
that month alone, repr for repr (every Decimal with its exponent): months over and a month to date, a month with no
runs, a live run, a price version and a carbon intensity that cut a month into charge periods, a fleet that ends, an
FX-converted currency, a month left out for want of a rate; on SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.month_load import Months
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.export import presented_report
from trainledger.store.catalog import carbon, fx, prices
from trainledger.store.models import RunStatus

from tests.helpers import add_fleet, add_run, offer

UTC = timezone.utc
NOW = datetime(2026, 12, 10, 6, tzinfo=UTC)  # December to date
MONTHS = ["2026-08", "2026-09", "2026-10", "2026-11", "2026-12"]  # September: no run


def _ledger(s: Session) -> None:
    add_fleet(s, 4, valid_to=date(2026, 11, 20))
    add_run(s, "a", datetime(2026, 8, 3, tzinfo=UTC), 30, nodes=2, status=RunStatus.failed)
    add_run(s, "b", datetime(2026, 8, 30, tzinfo=UTC), 30, nodes=1, project="p2")
    add_run(s, "x", datetime(2026, 11, 29, tzinfo=UTC), 72, nodes=1, project="p2")  # into December
    add_run(s, "c", datetime(2026, 10, 5, tzinfo=UTC), 12, nodes=3, offer_name="rtx4090-rent", tokens=10**9)
    add_run(s, "d", datetime(2026, 11, 10, tzinfo=UTC), 20, nodes=1, offer_name=None, gpu_util=0.7)
    add_run(s, "e", datetime(2026, 12, 2, tzinfo=UTC), 5, nodes=2, offer_name="rtx4090-rent", project="p2")
    live = add_run(s, "live", datetime(2026, 12, 8, tzinfo=UTC), 1, nodes=1)
    live.status, live.ended_at, live.heartbeat_at = RunStatus.running, None, NOW
    own = offer(s, "rtx4090-own")
    values = {**prices.price_values(own), "operations_per_node_month": Decimal("726.67")}
    prices.apply_version(s, prices.plan_version(s, own, values, datetime(2026, 10, 15, 12, 30, tzinfo=UTC)),
                         retroactive=True)
    carbon.set_intensity(s, "550", date(2026, 11, 20))
    fx.set_rate(s, "CNY", "USD", "0.14", date(2026, 9, 1))
    fx.set_rate(s, "CNY", "USD", "0.15", date(2026, 11, 15))
    s.commit()


def _text(rep) -> str:
    """The whole report, to the last digit (runs included: the lines a report with lines carries)."""
    return repr((asdict(rep), rep.runs, presented_report(rep)))


def _each(s: Session, months, batch: bool, **kw) -> list[str]:
    read = Months(s, months, now=NOW, currency=kw.get("currency")) if batch else None
    out = []
    for m in months:
        try:
            out.append(_text(monthly_report(s, m, now=NOW, months=read, **kw)))
        except LedgerInputError as exc:
            out.append(f"missing: {exc}")
    return out


@pytest.mark.parametrize("kw", [dict(lines=False, projects=False), dict(lines=True, projects=True),
                                dict(lines=False, projects=False, currency="USD"),
                                dict(lines=False, projects=True, currency="CNY", own="rtx4090-own")],
                         ids=["trend", "whole", "usd", "own"])
def test_months_read_together_equal_each_month_alone(session, kw):
    _ledger(session)
    alone = _each(session, MONTHS, False, **kw)
    together = _each(session, MONTHS, True, **kw)
    assert together == alone
    if kw.get("currency") == "USD":
        assert alone[0].startswith("missing: --currency: no CNY→USD exchange rate")  # August: no rate yet
        nov = monthly_report(session, "2026-11", now=NOW, currency="USD", lines=False)
        assert [r["rate"] for r in nov.fx_rates] == [Decimal("0.14"), Decimal("0.15")]  # November cut where the rate changes
    assert "'is_partial': True" in alone[-1] and "'runs': 3" in alone[-1]  # December to date: x, e and the live run
    assert "'runs': 0" in alone[1] and "'idle_cost': Decimal('0" not in alone[1]  # September: the fleet's idle only


def test_a_month_not_read_together_is_refused(session):
    _ledger(session)
    read = Months(session, MONTHS[:2], now=NOW)
    with pytest.raises(ValueError, match="not one of the months"):
        monthly_report(session, "2026-11", now=NOW, months=read)
    with pytest.raises(ValueError, match="not one of the months"):
        monthly_report(session, "2026-08", now=datetime(2026, 12, 11, tzinfo=UTC), months=read)
