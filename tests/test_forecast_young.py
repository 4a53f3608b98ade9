"""A young ledger's forecast (issue 26, item 4): the run-rate window starts at a day boundary, and a
history too short for a spread says the range cannot be estimated and widens it instead of p10 = p90."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from trainledger.money.outlook.forecast import forecast
from trainledger.money.rates.costs import cents

from tests.helpers import add_run

UTC = timezone.utc
NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
RENT = Decimal(3600) / 730  # rtx4090-rent per node-hour, billed per started hour


def test_the_window_starts_at_the_first_runs_day_and_the_range_is_not_invented(session):
    # the ledger's only run: 1 node × 10 h from Dec 8 15:00 (its first 9 hours of history are one partial day)
    add_run(session, "first", datetime(2026, 12, 8, 15, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent")
    session.commit()
    f = forecast(session, "2026-12", now=NOW)
    m = f["method"]
    assert m["window_start"] == datetime(2026, 12, 8, tzinfo=UTC)  # not 15:00, the first run's start
    bill = 10 * RENT
    window_h, rest_h = Decimal(60), Decimal(516)  # Dec 8 00:00 to NOW; NOW to Jan 1
    assert cents(f["spend"]["to_date"]) == cents(bill)
    assert cents(f["spend"]["expected"]) == cents(bill + bill * rest_h / window_h)  # not over 45 h from 15:00
    assert m["window_whole_days"] == 2 and m["range_estimated"] is False
    assert "cannot be estimated from 2 whole day(s) of history" in m["text"]
    expected = f["spend"]["expected"]
    assert (cents(f["spend"]["p10"]), cents(f["spend"]["p90"])) == (cents(bill), cents(2 * expected - bill))
    assert f["spend"]["p10"] < expected < f["spend"]["p90"]


def test_a_history_of_enough_whole_days_keeps_the_estimated_range(session):
    for day in (3, 5, 6, 8):
        add_run(session, f"r{day}", datetime(2026, 12, day, 9, tzinfo=UTC), 2 * day, nodes=1, offer_name="rtx4090-rent")
    session.commit()
    m = forecast(session, "2026-12", now=NOW)["method"]
    assert m["window_start"] == datetime(2026, 12, 3, 12, tzinfo=UTC) and m["window_whole_days"] == 7
    assert m["range_estimated"] is True and "cannot be estimated" not in m["text"]
