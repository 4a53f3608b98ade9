"""Planned vs measured: a real `trainledger launch` (torchrun, 2 CPU ranks) stores the planner's prediction,
and `runs show --json` puts it beside the measured step time, memory and cost, with the errors."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.runs import calibrate as cal
from trainledger.runs.predictions import planned_vs_measured
from trainledger.store.db import make_engine
from trainledger.store.models import Offer, Run, RunPrediction
from trainledger.trainer.plan.factors import Factors
from trainledger.trainer.plan.memory import GIB

from tests.tracking.conftest import CONFIGS, trainledger

pytestmark = pytest.mark.slow


def test_a_launched_run_stores_its_prediction_and_shows_planned_vs_measured(sqlite_url, track_env):
    out = trainledger(["launch", CONFIGS / "dp.yaml", "--steps", "2", "--offer", "rtx4090-rent", "--db", sqlite_url,
                       "--json"], track_env, timeout=600)
    run_id = json.loads(out.stdout)["run_id"]
    d = json.loads(trainledger(["runs", "show", run_id, "--db", sqlite_url, "--json"], track_env).stdout)
    pvm = d["planned_vs_measured"]
    engine = make_engine(sqlite_url)
    with Session(engine) as s:
        run = s.get(Run, run_id)
        stored = s.get(RunPrediction, run_id)
        assert run.status.value == "succeeded" and run.mem_kind == "cpu_max_rss"
        # this machine has no NVIDIA device: the CPU profile, uncalibrated (no calibration in a new ledger)
        step, mem = cal.predicted(cal.run_model(run, cal.cpu_hardware(run.gpus_per_node), "cpu"), Factors())
        assert stored.detail["device"] == "cpu" and stored.detail["calibration"] == "uncalibrated"
        assert stored.step_time_s == pytest.approx(step, rel=1e-12) and stored.memory_bytes == pytest.approx(mem)
        offer = s.exec(select(Offer).where(Offer.name == "rtx4090-rent")).one()
        again = planned_vs_measured(s, run)
    engine.dispose()
    assert pvm["note"] == "uncalibrated" and pvm["steps"] == 2 == run.steps
    by = {r["quantity"].split(" (")[0]: r for r in pvm["rows"]}
    st, mm, cost = by["step time"], by["memory per GPU"], by["cost"]
    assert st["predicted"] == pytest.approx(step) and st["measured"] == run.step_time_median_s
    assert st["error"] == pytest.approx((step - run.step_time_median_s) / run.step_time_median_s)
    assert mm["predicted"] == pytest.approx(mem / GIB) and mm["measured"] == pytest.approx(run.peak_mem_bytes / GIB)
    assert mm["error"] == pytest.approx((mem - run.peak_mem_bytes) / run.peak_mem_bytes)
    assert st["range"] is None and mm["range"] is None  # uncalibrated: no error bar
    # cost: rtx4090-rent bills started hours (minimum 1) at 3,600/730 CNY per node-hour: 2 steps and the run's
    # wall time are each 1 billed hour on 1 node = 4.93 CNY
    assert run.nodes == 1 and offer.price_per_node_month == Decimal("3600")
    assert Decimal(cost["predicted"]) == Decimal("4.93") and Decimal(cost["measured"]) == Decimal("4.93")
    assert cost["error"] == 0.0 and cost["quantity"] == f"cost ({offer.currency}, rtx4090-rent)"
    assert again["rows"][0]["predicted"] == pytest.approx(step)
    text = trainledger(["runs", "show", run_id, "--db", sqlite_url], track_env).stdout
    assert "planned vs measured (uncalibrated):" in text and "step time (s): predicted" in text
