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


def test_a_table_s_recurring_cells_are_the_cells_themselves():
    """``ui.frame``'s cells (``ui.cells``: a recurring value of a column shown once) are ``ui.cell`` of each value:
    1, 1.0 and True, 0.0 and -0.0, "" and None each their own."""
    from zoneinfo import ZoneInfo

    from trainledger.app.views import ui

    values = {"cost": ["0.00", "12.50", None, "0.00", "12.50"], "node_hours": [1.0, 0.0, -0.0, 2.5, None, 1, 0, 1.0],
              "nodes": [1, True, 2, None, 1], "gpu_util_mean": [0.5, None, 0.5, 0.0], "name": ["a", "", "a", None],
              "start": ["2026-11-03T04:05:06+00:00", None, "2026-11-03T04:05:06+00:00"], "split": [True, False, 1]}
    columns = list(values)
    rows = [{c: v[i % len(v)] for c, v in values.items()} for i in range(40)]
    tz = ZoneInfo("Asia/Shanghai")
    want = [{c: ui.cell(c, r.get(c), tz) for c in columns} for r in rows]
    got = ui.cells(rows, columns, tz)
    assert [[(type(d[c]), repr(d[c])) for c in columns] for d in got] == \
        [[(type(d[c]), repr(d[c])) for c in columns] for d in want]
