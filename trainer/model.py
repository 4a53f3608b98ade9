"""The decoders: GPT-2 style (``arch: gpt``) and Llama (``arch: llama``); :func:`build_model` picks one.

GPT:   x₀ = E[tokens] + P[positions]
       xₗ₊₁ = xₗ' + MLP(LN(xₗ')),  xₗ' = xₗ + Attn(LN(xₗ))      (pre-norm residual blocks)
       logits = LN(x_L) · Eᵀ                                   (output head tied to the token embedding)
Llama: x₀ = E[tokens]                                          (no position table: RoPE inside attention)
       xₗ₊₁ = xₗ' + SwiGLU(RMSNorm(xₗ')),  xₗ' = xₗ + GQA(RMSNorm(xₗ))
       SwiGLU(x) = W_down (silu(W_gate x) ⊙ W_up x);  logits = RMSNorm(x_L) · W_headᵀ (untied)

Both use ``torch.nn.functional.scaled_dot_product_attention`` (causal). In
grouped-query attention each of the KV key/value heads serves H / KV query
heads; with tensor parallelism a rank owns H / tp query heads and the KV / tp
key/value heads they read (tp divides both), so no head is split or copied.

The parameter count is exactly ``trainledger.trainer.shapes.param_count(shape)``.

Every layer draws its initial weights from its own generator seeded with
(seed, layer index), full-size, before any tensor-parallel slicing. So the
plain model, its pipeline stages and its tensor-parallel shards all start
from identical numbers for the same seed. Init follows GPT-2: N(0, 0.02),
residual output projections N(0, 0.02/√(2L)).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F
from trainledger.trainer.shapes import ModelShape
from trainledger.trainer.tensor_parallel import ColumnParallelLinear, RowParallelLinear, TPGroup

INIT_STD = 0.02


def _generator(seed: int, layer_index: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + layer_index)


def _normal(shape: tuple[int, ...], std: float, gen: torch.Generator) -> torch.Tensor:
    return torch.empty(shape).normal_(0.0, std, generator=gen)


class TokenEmbedding(nn.Module):
    """Token embedding E (V × d); ``logits`` applies it transposed as the tied output head."""

    def __init__(self, shape: ModelShape, seed: int):
        super().__init__()
        self.weight = nn.Parameter(_normal((shape.vocab_size, shape.d_model), INIT_STD, _generator(seed, 0)))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return F.embedding(idx, self.weight)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class PositionEmbedding(nn.Module):
    """Adds the learned position embedding P (T × d)."""

    def __init__(self, shape: ModelShape, seed: int):
        super().__init__()
        self.weight = nn.Parameter(_normal((shape.seq_len, shape.d_model), INIT_STD, _generator(seed, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[: x.shape[1]]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; with tp, each rank owns n_heads / tp heads."""

    def __init__(self, shape: ModelShape, gen: torch.Generator, tp: Optional[TPGroup]):
        super().__init__()
        d, H, Q = shape.d_model, shape.n_heads, shape.head_dim
        tp_size = tp.size if tp is not None else 1
        tp_rank = tp.rank if tp is not None else 0
        self.local_heads = H // tp_size
        self.head_dim = Q
        qkv = _normal((3 * d, d), INIT_STD, gen)
        proj = _normal((d, d), INIT_STD / math.sqrt(2 * shape.n_layers), gen)
        # Rows of this rank's heads in each of the q, k and v blocks of the fused weight.
        heads = torch.arange(tp_rank * self.local_heads * Q, (tp_rank + 1) * self.local_heads * Q)
        rows = torch.cat([heads, heads + d, heads + 2 * d])
        self.qkv = ColumnParallelLinear(qkv, tp, row_index=rows)
        self.proj = RowParallelLinear(proj, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.local_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, Q)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.local_heads * self.head_dim))


class MLP(nn.Module):
    """GELU MLP of width 4·d; with tp, each rank owns 4·d / tp hidden units."""

    def __init__(self, shape: ModelShape, gen: torch.Generator, tp: Optional[TPGroup]):
        super().__init__()
        d = shape.d_model
        fc = _normal((4 * d, d), INIT_STD, gen)
        proj = _normal((d, 4 * d), INIT_STD / math.sqrt(2 * shape.n_layers), gen)
        self.fc = ColumnParallelLinear(fc, tp)
        self.proj = RowParallelLinear(proj, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """One pre-norm transformer block (layer ``layer`` of the stack)."""

    def __init__(self, shape: ModelShape, layer: int, seed: int, tp: Optional[TPGroup] = None):
        super().__init__()
        gen = _generator(seed, 2 + layer)
        self.ln1 = nn.LayerNorm(shape.d_model)
        self.attn = CausalSelfAttention(shape, gen, tp)
        self.ln2 = nn.LayerNorm(shape.d_model)
        self.mlp = MLP(shape, gen, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class FinalNorm(nn.LayerNorm):
    """The LayerNorm before the output head."""

    def __init__(self, shape: ModelShape):
        super().__init__(shape.d_model)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all positions (computed in fp32)."""
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


class GPT(nn.Module):
    """The whole decoder in one module (data parallel, ZeRO and tensor parallel strategies)."""

    def __init__(self, shape: ModelShape, seed: int = 1234, tp: Optional[TPGroup] = None,
                 activation_checkpointing: bool = False):
        super().__init__()
        if shape.arch != "gpt":
            raise ValueError(f"GPT needs a shape of arch 'gpt', got {shape.name!r} ({shape.arch}): use build_model")
        self.shape = shape
        self.activation_checkpointing = activation_checkpointing
        self.tok = TokenEmbedding(shape, seed)
        self.pos = PositionEmbedding(shape, seed)
        self.blocks = nn.ModuleList(Block(shape, i, seed, tp) for i in range(shape.n_layers))
        self.ln_f = FinalNorm(shape)
        # A separate module sharing the embedding's Parameter, so ZeRO-3 gathers it for the head too.
        self.lm_head = nn.Linear(shape.d_model, shape.vocab_size, bias=False)
        self.lm_head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits (B, T, V), or the mean cross-entropy when ``targets`` is given."""
        x = _run_blocks(self.blocks, self.pos(self.tok(idx)), self.activation_checkpointing and self.training)
        logits = self.lm_head(self.ln_f(x))
        return logits if targets is None else lm_loss(logits, targets)


# --------------------------------------------------------------------------- Llama


def rope_cos_sin(seq_len: int, head_dim: int, theta: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables (T × Q): angle(t, i) = t · θ^(−2i/Q) for i < Q/2, repeated for both halves (fp32 math)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32, device=device), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, heads, T, Q) by position: x·cos + rotate_half(x)·sin, rotate_half(a, b) = (−b, a)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class LlamaAttention(nn.Module):
    """Grouped-query causal self-attention with rotary positions; with tp, each rank owns H/tp query heads
    and the KV/tp key/value heads of their groups (query head h reads key/value head h ÷ (H/KV))."""

    def __init__(self, shape: ModelShape, gen: torch.Generator, tp: Optional[TPGroup]):
        super().__init__()
        d, H, KV, Q = shape.d_model, shape.n_heads, shape.n_kv_heads, shape.head_dim
        tp_size = tp.size if tp is not None else 1
        tp_rank = tp.rank if tp is not None else 0
        self.local_heads, self.local_kv_heads, self.head_dim = H // tp_size, KV // tp_size, Q
        self.rope_theta = shape.rope_theta
        qkv = _normal(((H + 2 * KV) * Q, d), INIT_STD, gen)  # rows: H·Q of q, then KV·Q of k, then KV·Q of v
        out = _normal((d, H * Q), INIT_STD / math.sqrt(2 * shape.n_layers), gen)
        q_rows = torch.arange(tp_rank * self.local_heads * Q, (tp_rank + 1) * self.local_heads * Q)
        kv_rows = torch.arange(tp_rank * self.local_kv_heads * Q, (tp_rank + 1) * self.local_kv_heads * Q)
        rows = torch.cat([q_rows, H * Q + kv_rows, (H + KV) * Q + kv_rows])
        self.qkv = ColumnParallelLinear(qkv, tp, row_index=rows)
        self.out = RowParallelLinear(out, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        h, kv, Q = self.local_heads, self.local_kv_heads, self.head_dim
        q, k, v = self.qkv(x).split([h * Q, kv * Q, kv * Q], dim=-1)
        q = q.view(B, T, h, Q).transpose(1, 2)
        k = k.view(B, T, kv, Q).transpose(1, 2)
        v = v.view(B, T, kv, Q).transpose(1, 2)
        cos, sin = rope_cos_sin(T, Q, self.rope_theta, x.device, x.dtype)
        y = F.scaled_dot_product_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v,
                                           is_causal=True, enable_gqa=h != kv)
        return self.out(y.transpose(1, 2).reshape(B, T, h * Q))


class SwiGLU(nn.Module):
    """W_down(silu(W_gate x) ⊙ W_up x) of width F; with tp, each rank owns F/tp units of gate and up."""

    def __init__(self, shape: ModelShape, gen: torch.Generator, tp: Optional[TPGroup]):
        super().__init__()
        d, F_ = shape.d_model, shape.ffn_dim
        tp_size = tp.size if tp is not None else 1
        tp_rank = tp.rank if tp is not None else 0
        gate_up = _normal((2 * F_, d), INIT_STD, gen)  # rows: F of gate, then F of up
        down = _normal((d, F_), INIT_STD / math.sqrt(2 * shape.n_layers), gen)
        local = F_ // tp_size
        units = torch.arange(tp_rank * local, (tp_rank + 1) * local)
        self.local_ffn = local
        self.gate_up = ColumnParallelLinear(gate_up, tp, row_index=torch.cat([units, F_ + units]))
        self.down = RowParallelLinear(down, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).split(self.local_ffn, dim=-1)
        return self.down(F.silu(gate) * up)


class LlamaBlock(nn.Module):
    """One pre-norm Llama block (layer ``layer`` of the stack)."""

    def __init__(self, shape: ModelShape, layer: int, seed: int, tp: Optional[TPGroup] = None):
        super().__init__()
        gen = _generator(seed, 2 + layer)
        self.attn_norm = nn.RMSNorm(shape.d_model, eps=shape.norm_eps)
        self.attn = LlamaAttention(shape, gen, tp)
        self.mlp_norm = nn.RMSNorm(shape.d_model, eps=shape.norm_eps)
        self.mlp = SwiGLU(shape, gen, tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class LlamaFinalNorm(nn.RMSNorm):
    """The RMSNorm before the output head."""

    def __init__(self, shape: ModelShape):
        super().__init__(shape.d_model, eps=shape.norm_eps)


class OutputHead(nn.Module):
    """The untied output head W_head (V × d): logits = x · W_headᵀ."""

    def __init__(self, shape: ModelShape, seed: int):
        super().__init__()
        self.weight = nn.Parameter(_normal((shape.vocab_size, shape.d_model), INIT_STD, _generator(seed, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class Llama(nn.Module):
    """The Llama decoder in one module (data parallel, ZeRO and tensor parallel strategies)."""

    def __init__(self, shape: ModelShape, seed: int = 1234, tp: Optional[TPGroup] = None,
                 activation_checkpointing: bool = False):
        super().__init__()
        if shape.arch != "llama":
            raise ValueError(f"Llama needs a shape of arch 'llama', got {shape.name!r} ({shape.arch})")
        self.shape = shape
        self.activation_checkpointing = activation_checkpointing
        self.tok = TokenEmbedding(shape, seed)
        self.blocks = nn.ModuleList(LlamaBlock(shape, i, seed, tp) for i in range(shape.n_layers))
        self.norm = LlamaFinalNorm(shape)
        self.lm_head = OutputHead(shape, seed)

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits (B, T, V), or the mean cross-entropy when ``targets`` is given."""
        x = _run_blocks(self.blocks, self.tok(idx), self.activation_checkpointing and self.training)
        logits = self.lm_head(self.norm(x))
        return logits if targets is None else lm_loss(logits, targets)


def _run_blocks(blocks: nn.ModuleList, x: torch.Tensor, checkpoint: bool) -> torch.Tensor:
    """The residual stream through every block; with ``checkpoint`` each block's activations are recomputed."""
    for block in blocks:
        x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpoint else block(x)
    return x


def build_model(shape: ModelShape, seed: int = 1234, tp: Optional[TPGroup] = None,
                activation_checkpointing: bool = False) -> nn.Module:
    """The whole decoder for ``shape.arch``: :class:`GPT` or :class:`Llama`."""
    cls = Llama if shape.arch == "llama" else GPT
    return cls(shape, seed=seed, tp=tp, activation_checkpointing=activation_checkpointing)


def optimizer_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay matrices and embeddings, not LayerNorm/RMSNorm weights and biases."""
    decay, no_decay, seen = [], [], set()
    for p in module.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
