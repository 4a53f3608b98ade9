"""The time model: alpha-beta collectives, which link a group runs on, compute from FLOPs, the 1F1B
bubble, what each ZeRO stage sends; and the candidate search (validation, memory fit, reasons)."""

from __future__ import annotations

import pytest
from trainledger.trainer.plan import search, timing
from trainledger.trainer.plan.memory import GIB, memory_per_gpu, stage_params
from trainledger.trainer.plan.timing import Hardware, Link, all_gather_s, all_reduce_s, group_link, p2p_s, step_time
from trainledger.trainer.shapes import SHAPES, flops_per_token

NVLINK = Link(100e9, 0.0)
#: 8 GPUs per node, 100 GB/s inside a node, 400 Gb/s (50 GB/s) per node between nodes
HW = Hardware(name="test-8x", gpus_per_node=8, gpu_memory_bytes=80 * GIB, peak_tflops=1000.0, efficiency=0.5,
              intra=Link(100e9, 2e-6), inter=Link(50e9, 10e-6))


def test_ring_collectives():
    # 1 GB over 8 ranks at 100 GB/s, no latency: all-reduce moves 2·7/8 GB per rank = 17.5 ms.
    assert all_reduce_s(1e9, 8, NVLINK) == pytest.approx(0.0175)
    assert all_gather_s(1e9, 8, NVLINK) == pytest.approx(0.00875)  # half of it
    assert all_reduce_s(1e9, 1, NVLINK) == 0.0
    slow = Link(1e9, 1e-3)
    assert all_reduce_s(0, 4, slow) == pytest.approx(6e-3)  # 2·(n−1) latencies
    assert p2p_s(1e6, slow) == pytest.approx(2e-3)


def test_group_links():
    assert group_link(HW, 8, 1) is HW.intra  # tp 8 inside a node
    assert group_link(HW, 4, 2) is HW.intra  # dp 4 at stride tp 2: 8 ranks, one node
    across = group_link(HW, 8, 8)  # one rank per node: a node's 8 GPUs share its network
    assert across.bytes_per_s == pytest.approx(50e9 / 8) and across.latency_s == 10e-6
    two_per_node = group_link(HW, 16, 4)  # stride 4: 2 members per node, 4 groups share the network
    assert two_per_node.bytes_per_s == pytest.approx(50e9 * 2 / 8)


def test_compute_time_is_flops_over_peak_times_efficiency():
    shape = SHAPES["llama2-7b"]
    t = step_time(shape, HW, dp=1, tp=1, pp=1, zero_stage=0, micro_batch=2, micro_batches=3, stage_params=1)
    expected = 3 * flops_per_token(shape) * 2 * 4096 / (1000e12 * 0.5)
    assert t.compute_s == pytest.approx(expected)
    assert (t.tp_comm_s, t.pp_comm_s, t.bubble_s, t.dp_comm_s) == (0, 0, 0, 0)
    full = step_time(shape, HW, dp=1, tp=1, pp=1, zero_stage=0, micro_batch=2, micro_batches=3, stage_params=1,
                     recompute="full")
    assert full.compute_s == pytest.approx(expected * 4 / 3)  # the forward runs twice: 8N instead of 6N
    assert t.bottleneck == "compute" and t.comm_share == 0


def test_pipeline_bubble_is_pp_minus_one_over_m_plus_pp_minus_one():
    shape = SHAPES["llama2-70b"]
    for pp, m in ((8, 8), (8, 64), (4, 1)):
        t = step_time(shape, HW, dp=1, tp=8, pp=pp, zero_stage=1, micro_batch=1, micro_batches=m,
                      stage_params=10**9)
        pipeline = t.compute_s + t.tp_comm_s + t.pp_comm_s + t.bubble_s
        assert t.bubble_s / pipeline == pytest.approx((pp - 1) / (m + pp - 1))


def test_tensor_parallel_all_reduces_per_layer():
    """tp 8 in a node: 4 all-reduces of b·s·h·2 bytes per layer and micro-batch (6 with recomputation)."""
    shape = SHAPES["llama2-7b"]
    msg = 1 * 4096 * 4096 * 2
    t = step_time(shape, HW, dp=1, tp=8, pp=1, zero_stage=0, micro_batch=1, micro_batches=2, stage_params=1)
    assert t.tp_comm_s == pytest.approx(2 * 32 * 4 * all_reduce_s(msg, 8, HW.intra))
    r = step_time(shape, HW, dp=1, tp=8, pp=1, zero_stage=0, micro_batch=1, micro_batches=2, stage_params=1,
                  recompute="full")
    assert r.tp_comm_s == pytest.approx(t.tp_comm_s * 6 / 4)


@pytest.mark.parametrize("zero,per_step", [
    (0, lambda ar, rs, ag, m: ar),
    (1, lambda ar, rs, ag, m: rs + ag),
    (2, lambda ar, rs, ag, m: m * rs + ag),
    (3, lambda ar, rs, ag, m: m * (2 * ag + rs)),
])
def test_data_parallel_traffic_by_zero_stage(zero, per_step):
    shape, p, m = SHAPES["llama2-7b"], 6_738_415_616, 4
    link = group_link(HW, 16, 1)  # dp 16 over 2 nodes
    g = 2 * p
    t = step_time(shape, HW, dp=16, tp=1, pp=1, zero_stage=zero, micro_batch=1, micro_batches=m, stage_params=p)
    expected = per_step(all_reduce_s(g, 16, link), all_gather_s(g, 16, link), all_gather_s(g, 16, link), m)
    assert t.dp_comm_s == pytest.approx(expected)
    assert link.bytes_per_s == pytest.approx(50e9 * 8 / 8)  # 8 members per node share the node's link


def test_unknown_peak_gives_no_time():
    from dataclasses import replace

    assert step_time(SHAPES["tiny"], replace(HW, peak_tflops=None), dp=1, tp=1, pp=1, zero_stage=0,
                     micro_batch=1, micro_batches=1, stage_params=1) is None


def test_default_efficiency_by_gpu():
    assert timing.default_efficiency("NVIDIA GeForce RTX 4090 24GB") == 0.45
    assert timing.default_efficiency("NVIDIA H100 80GB SXM") == 0.50
    assert timing.default_efficiency("Some New GPU") == timing.FALLBACK_EFFICIENCY


# --------------------------------------------------------------------------- search


def test_layouts_cover_every_strategy():
    shape = SHAPES["llama2-70b"]
    got = list(search.layouts(shape, 16, ["dp", "zero1", "zero2", "zero3", "pp", "tp", "3d"]))
    assert ("dp", 16, 1, 1, 0) in got and ("zero3", 16, 1, 1, 3) in got
    assert ("tp", 2, 8, 1, 0) in got and ("tp", 2, 8, 1, 1) in got
    assert ("pp", 2, 1, 8, 0) in got and ("3d", 1, 8, 2, 1) in got
    assert all(dp * tp * pp == 16 for _, dp, tp, pp, _ in got)
    assert not any(s == "3d" and z != 1 for s, _, _, _, z in got)
    assert not any(pp > 1 and z >= 2 for _, _, _, pp, z in got)  # DeepSpeed's pipeline refuses ZeRO-2/3


def test_candidates_round_the_global_batch_up():
    cands = list(search.candidates(SHAPES["llama2-7b"], 1, 8, 100, ["zero2"], [4], ["none"]))
    assert len(cands) == 1
    c = cands[0]
    assert (c.dp, c.micro_batch, c.grad_accum, c.global_batch) == (8, 4, 4, 128)  # ⌈100 / 32⌉ = 4


def test_evaluate_keeps_fitting_plans_and_says_why_others_go():
    shape = SHAPES["llama2-70b"]
    C = search.Candidate
    bad_tp = search.evaluate(shape, C("tp", 1, 16, 1, 0, 1, 8, "none", 2, 8), HW)
    assert bad_tp.reason.startswith("invalid plan: tp 16 does not divide n_kv_heads 8")
    bad_pp = search.evaluate(shape, C("pp", 1, 1, 3, 0, 1, 8, "none", 1, 3), HW)
    assert "pp 3 does not divide n_layers 80" in bad_pp.reason
    oom = search.evaluate(shape, C("dp", 8, 1, 1, 0, 1, 8, "none", 1, 8), HW)
    assert oom.reason.startswith("out of memory: needs ") and oom.reason.endswith("GiB per GPU > 80 GiB")
    assert oom.memory.total > HW.gpu_memory_bytes and oom.time is None
    ok = search.evaluate(shape, C("3d", 2, 8, 4, 1, 1, 64, "full", 8, 8), HW)
    assert ok.kept and ok.memory.total <= HW.gpu_memory_bytes
    mem = memory_per_gpu(shape, dp=2, tp=8, pp=4, zero_stage=1, micro_batch=1, micro_batches=64, recompute="full")
    assert ok.memory.total == mem.total
    assert ok.tokens_per_s == pytest.approx(2 * 64 * 4096 / ok.time.total_s)
    assert ok.time.dp_comm_s > 0 and ok.time.tp_comm_s > 0 and ok.time.pp_comm_s > 0
    assert mem.params == stage_params(shape, 8, 4, mem.stage).total
