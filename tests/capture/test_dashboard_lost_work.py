"""The dashboard shows lost work: a column on Runs, the run's lost work and chain, the waste by reason on Overview."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from sqlmodel import Session
from trainledger.money.rates.costs import cents
from trainledger.reports.present import fmt_cell
from trainledger.runs.registry import show_run
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.app.helpers import make_app, metrics, run_page
from tests.helpers import add_fleet, add_run, presented_month

D = Decimal

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
        presented = presented_month(s, "2026-11")["summary"]  # with the month's goodput account: its waste
    engine.dispose()
    assert any(w.value == f"Lost work: 24 GPU-hours since its last checkpoint (step 900), "
                          f"{fmt_cell('lost_work_cost', d['lost_work_cost'])} CNY." for w in at.warning)
    assert any("resume chain of 2 runs" in i.value and fmt_cell("cost", d["resume_chain"]["cost"]) in i.value
               for i in at.info)
    over = run_page(make_app("2026-11"), "overview")
    waste = next(m for m in over.metric if m.label == "Waste (CNY)")
    assert waste.value == fmt_cell("waste_cost", presented["waste_cost"]) == metrics(over)["Waste (CNY)"]
    by = presented["waste_by_reason"]  # as the export presents it: cents that add up to the waste
    # crash-1's 1.5 h × 2 nodes after its checkpoint and fail-1's 2 h × 1 node: 5 busy node-hours of lost work; the
    # hour between crash-1 and again-1 × 2 nodes: recovery at the fleet's idle rate (owning a node: 120,000 ÷ 36 +
    # 6.67 a month fixed, 4.0 kW busy and 0.8 kW idle at 0.5 per kWh; November: 720 h)
    fixed = (D(120_000) / 36 + D("6.67")) / 720
    assert by["lost_work"] == str(cents(5 * (fixed + 2))) == "33.19"
    assert by["recovery"] == str(cents(2 * (fixed + D("0.4")))) == "10.08"
    assert f"lost work {fmt_cell('waste_cost', by['lost_work'])}" in waste.help
    assert f"recovery {fmt_cell('waste_cost', by['recovery'])}" in waste.help
    assert "startup" not in waste.help  # reasons at 0.00 are left out
