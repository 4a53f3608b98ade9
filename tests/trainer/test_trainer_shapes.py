"""Model shapes: exact parameter counts (built models and published Llama counts), FLOPs per token as
nanoGPT/PaLM count them, the Llama blocks (RoPE, GQA split over tensor-parallel ranks), hardware peaks."""

from __future__ import annotations

import pytest
from trainledger.trainer.hardware import lookup_peak_tflops
from trainledger.trainer.metrics import percentile
from trainledger.trainer.shapes import SHAPES, ModelShape, flops_per_token, llama_ffn_dim, param_count

#: Published parameter counts (Touvron et al. 2023 released checkpoints; Meta Llama 3 8B model card).
PUBLISHED = {"llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320, "llama2-70b": 68_976_648_192,
             "llama3-8b": 8_030_261_248}


@pytest.mark.parametrize("name", ["tiny", "small", "llama-tiny", "llama-small"])
def test_param_count_is_the_built_models(name):
    from trainledger.trainer.model import build_model

    model = build_model(SHAPES[name])
    assert param_count(SHAPES[name]) == sum(p.numel() for p in model.parameters())  # a tied head counted once


def test_gpt_head_is_tied_and_llama_head_is_not():
    from trainledger.trainer.model import build_model

    gpt, llama = build_model(SHAPES["tiny"]), build_model(SHAPES["llama-tiny"])
    assert gpt.lm_head.weight is gpt.tok.weight
    assert llama.lm_head.weight is not llama.tok.weight
    assert llama.lm_head.weight.shape == llama.tok.weight.shape == (257, 64)
    assert not hasattr(llama, "pos")  # positions come from RoPE, not a table


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_llama_parameter_counts_are_the_published_ones(name):
    assert param_count(SHAPES[name]) == PUBLISHED[name]


def test_llama_ffn_width_follows_metas_formula():
    assert llama_ffn_dim(4096) == SHAPES["llama2-7b"].ffn_dim == 11008
    assert llama_ffn_dim(5120) == SHAPES["llama2-13b"].ffn_dim == 13824
    assert llama_ffn_dim(8192, multiple_of=4096, ffn_dim_multiplier=1.3) == SHAPES["llama2-70b"].ffn_dim == 28672


def test_named_shapes():
    assert {"tiny", "small", "1b", "7b", "70b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
            "llama-tiny"} <= set(SHAPES)
    assert param_count(SHAPES["tiny"]) == 222_400
    assert 6.0e9 < param_count(SHAPES["7b"]) < 7.5e9
    assert SHAPES["llama2-70b"].n_kv_heads == 8 and SHAPES["llama2-7b"].n_kv_heads == 32
    assert SHAPES["llama3-8b"].rope_theta == 500000.0 and SHAPES["llama3-8b"].vocab_size == 128256
    assert SHAPES["tiny"].vocab_size == SHAPES["llama-tiny"].vocab_size == 257


def test_flops_per_token_is_nanogpts_arithmetic_for_gpt2_124m():
    """nanoGPT's estimate_mfu: N = get_num_params() (its 124,439,808 parameters, non_embedding: minus the
    1024 × 768 position table) and 6N + 12·L·H·Q·T. Our block has no linear biases (9·d per layer)."""
    nanogpt_params, biases, wpe = 124_439_808, 12 * 9 * 768, 1024 * 768
    assert param_count(SHAPES["gpt2-124m"]) == nanogpt_params - biases
    n = nanogpt_params - biases - wpe
    assert flops_per_token(SHAPES["gpt2-124m"]) == 6 * n + 12 * 12 * 12 * 64 * 1024
    # The old count (position table in N) overstated MFU and planned hours by 0.55%.
    old = 6 * (nanogpt_params - biases) + 12 * 12 * 12 * 64 * 1024
    assert round(old / flops_per_token(SHAPES["gpt2-124m"]) - 1, 4) == 0.0055


def test_flops_per_token_is_palms_arithmetic_for_llama2_7b():
    """PaLM's 6N + 12·L·H·Q·T with N the published count minus the 32,000 × 4,096 embedding lookup table
    (the untied output head is a matmul and stays)."""
    n = PUBLISHED["llama2-7b"] - 32_000 * 4_096
    assert flops_per_token(SHAPES["llama2-7b"]) == 6 * n + 12 * 32 * 32 * 128 * 4096 == 46_086_512_640


def test_flops_n_is_the_built_models_matmul_parameters():
    """6N counts every parameter of the built model but the lookup tables (nanoGPT's non_embedding)."""
    from trainledger.trainer.model import build_model

    for name, table in (("tiny", "pos"), ("llama-tiny", "tok")):
        shape = SHAPES[name]
        model = build_model(shape)
        n = sum(p.numel() for p in model.parameters()) - getattr(model, table).weight.numel()
        L, H, Q, T = shape.n_layers, shape.n_heads, shape.head_dim, shape.seq_len
        assert flops_per_token(shape) == 6 * n + 12 * L * H * Q * T
    assert flops_per_token(SHAPES["tiny"]) == 1_678_464


def test_shape_checks_its_dims():
    with pytest.raises(ValueError, match="d_model 100 is not divisible by n_heads 3"):
        ModelShape("x", n_layers=2, d_model=100, n_heads=3, seq_len=8, vocab_size=10)
    with pytest.raises(ValueError, match="n_kv_heads 3 does not divide n_heads 4"):
        ModelShape("x", n_layers=2, d_model=64, n_heads=4, seq_len=8, vocab_size=10, arch="llama", n_kv_heads=3)
    with pytest.raises(ValueError, match="ffn_dim is fixed to 256 for arch 'gpt'"):
        ModelShape("x", n_layers=2, d_model=64, n_heads=4, seq_len=8, vocab_size=10, ffn_dim=100)


def test_tensor_parallel_shards_are_slices_of_the_full_weights():
    """tp shards built from the same seed, concatenated, equal the unsharded layer's weights."""
    import torch
    from trainledger.trainer.model import Block
    from trainledger.trainer.tensor_parallel import TPGroup

    shape = SHAPES["tiny"]
    full = Block(shape, layer=1, seed=5)
    shards = [Block(shape, layer=1, seed=5, tp=TPGroup(group=None, rank=r, size=2)) for r in range(2)]
    assert torch.equal(torch.cat([s.mlp.fc.weight for s in shards]), full.mlp.fc.weight)
    assert torch.equal(torch.cat([s.mlp.proj.weight for s in shards], dim=1), full.mlp.proj.weight)
    assert torch.equal(torch.cat([s.attn.proj.weight for s in shards], dim=1), full.attn.proj.weight)
    q_rows = [s.attn.qkv.weight[:32] for s in shards]  # this rank's 2 heads × 16 of the q block
    assert torch.equal(torch.cat(q_rows), full.attn.qkv.weight[:64])
    assert all(getattr(s.mlp.fc.weight, "tensor_model_parallel", False) for s in shards)


def test_llama_tp_shards_own_whole_query_groups():
    """GQA split over tp = 2 (llama-small: 8 query heads, 4 key/value heads, Q = 32): rank r owns query
    heads 4r..4r+3 and the key/value heads 2r, 2r+1 they read (query head h reads h ÷ 2)."""
    import torch
    from trainledger.trainer.model import LlamaBlock
    from trainledger.trainer.tensor_parallel import TPGroup

    shape = SHAPES["llama-small"]
    full = LlamaBlock(shape, layer=0, seed=7)
    shards = [LlamaBlock(shape, layer=0, seed=7, tp=TPGroup(group=None, rank=r, size=2)) for r in range(2)]
    w = full.attn.qkv.weight  # rows: q 256, k 128, v 128
    for r, s in enumerate(shards):
        mine = s.attn.qkv.weight
        assert (s.attn.local_heads, s.attn.local_kv_heads) == (4, 2)
        assert torch.equal(mine[:128], w[128 * r:128 * (r + 1)])  # q heads 4r..4r+3
        assert torch.equal(mine[128:192], w[256 + 64 * r:256 + 64 * (r + 1)])  # k heads 2r, 2r+1
        assert torch.equal(mine[192:], w[384 + 64 * r:384 + 64 * (r + 1)])  # v heads 2r, 2r+1
        assert torch.equal(s.mlp.gate_up.weight[:352], full.mlp.gate_up.weight[352 * r:352 * (r + 1)])
        assert torch.equal(s.mlp.gate_up.weight[352:], full.mlp.gate_up.weight[704 + 352 * r:704 + 352 * (r + 1)])


@pytest.mark.parametrize("name,tp", [("llama-small", 2), ("llama-small", 4), ("llama-tiny", 2)])
def test_llama_tp_partial_outputs_add_up_to_the_full_block(monkeypatch, name, tp):
    """Σ over tp ranks of each rank's attention and MLP outputs (before the all-reduce) = the unsharded
    block's: heads, key/value groups and SwiGLU units are split without loss or overlap."""
    import torch
    import trainledger.trainer.tensor_parallel as tpmod
    from trainledger.trainer.model import LlamaBlock
    from trainledger.trainer.tensor_parallel import TPGroup

    monkeypatch.setattr(tpmod, "_all_reduce", lambda x, tp: x.clone())  # each rank keeps its partial sum
    shape = SHAPES[name]
    full = LlamaBlock(shape, layer=2, seed=3)
    shards = [LlamaBlock(shape, layer=2, seed=3, tp=TPGroup(group=None, rank=r, size=tp)) for r in range(tp)]
    x = torch.randn(2, 16, shape.d_model, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attn = sum(s.attn(x) for s in shards)
        mlp = sum(s.mlp(x) for s in shards)
        assert torch.allclose(attn, full.attn(x), atol=1e-5)
        assert torch.allclose(mlp, full.mlp(x), atol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
    """⟨RoPE(q, m), RoPE(k, n)⟩ depends on m − n: shifting both positions leaves the score unchanged."""
    import torch
    from trainledger.trainer.model import apply_rope, rope_cos_sin

    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(32, generator=g), torch.randn(32, generator=g)
    cos, sin = rope_cos_sin(64, 32, 10000.0, "cpu", torch.float64)

    def score(m, n):
        qm = apply_rope(q.double().view(1, 1, 1, 32), cos[m], sin[m])
        kn = apply_rope(k.double().view(1, 1, 1, 32), cos[n], sin[n])
        return float((qm * kn).sum())

    assert score(5, 2) == pytest.approx(score(40, 37), abs=1e-5)  # the tables are computed in fp32
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


def test_percentiles():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA GeForce RTX 4090", 165.2), ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA H100 80GB HBM3", 989.0),
    ("NVIDIA H200", 989.0), ("NVIDIA H100 PCIe", None), ("Tesla T4", None), (None, None),
])
def test_peak_tflops_lookup(name, peak):
    assert lookup_peak_tflops(name) == peak
