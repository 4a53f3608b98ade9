"""A month's report without lines remembered once the month has ended (``trainledger.money.account.ended``).

Read back while the database proves nothing was committed (``trainledger.store.unchanged``), it equals the report
computed afresh, repr for repr (every Decimal with its exponent); every kind of write (a run, a run's phase, a price
version, a carbon intensity, an exchange rate, a setting, a fleet …: the goodput store's writes) makes the next read
compute again; a month to date or one a live run touches is computed on every read; each read is a copy of its own.
On SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
from sqlmodel import Session
from trainledger.money.account import ended
from trainledger.money.account.month_load import Months
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.store.catalog import fx
from trainledger.store.models import Run, RunStatus
from trainledger.store.settings import set_setting

from tests.helpers import add_run
from tests.test_goodput_month_store import NOV, NOW, WRITES, _ledger
from tests.test_unchanged import one_state

UTC = timezone.utc
MID_DEC = datetime(2026, 12, 15, tzinfo=UTC)
VARIANTS = [{}, {"projects": True}, {"own": "rtx4090-own"}, {"currency": "USD", "projects": True}]


@pytest.fixture
def s(session):
    _ledger(session)
    fx.set_rate(session, "CNY", "USD", "0.14", date(2026, 1, 1))
    session.commit()
    rollup.ensure(session)  # the rollup built, as the first report builds it (a write: nothing remembered then)
    session.commit()
    return session


@pytest.fixture
def computed(monkeypatch):
    """The reports computed (each call of ``monthly_report`` through ``ended.month_report``), by month."""
    calls: list[str] = []

    def counted(session, month, **kw):
        calls.append(month)
        return monthly_report(session, month, **kw)

    monkeypatch.setattr(ended, "monthly_report", counted)
    return calls


def read(s: Session, month: str = NOV, now: datetime = NOW, **kw) -> str:
    """The report as ``ended.month_report`` gives it, as text (repr: every figure to the last digit and exponent)."""
    return repr(ended.month_report(s, month, now=now, **kw))


def fresh(s: Session, month: str = NOV, now: datetime = NOW, projects: bool = False, **kw) -> str:
    return repr(monthly_report(s, month, lines=False, projects=projects, now=now, **kw))


def _sqlite(s: Session) -> bool:
    return s.get_bind().dialect.name == "sqlite"


@pytest.mark.parametrize("kw", VARIANTS, ids=["plain", "projects", "own", "usd"])
def test_remembered_equals_a_fresh_report_and_computes_nothing(s, computed, kw):
    """Computed, then read back while the database shows nothing committed (SQLite: across transactions; PostgreSQL:
    within one snapshot, ``tests.test_unchanged.one_state``); the same at a later ``now`` (an ended month does not
    depend on it)."""
    first = read(s, **kw)
    assert first == fresh(s, **kw)
    assert "Decimal(" in first and "is_partial" not in first  # figures, of a whole month
    across = one_state(s)
    assert read(s, **kw) == first  # the first look in this state may compute (PostgreSQL: a new snapshot)
    computed.clear()
    for now in (NOW, NOW + timedelta(days=40)):
        assert read(s, now=now, **kw) == first
        if across:
            s.commit()
    assert computed == []
    assert fresh(s, now=NOW + timedelta(days=40), **kw) == first


def test_each_key_has_its_own_report(s, computed):
    """The currency, the own offer and whether projects are costed are the key's: none is read for another."""
    for kw in VARIANTS:
        assert read(s, **kw) == fresh(s, **kw)
    if _sqlite(s):
        assert len(computed) == len(VARIANTS)


def test_the_currency_from_the_environment_or_the_config_file_is_the_key_s(s, computed, monkeypatch, tmp_path):
    """Without ``--currency`` the report is presented in ``$TRAINLEDGER_CURRENCY`` or the config file's currency
    (neither is in the database): a change of either is a report of its own, never the one read before."""
    plain = read(s)
    monkeypatch.setenv("TRAINLEDGER_CURRENCY", "USD")
    assert read(s) == fresh(s) == fresh(s, currency="USD") != plain
    monkeypatch.delenv("TRAINLEDGER_CURRENCY")
    assert read(s) == plain
    conf = tmp_path / "trainledger.toml"
    conf.write_text('currency = "USD"\n', encoding="utf-8")
    monkeypatch.setenv("TRAINLEDGER_CONFIG", str(conf))
    assert read(s) == fresh(s) != plain
    if _sqlite(s):
        assert len(computed) == 2  # the ledger's own currency once, USD once (the environment's and the file's)


def _fx_rate(s):
    fx.set_rate(s, "CNY", "USD", "0.15", date(2026, 11, 15))  # a new rate mid-November


def _currency_setting(s):
    set_setting(s, "currency", "USD")


def _another_month_s_run(s):
    add_run(s, "jan", datetime(2027, 1, 2, tzinfo=UTC), 3, nodes=1)  # a commit anywhere: computed again


ALL_WRITES = WRITES + [_fx_rate, _currency_setting, _another_month_s_run]


@pytest.mark.parametrize("write", ALL_WRITES, ids=[w.__name__.strip("_") for w in ALL_WRITES])
def test_each_write_makes_the_next_read_compute_again(s, computed, write):
    for kw in ({}, {"currency": "USD", "projects": True}):
        read(s, **kw)
    s.commit()
    before = len(computed)
    write(s)
    s.commit()
    for kw in ({}, {"currency": "USD", "projects": True}):
        assert read(s, **kw) == fresh(s, **kw)
    assert len(computed) == before + 2


def test_a_month_to_date_or_with_a_live_run_is_computed_on_every_read(s, computed):
    for _ in range(2):
        assert read(s, "2026-12", now=MID_DEC) == fresh(s, "2026-12", now=MID_DEC)
    assert computed == ["2026-12"] * 2
    live = add_run(s, "live", datetime(2026, 11, 25, tzinfo=UTC), 1, nodes=1)
    live.status, live.ended_at = RunStatus.running, None
    s.commit()
    for _ in range(2):
        assert read(s) == fresh(s)
    assert computed[2:] == [NOV] * 2
    live.status, live.ended_at = RunStatus.succeeded, datetime(2026, 11, 26, tzinfo=UTC)
    s.commit()
    read(s)
    read(s)
    if _sqlite(s):
        assert computed[4:] == [NOV]  # over, and no live run: remembered again


def test_nothing_is_remembered_inside_a_transaction_that_wrote(s, computed):
    """A write not yet committed (it may be rolled back): computed, seen, and forgotten."""
    s.get(Run, "c").ended_at += timedelta(hours=2)  # flushed by the report's rollup upkeep
    written = read(s)
    assert written == fresh(s)
    s.rollback()
    assert read(s) == fresh(s) != written
    assert len(computed) == 2


def test_each_read_is_a_copy_of_its_own(s):
    """What one caller changes, no other caller reads."""
    a = ended.month_report(s, NOV, now=NOW, projects=True)
    text = repr(a)
    a.summary["actual_cost"] = -1
    a.node_types.clear()
    a.projects.append({"project": "changed"})
    b = ended.month_report(s, NOV, now=NOW, projects=True)
    assert b is not a and repr(b) == text == fresh(s, projects=True)


def test_months_read_together_remembered_equal_each_month_alone(s, computed):
    """The dashboard's trend: months read together (``month_load.Months``), each remembered, each equal to its report
    alone; the month to date among them computed again on each read."""
    months = ["2026-10", NOV, "2026-12"]
    for _ in range(2):
        read_ = Months(s, months, now=MID_DEC, currency="USD")
        got = [repr(ended.month_report(s, m, now=MID_DEC, currency="USD", months=read_))
               for m in months]
        assert got == [fresh(s, m, now=MID_DEC, currency="USD") for m in months]
        s.commit()
    if _sqlite(s):
        assert computed == months + ["2026-12"]
