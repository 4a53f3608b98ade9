"""Model shapes: exact parameter count of the real model, PaLM FLOPs per token, MFU, hardware peaks."""

from __future__ import annotations

import pytest

from trainer.hardware import lookup_peak_tflops
from trainer.metrics import mfu, percentile
from trainer.shapes import SHAPES, ModelShape, flops_per_token, param_count


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_param_count_is_the_built_models(name):
    from trainer.model import GPT

    model = GPT(SHAPES[name])
    assert param_count(SHAPES[name]) == sum(p.numel() for p in model.parameters())  # tied head counted once
    assert model.lm_head.weight is model.tok.weight


def test_named_shapes():
    assert {"tiny", "small", "1b", "7b", "70b"} <= set(SHAPES)
    assert param_count(SHAPES["tiny"]) == 222_400
    assert 1.0e9 < param_count(SHAPES["1b"]) < 1.5e9
    assert 6.0e9 < param_count(SHAPES["7b"]) < 7.5e9
    assert 60e9 < param_count(SHAPES["70b"]) < 75e9
    assert SHAPES["tiny"].vocab_size == SHAPES["small"].vocab_size == 257


def test_flops_per_token_is_palm():
    s = SHAPES["tiny"]  # L=4, d=64, H=4, Q=16, T=128
    assert flops_per_token(s) == 6 * 222_400 + 12 * 4 * 4 * 16 * 128 == 1_727_616
    big = SHAPES["7b"]
    assert flops_per_token(big) == 6 * param_count(big) + 12 * 32 * 32 * 128 * 4096


def test_shape_checks_its_dims():
    with pytest.raises(ValueError, match="d_model 100 is not divisible by n_heads 3"):
        ModelShape("x", n_layers=2, d_model=100, n_heads=3, seq_len=8, vocab_size=10)


def test_tensor_parallel_shards_are_slices_of_the_full_weights():
    """tp shards built from the same seed, concatenated, equal the unsharded layer's weights."""
    import torch

    from trainer.model import Block
    from trainer.tensor_parallel import TPGroup

    shape = SHAPES["tiny"]
    full = Block(shape, layer=1, seed=5)
    shards = [Block(shape, layer=1, seed=5, tp=TPGroup(group=None, rank=r, size=2)) for r in range(2)]
    assert torch.equal(torch.cat([s.mlp.fc.weight for s in shards]), full.mlp.fc.weight)
    assert torch.equal(torch.cat([s.mlp.proj.weight for s in shards], dim=1), full.mlp.proj.weight)
    assert torch.equal(torch.cat([s.attn.proj.weight for s in shards], dim=1), full.attn.proj.weight)
    q_rows = [s.attn.qkv.weight[:32] for s in shards]  # this rank's 2 heads × 16 of the q block
    assert torch.equal(torch.cat(q_rows), full.attn.qkv.weight[:64])
    assert all(getattr(s.mlp.fc.weight, "tensor_model_parallel", False) for s in shards)


def test_mfu_and_percentiles():
    assert mfu(1_000_000, 1e6, None, 8) is None
    # 6e12 FLOPs/s achieved on 2 GPUs of 10 TFLOPs each = 30 %.
    assert mfu(6_000_000, 1e6, 10.0, 2) == pytest.approx(0.3)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA GeForce RTX 4090", 165.2), ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H200", 989.0), ("NVIDIA H100 PCIe", None), ("Tesla T4", None), (None, None),
])
def test_peak_tflops_lookup(name, peak):
    assert lookup_peak_tflops(name) == peak
