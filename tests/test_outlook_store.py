"""A closed month's forecast path and spend anomalies stored per ledger state (issue 39 item 6,
``trainledger.money.outlook.outlook_store``).

Read back, they equal a fresh computation repr for repr (every Decimal with its exponent, every date and instant);
after each kind of write that can change a past month (of the month, or of the month before for the anomalies'
baseline), or when what depends on ``now`` changes (the exchange rate in force, the fleets held up to now), the next
read computes them again; a run costed up to ``now`` or a month to date is never stored; each currency key has its
own. On SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest
from sqlalchemy import update
from sqlmodel import Session
from trainledger.money.goodput import month_store
from trainledger.money.goodput.month_store import month_summary
from trainledger.money.outlook import anomalies as anomalies_mod
from trainledger.money.outlook import forecast as forecast_mod
from trainledger.money.outlook import outlook_store
from trainledger.money.outlook.anomalies import anomalies
from trainledger.money.outlook.forecast import forecast
from trainledger.store.catalog import fx
from trainledger.store.models import GoodputMonth, Run, RunStatus

from tests.helpers import add_fleet, add_run
from tests.test_goodput_month_store import NOV, NOW, WRITES, _ledger, _row

UTC = timezone.utc
OCT = "2026-10"
_READ = forecast_mod._read_ledger


@pytest.fixture
def s(session):
    _ledger(session)
    return session


@pytest.fixture
def reads(monkeypatch):
    """How often the runs were read and costed (``forecast._read_ledger``, from the forecast and the anomalies)."""
    calls = []

    def spy(*a, **k):
        calls.append(a[3:5])
        return _READ(*a, **k)

    monkeypatch.setattr(forecast_mod, "_read_ledger", spy)
    monkeypatch.setattr(anomalies_mod, "_read_ledger", spy)
    return calls


def _fresh(fn, monkeypatch, *a, **k):
    """``fn`` computed without the store (its reads not counted)."""
    with monkeypatch.context() as m:
        m.setattr(outlook_store, "read_or_compute", lambda *args, **kw: args[8]())
        m.setattr(forecast_mod, "_read_ledger", _READ)
        m.setattr(anomalies_mod, "_read_ledger", _READ)
        return fn(*a, **k)


def _both(s: Session, monkeypatch, now=NOW, currency=None, fingerprints=None) -> tuple[str, str]:
    """The forecast and the anomalies of November as read, each checked equal (repr for repr) to a fresh one."""
    fc = forecast(s, NOV, now=now, currency=currency, fingerprints=fingerprints)
    an = anomalies(s, NOV, now=now, currency=currency, fingerprints=fingerprints)
    s.commit()
    assert repr(fc) == repr(_fresh(forecast, monkeypatch, s, NOV, now=now, currency=currency))
    assert repr(an) == repr(_fresh(anomalies, monkeypatch, s, NOV, now=now, currency=currency))
    return repr({k: v for k, v in fc.items() if k != "now"}), repr({k: v for k, v in an.items() if k != "now"})


def _entries(s: Session, key: str = "") -> dict:
    row = _row(s, NOV, key)
    return json.loads(row.payload).get("outlook", {}) if row is not None else {}


def _totals(s: Session, currency=None, now=NOW):
    t = month_summary(s, NOV, currency=currency, now=now)
    s.commit()
    return t


def test_stored_forecast_and_anomalies_equal_a_fresh_computation(s, reads, monkeypatch):
    fc, an = _both(s, monkeypatch)  # no goodput row yet: computed, nothing to store them in
    assert len(reads) == 2 and _entries(s) == {}
    t = _totals(s)
    assert t.fingerprint == _row(s).fingerprint == month_store.fingerprint(s, NOV, "", NOW)
    assert _both(s, monkeypatch) == (fc, an)  # computed and stored ...
    assert len(reads) == 4 and set(_entries(s)) == {"forecast_days", "anomaly_days"}
    assert _both(s, monkeypatch) == (fc, an)  # ... read back
    assert len(reads) == 4
    assert month_summary(s, NOV, now=NOW).stored  # the goodput totals beside them read back as before
    got = anomalies(s, NOV, now=NOW)
    assert got["days"] and any(d["judged"] for d in got["days"])  # the baseline reaches into October
    # the fingerprints a caller already has (the dashboard's goodput totals): read without hashing again
    before = month_store.fingerprint(s, OCT, "", NOW)
    assert _both(s, monkeypatch, fingerprints={NOV: t.fingerprint, OCT: before}) == (fc, an)
    assert len(reads) == 4


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_each_write_that_can_change_a_past_month_is_seen(s, reads, monkeypatch, write):
    _totals(s)
    first = _both(s, monkeypatch)
    _both(s, monkeypatch)
    n = len(reads)
    write(s)
    s.commit()
    _both(s, monkeypatch)  # the goodput row is of the old state: computed (equal to fresh), not stored
    assert len(reads) == n + 2
    _totals(s)
    after = _both(s, monkeypatch)  # computed again for the new state, stored ...
    assert len(reads) == n + 4
    assert _both(s, monkeypatch) == after and len(reads) == n + 4  # ... and read back
    if write.__name__ in ("_status", "_end", "_add_run", "_delete_run", "_fleet_size", "_timezone", "_share"):
        assert after != first


def test_a_write_to_the_month_before_changes_the_anomalies_baseline(s, reads, monkeypatch):
    _totals(s)
    fc, an = _both(s, monkeypatch)
    add_run(s, "oct", datetime(2026, 10, 20, tzinfo=UTC), 30, nodes=2, offer_name="rtx4090-rent", project="p2")
    s.commit()
    n = len(reads)
    fc2, an2 = _both(s, monkeypatch)
    assert len(reads) == n + 1  # the forecast of November reads November only: still stored; the anomalies not
    assert fc2 == fc and an2 != an
    assert _both(s, monkeypatch) == (fc2, an2) and len(reads) == n + 1  # stored again


def test_what_depends_on_now_is_seen(s, reads, monkeypatch):
    """The rate in force at ``now`` converts the offers; the fleets held up to ``now`` are read."""
    fx.set_rate(s, "CNY", "USD", "0.14", date(2026, 1, 1))
    fx.set_rate(s, "CNY", "USD", "0.15", date(2027, 2, 1))  # in force from February 2027
    add_fleet(s, 2, offer_name="rtx4090-own", valid_from=date(2027, 2, 1), name="later")
    s.commit()
    _totals(s, "USD")
    _totals(s)
    jan = _both(s, monkeypatch, currency="USD")
    assert _both(s, monkeypatch, currency="USD") == jan
    own = _both(s, monkeypatch)
    assert _both(s, monkeypatch) == own
    n = len(reads)
    feb = NOW + timedelta(days=30)
    _totals(s, "USD", feb)
    later = _both(s, monkeypatch, now=feb, currency="USD")  # the same ledger state, another rate at now
    assert len(reads) == n + 2 and later != jan
    n = len(reads)
    _totals(s, None, feb)
    assert _both(s, monkeypatch, now=feb) == own  # the offers' own currency in February: the same figures, but
    assert len(reads) == n + 2  # another fleet is read up to now: computed again, then stored
    _both(s, monkeypatch, now=feb)
    assert len(reads) == n + 2
    assert set(_entries(s, "USD")) == set(_entries(s, "")) == {"forecast_days", "anomaly_days"}
    assert _both(s, monkeypatch, now=feb, currency="USD") == later and len(reads) == n + 2


def test_a_run_costed_up_to_now_or_a_live_run_is_never_stored(s, reads, monkeypatch):
    dec1 = datetime(2026, 12, 1, 12, tzinfo=UTC)  # run x (29 Nov + 72 h) ends after it: costed up to now
    _totals(s, now=dec1)
    _both(s, monkeypatch, now=dec1)
    _both(s, monkeypatch, now=dec1)
    assert len(reads) == 4 and _entries(s) == {}
    live = add_run(s, "live", datetime(2026, 11, 25, tzinfo=UTC), 1, nodes=1)
    live.status, live.ended_at = RunStatus.running, None
    s.commit()
    _both(s, monkeypatch)
    _both(s, monkeypatch)
    assert len(reads) == 8 and _entries(s) == {}


def test_a_damaged_entry_is_computed_again_never_shown(s, reads, monkeypatch):
    _totals(s)
    first = _both(s, monkeypatch)
    p = json.loads(_row(s).payload)
    p["outlook"]["forecast_days"]["value"]["days"][3][1][0] = "1E+9"
    s.exec(update(GoodputMonth).where(GoodputMonth.month == NOV).values(payload=json.dumps(p, sort_keys=True)))
    s.commit()
    n = len(reads)
    assert _both(s, monkeypatch) == first  # the row's digest fails: computed again (and the totals too)
    assert len(reads) == n + 2
    assert s.get(Run, "c") is not None
