"""The dashboard shows lost work: a column on Runs, the run's lost work and chain, the waste by reason on Overview."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.export import presented_report
from trainledger.reports.present import fmt_cell
from trainledger.runs.registry import show_run
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.app.helpers import make_app, metrics, run_page
from tests.helpers import add_fleet, add_run

START = datetime(2026, 11, 9, 8, tzinfo=timezone.utc)


def _ledger(url: str) -> None:
    engine = make_engine(url)
    with Session(engine) as s:
        add_fleet(s, 8)
        add_run(s, "crash-1", START, 6, nodes=2, status=RunStatus.crashed)
        s.get(Run, "crash-1").last_checkpoint_at = START + timedelta(hours=4.5)
        s.get(Run, "crash-1").last_checkpoint_step = 900
        add_run(s, "again-1", START + timedelta(hours=7), 3, nodes=2).resume_of = "crash-1"
        add_run(s, "fail-1", START + timedelta(days=1), 2, nodes=1, status=RunStatus.failed)
        s.commit()
    engine.dispose()


def test_runs_and_overview_show_lost_work(sqlite_url, app_env):
    _ledger(sqlite_url)
    app_env(sqlite_url)
    at = run_page(make_app("2026-11", run="crash-1"), "runs")
    table = at.dataframe[0].value.set_index("id")
    assert table.loc["crash-1", "lost GPU-h"] == 24.0  # 1.5 h × 2 nodes × 8 GPUs
    assert table.loc["fail-1", "lost GPU-h"] == 16.0 and table["lost GPU-h"].isna()["again-1"]
    engine = make_engine(sqlite_url)
    with Session(engine) as s:
        d = show_run(s, "crash-1")
        rep = monthly_report(s, "2026-11")
        summary, presented = rep.summary, presented_report(rep)["summary"]
    engine.dispose()
    assert any(w.value == f"Lost work: 24 GPU-hours since its last checkpoint (step 900), "
                          f"{fmt_cell('lost_work_cost', d['lost_work_cost'])} CNY." for w in at.warning)
    assert any("resume chain of 2 runs" in i.value and fmt_cell("cost", d["resume_chain"]["cost"]) in i.value
               for i in at.info)
    over = run_page(make_app("2026-11"), "overview")
    waste = next(m for m in over.metric if m.label == "Waste (CNY)")
    assert waste.value == fmt_cell("waste_cost", summary["waste_cost"]) == metrics(over)["Waste (CNY)"]
    by = presented["waste_by_reason"]  # as the export presents it: cents that add up to the waste
    assert f"failed {fmt_cell('waste_cost', by['failed'])}" in waste.help
    assert f"lost since checkpoint {fmt_cell('waste_cost', by['lost_since_checkpoint'])}" in waste.help
