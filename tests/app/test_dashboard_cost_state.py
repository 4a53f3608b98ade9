"""The run detail is made at TRAINLEDGER_NOW and says when a run's cost is provisional (issue 26, item 2)."""

from __future__ import annotations

from datetime import datetime, timezone

from trainledger.reports.present import fmt_cell
from trainledger.runs.registry import show_run
from trainledger.store.models import RunNode

from tests.app.helpers import make_app, plain, run_page, with_session
from tests.helpers import add_fleet, add_run

UTC = timezone.utc
DAY5 = datetime(2025, 11, 5, tzinfo=UTC)


def _ledger(s) -> None:
    add_fleet(s, 2)
    add_run(s, "early", datetime(2025, 11, 3, tzinfo=UTC), 24, nodes=2)
    for n in range(2):
        s.add(RunNode(run_id="early", hostname=f"n{n}", node_rank=n, energy_kwh=80.0))
    add_run(s, "later", datetime(2025, 11, 20, tzinfo=UTC), 100, nodes=2)  # after DAY5: not in the month yet
    add_run(s, "rented", datetime(2025, 11, 3, tzinfo=UTC), 5, nodes=1, offer_name="rtx4090-rent")
    s.commit()


def test_the_run_detail_honours_trainledger_now_and_says_provisional(sqlite_url, app_env, monkeypatch):
    with_session(sqlite_url, _ledger)
    app_env(sqlite_url)
    monkeypatch.setenv("TRAINLEDGER_NOW", DAY5.isoformat())
    want = with_session(sqlite_url, lambda s: show_run(s, "early", now=DAY5))
    closed = with_session(sqlite_url, lambda s: show_run(s, "early", now=datetime(2025, 12, 2, tzinfo=UTC)))
    assert fmt_cell("cost_actual", want["cost_actual"]) != fmt_cell("cost_actual", closed["cost_actual"])
    at = run_page(make_app("2025-11", run="early"), "runs")
    cost = next(m for m in at.metric if plain(m.label) == "Run cost (CNY)")
    assert (cost.value, cost.delta) == (fmt_cell("cost_actual", want["cost_actual"]), "provisional")
    table = next(df.value for df in at.dataframe if "cost is" in df.value.columns)
    assert dict(zip(table["id"], table["cost is"])) == {"early": "provisional", "rented": "final", "later": "provisional"}
