"""A ledger in the middle of a month, for the month-to-date, forecast, budget and exporter tests.

``NOW`` is 2026-12-10 12:00 UTC: 9.5 of December's 31 days (228 of 744 hours)
have elapsed. The ledger (display time zone UTC, the seed presets):

* fleet ``own2``: 2 × rtx4090-own, held since 2020;
* ``llm-nov``: project llm, 2 nodes × 48 h from 2026-11-25 (owned);
* ``llm-a``: project llm, 2 nodes × 24 h from 2026-12-05 (owned), GPU-Util 0.8;
* ``llm-live``: project llm, 1 node, running since 2026-12-10 06:00 (6 h at ``NOW``; owned);
* ``vision-a``: project vision, 1 node × 10 h from 2026-12-08 on rtx4090-rent (elastic).

Expected figures are written out from the preset prices (data/pricing.toml), not
read from the code: owning a node costs (120,000 ÷ 36 + 6.67) per month of fixed
cost, 4.0 kW at load and 0.8 kW idle at 0.5 per kWh; renting 3,600 ÷ 730 per
node-hour, billed per started hour.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from sqlmodel import Session
from trainledger.store.models import RunStatus

from tests.helpers import add_fleet, add_run

UTC = timezone.utc
NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
MONTH = "2026-12"
ELAPSED_H = Decimal(228)
MONTH_H = Decimal(744)

FIXED_PER_NODE_MONTH = Decimal(120_000) / 36 + Decimal("6.67")
LOAD_KWH_PRICE = Decimal("4.0") * Decimal("0.5")  # per busy node-hour
IDLE_KWH_PRICE = Decimal("0.8") * Decimal("0.5")  # per idle node-hour
RENT_PER_NODE_HOUR = Decimal(3600) / 730


def busy_rate() -> Decimal:
    """An owned node-hour in a run, in December (744 h)."""
    return FIXED_PER_NODE_MONTH / MONTH_H + LOAD_KWH_PRICE


def idle_rate() -> Decimal:
    return FIXED_PER_NODE_MONTH / MONTH_H + IDLE_KWH_PRICE


def build_december(session: Session) -> None:
    add_fleet(session, nodes=2, name="own2")
    add_run(session, "llm-nov", datetime(2026, 11, 25, tzinfo=UTC), 48, nodes=2, project="llm")
    add_run(session, "llm-a", datetime(2026, 12, 5, tzinfo=UTC), 24, nodes=2, project="llm", gpu_util=0.8)
    live = add_run(session, "llm-live", datetime(2026, 12, 10, 6, tzinfo=UTC), 1, nodes=1, project="llm")
    live.status, live.ended_at, live.heartbeat_at = RunStatus.running, None, NOW - timedelta(seconds=5)
    add_run(session, "vision-a", datetime(2026, 12, 8, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent", project="vision")
    session.commit()


#: December to NOW, by hand: owned busy node-hours 48 + 6, elastic 10 node-hours
LLM_TO_DATE = Decimal(54) * busy_rate()
VISION_TO_DATE = 10 * RENT_PER_NODE_HOUR
FLEET_TO_DATE = Decimal(54) * busy_rate() + (2 * ELAPSED_H - 54) * idle_rate()
IDLE_TO_DATE = (2 * ELAPSED_H - 54) * idle_rate()
SPEND_TO_DATE = FLEET_TO_DATE + VISION_TO_DATE
