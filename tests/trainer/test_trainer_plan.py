"""Plan validation: each rule refuses with one line that says what to change (no processes start)."""

from __future__ import annotations

import json

import pytest
from trainledger.trainer.config import ConfigError, config_from_dict
from trainledger.trainer.parallel import (
    ParallelPlan,
    PlanError,
    apply_deepspeed_json,
    deepspeed_config,
    resolve_plan,
)


def cfg(**parallel) -> dict:
    return {"model": {"shape": "tiny"}, "parallel": parallel, "precision": "fp32"}


def refused(config: dict, **kwargs) -> str:
    with pytest.raises(PlanError) as info:
        resolve_plan(config, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_world_size_must_equal_dp_tp_pp():
    assert refused(cfg(strategy="tp", dp=2, tp=2), world_size=2) == (
        "dp 2 × tp 2 × pp 1 = 4 ≠ world size 2: set parallel.dp to 1 (= world size 2 ÷ (tp 2 × pp 1))"
    )
    assert refused(cfg(strategy="3d", tp=2, pp=2), world_size=6) == (
        "dp 1 × tp 2 × pp 2 = 4 ≠ world size 6: launch a multiple of tp 2 × pp 2 = 4 processes or change tp/pp"
    )


def test_pipeline_stages_must_divide_layers():
    assert refused(cfg(strategy="pp", pp=3), world_size=3) == (
        "pp 3 does not divide n_layers 4 (stages would hold unequal layer counts and leave GPUs idle): "
        "set parallel.pp to one of 1, 2, 4"
    )


def test_tensor_parallel_must_divide_heads():
    assert refused(cfg(strategy="tp", tp=3), world_size=3) == (
        "tp 3 does not divide n_heads 4: set parallel.tp to one of 1, 2, 4"
    )


def test_global_batch_must_be_micro_times_dp_multiple():
    assert refused(cfg(strategy="dp", micro_batch=4, global_batch=10), world_size=2) == (
        "global_batch 10 is not a multiple of micro_batch 4 × dp 2 = 8: set global_batch to 8 or 16 "
        "(grad_accum = global_batch ÷ 8)"
    )


def test_grad_accum_must_agree_with_global_batch_and_dp():
    assert refused(cfg(strategy="zero1", micro_batch=4, grad_accum=3, global_batch=16), world_size=2) == (
        "grad_accum 3 disagrees with global_batch 16 ÷ (micro_batch 4 × dp 2) = 2: drop grad_accum or set it to 2"
    )


def test_batch_arithmetic_resolves():
    plan = resolve_plan(cfg(strategy="zero2", micro_batch=4, global_batch=32), world_size=4)
    assert (plan.dp, plan.grad_accum, plan.global_batch, plan.zero_stage) == (4, 2, 32, 2)
    plan = resolve_plan(cfg(strategy="3d", tp=2, pp=2, micro_batch=2, grad_accum=4), world_size=8)
    assert (plan.dp, plan.tp, plan.pp, plan.global_batch, plan.zero_stage) == (2, 2, 2, 16, 1)


def test_zero2_or_3_with_pipeline_names_3d():
    message = refused(cfg(strategy="zero2", pp=2), world_size=4)
    assert message == (
        "ZeRO-2 is incompatible with pipeline parallelism (pp 2): DeepSpeed's pipeline engine supports "
        "ZeRO-0/1 only; use strategy '3d' (ZeRO-1 + TP + PP), or 'pp', or set pp: 1"
    )
    assert "use strategy '3d'" in refused(cfg(strategy="pp", pp=2, zero_stage=3), world_size=2)
    config = config_from_dict(cfg())
    with pytest.raises(PlanError, match="ZeRO-3 is incompatible with pipeline parallelism.*'3d'"):
        apply_deepspeed_json(config, {"zero_optimization": {"stage": 3}, "pipeline": {"stages": 2}},
                             infer_strategy=True)
    with pytest.raises(PlanError, match="'3d'"):
        ParallelPlan("pp", dp=1, tp=1, pp=2, zero_stage=2, micro_batch=1, grad_accum=1, global_batch=1,
                     nodes=1, gpus_per_node=2, world_size=2)


def test_hostfile_must_match_nodes_and_gpus(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# cluster\nnode0 slots=4\nnode1 slots=4\n", encoding="utf-8")
    plan = resolve_plan(cfg(strategy="dp"), hostfile=hostfile)
    assert (plan.nodes, plan.gpus_per_node, plan.world_size, plan.dp) == (2, 4, 8, 8)
    assert refused(cfg(strategy="dp", nodes=3), hostfile=hostfile) == (
        f"hostfile {hostfile} lists 2 nodes but nodes is 3: set parallel.nodes: 2 or edit the hostfile"
    )
    assert refused(cfg(strategy="dp", gpus_per_node=8), hostfile=hostfile) == (
        f"hostfile {hostfile} gives slots=4 per node but gpus_per_node is 8: "
        f"set parallel.gpus_per_node: 4 or edit the hostfile's slots"
    )
    assert refused(cfg(strategy="dp"), hostfile=hostfile, world_size=4) == (
        "nodes 2 × gpus_per_node 4 = 8 ≠ world size 4: launch 8 processes or change parallel.nodes/gpus_per_node"
    )
    uneven = tmp_path / "uneven"
    uneven.write_text("a slots=4\nb slots=2\n", encoding="utf-8")
    assert "slots differ between hosts (a: 4, b: 2)" in refused(cfg(), hostfile=uneven)


def test_auto_values_are_resolved():
    config = cfg(strategy="zero3", micro_batch=2, global_batch=8)
    config["deepspeed"] = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                              "stage3_param_persistence_threshold": "auto"},
    }
    plan = resolve_plan(config, world_size=2)
    ds = deepspeed_config(plan, config)
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (8, 2, 2)
    assert ds["gradient_clipping"] == 1.0 and ds["optimizer"]["params"]["lr"] == 1e-3
    assert ds["zero_optimization"] == {"stage": 3, "reduce_bucket_size": 64 * 64, "stage3_prefetch_bucket_size": 3686,
                                       "stage3_param_persistence_threshold": 640, "overlap_comm": False,
                                       "contiguous_gradients": True}
    assert "auto" not in json.dumps(ds)


def test_unresolvable_auto_is_refused():
    config = cfg(strategy="dp")
    config["deepspeed"] = {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "auto"}}}
    plan = resolve_plan(config, world_size=1)
    with pytest.raises(PlanError) as info:
        deepspeed_config(plan, config)
    assert str(info.value) == (
        "DeepSpeed JSON key 'zero_optimization.offload_optimizer.device' is \"auto\", "
        "which trainledger cannot resolve: set a value"
    )


def test_plain_deepspeed_json_sets_the_strategy():
    config = apply_deepspeed_json(config_from_dict({"precision": "fp32"}), {
        "train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 5e-4}}, "gradient_clipping": 0.7,
    }, infer_strategy=True)
    plan = resolve_plan(config, world_size=2)
    assert (plan.strategy, plan.zero_stage, plan.grad_accum) == ("zero2", 2, 2)
    ds = deepspeed_config(plan, config)
    assert ds["optimizer"]["params"]["lr"] == 5e-4 and ds["gradient_clipping"] == 0.7
    with pytest.raises(PlanError, match="disagrees with strategy 'dp' \\(ZeRO-0\\): use strategy 'zero3'"):
        apply_deepspeed_json(config_from_dict({}), {"zero_optimization": {"stage": 3}})


def test_unknown_config_key_is_named():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"parallel": {"strategy": "dp", "micro_bach": 4}})
    assert str(info.value).startswith("unknown config key 'parallel.micro_bach' (allowed: strategy, dp, tp, pp,")
    with pytest.raises(ConfigError, match="unknown config key 'stepz'"):
        config_from_dict({"stepz": 3})
    with pytest.raises(ConfigError, match="parallel.micro_batch must be an integer, got 'four'"):
        config_from_dict({"parallel": {"micro_batch": "four"}})
    with pytest.raises(ConfigError, match="unknown parallel.strategy 'fsdp': use one of dp, zero1, zero2, zero3, pp, tp, 3d"):
        config_from_dict({"parallel": {"strategy": "fsdp"}})


def test_strategy_dims_are_checked():
    assert refused(cfg(strategy="zero1", tp=2), world_size=2) == (
        "strategy 'zero1' is data parallel only (tp 2): use strategy 'tp' or '3d', or set tp: 1"
    )
    assert refused(cfg(strategy="3d"), world_size=8) == (
        "strategy '3d' needs parallel.tp and parallel.pp (dp follows from the world size)"
    )


def test_pipeline_with_fp32_zero0_clips_in_the_trainer():
    config = cfg(strategy="pp", pp=2)
    ds = deepspeed_config(resolve_plan(config, world_size=2), config)
    assert ds["gradient_clipping"] == 0.0  # DeepSpeed's fp32 ZeRO-0 norm miscounts pipeline params
    config = cfg(strategy="3d", tp=2, pp=2)
    assert deepspeed_config(resolve_plan(config, world_size=4), config)["gradient_clipping"] == 1.0
