"""A month's goodput totals stored per ledger state (issue 39 item 6, ``trainledger.money.goodput.month_store``).

The stored totals equal a fresh computation digit for digit; after each kind of write that can change a past month
the fingerprint changes and the next read computes the month again; a month to date or with a live run is never
stored; a damaged or foreign row is computed again, never shown. On SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlalchemy import delete, update
from sqlmodel import Session, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput import month_store
from trainledger.money.goodput.goodput_core import ranked_by_badput
from trainledger.money.goodput.goodput_ledger import month_account, report_account
from trainledger.money.goodput.month_store import month_summary, month_totals
from trainledger.money.goodput.waste import project_waste
from trainledger.reports.export import presented_report
from trainledger.reports.periods import period_report
from trainledger.store.catalog import carbon, fx, prices
from trainledger.store.db import read_only_engine
from trainledger.store.models import (
    Fleet,
    GoodputMonth,
    NodeType,
    Project,
    Run,
    RunPhase,
    RunStatus,
)
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run, offer

UTC = timezone.utc
NOW = datetime(2027, 1, 10, tzinfo=UTC)
NOV = "2026-11"


def _ledger(s: Session) -> None:
    """November 2026 on a 4-node owned fleet and elastic rent: a failed run with a checkpoint resumed 3 h later (a
    recovery gap), a run with phases, a rented run of another project, and a run across the month's end."""
    add_fleet(s, 4)
    a = add_run(s, "a", datetime(2026, 11, 3, tzinfo=UTC), 10, nodes=2, status=RunStatus.failed)
    a.last_checkpoint_at = datetime(2026, 11, 3, 6, tzinfo=UTC)
    b = add_run(s, "b", datetime(2026, 11, 3, 13, tzinfo=UTC), 8, nodes=2)
    b.resume_of = "a"
    add_run(s, "c", datetime(2026, 11, 10, tzinfo=UTC), 20, nodes=1)
    for phase, hours, count in (("step", 14, 1000), ("straggler_wait", 2, 1000), ("data", 1, 1000),
                                ("checkpoint_save", 0.5, 10)):
        s.add(RunPhase(run_id="c", node="h0", phase=phase, seconds=hours * 3600.0, count=count))
    add_run(s, "r", datetime(2026, 11, 12, tzinfo=UTC), 30, nodes=3, offer_name="rtx4090-rent", project="p2")
    add_run(s, "x", datetime(2026, 11, 29, tzinfo=UTC), 72, nodes=1, project="p2")
    s.commit()


@pytest.fixture
def s(session):
    _ledger(session)
    return session


def _text(m) -> dict:
    """Every field of a MonthAccount as text: equal means equal to the last digit (and the same exponent)."""
    out = {}
    for f in fields(m):
        v = getattr(m, f.name)
        out[f.name] = {getattr(k, "value", k): str(x) for k, x in v.items()} if isinstance(v, dict) else str(v)
    return out


def _exact(v):
    """A project line's or run line's values as text, to the last digit: Decimals with their exponent, floats as
    their repr, datetimes with their offset, dataclasses field by field."""
    if isinstance(v, Decimal):
        return f"D{v}"
    if isinstance(v, float):
        return f"F{v!r}"
    if isinstance(v, datetime):
        return f"T{v.isoformat()}"
    if isinstance(v, dict):
        return {str(getattr(k, "value", k)): _exact(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_exact(x) for x in v]
    if hasattr(v, "__dataclass_fields__"):
        return {f.name: _exact(getattr(v, f.name)) for f in fields(v)}
    return repr(v)


def _fresh(s: Session, month: str = NOV, currency=None, now=NOW):
    rep = monthly_report(s, month, now=now, currency=currency, lines=True)
    macc, accounts = month_account(s, rep, now)
    return _text(macc), {k: str(v) for k, v in project_waste(accounts).items()}


def _fresh_sections(s: Session, month: str = NOV, currency=None, now=NOW):
    """The Goodput page's per-project lines and runs of most badput, from the whole account."""
    acct = report_account(s, monthly_report(s, month, now=now, currency=currency, lines=True), now)
    charged = [a for a in acct.runs if a.month == month and a.resume_of and a.cost[month_store.Category.recovery] > 0]
    return _exact(acct.projects), _exact(ranked_by_badput(acct.runs)), _exact(charged)


def _row(s: Session, month: str = NOV, key: str = ""):
    return s.connection().execute(select(GoodputMonth.__table__).where(GoodputMonth.month == month,
                                                                        GoodputMonth.currency == key)).first()


def _check(s: Session, month: str = NOV, currency=None, now=NOW, stored: bool = True):
    """The month's totals as read equal the fresh ones; ``stored``: whether they were read back."""
    t = month_summary(s, month, currency=currency, now=now)
    assert t.stored is stored
    assert (_text(t.account), {k: str(v) for k, v in t.project_waste.items()}) == _fresh(s, month, currency, now)
    assert (_exact(t.projects), _exact(t.ranked), _exact(t.recovered)) == _fresh_sections(s, month, currency, now)
    s.commit()
    return t


def test_stored_totals_equal_a_fresh_computation_field_for_field(s):
    first = _check(s, stored=False)
    row = _row(s)
    assert row is not None and len(row.fingerprint) == 64
    again = _check(s)  # read back
    assert _text(again.account) == _text(first.account) and again.project_waste == first.project_waste
    assert again.projects == first.projects and again.ranked == first.ranked and len(again.ranked) == 5
    assert [r.run_id for r in again.recovered] == ["b"]  # b resumes the failed a: the gap between them
    assert month_totals(s, NOV, now=NOW) == again.account
    assert again.account.by_category[month_store.Category.recovery] > 0  # the chain's gap is in it
    assert _row(s).fingerprint == month_store.fingerprint(s, NOV, "", NOW)
    # December holds the rest of x: over at NOW, stored on its own row
    _check(s, "2026-12", stored=False)
    _check(s, "2026-12")


def _status(s):
    s.get(Run, "c").status = RunStatus.crashed


def _end(s):
    s.get(Run, "c").ended_at += timedelta(hours=2)


def _checkpoint(s):
    s.get(Run, "a").last_checkpoint_at = datetime(2026, 11, 3, 8, tzinfo=UTC)


def _add_run(s):
    add_run(s, "n", datetime(2026, 11, 20, tzinfo=UTC), 5, nodes=1)


def _delete_run(s):
    s.delete(s.get(Run, "r"))


def _phase_written(s):
    row = s.exec(select(RunPhase).where(RunPhase.run_id == "c", RunPhase.phase == "step")).one()
    row.seconds += 1800.0


def _phase_added(s):
    s.add(RunPhase(run_id="c", node="h0", phase="eval", seconds=1200.0, count=3))


def _resume_link(s):
    s.get(Run, "b").resume_of = None


def _price_version(s):
    own = offer(s, "rtx4090-own")
    values = {**prices.price_values(own), "operations_per_node_month": Decimal("726.67")}
    prices.apply_version(s, prices.plan_version(s, own, values, datetime(2026, 11, 15, 12, 30, tzinfo=UTC)),
                         retroactive=True)


def _carbon(s):
    carbon.set_intensity(s, "550", date(2026, 11, 20))


def _fleet_size(s):
    s.exec(select(Fleet)).one().node_count = 6


def _idle_share(s):
    from trainledger.money.allocation.idle_share import set_fleet_policy

    set_fleet_policy(s, "fleet", "even")


def _timezone(s):
    set_setting(s, "timezone", "Asia/Shanghai")


def _share(s):
    r = s.get(Run, "r")
    r.share, r.share_basis = "1/2", "gpus"


def _project_name(s):
    s.exec(select(Project).where(Project.name == "p2")).one().name = "p2-renamed"


def _node_type(s):
    s.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one().nominal_power_kw = Decimal("3.5")


WRITES = [_status, _end, _checkpoint, _add_run, _delete_run, _phase_written, _phase_added, _resume_link,
          _price_version, _carbon, _fleet_size, _idle_share, _timezone, _share, _project_name, _node_type]


def write_is_seen(s: Session, write, check, row, fingerprint) -> None:
    """Stored, then ``write``: the fingerprint changes, so the next read (``check``) computes the month again, equal
    to a fresh computation, and stores it under the new fingerprint."""
    check(s, stored=False)
    check(s)
    before = row(s).fingerprint
    write(s)
    s.commit()
    assert fingerprint(s, NOV, "", NOW) != before  # the change is in the fingerprint ...
    check(s, stored=False)  # ... so the next read computes the month again, equal to a fresh computation
    assert row(s).fingerprint != before
    check(s)


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_each_write_that_can_change_a_past_month_is_seen(s, write):
    write_is_seen(s, write, _check, _row, month_store.fingerprint)


def test_a_run_of_a_later_month_resuming_one_of_this_month_is_seen(s):
    """The recovery gap of a run resumed in December after a failure in November is November's in part: a change to
    the December run (no slice in November) changes November's fingerprint."""
    add_run(s, "f", datetime(2026, 11, 26, tzinfo=UTC), 10, nodes=1, status=RunStatus.failed)
    g = add_run(s, "g", datetime(2026, 12, 3, tzinfo=UTC), 5, nodes=1)
    g.resume_of = "f"
    s.commit()
    with_gap = _check(s, stored=False)
    _check(s)
    before = _row(s).fingerprint
    g.started_at, g.ended_at = datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 1, 5, tzinfo=UTC)
    s.commit()
    assert month_store.fingerprint(s, NOV, "", NOW) != before
    shorter = _check(s, stored=False)
    assert shorter.account.seconds[month_store.Category.recovery] == \
        with_gap.account.seconds[month_store.Category.recovery]  # the gap's November part: from the 26th 10:00 on
    g.resume_of = None
    s.commit()
    assert _check(s, stored=False).account.seconds[month_store.Category.recovery] < \
        with_gap.account.seconds[month_store.Category.recovery]
    _check(s)


def test_an_exchange_rate_and_the_currency_setting_are_seen(s):
    fx.set_rate(s, "CNY", "USD", "0.14", date(2026, 1, 1))
    s.commit()
    _check(s, currency="USD", stored=False)
    _check(s, currency="USD")
    before = _row(s, key="USD").fingerprint
    fx.set_rate(s, "CNY", "USD", "0.15", date(2026, 11, 15))  # a new rate mid-November
    s.commit()
    _check(s, currency="USD", stored=False)
    assert _row(s, key="USD").fingerprint != before
    _check(s, currency="USD")
    _check(s, stored=False)  # the offers' own currency: a row of its own
    set_setting(s, "currency", "USD")  # the presentation currency by default: read under its own key
    s.commit()
    t = _check(s, stored=False)
    assert t.account.currency == "USD" and _row(s, key="USD") is not None


def never_stored(s: Session, check, row, fingerprint) -> Run:
    """A month to date (December at the 15th), then November with a live run in it: computed on every read, never
    stored; returns the live run."""
    mid_dec = datetime(2026, 12, 15, tzinfo=UTC)
    check(s, "2026-12", now=mid_dec, stored=False)
    check(s, "2026-12", now=mid_dec, stored=False)
    assert row(s, "2026-12") is None
    live = add_run(s, "live", datetime(2026, 11, 25, tzinfo=UTC), 1, nodes=1)
    live.status, live.ended_at = RunStatus.running, None
    s.commit()
    assert fingerprint(s, NOV, "", NOW) is None
    check(s, stored=False)
    check(s, stored=False)
    assert row(s) is None
    return live


def test_a_month_to_date_or_with_a_live_run_is_never_stored(s):
    live = never_stored(s, _check, _row, month_store.fingerprint)
    live.status, live.ended_at = RunStatus.succeeded, datetime(2026, 11, 26, tzinfo=UTC)
    s.commit()
    _check(s, stored=False)
    _check(s)


def _tamper(s: Session, **values) -> None:
    s.connection().execute(update(GoodputMonth.__table__).where(GoodputMonth.month == NOV).values(**values))
    s.commit()


def test_a_damaged_or_foreign_row_is_computed_again_never_shown(s):
    _check(s, stored=False)
    _check(s, "2026-12", stored=False)
    row = _row(s)
    payload = json.loads(row.payload)
    payload["spend"] = str(Decimal(payload["spend"]) + 1)
    _tamper(s, payload=json.dumps(payload))  # the digest no longer matches
    _check(s, stored=False)
    _check(s)
    digest = month_store._digest
    for bad in ('{"format": "goodput-month/0"}', "not json", json.dumps({**json.loads(_row(s).payload), "runs": "7"}),
                _row(s, "2026-12").payload):  # another format, garbage, a wrong type, another month's figures
        fp = _row(s).fingerprint
        _tamper(s, payload=bad, digest=digest(fp, bad))  # even with a digest that matches
        _check(s, stored=False)
        _check(s)
    s.connection().execute(delete(GoodputMonth.__table__))
    s.commit()
    _check(s, stored=False)


def test_a_read_only_ledger_computes_and_stores_nothing(s, ledger_url):
    want = _fresh(s)[0]  # the rollup built first (a read-only ledger cannot build it)
    s.commit()
    eng = read_only_engine(ledger_url)
    try:
        with Session(eng) as ro:
            assert _text(month_totals(ro, NOV, now=NOW)) == want
            ro.rollback()
    finally:
        eng.dispose()
    assert _row(s) is None


def test_the_summary_s_waste_from_stored_totals_is_the_whole_account_s(s):
    rep = monthly_report(s, NOV, now=NOW, lines=False)
    whole = presented_report(rep, report_account(s, monthly_report(s, NOV, now=NOW, lines=True), NOW))
    for stored in (False, True):
        t = month_summary(s, NOV, now=NOW)
        assert t.stored is stored
        assert presented_report(rep, t) == whole
        s.commit()
    assert whole["summary"]["waste_cost"] and any(p["waste_cost"] != "0.00" for p in whole["projects"])
    with pytest.raises(ValueError):
        presented_report(monthly_report(s, NOV, now=NOW, lines=True), t)


def test_the_period_report_reads_the_stored_totals(s):
    from trainledger.money.rates.periods import quarter_period

    period = quarter_period("2026-Q4")
    first = period_report(s, period, now=NOW)
    s.commit()
    assert _row(s) is not None and _row(s, "2026-10") is not None
    assert period_report(s, period, now=NOW) == first
