"""``trainledger plan calibrate``: factors fitted to a generated history with known factors come back exactly;
a stored calibration changes ``plan recommend``'s prediction as its factors say; bad input is one line."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from sqlmodel import func, select
from trainledger.runs import calibrate as cal
from trainledger.store.models import NodeType, PlanCalibration, Run, RunStatus
from trainledger.trainer.plan.factors import Factors

UTC = timezone.utc
KNOWN = Factors(compute=1.25, intra_comm=1.8, inter_comm=2.5, bubble=0.7, memory=1.15, memory_fixed=1.4)
#: (strategy, nodes, dp, tp, pp, ZeRO, micro-batch, micro-batches, recompute) on h100-8x (8 GPUs per node):
#: intra-node data parallelism, inter-node ZeRO, tensor and pipeline parallelism, a pipeline across nodes
PLANS = [("dp", 1, 8, 1, 1, 0, 1, 4, False), ("zero1", 2, 16, 1, 1, 1, 1, 2, False),
         ("zero2", 1, 8, 1, 1, 2, 2, 2, False), ("zero3", 2, 16, 1, 1, 3, 1, 1, True),
         ("pp", 1, 2, 1, 4, 1, 1, 8, False), ("tp", 1, 1, 8, 1, 0, 4, 1, False),
         ("3d", 2, 2, 2, 4, 1, 1, 16, True), ("zero1", 4, 32, 1, 1, 1, 2, 1, False)]


def _record(i: int, plan: tuple, nt: NodeType, mem_kind: str = "cuda_max_allocated") -> Run:
    strategy, nodes, dp, tp, pp, zero, mb, m, recompute = plan
    return Run(id=f"gen-{i}", node_type_id=nt.id, nodes=nodes, gpus_per_node=nt.gpus_per_node,
               world_size=dp * tp * pp, strategy=strategy, dp=dp, tp=tp, pp=pp, zero_stage=zero, micro_batch=mb,
               grad_accum=m, status=RunStatus.succeeded, mem_kind=mem_kind, sweep_id="sweep-gen",
               config={"train": {"model": {"shape": "llama2-7b", "activation_checkpointing": recompute},
                                 "precision": "bf16"}},
               started_at=datetime(2026, 11, 2, i, tzinfo=UTC), ended_at=datetime(2026, 11, 2, i, 30, tzinfo=UTC))


def _history(session, factors: Factors = KNOWN) -> list[Run]:
    """Runs whose measured step time and memory are the model's parts scaled by ``factors`` (no noise)."""
    nt = session.exec(select(NodeType).where(NodeType.name == "h100-8x")).one()
    runs = []
    for i, plan in enumerate(PLANS):
        run = _record(i, plan, nt)
        step, mem = cal.predicted(cal.run_model(run, cal.model_hardware(session, nt, "gpu", 8), "gpu"), factors)
        run.step_time_median_s, run.peak_mem_bytes = step, round(mem)
        session.add(run)
        runs.append(run)
    session.flush()
    return runs


def test_fit_recovers_known_factors_from_a_generated_history(session):
    _history(session)
    (c,) = cal.calibrate(session, node_type="h100-8x")
    assert c["device"] == "gpu" and c["n_runs"] == len(PLANS) and c["sweep_id"] is None
    for name, value in KNOWN.as_dict().items():
        # no noise: exact up to float rounding (memory is stored as whole bytes: 1 byte in ~10^10)
        assert c["factors"][name] == pytest.approx(value, rel=1e-6), name
    assert all(c["fitted"].values())  # every part is exercised by some run
    assert c["calibrated_efficiency"] == pytest.approx(0.50 / 1.25)  # H100 default 50% ÷ the compute factor
    assert [r["run_id"] for r in c["runs"]] == [f"gen-{i}" for i in range(len(PLANS))]
    assert max(abs(x) for r in c["runs"] for x in (r["step_residual"], r["memory_residual"])) < 1e-6
    stored = session.exec(select(PlanCalibration)).one()
    assert stored.provenance["runs"][0]["run_id"] == "gen-0" and stored.n_runs == len(PLANS)


def test_a_part_no_run_exercises_keeps_factor_one(session):
    nt = session.exec(select(NodeType).where(NodeType.name == "h100-8x")).one()
    for i, plan in enumerate(p for p in PLANS if p[1] == 1 and p[4] == 1):  # one node, no pipeline
        run = _record(i, plan, nt)
        step, mem = cal.predicted(cal.run_model(run, cal.model_hardware(session, nt, "gpu", 8), "gpu"), KNOWN)
        run.step_time_median_s, run.peak_mem_bytes = step, round(mem)
        session.add(run)
    (c,) = cal.calibrate(session)
    assert c["factors"]["inter_comm"] == 1.0 and c["factors"]["bubble"] == 1.0
    assert c["fitted"]["inter_comm"] is False and c["fitted"]["bubble"] is False
    assert c["factors"]["compute"] == pytest.approx(1.25, rel=1e-6)


def _plan(cli) -> dict:
    r = cli("plan", "recommend", "--model", "llama-small", "--tokens", "1e9", "--node-type", "rtx4090-8x", "--nodes",
            "1", "--strategies", "zero1", "--micro-batches", "1", "--recompute", "none", "--offers", "rtx4090-rent",
            "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    return d, {p["plan"]: p for p in d["plans"]}


def test_a_stored_calibration_changes_recommend_as_its_factors_say(cli, session):
    before, plans0 = _plan(cli)
    assert {p["calibration"] for p in plans0.values()} == {"uncalibrated"}
    assert all(p["step_time_range_s"] is None for p in plans0.values())
    nt = session.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
    session.add(PlanCalibration(node_type_id=nt.id, device="gpu", n_runs=3, created_at=datetime(2026, 12, 1, tzinfo=UTC),
                                factors=Factors(compute=2, intra_comm=2, inter_comm=2, bubble=2, memory=1.5,
                                                memory_fixed=1.5).as_dict(),
                                provenance={"runs": [], "fitted": {}, "step_range": [-0.1, 0.2],
                                            "memory_range": [-0.05, 0.05]}))
    session.commit()
    after, plans1 = _plan(cli)
    assert after["calibrations"] == {"rtx4090-8x": "calibrated #1 (3 runs, 2026-12-01)"}
    assert plans1.keys() == plans0.keys()
    for name, p in plans1.items():
        p0 = plans0[name]
        assert p["calibration"] == "calibrated #1 (3 runs, 2026-12-01)"
        assert p["step_time_s"] == pytest.approx(2 * p0["step_time_s"], rel=1e-12)  # every time part × 2
        assert p["total_gib"] == pytest.approx(1.5 * p0["total_gib"], rel=1e-12)  # every memory part × 1.5
        assert p["step_time_range_s"] == pytest.approx([0.9 * p["step_time_s"], 1.2 * p["step_time_s"]])
        assert p["memory_range_gib"] == pytest.approx([0.95 * p["total_gib"], 1.05 * p["total_gib"]])
        assert p["days"] == pytest.approx(2 * p0["days"], rel=1e-9)
    assert after["hardware"][0]["efficiency"] == pytest.approx(0.225)  # RTX 4090 default 45% ÷ compute factor 2


@pytest.mark.parametrize("args, message", [
    ((), "no measured run to fit: a calibration needs succeeded runs with a plan"),
    (("--node-type", "nope-8x"), "--node-type: unknown 'nope-8x'; use one of"),
    (("--from-sweep", "sweep-none"), "--from-sweep: no run in sweep 'sweep-none'"),
])
def test_bad_input_is_one_line_and_writes_nothing(cli, session, args, message):
    r = cli("plan", "calibrate", *args)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and message in r.output, r.output
    assert session.exec(select(func.count()).select_from(PlanCalibration)).one() == 0


def test_a_node_type_without_runs_is_one_line(cli, session):
    _history(session)
    session.commit()
    r = cli("plan", "calibrate", "--node-type", "a100-8x")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "no measured run to fit on a100-8x" in r.output
    ok = cli("plan", "calibrate", "--node-type", "h100-8x", "--from-sweep", "sweep-gen", "--json")
    assert ok.exit_code == 0, ok.output
    (c,) = json.loads(ok.output)["calibrations"]
    assert c["sweep_id"] == "sweep-gen" and c["factors"]["bubble"] == pytest.approx(0.7, rel=1e-6)


def test_cpu_runs_calibrate_the_cpu_profile_not_the_gpus(session):
    nt = session.exec(select(NodeType).where(NodeType.name == "h100-8x")).one()
    run = _record(0, PLANS[0], nt, mem_kind="cpu_max_rss")
    step, mem = cal.predicted(cal.run_model(run, cal.cpu_hardware(8), "cpu"), KNOWN)
    run.step_time_median_s, run.peak_mem_bytes = step, round(mem)
    session.add(run)
    (c,) = cal.calibrate(session)
    assert c["device"] == "cpu" and cal.latest(session, nt.id, "gpu") is None
    assert cal.latest(session, nt.id, "cpu").id == c["id"]


def test_a_finished_sweep_calibrates_from_its_runs(ledger_url, session):
    from trainledger.runs.sweep import calibrate_sweep

    _history(session)
    session.commit()
    out = calibrate_sweep(ledger_url, "sweep-gen")
    (c,) = out["calibrations"]
    assert c["sweep_id"] == "sweep-gen" and c["n_runs"] == len(PLANS) and "runs" not in c
    assert c["factors"]["compute"] == pytest.approx(1.25, rel=1e-6)
    none = calibrate_sweep(ledger_url, "sweep-other")
    assert none == {"calibrations": [], "reason": "--from-sweep: no run in sweep 'sweep-other'; see `trainledger "
                                                  "sweep --help` or `trainledger runs list`"}
