"""A month's presented lines stored per ledger state (issue 39 item 6, ``trainledger.reports.month_lines_store``).

The stored lines (the monthly report with its run lines as the export presents it, the chargeback statements, each
run line's cost per 1M tokens and badput reason) equal a fresh computation value for value, type for type (their
JSON, in order); after each kind of write that can change a past month, and each change to what a run line shows,
the fingerprint changes and the next read computes the month again; a month to date or with a live run is never
stored; a damaged row is computed again, never shown. On SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, update
from sqlmodel import Session, select
from trainledger.money.account.chargeback import chargeback
from trainledger.money.account.monthly import month_charges, monthly_report
from trainledger.money.goodput import month_store
from trainledger.money.goodput.goodput_ledger import report_account
from trainledger.money.goodput.waste import run_reason
from trainledger.reports import month_lines_store as store
from trainledger.reports.chargeback import presented as presented_chargeback
from trainledger.reports.export import presented_report
from trainledger.store.catalog import fx
from trainledger.store.models import MonthLines, Run, User

from tests.test_goodput_month_store import NOV, NOW, WRITES, _ledger, never_stored, write_is_seen

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def s(session):
    _ledger(session)
    session.get(Run, "c").tokens = 3_000_000_000  # a run with tokens: its cost per 1M tokens
    session.commit()
    return session


def _fresh(s: Session, month: str = NOV, currency=None, now=NOW) -> store.PresentedLines:
    charges = month_charges(s, month, currency=currency, now=now)
    return store.presented_lines(s, charges, report_account(s, charges.report, now))


def _text(lines: store.PresentedLines) -> tuple[str, str, str]:
    """The lines as JSON, in order: equal means the same values of the same types (1 ≠ 1.0 ≠ true), floats to the
    last bit (their repr)."""
    return json.dumps(lines.presented), json.dumps(lines.chargeback), json.dumps(lines.runs)


def _row(s: Session, month: str = NOV, key: str = ""):
    return s.connection().execute(select(MonthLines.__table__).where(MonthLines.month == month,
                                                                      MonthLines.currency == key)).first()


def _check(s: Session, month: str = NOV, currency=None, now=NOW, stored: bool = True) -> store.PresentedLines:
    """The month's lines as read equal the fresh ones; ``stored``: whether they were read back."""
    got = store.month_lines(s, month, currency=currency, now=now)
    assert got.stored is stored
    assert _text(got) == _text(_fresh(s, month, currency, now))
    s.commit()
    return got


def test_stored_lines_equal_a_fresh_computation_and_the_cli_s(s):
    first = _check(s, stored=False)
    assert _row(s) is not None and _row(s).fingerprint == store.fingerprint(s, NOV, "", NOW)
    again = _check(s)
    assert _text(again) == _text(first)
    # the lines are the CLI's: report monthly's presented report with its goodput account, report chargeback's
    rep = monthly_report(s, NOV, now=NOW, lines=True)
    acct = report_account(s, rep, NOW)
    assert json.dumps(again.presented) == json.dumps(presented_report(rep, acct))
    assert json.dumps(again.chargeback) == json.dumps(presented_chargeback(chargeback(s, NOV, now=NOW)))
    accounts = {a.run_id: a for a in acct.runs}
    assert again.runs == {r.run_id: [store.per_1m(r), run_reason(accounts[r.run_id])] for r in rep.runs}
    assert again.runs["c"][0] is not None and len(again.presented["runs"]) == 5
    # a month that is over reads the same later on: nothing in it depends on the clock
    later = NOW + timedelta(days=40)
    assert _text(_check(s, now=later)) == _text(first)
    # storing lines leaves the goodput totals' fingerprint as it was (month_lines is not hashed)
    goodput_fp = month_store.fingerprint(s, NOV, "", NOW)
    s.connection().execute(delete(MonthLines.__table__))
    s.commit()
    assert month_store.fingerprint(s, NOV, "", NOW) == goodput_fp


def _run_name(s):
    s.get(Run, "c").name = "c-renamed"


def _tokens(s):
    s.get(Run, "c").tokens = 4_000_000_000


def _mfu(s):
    s.get(Run, "c").mfu = 0.41


def _gpu_util(s):
    r = s.get(Run, "c")
    r.gpu_util_mean, r.util_source = 0.77, "nvml"


def _strategy(s):
    s.get(Run, "c").strategy = "zero3"


def _user_name(s):
    s.exec(select(User).where(User.name == "u1")).one().name = "u1-renamed"


LINE_WRITES = [_run_name, _tokens, _mfu, _gpu_util, _strategy, _user_name]


@pytest.mark.parametrize("write", WRITES + LINE_WRITES, ids=[w.__name__.strip("_") for w in WRITES + LINE_WRITES])
def test_each_write_that_can_change_a_past_month_s_lines_is_seen(s, write):
    write_is_seen(s, write, _check, _row, store.fingerprint)


def test_a_currency_and_its_rates_are_a_row_of_their_own(s):
    fx.set_rate(s, "CNY", "USD", "0.14", datetime(2026, 1, 1).date())
    s.commit()
    _check(s, currency="USD", stored=False)
    usd = _check(s, currency="USD")
    assert usd.presented["summary"]["currency"] == "USD" and _row(s, key="USD") is not None
    fx.set_rate(s, "CNY", "USD", "0.15", datetime(2026, 11, 15).date())
    s.commit()
    _check(s, currency="USD", stored=False)
    _check(s, stored=False)  # the offers' own currency: a row of its own


def test_a_month_to_date_or_with_a_live_run_is_never_stored(s):
    never_stored(s, _check, _row, store.fingerprint)


def _tamper(s: Session, **values) -> None:
    s.connection().execute(update(MonthLines.__table__).where(MonthLines.month == NOV).values(**values))
    s.commit()


def test_a_damaged_or_foreign_row_is_computed_again_never_shown(s):
    _check(s, stored=False)
    _check(s, "2026-12", stored=False)
    payload = json.loads(_row(s).payload)
    payload["presented"]["runs"][0]["cost"] = "0.01"
    _tamper(s, payload=json.dumps(payload))  # the digest no longer matches
    _check(s, stored=False)
    _check(s)
    for bad in ('{"format": "month-lines/0"}', "not json", json.dumps({**json.loads(_row(s).payload), "runs": [7]}),
                _row(s, "2026-12").payload):  # another format, garbage, a wrong type, another month's lines
        fp = _row(s).fingerprint
        _tamper(s, payload=bad, digest=month_store._digest(fp, bad, store.FORMAT))  # even with a matching digest
        _check(s, stored=False)
        _check(s)


#: the modules whose code makes a month's lines (the report's lines, the account, the statements, their presentation)
LINE_MODULES = ["money/account/month_lines.py", "money/account/monthly.py", "money/account/chargeback.py",
                "money/account/not_costed.py", "money/allocation/idle_share.py", "money/goodput/goodput_ledger.py",
                "money/goodput/goodput_core.py", "reports/export.py", "reports/chargeback.py"]


def test_the_lines_read_no_run_column_the_fingerprint_leaves_out():
    """Every ``Run.<column>`` the code of the lines names is hashed (a column read later must be added to
    ``month_lines_store.RUN_COLUMNS``, or the stored lines would outlive a change to it)."""
    columns = {c.name for c in Run.__table__.columns}
    named = set()
    for rel in LINE_MODULES:
        for node in ast.walk(ast.parse((REPO / "ledger" / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Run" \
                    and node.attr in columns:
                named.add(node.attr)
    assert named and named <= set(store.RUN_COLUMNS), sorted(named - set(store.RUN_COLUMNS))
    assert not re.search(r"select\(Run\)", "".join(  # no whole run rows selected (goodput_ledger's session.get of
        (REPO / "ledger" / rel).read_text(encoding="utf-8") for rel in LINE_MODULES))  # one run: --run's months)
