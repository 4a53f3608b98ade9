"""GPT-style decoder: pre-norm blocks, causal attention, learned positions, tied embeddings.

x₀ = E[tokens] + P[positions]
xₗ₊₁ = xₗ' + MLP(LN(xₗ')),  xₗ' = xₗ + Attn(LN(xₗ))      (pre-norm residual blocks)
logits = LN(x_L) · Eᵀ                                   (output head tied to the token embedding)

The parameter count is exactly ``trainer.shapes.param_count(shape)``.

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

from trainer.shapes import ModelShape
from trainer.tensor_parallel import ColumnParallelLinear, RowParallelLinear, TPGroup

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
        x = self.pos(self.tok(idx))
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits if targets is None else lm_loss(logits, targets)


def optimizer_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: decay matrices and embeddings, not LayerNorm weights/biases."""
    decay, no_decay, seen = [], [], set()
    for p in module.parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
