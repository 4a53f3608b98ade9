"""Planner arithmetic: the ZeRO paper's model-state formulas, plan validity, DeepSpeed's own estimator."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from app import planner
from app.planner import model_states_per_gpu, plans, training_hours
from trainer.shapes import SHAPES, ModelShape, flops_per_token, param_count

PSI = 7_500_000_000  # the ZeRO paper's Figure 1: 7.5B parameters on N_d = 64 GPUs, K = 12


@pytest.mark.parametrize("stage,expected", [
    (0, 120 * 10**9),                                # (2 + 2 + K)Ψ = 16Ψ = 120 GB
    (1, 30 * 10**9 + Fraction(12 * PSI, 64)),         # 2Ψ + 2Ψ + KΨ/N_d = 31.4 GB
    (2, 15 * 10**9 + Fraction(14 * PSI, 64)),         # 2Ψ + (2 + K)Ψ/N_d = 16.6 GB
    (3, Fraction(16 * PSI, 64)),                     # (2 + 2 + K)Ψ/N_d = 1.9 GB
])
def test_zero_paper_figure_1(stage, expected):
    states = model_states_per_gpu(PSI, dp=64, zero_stage=stage)
    assert states.total == expected
    assert round(float(states.total) / 1e9, 1) == {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}[stage]


def test_what_each_stage_shards():
    s0, s1, s2, s3 = (model_states_per_gpu(1000, dp=10, zero_stage=z) for z in range(4))
    assert (s0.params, s0.grads, s0.optimizer) == (2000, 2000, 12000)
    assert (s1.params, s1.grads, s1.optimizer) == (2000, 2000, 1200)
    assert (s2.params, s2.grads, s2.optimizer) == (2000, 200, 1200)
    assert (s3.params, s3.grads, s3.optimizer) == (200, 200, 1200)


def test_tp_and_pp_divide_the_parameters():
    base = model_states_per_gpu(8_000, dp=4, zero_stage=1)
    split = model_states_per_gpu(8_000, dp=4, tp=2, pp=4, zero_stage=1)
    assert split.total * 8 == base.total
    assert split.params == Fraction(2 * 8_000, 8) and split.optimizer == Fraction(12 * 8_000, 8 * 4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="zero_stage"):
        model_states_per_gpu(10, zero_stage=4)
    with pytest.raises(ValueError, match="dp must be positive"):
        model_states_per_gpu(10, dp=0)


def test_plans_on_the_seed_cluster_70b():
    shape = SHAPES["70b"]
    n = param_count(shape)
    rows = {p.strategy: p for p in plans(shape, 8, 8, 24 * planner.GIB, tp=8, pp=4)}
    assert set(rows) == {"dp", "zero1", "zero2", "zero3", "pp", "tp", "3d"}
    assert rows["zero3"].states.total == Fraction(16 * n, 64) and rows["zero3"].fits
    assert rows["dp"].states.total == 16 * n and not rows["dp"].fits
    assert (rows["3d"].dp, rows["3d"].tp, rows["3d"].pp, rows["3d"].zero_stage) == (2, 8, 4, 1)
    assert rows["3d"].states.total == Fraction(4 * n, 32) + Fraction(12 * n, 32 * 2)
    assert (rows["tp"].dp, rows["pp"].dp) == (8, 16)


def test_invalid_plans_say_why():
    shape = ModelShape("odd", n_layers=6, d_model=64, n_heads=4, seq_len=16, vocab_size=100)
    rows = {p.strategy: p for p in plans(shape, 2, 4, 1e9, tp=8, pp=4)}
    assert rows["tp"].states is None and rows["tp"].fits is None
    assert "tp 8 does not divide n_heads 4" in rows["tp"].error
    assert "pp 4 does not divide n_layers 6" in rows["pp"].error
    assert rows["zero2"].error is None and rows["zero2"].fits


def test_training_hours():
    shape = SHAPES["1b"]
    # tokens × FLOPs/token ÷ (MFU × peak × GPUs) ÷ 3600
    expected = 20e9 * flops_per_token(shape) / (0.4 * 989e12 * 64) / 3600
    assert training_hours(20e9, shape, 0.4, 989, 64) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="MFU"):
        training_hours(1, shape, 0, 989, 8)


@pytest.mark.parametrize("shape_name", ["1b", "7b", "13b", "70b"])
@pytest.mark.parametrize("nodes,gpus", [(1, 8), (2, 8), (8, 8), (16, 8)])
def test_zero2_matches_deepspeeds_estimator(shape_name, nodes, gpus):
    """DeepSpeed's ZeRO-2 estimate (no offload) is 2Ψ + 18Ψ/N: the paper's 2Ψ + (2 + K)Ψ/N with
    K = 12 plus the 4-byte fp32 gradient partition DeepSpeed keeps, i.e. our formula with K = 16."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    n = param_count(SHAPES[shape_name])
    world = nodes * gpus
    _, ds_gpu = estimate_zero2_model_states_mem_needs(n, num_gpus_per_node=gpus, num_nodes=nodes, cpu_offload=False)
    ours_k16 = model_states_per_gpu(n, dp=world, zero_stage=2, k=16).total
    assert ds_gpu == int(2 * n + int(Fraction(18 * n, world)))
    assert int(ours_k16) in (ds_gpu, ds_gpu + 1)  # DeepSpeed truncates 18Ψ/N to an int first
    assert ours_k16 - model_states_per_gpu(n, dp=world, zero_stage=2).total == Fraction(4 * n, world)


def test_zero2_matches_deepspeeds_all_live_estimate(capsys):
    """The same through estimate_zero2_model_states_mem_needs_all_live on a real (meta-device) module."""
    pytest.importorskip("deepspeed")
    import torch
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs_all_live

    model = torch.nn.Linear(40_000, 40_000, bias=False, device="meta")  # 1.6B parameters, no memory
    n = 40_000 * 40_000
    capsys.readouterr()
    estimate_zero2_model_states_mem_needs_all_live(model, num_gpus_per_node=8, num_nodes=2)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "offload_optimizer=none" in ln)
    ds_gib = float(re.findall(r"([\d.]+)GB", line)[1])
    ours = model_states_per_gpu(n, dp=16, zero_stage=2, k=16).total
    assert ds_gib == round(float(ours) / 2**30, 2)
