"""Identical runs read identically on the Runs page (issue 26, item 6; docs/MONEY.md, "Rounding")."""

from __future__ import annotations

from tests.app.helpers import make_app, run_page, with_session
from tests.test_rounding import _twins


def test_the_runs_table_shows_identical_runs_identically(sqlite_url, app_env):
    with_session(sqlite_url, _twins)
    app_env(sqlite_url)
    at = run_page(make_app("2025-11"), "runs")
    table = next(df.value for df in at.dataframe if "cost (CNY)" in df.value.columns)
    assert dict(zip(table["id"], table["cost (CNY)"])) == {"twin-a": 49.32, "twin-b": 49.32}
