"""``trainledger plan recommend``: every ranked plan fits (checked by the memory model), is priced as the
offer bills it, ranks by cost; reserved capacity costs what the monthly report says; calibration,
assumptions, bad input and the pre-scale trial."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP
from decimal import Decimal as D

import pytest
from sqlmodel import select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.runs import plan as planner
from trainledger.store.models import Offer
from trainledger.trainer.plan.memory import GIB, memory_per_gpu
from trainledger.trainer.shapes import SHAPES

from tests.helpers import add_run

UTC = timezone.utc
SEED = ["plan", "recommend", "--model", "llama2-70b", "--tokens", "2e12", "--json"]


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_seed_scenario_ranks_only_plans_that_fit_24_gib_by_cost(cli):
    d = _json(cli(*SEED, "--top", "40"))
    plans = d["plans"]
    assert len(plans) == 40 and d["counts"]["candidates"] >= 10_000
    assert d["counts"]["candidates"] == d["counts"]["plans_evaluated"] * 3  # three rtx4090 offers
    shape = SHAPES["llama2-70b"]
    for p in plans:
        assert p["node_type"] == "rtx4090-8x" and p["gpus"] == 8 * p["nodes"]
        mem = memory_per_gpu(shape, dp=p["dp"], tp=p["tp"], pp=p["pp"], zero_stage=p["zero_stage"],
                             micro_batch=p["micro_batch"], micro_batches=p["grad_accum"], recompute=p["recompute"])
        assert mem.total <= 24 * GIB and p["total_gib"] == pytest.approx(mem.total / GIB, abs=1e-4)
        assert p["dp"] * p["tp"] * p["pp"] == p["gpus"]
        assert not (p["pp"] > 1 and p["zero_stage"] >= 2)  # DeepSpeed's pipeline engine refuses it
    cost = [D(p["cost"]) for p in plans]
    assert cost == sorted(cost) and [p["rank"] for p in plans] == list(range(1, 41))
    assert d["counts"]["discarded"]["out of memory"] > 0 and d["counts"]["discarded"]["invalid plan"] > 0
    # the 64-GPU seed cluster itself: no plan fits 24 GiB cards
    eight = _json(cli(*SEED, "--nodes", "8"))
    assert eight["plans"] == [] and eight["counts"]["kept"] == 0


def test_costs_are_billed_as_each_offer_bills(cli):
    """elastic: nodes × started hours × 3,600/730; reserved: nodes × ⌈hours/730⌉ × 3,240; own: node-hours × 4,800/730."""
    d = _json(cli(*SEED, "--top", "200"))
    seen = set()
    for p in d["plans"]:
        hours = D(repr(p["hours"]))
        n = p["nodes"]
        if p["offer"] == "rtx4090-rent":
            expected = n * hours.to_integral_value(rounding="ROUND_CEILING") * D(3600) / 730
        elif p["offer"] == "rtx4090-reserved":
            expected = n * math.ceil(p["hours"] / 730) * D(3240)
        else:
            expected = n * hours * (D(120000) / 36 + D("6.67")) / 730 + n * hours * D("4.0") * D("0.5")
        assert D(p["cost"]) == costs.cents(expected), p
        assert D(p["cost_per_1m_tokens"]) == (expected / D(2 * 10**12) * 10**6).quantize(D("0.0001"), ROUND_HALF_UP)
        assert p["hours"] == pytest.approx(2e12 / p["tokens_per_s"] / 3600)
        seen.add(p["offer"])
    assert seen == {"rtx4090-rent", "rtx4090-reserved", "rtx4090-own"}


def test_reserved_plan_of_one_month_costs_what_the_monthly_report_says(session):
    """Issue #18: the Planner, Rent vs own and the monthly report agree on reserved capacity."""
    nodes = 3
    add_run(session, "r1", datetime(2026, 11, 10, tzinfo=UTC), 5, nodes=nodes, offer_name="rtx4090-rent")
    rep = monthly_report(session, "2026-11", reserved="rtx4090-reserved")
    (ntm,) = rep.node_types
    req = planner.RecommendRequest(model="llama-tiny", tokens=1e9, offers=["rtx4090-reserved"], nodes=[nodes],
                                   strategies=["dp"], top=1)
    (p,) = planner.recommend(session, req)["plans"]
    assert p["hours"] < 730 and p["nodes"] == nodes
    assert p["cost"] == ntm.reserved_cost == nodes * D(3240)
    reserved = session.exec(select(Offer).where(Offer.name == "rtx4090-reserved")).one()
    assert costs.planned_run_cost(reserved, nodes, D(731)) == 2 * ntm.reserved_cost  # a second month starts


def test_deadline_and_budget_discard_with_reasons(cli):
    d = _json(cli(*SEED, "--deadline", "1000d", "--budget", "4300000", "--top", "50"))
    assert all(p["days"] <= 1000 and D(p["cost"]) <= 4_300_000 for p in d["plans"]) and d["plans"]
    kinds = d["counts"]["discarded"]
    assert kinds["misses the deadline"] > 0 and kinds["over budget"] > 0
    ex = next(e for e in d["discarded"] if e["kind"] == "misses the deadline")
    assert ex["reason"].startswith("misses the deadline: ") and ex["reason"].endswith("days > 1000")
    fast = _json(cli(*SEED, "--rank-by", "time", "--top", "5"))
    days = [p["days"] for p in fast["plans"]]
    assert days == sorted(days) and days[0] < d["plans"][0]["days"]


def test_efficiency_is_calibrated_from_measured_runs(session):
    """MFU 0.30 with a communication share of 0.25: the compute reached 0.30 / 0.75 = 40% of peak."""
    req = planner.RecommendRequest(model="llama2-7b", tokens=1e11, offers=["rtx4090-rent"], nodes=[4],
                                   strategies=["zero3"], micro_batches=[1], recompute=["full"], top=1)
    before = planner.recommend(session, req)
    assert before["hardware"][0]["efficiency"] == 0.45
    assert before["hardware"][0]["efficiency_source"].startswith("default for NVIDIA GeForce RTX 4090")
    for i, (mfu, comm) in enumerate(((0.30, 0.25), (0.20, 0.5), (0.36, 0.1))):
        r = add_run(session, f"m{i}", datetime(2026, 11, 1 + i, tzinfo=UTC), 1, offer_name="rtx4090-rent")
        r.mfu, r.comm_share = mfu, comm
    session.flush()
    after = planner.recommend(session, req)
    hw = after["hardware"][0]
    assert hw["efficiency"] == pytest.approx(0.40) and hw["efficiency_source"].startswith("calibrated: median of 3")
    b, a = before["plans"][0], after["plans"][0]
    assert a["efficiency"] == pytest.approx(0.40)
    assert a["step_time_s"] > b["step_time_s"]  # less compute efficiency, slower step


def test_node_type_without_link_speeds_is_planned_on_stated_assumptions(cli, tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text('[[node_type]]\nname = "l40s-4x"\ngpu_model = "NVIDIA L40S"\ngpus_per_node = 4\n'
                    'gpu_memory_gb = 48\npeak_bf16_tflops = 362\n\n[[offer]]\nname = "l40s-rent"\n'
                    'node_type = "l40s-4x"\nkind = "rent_elastic"\ncurrency = "CNY"\nprice_per_node_hour = "20"\n')
    assert cli("pricing", "import", toml).exit_code == 0
    d = _json(cli("plan", "recommend", "--model", "llama2-7b", "--tokens", "1e11", "--node-type", "l40s-4x",
                  "--nodes", "1..4", "--json"))
    (hw,) = d["hardware"]
    assert hw["links"].startswith("assumed (not in the catalog): intra_node_gbytes_per_s")
    assert hw["intra_node_gbytes_per_s"] == 16.0 and hw["inter_node_gbits_per_s"] == 25.0
    assert hw["efficiency"] == 0.40  # not a GPU the defaults list: the stated fallback
    assert d["plans"] and all(p["offer"] == "l40s-rent" for p in d["plans"])


@pytest.mark.parametrize("args,message", [
    (["--tokens", "lots"], "error: --tokens: expected a token count such as 2e12 or 300B, got 'lots'"),
    (["--model", "gpt5"], "error: --model: unknown model shape 'gpt5': use one of "),
    (["--node-type", "tpu-v9"], "error: --node-type: unknown 'tpu-v9'; use one of "),
    (["--nodes", "9..x"], "error: --nodes: expected a count (8), a range (1..64) or a list (2,4,8), got '9..x'"),
    (["--deadline", "soon"], "error: --deadline: expected a positive duration such as 30d, 36h or 2w, got 'soon'"),
    (["--budget", "cheap"], "error: --budget: expected a number, got 'cheap'"),
    (["--strategies", "dp,fsdp"], "error: --strategies: unknown 'fsdp'; use a comma list of dp,zero1,zero2,zero3,pp,tp,3d"),
    (["--rank-by", "vibes"], "error: --rank-by: use one of cost, time, got 'vibes'"),
    (["--run"], "error: --run: runs the trial; add --trial"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, message):
    base = {"--model": "llama2-70b", "--tokens": "2e12"}
    for flag in ("--model", "--tokens"):
        if flag in args:
            base.pop(flag)
    argv = ["plan", "recommend", *[x for kv in base.items() for x in kv], *args]
    r = cli(*argv)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(message), r.stderr


def test_offers_in_two_currencies_are_refused(cli, tmp_path):
    toml = tmp_path / "usd.toml"
    toml.write_text('[[offer]]\nname = "usd-rent"\nnode_type = "rtx4090-8x"\nkind = "rent_elastic"\n'
                    'currency = "USD"\nprice_per_node_hour = "1"\n')
    assert cli("pricing", "import", toml).exit_code == 0
    r = cli(*SEED)
    assert r.exit_code == 2 and "the offers are priced in CNY, USD" in r.stderr
    assert _json(cli(*SEED, "--offers", "usd-rent", "--top", "1"))["plans"][0]["currency"] == "USD"


def test_text_output_labels_the_figures_predicted(cli):
    r = cli("plan", "recommend", "--model", "llama2-70b", "--tokens", "2e12", "--top", "3")
    assert r.exit_code == 0, r.output
    assert "PREDICTED by the planning model" in r.output
    assert "candidate plans" in r.output and "out of memory" in r.output
    assert "rtx4090-8x: efficiency 45%" in r.output


def test_trial_shrinks_the_best_plans_to_two_nodes(cli):
    """Each trial keeps the plan's tp, micro-batch, ZeRO stage and layers per stage; its config resolves to that
    layout on 2 nodes; the predictions fit the cards."""
    from trainledger.trainer.config import load_config
    from trainledger.trainer.parallel import resolve_plan

    d = _json(cli(*SEED, "--trial", "--top", "20"))
    t = d["trial"]
    assert t["nodes"] == 2 and 1 <= len(t["runs"]) <= 3 and t["ran"] is False
    by_rank = {p["rank"]: p for p in d["plans"]}
    for e in t["runs"]:
        src = by_rank[e["from_rank"]]
        cfg = load_config(e["config_path"])
        plan = resolve_plan(cfg, world_size=2 * e["gpus_per_node"], nodes=2, gpus_per_node=e["gpus_per_node"])
        assert (plan.strategy, plan.tp, plan.micro_batch, plan.zero_stage) == (
            src["strategy"], src["tp"], src["micro_batch"], src["zero_stage"])
        assert (plan.dp, plan.pp) == (e["dp"], e["pp"]) and plan.grad_accum == src["grad_accum"]
        assert cfg.shape.n_layers // plan.pp == 80 // src["pp"]  # each stage holds what it would at scale
        assert cfg.model.activation_checkpointing == (src["recompute"] == "full")
        assert e["predicted_memory_gib"] <= 24 and e["predicted_step_time_s"] > 0


def test_the_search_memo_changes_no_evaluation():
    """``evaluate``'s memo (each candidate's validation and memory, each layout's memory: shared by every node type of
    one search) gives what evaluating each candidate alone gives, on two GPUs of different memory, calibrated or
    not, every reason kind included."""
    from dataclasses import replace

    from trainledger.trainer.plan.factors import Factors
    from trainledger.trainer.plan.search import candidates, evaluate
    from trainledger.trainer.plan.timing import Hardware, Link

    shape = SHAPES["llama2-70b"]
    small = Hardware(name="24g", gpus_per_node=8, gpu_memory_bytes=24 * GIB, peak_tflops=165.0, efficiency=0.3,
                     efficiency_source="default", intra=Link(16e9, 10e-6), inter=Link(25e9 / 8, 30e-6))
    big = replace(small, name="141g", gpu_memory_bytes=141 * GIB, peak_tflops=989.0)
    memo: dict = {}
    reasons = set()
    for hw, factors in ((small, None), (big, None), (big, Factors(compute=1.2, intra_comm=2.0, bubble=1.1,
                                                                 memory=1.1, memory_fixed=1.3))):
        for nodes in (1, 3, 8):
            for c in candidates(shape, nodes, 8, 512):
                shared = evaluate(shape, c, hw, factors=factors, memo=memo)
                assert shared == evaluate(shape, c, hw, factors=factors), c
                reasons.add((shared.reason or "kept").split(":")[0])
    assert reasons == {"kept", "invalid plan", "out of memory"}


def _median_in_python(session, nt_id: int):
    """The definition as it read before the database computed it: every measured run's ratio, statistics.median."""
    import statistics

    from trainledger.store.models import Run, RunStatus

    rows = session.exec(select(Run.mfu, Run.comm_share).where(
        Run.node_type_id == nt_id, Run.status == RunStatus.succeeded, Run.mfu.is_not(None))).all()
    samples = [mfu / (1 - (cs or 0.0)) for mfu, cs in rows if mfu and mfu > 0 and (cs or 0.0) < 1]
    return (min(1.0, statistics.median(samples)), len(samples)) if samples else (None, 0)


def test_calibrated_efficiency_is_the_median_of_every_measured_run_to_the_last_bit(session):
    """The median the database orders for (hardware.calibrated_efficiency) is statistics.median over every measured
    run's MFU ÷ (1 − comm share), bit for bit, odd and even counts; runs that are not measured (failed, no or zero
    MFU, comm share 1 or more) count for neither; another node type's runs neither."""
    import random

    from trainledger.runs.hardware import calibrated_efficiencies, calibrated_efficiency
    from trainledger.store.models import NodeType, RunStatus

    rng = random.Random(39)
    nt = session.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
    assert calibrated_efficiency(session, nt)[1].startswith("default for")
    shapes = [(lambda: (rng.uniform(0.05, 0.6), rng.choice([None, 0.0, rng.uniform(0, 0.7)])), RunStatus.succeeded),
              (lambda: (rng.uniform(0.05, 0.6), 0.2), RunStatus.failed),
              (lambda: (rng.choice([None, 0.0]), 0.1), RunStatus.succeeded),
              (lambda: (0.4, rng.choice([1.0, 1.5])), RunStatus.succeeded)]
    for i in range(41):
        make, status = shapes[0] if i < 25 else rng.choice(shapes)
        r = add_run(session, f"cal{i}", datetime(2026, 10, 1 + i % 28, tzinfo=UTC), 1, offer_name="rtx4090-rent",
                    status=status)
        r.mfu, r.comm_share = make()
        if i % 4 == 3:  # a few (an even count, then odd) are checked on the way
            session.flush()
            want, n = _median_in_python(session, nt.id)
            assert calibrated_efficiency(session, nt) == (want, f"calibrated: median of {n} measured run(s) on {nt.name}")
    session.flush()
    want, n = _median_in_python(session, nt.id)
    assert n >= 25 and calibrated_efficiency(session, nt)[0] == want
    other = add_run(session, "cal-other", datetime(2026, 10, 2, tzinfo=UTC), 1, offer_name=None,
                    node_type_name="h100-8x")
    other.mfu = 0.99
    session.flush()
    assert calibrated_efficiency(session, nt)[0] == want
    h100 = session.exec(select(NodeType).where(NodeType.name == "h100-8x")).one()
    a100 = session.exec(select(NodeType).where(NodeType.name == "a100-8x")).one()
    both = calibrated_efficiencies(session, [nt, h100, a100])  # one read for several node types: the same figures
    assert both == {nt.id: calibrated_efficiency(session, nt), h100.id: (0.99, "calibrated: median of 1 measured "
                    "run(s) on h100-8x"), a100.id: calibrated_efficiency(session, a100)}
    assert both[a100.id][1].startswith("default for") and both[nt.id][0] == want
