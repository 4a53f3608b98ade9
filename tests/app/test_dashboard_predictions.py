"""Planned vs measured and calibrated ranges on the dashboard: the Runs page's run detail, the Strategies
page and the Planner page show what ``trainledger.runs.predictions`` / ``trainledger plan recommend`` compute."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from sqlmodel import select
from trainledger.runs.predictions import planned_vs_measured_of, store_prediction
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import NodeType, PlanCalibration, Run
from typer.testing import CliRunner

from tests.app.helpers import SWEEP, add_hand_runs, make_app, plain, run_page

UTC = timezone.utc


def _ledger(url: str) -> dict:
    """The hand-built sweep of tests/app/helpers.py, each run with its plan and the planner's prediction."""
    engine = make_engine(url)
    with session_scope(engine) as s:
        add_hand_runs(s)
        for r in s.exec(select(Run).where(Run.sweep_id == SWEEP)).all():
            r.config = {"train": {"model": {"shape": "llama2-7b"}, "precision": "bf16"}}
            s.flush()
            store_prediction(s, r, steps=100, device="gpu")
    with session_scope(engine) as s:
        out = {r.id: planned_vs_measured_of(s, r.id) for r in s.exec(select(Run).where(Run.sweep_id == SWEEP)).all()}
    engine.dispose()
    return out


def _table(at, first: str):
    return next(df.value for df in at.dataframe if list(df.value.columns)[0] == first)


def test_run_detail_shows_planned_vs_measured(sqlite_url, app_env):
    expected = _ledger(sqlite_url)["sweep-a-zero1"]
    app_env(sqlite_url)
    at = run_page(make_app(run="sweep-a-zero1"), "runs")
    assert not at.exception
    table = _table(at, "")
    step = expected["rows"][0]
    assert list(table[""]) == ["step time (s)", "memory per GPU (GiB)", "cost (CNY, rtx4090-rent)"]
    assert table["measured"][0] == "2" and table["predicted"][0] == f"{step['predicted']:,.4g}"
    assert table["error"][0] == f"{(step['predicted'] - 2.0) / 2.0:+.1%}" and table["range"][0] == "—"
    assert table["measured"][1] == "21.5"  # 21.5 GiB peak allocated
    assert expected["note"] == "uncalibrated" and any("uncalibrated" in c.value for c in at.caption)


def test_strategies_page_shows_planned_vs_measured_per_run(sqlite_url, app_env):
    expected = _ledger(sqlite_url)
    app_env(sqlite_url)
    at = run_page(make_app(), "strategies")
    assert not at.exception
    table = _table(at, "strategy")
    table = table[table.columns.intersection(["strategy", "run", "step time (s) measured", "step time (s) predicted",
                                              "step time (s) error"])]
    assert list(table["run"]) == ["sweep-a-3d", "sweep-a-zero1", "sweep-a-zero2"]
    assert list(table["step time (s) measured"]) == ["1.8", "2", "2.2"]
    assert list(table["step time (s) predicted"]) == [f"{expected[r]['rows'][0]['predicted']:,.4g}" for r in table["run"]]
    assert list(table["step time (s) error"]) == [f"{expected[r]['rows'][0]['error']:+.1%}" for r in table["run"]]


def test_planner_shows_the_calibration_and_its_ranges(sqlite_url, app_env):
    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        nt = s.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
        s.add(PlanCalibration(node_type_id=nt.id, device="gpu", n_runs=7, created_at=datetime(2026, 12, 1, tzinfo=UTC),
                              factors={"compute": 1.2, "intra_comm": 1.5, "inter_comm": 1.1, "bubble": 1.0,
                                       "memory": 1.0, "memory_fixed": 1.0},
                              provenance={"runs": [], "fitted": {}, "step_range": [-0.1, 0.15],
                                          "memory_range": [-0.02, 0.03]}))
    engine.dispose()
    app_env(sqlite_url)
    at = run_page(make_app(), "planner")
    assert not at.exception
    from trainledger.cli.commands import app

    r = CliRunner().invoke(app, ["plan", "recommend", "--model", "llama2-70b", "--tokens", "2e12", "--node-type",
                                 "rtx4090-8x", "--nodes", "1..64", "--json", "--db", sqlite_url])
    cli = json.loads(r.output)
    shown = next(df.value for df in at.dataframe if list(df.value.columns)[0] == "rank" and "plan" in df.value.columns)
    label = "calibrated #1 (7 runs, 2026-12-01)"
    assert list(shown["calibration"]) == [p["calibration"] for p in cli["plans"]] == [label] * len(cli["plans"])
    assert list(shown["step time range (s)"]) == [f"{p['step_time_range_s'][0]:,.3g}–{p['step_time_range_s'][1]:,.3g}"
                                                  for p in cli["plans"]]
    assert any(label in plain(c.value) for c in at.caption)
