"""``trainledger demo`` teaches the right magnitudes for 8x RTX 4090 nodes (the sources are in ledger/demo.py).

Every figure is read back from the demo ledger and checked against a stated plausible range or recomputed from
the run's own inputs: power per node, MFU against GPU-Util, token throughput from MFU and the node type's peak,
failures, and the fleet's capacity at every instant.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timezone

import pytest
from sqlmodel import Session, select
from trainledger.demo import FLEET_NODES, FLOPS_PER_TOKEN, generate_demo
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.money.rates.months import months_between
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import Fleet, NodeType, Run, RunNode, RunStatus

NOW = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
MONTHS = months_between("2026-06", "2026-11")
KW_PER_NODE = (3.0, 4.1)  # an 8x4090 node under load: 8 × 450 W board power, scaled by busy share, + ~0.5 kW host
MEAN_KW_PER_NODE = (3.0, 4.0)
MFU_RANGE = (0.25, 0.45)  # a well-run LLM training job: ~30-45%; a fine-tune on 25 GbE a little lower
MEAN_MFU = (0.30, 0.45)
GPU_UTIL_RANGE = (0.70, 0.99)
FAILED_SHARE = (0.05, 0.25)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('demo') / 'ledger.db'}")
    with session_scope(engine) as s:
        generate_demo(s, end_month=MONTHS[-1], now=NOW)
    with Session(engine) as s:
        yield s
    engine.dispose()


def _runs(s: Session) -> list[Run]:
    return s.exec(select(Run).order_by(Run.started_at)).all()


def test_power_per_node_is_that_of_an_8x4090_node_under_load(demo):
    runs = {r.id: r for r in _runs(demo)}
    nodes = demo.exec(select(RunNode)).all()
    assert {n.run_id for n in nodes} == set(runs)  # every run has its nodes' energy, none is estimated
    total_kwh = total_hours = 0.0
    for n in nodes:
        r = runs[n.run_id]
        hours = float(costs.hours_between(r.started_at, r.ended_at))
        assert KW_PER_NODE[0] <= n.energy_kwh / hours <= KW_PER_NODE[1], (n.run_id, n.hostname, n.energy_kwh / hours)
        total_kwh += n.energy_kwh
        total_hours += hours
    assert MEAN_KW_PER_NODE[0] <= total_kwh / total_hours <= MEAN_KW_PER_NODE[1]
    for month in MONTHS:  # the report's energy over its node-hours: the same magnitude, all of it measured
        rep = monthly_report(demo, month)
        s = rep.summary
        if s["node_hours"]:
            demo_hours = sum(float(n.node_hours) for n in rep.node_types)
            assert MEAN_KW_PER_NODE[0] <= float(s["energy_measured_kwh"]) / demo_hours <= MEAN_KW_PER_NODE[1]


def test_mfu_and_gpu_util_are_plausible_and_different(demo):
    runs = _runs(demo)
    for r in runs:
        assert MFU_RANGE[0] <= r.mfu <= MFU_RANGE[1], (r.id, r.mfu)
        assert GPU_UTIL_RANGE[0] <= r.gpu_util_mean <= GPU_UTIL_RANGE[1], (r.id, r.gpu_util_mean)
        assert r.mfu < r.gpu_util_mean - 0.3  # a busy GPU is not a GPU at peak FLOPs
    pretrain = [r.mfu for r in runs if r.strategy == "3d"]
    assert MEAN_MFU[0] <= sum(pretrain) / len(pretrain) <= MEAN_MFU[1]
    for month in MONTHS:
        s = monthly_report(demo, month).summary
        if s["mfu_mean"] is not None:
            assert MEAN_MFU[0] - 0.03 <= s["mfu_mean"] <= MEAN_MFU[1]


def test_throughput_follows_from_mfu_and_the_peak(demo):
    """tokens/s = MFU × 165.2 TFLOPS × GPUs ÷ FLOPs per token (costs.mfu the other way round); steps and tokens agree."""
    nt = demo.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
    for r in _runs(demo):
        assert costs.mfu(r.tokens_per_s, FLOPS_PER_TOKEN, nt.peak_bf16_tflops, r.world_size) == pytest.approx(r.mfu, rel=1e-12)
        hours = float(costs.hours_between(r.started_at, r.ended_at))
        assert r.tokens == pytest.approx(r.tokens_per_s * hours * 3600, rel=1e-9)  # timestamps are kept to the µs
        tokens_per_step = r.dp * r.micro_batch * r.grad_accum * r.seq_len
        assert r.step_time_median_s * r.tokens_per_s == pytest.approx(tokens_per_step, rel=1e-9)
        assert r.steps == r.tokens // tokens_per_step
        assert r.world_size == r.nodes * nt.gpus_per_node == r.dp * r.tp * r.pp


def test_failures_are_a_plausible_minority_with_real_causes(demo):
    runs = _runs(demo)
    status = Counter(r.status for r in runs)
    assert FAILED_SHARE[0] <= (status[RunStatus.failed] + status[RunStatus.cancelled]) / len(runs) <= FAILED_SHARE[1]
    for r in runs:
        if r.status == RunStatus.failed:
            rank = re.search(r"rank (\d+)", r.error)
            assert rank is None or int(rank.group(1)) < r.world_size, r.error  # a rank the run has
            assert r.exit_code == 1
        else:
            assert r.error is None


def test_no_instant_uses_more_nodes_than_the_fleet_has(demo):
    fleet = demo.exec(select(Fleet).where(Fleet.name == "demo-cluster")).one()
    assert fleet.node_count == FLEET_NODES
    runs = _runs(demo)
    events = sorted([(r.started_at, r.nodes) for r in runs] + [(r.ended_at, -r.nodes) for r in runs],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    in_use = peak = 0
    for _, delta in events:
        in_use += delta
        peak = max(peak, in_use)
    assert 0 < peak <= fleet.node_count
    by_host: dict[str, list[tuple[datetime, datetime]]] = {}
    for r in runs:
        for n in demo.exec(select(RunNode).where(RunNode.run_id == r.id)).all():
            by_host.setdefault(n.hostname, []).append((r.started_at, r.ended_at))
    assert len(by_host) <= fleet.node_count
    for spans in by_host.values():  # no node runs two jobs at once
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    for month in MONTHS:  # and the report's peak (what the capacity warning reads) agrees
        assert all(n.peak_nodes <= fleet.node_count for n in monthly_report(demo, month).node_types)


def test_the_demo_seeds_a_team_budget_and_two_project_budgets_the_overview_can_judge(demo):
    """Issue #28: "will we go over?" is answered on a fresh demo: every-month budgets for the team and both projects,
    each judged against its month (November's states follow from its costs)."""
    from decimal import Decimal

    from trainledger.money.outlook.budgets import budget_status, list_budgets

    assert [(b["project"], b["period"], b["amount"], b["currency"]) for b in list_budgets(demo)] == [
        ("", "monthly", Decimal("38000"), "CNY"), ("demo-finetune", "monthly", Decimal("2000"), "CNY"),
        ("demo-pretrain", "monthly", Decimal("25000"), "CNY")]
    st = budget_status(demo, "2026-11", now=NOW)
    rep = monthly_report(demo, "2026-11", now=NOW)
    cost = {p["project"]: p["cost"] for p in rep.projects}
    for b in st["budgets"]:
        spent = rep.summary["actual_cost"] if b["project"] == "" else cost[b["project"]]
        assert b["cost"]["to_date"] == spent and b["state"] == ("over" if spent > b["amount"] else "ok"), b
