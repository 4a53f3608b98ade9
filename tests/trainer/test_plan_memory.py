"""The planner's memory model against its references: DeepSpeed's own estimator functions (model states),
the ZeRO paper's figure, Korthikanti et al.'s activation coefficients, and the tensors autograd really
saves in a forward pass of the trainer's models."""

from __future__ import annotations

import re

import pytest
from trainledger.trainer.plan import memory
from trainledger.trainer.plan.memory import (
    korthikanti_layer_bytes,
    layer_activation_bytes,
    model_states,
    output_layer_bytes,
    recomputed_layer_bytes,
    stage_activations,
    stage_params,
    zero_paper_bytes,
)
from trainledger.trainer.shapes import SHAPES, param_count

BIG = ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "7b"]
CLUSTERS = [(1, 8), (8, 8), (2, 4)]  # (nodes, GPUs per node)


def _params_as_deepspeed_counts(model) -> tuple[int, int]:
    """DeepSpeed's ``model_to_params`` (stage3.py): unique parameters, and the most any one module holds
    directly. Written out because on the meta device every ``data_ptr()`` is 0, which its dedup relies on."""
    total = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


@pytest.mark.parametrize("name", BIG + ["tiny", "llama-tiny"])
def test_stage_params_are_the_built_models(name):
    import torch
    from trainledger.trainer.model import build_model

    with torch.device("meta"):
        model = build_model(SHAPES[name])
    sp = stage_params(SHAPES[name])
    assert (sp.total, sp.largest_layer) == _params_as_deepspeed_counts(model)
    assert sp.total == param_count(SHAPES[name])


@pytest.mark.parametrize("name", BIG)
@pytest.mark.parametrize("nodes,gpus", CLUSTERS)
def test_zero2_equals_deepspeeds_estimator(name, nodes, gpus):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    n = param_count(SHAPES[name])
    _, ds_gpu = estimate_zero2_model_states_mem_needs(n, num_gpus_per_node=gpus, num_nodes=nodes, cpu_offload=False)
    ours = model_states(n, dp=nodes * gpus, zero_stage=2)
    assert ours.total == ds_gpu
    assert ours.total > ours.zero_paper  # DeepSpeed keeps an fp32 gradient partition the paper leaves out
    assert ours.total - ours.zero_paper == pytest.approx(4 * n / (nodes * gpus), abs=1)


@pytest.mark.parametrize("name", BIG)
@pytest.mark.parametrize("nodes,gpus", CLUSTERS)
def test_zero3_equals_deepspeeds_estimator(name, nodes, gpus):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    sp = stage_params(SHAPES[name])
    _, ds_gpu, largest_mem = estimate_zero3_model_states_mem_needs(
        sp.total, sp.largest_layer, num_gpus_per_node=gpus, num_nodes=nodes, cpu_offload=False,
        cpu_offload_params=False)
    assert model_states(sp.total, dp=nodes * gpus, zero_stage=3, largest_layer=sp.largest_layer).total == ds_gpu
    assert largest_mem == 4 * sp.largest_layer


def test_the_issues_example_7b_on_8_rtx4090s():
    """ZeRO-2 of the GPT "7b" shape on 8 GPUs: 23.02 GiB by the paper, 26.09 GiB by DeepSpeed: too big for 24 GiB."""
    n = param_count(SHAPES["7b"])
    s = model_states(n, dp=8, zero_stage=2)
    assert (round(s.zero_paper / 2**30, 2), round(s.total / 2**30, 2)) == (23.02, 26.09)


@pytest.mark.parametrize("stage,fn_name", [(2, "estimate_zero2_model_states_mem_needs_all_live"),
                                           (3, "estimate_zero3_model_states_mem_needs_all_live")])
@pytest.mark.parametrize("name", ["tiny", "llama-tiny", "llama-small"])
def test_all_live_estimates_of_the_real_model(capsys, stage, fn_name, name):
    """DeepSpeed's printing estimator on the real (CPU) model: its "offload_optimizer=none" GB per GPU."""
    import importlib

    from trainledger.trainer.model import build_model

    module = importlib.import_module("deepspeed.runtime.zero." + ("stage_1_and_2" if stage == 2 else "stage3"))
    model = build_model(SHAPES[name])
    capsys.readouterr()
    getattr(module, fn_name)(model, num_gpus_per_node=4, num_nodes=2)
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "offload_optimizer=none" in ln and "offload_param=cpu" not in ln)
    ds_gb = float(re.findall(r"([\d.]+)GB", line)[1])
    sp = stage_params(SHAPES[name])
    ours = model_states(sp.total, dp=8, zero_stage=stage, largest_layer=sp.largest_layer)
    assert ds_gb == round(ours.total / 2**30, 2)


PSI = 7_500_000_000  # the ZeRO paper's Figure 1: 7.5B parameters on N_d = 64 GPUs, K = 12


@pytest.mark.parametrize("stage,gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage, gb):
    assert round(zero_paper_bytes(PSI, 64, stage) / 1e9, 1) == gb


def test_what_each_stage_shards():
    """Per parameter and dp = 10: ZeRO-0 20 bytes; ZeRO-1 2 + 2 + 16/10; ZeRO-2 2 + 18/10; ZeRO-3 18/10 + 4·largest."""
    s = [model_states(1000, dp=10, zero_stage=z, largest_layer=100) for z in range(4)]
    assert [x.total for x in s] == [20_000, 5_600, 3_800, 2_200]
    assert (s[1].optimizer, s[2].optimizer, s[3].optimizer) == (1_200, 1_200, 1_200)
    assert (s[0].params, s[1].params, s[2].params, s[3].params) == (2_000, 2_000, 2_000, 600)
    fp32 = [model_states(1000, dp=10, zero_stage=z, largest_layer=100, precision="fp32").total for z in range(4)]
    assert fp32 == [16_000, 9_600, 6_000, 2_800]  # 4+4+8; 4+4+16/10; 4+20/10; 8·largest + 20/10


def test_tp_and_pp_split_the_blocks_and_keep_embeddings_whole():
    """llama2-70b on tp 8 × pp 8: a stage holds 10 blocks' matrices ÷ 8 + their norms, plus the embedding
    (first stage) or the final norm and head (last stage); summed over every rank, each block counted once."""
    shape = SHAPES["llama2-70b"]
    d, V = 8192, 32000
    first, mid, last = (stage_params(shape, tp=8, pp=8, stage=s) for s in (0, 3, 7))
    per_block = (param_count(shape) - 2 * V * d - d) // 80
    norms = 2 * d
    assert mid.total == 10 * ((per_block - norms) // 8 + norms)
    assert first.total == mid.total + V * d and last.total == mid.total + V * d + d
    total = sum(stage_params(shape, 8, 8, s).total for s in range(8)) * 8
    assert total == param_count(shape) + 7 * (V * d + V * d + d + 80 * norms)  # whole parts on every tp rank


def test_tp_shard_sizes_are_the_built_shards():
    from trainledger.trainer.model import LlamaBlock
    from trainledger.trainer.tensor_parallel import TPGroup

    shape = SHAPES["llama-small"]
    blocks = [LlamaBlock(shape, 0, 1, TPGroup(None, r, 4)) for r in range(4)]
    assert {sum(p.numel() for p in b.parameters()) for b in blocks} == {
        stage_params(shape, tp=4, pp=8, stage=3).total}  # one block per stage, no embedding or head


@pytest.mark.parametrize("t,sp,expect", [(1, False, 34), (4, False, 10 + 24 / 4), (4, True, 34 / 4)])
def test_gpt_layer_with_dropout_and_eager_attention_is_korthikanti(t, sp, expect):
    """Our per-layer terms for a GPT-3 block (dropout, eager attention, 2-byte activations) reproduce the
    paper's s·b·h·(34 + 5as/h) and its tensor/sequence-parallel forms, plus the fp32 LayerNorm statistics
    (mean and rstd, 4 floats per token) the paper leaves out."""
    shape = SHAPES["7b"]
    s, b, h, a = shape.seq_len, 2, shape.d_model, shape.n_heads
    ours = layer_activation_bytes(shape, b, t, "bf16", flash=False, dropout=True, sequence_parallel=sp)
    stats = 16 * s * b / (t if sp else 1)
    assert ours - stats == pytest.approx(korthikanti_layer_bytes(s, b, h, a, t, sp))
    assert korthikanti_layer_bytes(s, b, h, a, t, sp) == pytest.approx(s * b * h * (expect + 5 * a * s / (h * t)))


def test_flash_attention_drops_the_score_term():
    shape = SHAPES["llama2-7b"]
    eager = layer_activation_bytes(shape, 1, 1, "bf16", flash=False)
    flash = layer_activation_bytes(shape, 1, 1, "bf16", flash=True)
    s, a = shape.seq_len, shape.n_heads
    assert eager - flash == pytest.approx(2 * a * s * s - 4 * a * s)  # softmax output out, log-sum-exp in


def _saved_bytes(fn, params) -> int:
    """Bytes of the distinct storages autograd saves for the backward pass during ``fn()`` (parameters excluded)."""
    import torch

    seen: dict[int, int] = {}
    skip = {p.untyped_storage().data_ptr() for p in params}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@pytest.mark.parametrize("name", ["tiny", "small", "llama-tiny", "llama-small"])
def test_layer_activations_are_what_autograd_saves(name):
    """One block's forward in fp32 on CPU (SDPA): the saved tensors add up to the formula, byte for byte."""
    import torch
    from trainledger.trainer.model import Block, LlamaBlock

    shape = SHAPES[name]
    block = (LlamaBlock if shape.arch == "llama" else Block)(shape, 0, 1)
    x = torch.randn(3, shape.seq_len, shape.d_model, requires_grad=True)
    assert _saved_bytes(lambda: block(x), block.parameters()) == layer_activation_bytes(shape, 3, 1, "fp32")


@pytest.mark.parametrize("name", ["tiny", "llama-tiny", "llama-small"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_model_activations_are_what_autograd_saves(name, recompute):
    """The whole model with its loss: every block, token ids, final norm, log-softmax and targets; with full
    recomputation only each block's input. Off by the loss's 4-byte total weight, which is not modelled."""
    import torch
    from trainledger.trainer.model import build_model

    shape = SHAPES[name]
    model = build_model(shape, activation_checkpointing=recompute == "full").train()
    idx = torch.randint(0, 257, (2, shape.seq_len), generator=torch.Generator().manual_seed(0))
    measured = _saved_bytes(lambda: model(idx, idx.roll(1, dims=1)), model.parameters())
    acts = stage_activations(shape, 2, 1, 1, 0, 1, recompute, "fp32")
    transient = output_layer_bytes(shape, 2, "fp32")[1]
    predicted = acts.total - transient
    if recompute == "full":  # the block being recomputed is not alive in the forward pass
        predicted -= layer_activation_bytes(shape, 2, 1, "fp32")
        assert acts.layers - layer_activation_bytes(shape, 2, 1, "fp32") == \
            shape.n_layers * recomputed_layer_bytes(shape, 2, "fp32")
    assert measured - predicted == 4


def test_pipeline_stages_hold_micro_batches_in_flight():
    """1F1B: stage s holds min(pp − s, m) micro-batches; the last adds the output layer."""
    shape = SHAPES["llama2-70b"]
    one = layer_activation_bytes(shape, 1, 8, "bf16")
    first = stage_activations(shape, 1, 8, 8, 0, 64)
    last = stage_activations(shape, 1, 8, 8, 7, 64)
    assert first.in_flight == 8 and last.in_flight == 1
    assert first.layers == 10 * 8 * one and last.layers == 10 * one
    saved, transient = output_layer_bytes(shape, 1, "bf16")
    assert last.output_layer == saved + transient
    assert stage_activations(shape, 1, 8, 8, 0, 3).in_flight == 3  # fewer micro-batches than stages


def test_memory_per_gpu_adds_the_allowance_and_picks_the_fullest_stage():
    shape = SHAPES["llama2-70b"]
    est = memory.memory_per_gpu(shape, dp=2, tp=8, pp=8, zero_stage=1, micro_batch=1, micro_batches=64,
                                recompute="full")
    sp = stage_params(shape, 8, 8, est.stage)
    states = model_states(sp.total, 2, 1, sp.largest_layer)
    acts = stage_activations(shape, 1, 8, 8, est.stage, 64, "full")
    bucket = min(memory.REDUCE_BUCKET_ELEMENTS, sp.total) * 2
    assert est.allowance == pytest.approx(2**30 + bucket + 0.10 * (states.total + acts.total))
    assert est.total == pytest.approx(states.total + acts.total + est.allowance)
    other = memory.memory_per_gpu(shape, dp=2, tp=8, pp=8, zero_stage=1, micro_batch=1, micro_batches=64,
                                  recompute="full")
    assert other.total == est.total
    for stage in range(8):  # no stage needs more
        sp = stage_params(shape, 8, 8, stage)
        st = model_states(sp.total, 2, 1, sp.largest_layer).total + stage_activations(
            shape, 1, 8, 8, stage, 64, "full").total
        assert st * 1.1 + 2**30 + min(memory.REDUCE_BUCKET_ELEMENTS, sp.total) * 2 <= est.total + 1
