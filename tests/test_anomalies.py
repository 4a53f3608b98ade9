"""Spend anomalies (ledger/money/outlook/anomalies.py): a flat history flags nothing, an injected spike day is flagged with
its figures, a young ledger's first days are not judged; `trainledger report anomalies` prints the same.

Every day from 2026-10-01 one elastic run of 2 nodes × 10 h on rtx4090-rent (3,600 CNY per node-month of 730 h):
2 × 10 × 3,600 ÷ 730 = 98.63 CNY a day, no fleet, so no idle. The spike: 8 more nodes × 10 h on 2026-11-20
= 394.52 CNY more, 493.15 that day, against median 98.63 + max(3 × MAD 0, 50% × 98.63, 1.00) = 147.95.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.outlook.anomalies import anomalies, runs_on_day

from tests.helpers import add_run

UTC = timezone.utc
NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
MONTH = "2026-11"
SPIKE = date(2026, 11, 20)


@pytest.fixture
def sqlite_session(sqlite_url):
    """The flat and young histories on SQLite only (the spike test covers PostgreSQL too)."""
    from trainledger.store.db import make_engine

    engine = make_engine(sqlite_url)
    with Session(engine, expire_on_commit=False) as s:
        yield s
    engine.dispose()


def _daily_runs(session, first: date, last: date) -> None:
    day = first
    while day <= last:
        add_run(session, f"r-{day}", datetime(day.year, day.month, day.day, 8, tzinfo=UTC), 10, nodes=2,
                offer_name="rtx4090-rent", project="llm")
        day += timedelta(days=1)


def test_a_flat_history_flags_nothing(sqlite_session):
    session = sqlite_session
    _daily_runs(session, date(2026, 10, 1), date(2026, 11, 30))
    session.commit()
    a = anomalies(session, MONTH, now=NOW)
    assert a["flagged"] == []
    assert len(a["days"]) == 30 and all(d["judged"] and d["baseline_days"] == 28 for d in a["days"])
    assert {d["spend"] for d in a["days"]} == {Decimal("98.63")} and {d["idle_cost"] for d in a["days"]} == {Decimal("0.00")}
    assert {d["spend_threshold"] for d in a["days"]} == {Decimal("147.95")}  # 98.63 + 50% of 98.63


def test_an_injected_spike_day_is_flagged_with_its_figures(session, cli):
    _daily_runs(session, date(2026, 10, 1), date(2026, 11, 30))
    add_run(session, "spike", datetime(2026, 11, 20, 9, tzinfo=UTC), 10, nodes=8, offer_name="rtx4090-rent", project="llm")
    session.commit()
    a = anomalies(session, MONTH, now=NOW)
    assert a["flagged"] == [{"date": SPIKE, "measure": "spend", "value": Decimal("493.15"), "median": Decimal("98.63"),
                             "mad": Decimal("0.00"), "threshold": Decimal("147.95"), "baseline_days": 28}]
    # the days after it: the spike is one day in 28, so the median and MAD do not move
    assert next(d for d in a["days"] if d["date"] == SPIKE + timedelta(days=1))["flags"] == []
    assert [(r["id"], r["node_hours"]) for r in runs_on_day(session, SPIKE, now=NOW)] == [
        ("spike", Decimal(80)), (f"r-{SPIKE}", Decimal(20))]
    session.close()  # no open read transaction while the CLI opens the ledger
    out = cli("report", "anomalies", "--month", MONTH, "--now", NOW.isoformat())
    assert out.exit_code == 0, out.output
    assert ("2026-11-20  spend 493.15 above 147.95 (median 98.63, MAD 0.00 over 28 days); "
            "its runs: trainledger report anomalies --day 2026-11-20") in out.output
    assert "30 of 30 whole days judged" in out.output
    js = json.loads(cli("report", "anomalies", "--month", MONTH, "--now", NOW.isoformat(), "--json").output)
    assert [(f["date"], f["value"]) for f in js["flagged"]] == [("2026-11-20", "493.15")]
    day = cli("report", "anomalies", "--day", "2026-11-20", "--now", NOW.isoformat())
    assert day.exit_code == 0 and re.search(r"^spike .* 8 +2026-11-20 09:00 +80$", day.output, re.M), day.output
    bad = cli("report", "anomalies", "--day", "20-11-2026")
    assert bad.exit_code == 2 and "--day: expected a day as YYYY-MM-DD, got '20-11-2026'" in bad.output


def test_a_young_ledger_is_judged_from_its_seventh_day(sqlite_session):
    session = sqlite_session
    _daily_runs(session, date(2026, 11, 1), date(2026, 11, 30))
    session.commit()
    a = anomalies(session, MONTH, now=NOW)
    assert [d["baseline_days"] for d in a["days"][:9]] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert [d["date"].day for d in a["days"] if d["judged"]] == list(range(8, 31))
    assert a["flagged"] == []
    # mid-month: only the whole days so far
    part = anomalies(session, MONTH, now=datetime(2026, 11, 10, 12, tzinfo=UTC))
    assert [d["date"].day for d in part["days"]] == list(range(1, 10))
