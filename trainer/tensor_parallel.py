"""Megatron-style tensor parallelism: column- and row-parallel linear layers.

A column-parallel linear splits the weight's output rows across the tp ranks
of a group; a row-parallel linear splits its input columns. Attention is
column-parallel qkv (each rank owns n_heads / tp heads) followed by a
row-parallel output projection; the MLP is column-parallel fc then
row-parallel proj. Per block that is one all-reduce in the forward pass
(after each row-parallel layer) and one in the backward pass (before each
column-parallel layer), as in Megatron-LM (Shoeybi et al., 2019, §3).

Weights are generated full-size from a seeded generator and then sliced, so
a tp-sharded model holds exactly the slices of the unsharded one: the basis
for comparing every strategy's loss against plain data parallelism.
Collectives go through ``deepspeed.comm`` so the trainer's communication
timer sees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import nn


@dataclass(frozen=True)
class TPGroup:
    """This rank's tensor-parallel group: the process group, its rank and size."""

    group: Any
    rank: int
    size: int


def _all_reduce(x: torch.Tensor, tp: TPGroup) -> torch.Tensor:
    from deepspeed import comm as dist

    x = x.contiguous().clone()
    dist.all_reduce(x, group=tp.group)
    return x


class _CopyToTensorParallel(torch.autograd.Function):
    """Identity forward; all-reduce of the gradient backward (the input of a column-parallel layer)."""

    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.tp), None


class _ReduceFromTensorParallel(torch.autograd.Function):
    """All-reduce forward; identity backward (the output of a row-parallel layer)."""

    @staticmethod
    def forward(ctx, x, tp):
        return _all_reduce(x, tp)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tensor_parallel(x: torch.Tensor, tp: Optional[TPGroup]) -> torch.Tensor:
    return x if tp is None or tp.size == 1 else _CopyToTensorParallel.apply(x, tp)


def reduce_from_tensor_parallel(x: torch.Tensor, tp: Optional[TPGroup]) -> torch.Tensor:
    return x if tp is None or tp.size == 1 else _ReduceFromTensorParallel.apply(x, tp)


def mark_tensor_parallel(param: nn.Parameter) -> nn.Parameter:
    """Flag a sharded parameter so DeepSpeed's gradient-norm code counts it on every tp rank."""
    param.tensor_model_parallel = True
    return param


class ColumnParallelLinear(nn.Module):
    """y = x Wᵀ with W's output rows split across tp ranks (no bias).

    ``row_index`` selects this rank's rows of the full weight; by default the
    contiguous block ``[rank·out/tp, (rank+1)·out/tp)``.
    """

    def __init__(self, full_weight: torch.Tensor, tp: Optional[TPGroup], row_index: Optional[torch.Tensor] = None):
        super().__init__()
        self.tp = tp
        if tp is not None and tp.size > 1:
            if row_index is None:
                rows = full_weight.shape[0] // tp.size
                row_index = torch.arange(tp.rank * rows, (tp.rank + 1) * rows)
            self.weight = mark_tensor_parallel(nn.Parameter(full_weight[row_index].clone()))
        else:
            self.weight = nn.Parameter(full_weight.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(copy_to_tensor_parallel(x, self.tp), self.weight)


class RowParallelLinear(nn.Module):
    """y = x Wᵀ with W's input columns split across tp ranks, partial sums all-reduced (no bias)."""

    def __init__(self, full_weight: torch.Tensor, tp: Optional[TPGroup]):
        super().__init__()
        self.tp = tp
        if tp is not None and tp.size > 1:
            cols = full_weight.shape[1] // tp.size
            shard = full_weight[:, tp.rank * cols : (tp.rank + 1) * cols]
            self.weight = mark_tensor_parallel(nn.Parameter(shard.clone()))
        else:
            self.weight = nn.Parameter(full_weight.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_from_tensor_parallel(nn.functional.linear(x, self.weight), self.tp)
