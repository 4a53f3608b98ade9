"""Every candidate plan for a model on a cluster, evaluated: valid? fits? how fast?

Candidates per cluster of ``nodes`` × ``gpus_per_node`` GPUs (world W):

* ``dp``, ``zero1``, ``zero2``, ``zero3``: dp = W;
* ``tp``: tp ∈ {2, 4, 8, …} dividing W, dp = W / tp, ZeRO-0 or 1;
* ``pp``: pp ∈ divisors of W from 2 to L, dp = W / pp, ZeRO-0 or 1;
* ``3d``: tp × pp as above with dp = W / (tp·pp), ZeRO-1;

each with every micro-batch of ``micro_batches`` and recompute "none" or
"full". The global batch is the requested one rounded up to a multiple of
micro_batch × dp: grad_accum = ⌈G / (micro_batch · dp)⌉.

A candidate is kept when it passes the trainer's own plan validation
(``trainledger.trainer.parallel.ParallelPlan.validate``: the message it raises is the
reason it is discarded), fits in GPU memory (:mod:`trainledger.trainer.plan.memory`) and
the peak of the GPU is known (:mod:`trainledger.trainer.plan.timing`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from trainledger.trainer.parallel import STRATEGY_ZERO_STAGE, ParallelPlan, PlanError
from trainledger.trainer.plan.factors import Factors, calibrated_memory, calibrated_time
from trainledger.trainer.plan.memory import GIB, RECOMPUTE, MemoryEstimate, memory_per_gpu
from trainledger.trainer.plan.timing import Hardware, StepTime, step_time
from trainledger.trainer.shapes import ModelShape

#: micro-batch sizes tried by default (sequences per GPU per micro-step)
MICRO_BATCHES = (1, 2, 4, 8)
#: tokens per optimizer step by default: Llama 2 trained with 4M-token batches (Touvron et al. 2023, §2.2)
DEFAULT_BATCH_TOKENS = 4 * 2**20


@dataclass(frozen=True)
class Candidate:
    """One plan on one cluster size: dims, ZeRO stage, batch split and recomputation."""

    strategy: str
    dp: int
    tp: int
    pp: int
    zero_stage: int
    micro_batch: int
    grad_accum: int
    recompute: str
    nodes: int
    gpus_per_node: int

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def global_batch(self) -> int:
        return self.micro_batch * self.grad_accum * self.dp

    def label(self) -> str:
        """A short name: ``3d tp8 pp4 dp2 Z1 mb1 full`` etc."""
        dims = " ".join(f"{k}{v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("dp", self.dp)) if v > 1)
        return (f"{self.strategy} {dims or 'dp1'} Z{self.zero_stage} mb{self.micro_batch}"
                + (" recompute" if self.recompute == "full" else ""))


@dataclass(frozen=True)
class Evaluated:
    """A candidate with its memory and step time, or the reason it was discarded."""

    candidate: Candidate
    memory: Optional[MemoryEstimate]
    time: Optional[StepTime]
    reason: Optional[str]
    tokens_per_step: int

    @property
    def kept(self) -> bool:
        return self.reason is None

    @property
    def tokens_per_s(self) -> Optional[float]:
        return self.tokens_per_step / self.time.total_s if self.time else None


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 2
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def _divisors(n: int, low: int, high: int) -> list[int]:
    return [d for d in range(low, min(n, high) + 1) if n % d == 0]


def layouts(shape: ModelShape, world: int, strategies: Sequence[str]) -> Iterator[tuple[str, int, int, int, int]]:
    """(strategy, dp, tp, pp, zero stage) for every layout of ``world`` GPUs the strategies allow."""
    tps = [t for t in _powers_of_two(world) if world % t == 0]
    pps = _divisors(world, 2, shape.n_layers)
    for strategy in strategies:
        if strategy in ("dp", "zero1", "zero2", "zero3"):
            yield strategy, world, 1, 1, STRATEGY_ZERO_STAGE[strategy]
        elif strategy in ("tp", "pp"):
            for degree in (tps if strategy == "tp" else pps):
                tp, pp = (degree, 1) if strategy == "tp" else (1, degree)
                for zero in (0, 1):
                    yield strategy, world // degree, tp, pp, zero
        elif strategy == "3d":
            for tp in tps:
                for pp in pps:
                    if world % (tp * pp) == 0:
                        yield strategy, world // (tp * pp), tp, pp, 1


def candidates(shape: ModelShape, nodes: int, gpus_per_node: int, global_batch: int,
               strategies: Sequence[str] = tuple(STRATEGY_ZERO_STAGE), micro_batches: Sequence[int] = MICRO_BATCHES,
               recompute: Sequence[str] = RECOMPUTE) -> Iterator[Candidate]:
    """Every candidate on ``nodes`` × ``gpus_per_node`` GPUs for about ``global_batch`` sequences per step."""
    world = nodes * gpus_per_node
    for strategy, dp, tp, pp, zero in layouts(shape, world, strategies):
        for mb in micro_batches:
            ga = max(1, math.ceil(global_batch / (mb * dp)))
            for rc in recompute:
                yield Candidate(strategy, dp, tp, pp, zero, mb, ga, rc, nodes, gpus_per_node)


def evaluate(shape: ModelShape, c: Candidate, hw: Hardware, precision: str = "bf16",
             time_if_too_big: bool = False, factors: Optional[Factors] = None,
             memo: Optional[dict[tuple, MemoryEstimate]] = None) -> Evaluated:
    """Validate, size and time one candidate on ``hw`` (scaled by a calibration's ``factors`` when given).

    A plan that does not fit is discarded with its memory; with
    ``time_if_too_big`` its step time is estimated anyway (what it would take
    on cards large enough), still with the out-of-memory reason. ``memo``: what does not depend on the hardware,
    shared by the calls of one search for ``shape``: each candidate's validation and each layout's memory (a plan on
    several node types or offers is checked and sized once).
    """
    tokens = c.global_batch * shape.seq_len
    key = (c, precision)
    known = memo.get(key) if memo is not None else None  # (reason it is invalid or None, its memory) of a candidate
    if known is None:
        known = _checked(shape, c, precision, memo)
        if memo is not None:
            memo[key] = known
    invalid, mem = known
    if invalid is not None:
        return Evaluated(c, None, None, invalid, tokens)
    if factors is not None:
        mem = calibrated_memory(mem, factors)
    too_big = mem.total > hw.gpu_memory_bytes
    if too_big and not time_if_too_big:
        return Evaluated(c, mem, None, _oom(mem, hw), tokens)
    t = step_time(shape, hw, dp=c.dp, tp=c.tp, pp=c.pp, zero_stage=c.zero_stage, micro_batch=c.micro_batch,
                  micro_batches=c.grad_accum, stage_params=mem.params, recompute=c.recompute, precision=precision)
    if factors is not None and t is not None:
        t = calibrated_time(t, hw, c.dp, c.tp, c.pp, factors)
    if too_big:
        return Evaluated(c, mem, t, _oom(mem, hw), tokens)
    if t is None:
        return Evaluated(c, mem, None, f"no peak TFLOPs known for {hw.name}: time cannot be estimated", tokens)
    return Evaluated(c, mem, t, None, tokens)


def _checked(shape: ModelShape, c: Candidate, precision: str,
             memo: Optional[dict]) -> tuple[Optional[str], Optional[MemoryEstimate]]:
    """The trainer's plan validation of ``c`` for ``shape`` (its message: the reason it is discarded) and, when
    valid, its memory per GPU before any calibration (by layout in ``memo``: the same for every cluster size)."""
    try:
        ParallelPlan(strategy=c.strategy, dp=c.dp, tp=c.tp, pp=c.pp, zero_stage=c.zero_stage,
                     micro_batch=c.micro_batch, grad_accum=c.grad_accum, global_batch=c.global_batch,
                     nodes=c.nodes, gpus_per_node=c.gpus_per_node, world_size=c.world_size).check_shape(shape)
    except PlanError as exc:
        return f"invalid plan: {exc}", None
    layout = (c.dp, c.tp, c.pp, c.zero_stage, c.micro_batch, c.grad_accum, c.recompute, precision)
    mem = memo.get(layout) if memo is not None else None
    if mem is None:
        mem = memory_per_gpu(shape, dp=c.dp, tp=c.tp, pp=c.pp, zero_stage=c.zero_stage, micro_batch=c.micro_batch,
                             micro_batches=c.grad_accum, recompute=c.recompute, precision=precision)
        if memo is not None:
            memo[layout] = mem
    return None, mem


def _oom(mem: MemoryEstimate, hw: Hardware) -> str:
    return f"out of memory: needs {mem.total / GIB:.1f} GiB per GPU > {hw.gpu_memory_bytes / GIB:g} GiB"


def reason_kind(reason: str) -> str:
    """The class of a discard reason, for counting: 'invalid plan', 'out of memory' or 'no peak'."""
    return reason.split(":", 1)[0]
