"""``runs list``: newest first, a page at a time, and a line saying how many more runs match."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from trainledger.runs.registry import count_runs, list_runs

from tests.helpers import add_run

UTC = timezone.utc


def _ledger(session):
    t0 = datetime(2026, 11, 1, 6, tzinfo=UTC)
    for i in range(5):
        add_run(session, f"r{i}", t0 + timedelta(days=i), 2, project="a" if i % 2 else "b")
    add_run(session, "oct", datetime(2026, 10, 31, 20, tzinfo=UTC), 12)  # crosses into November
    add_run(session, "sep", datetime(2026, 9, 3, tzinfo=UTC), 1)
    session.commit()


def test_count_matches_the_unlimited_list(session):
    _ledger(session)
    for filters in ({}, {"month": "2026-11"}, {"month": "2026-11", "project": "a"}, {"project": "nope"},
                    {"status": "succeeded", "month": "2026-10"}):
        assert count_runs(session, **filters) == len(list_runs(session, **filters, limit=1000)), filters
    assert count_runs(session, month="2026-11") == 6


def test_cli_pages_newest_first_and_says_how_many_more(cli, session):
    _ledger(session)
    r = cli("runs", "list", "--month", "2026-11", "--limit", "2")
    assert r.exit_code == 0, r.output
    assert r.stdout.index("r4") < r.stdout.index("r3") and "r2" not in r.stdout
    assert "4 more of 6 matching runs" in r.stderr
    r = cli("runs", "list", "--month", "2026-11", "--limit", "2", "--offset", "4")
    assert "r0" in r.stdout and "oct" in r.stdout and "more of" not in r.stderr
    r = cli("runs", "list", "--month", "2026-11", "--limit", "2", "--offset", "2")
    assert "2 more of 6 matching runs (newest first: rows 3-4 shown)" in r.stderr
    r = cli("runs", "list", "--month", "2026-11", "--limit", "2", "--json")
    assert r.exit_code == 0 and "more of" not in r.stderr
    assert "--offset" in cli("runs", "list", "--help", db=False).stdout


def test_count_with_an_index_on_ended_at_gives_the_same_numbers(session):
    from sqlalchemy import text
    from trainledger.runs import registry as runs

    _ledger(session)
    session.execute(text("CREATE INDEX ix_test_run_ended ON run (ended_at, started_at)"))
    session.commit()
    runs._END_INDEX.clear()
    try:
        assert runs._indexed_by_end(session)
        for filters in ({"month": "2026-11"}, {"month": "2026-10"}, {"month": "2026-11", "project": "a"},
                        {"month": "2026-09", "status": "succeeded"}):
            assert count_runs(session, **filters) == len(list_runs(session, **filters, limit=1000)), filters
    finally:
        runs._END_INDEX.clear()
