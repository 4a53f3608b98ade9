"""Calibration factors of the planning model: how far measured runs sit from its parts (stdlib only).

The model predicts a step as compute + communication + pipeline bubble
(:mod:`trainledger.trainer.plan.timing`) and a GPU's memory as states + activations +
allowance (:mod:`trainledger.trainer.plan.memory`). A calibration scales each part by a
factor fitted to measured runs (``trainledger.runs.calibrate``); 1.0 everywhere is
the model as written:

    step   = compute · f_compute + intra-node comm · f_intra + inter-node comm · f_inter
             + bubble · f_bubble
    memory = (states + activations) · (1 + FRAGMENTATION) · f_memory
             + (reserve + ZeRO bucket) · f_fixed

A communication part is intra-node when its group's ranks sit in one node
(DeepSpeed's topology: tp adjacent, then dp, then pp), else inter-node.
The calibrated compute efficiency is the model's efficiency ÷ f_compute.
Both sums are linear in the factors, so a least-squares fit finds them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from trainledger.trainer.plan.memory import FRAGMENTATION, MemoryEstimate
from trainledger.trainer.plan.timing import Hardware, StepTime

#: the factors of the step time, in the order of :func:`time_columns`
TIME_FACTORS = ("compute", "intra_comm", "inter_comm", "bubble")
#: the factors of the memory per GPU, in the order of :func:`memory_columns`
MEMORY_FACTORS = ("memory", "memory_fixed")


@dataclass(frozen=True)
class Factors:
    """Multipliers of the model's parts (1.0: the model as written)."""

    compute: float = 1.0
    intra_comm: float = 1.0
    inter_comm: float = 1.0
    bubble: float = 1.0
    memory: float = 1.0
    memory_fixed: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _intra(hw: Hardware, size: int, stride: int) -> bool:
    """Whether a group of ``size`` ranks ``stride`` apart sits in one node (as ``timing.group_link`` decides)."""
    return size <= 1 or size * stride <= hw.gpus_per_node


def time_columns(t: StepTime, hw: Hardware, dp: int, tp: int, pp: int) -> dict[str, float]:
    """The step's parts by factor, in seconds: compute, intra-node comm, inter-node comm, bubble."""
    cols = {"compute": t.compute_s, "intra_comm": 0.0, "inter_comm": 0.0, "bubble": t.bubble_s}
    for seconds, size, stride in ((t.tp_comm_s, tp, 1), (t.pp_comm_s, pp, tp * dp), (t.dp_comm_s, dp, tp)):
        cols["intra_comm" if _intra(hw, size, stride) else "inter_comm"] += seconds
    return cols


def memory_columns(mem: MemoryEstimate) -> dict[str, float]:
    """The memory's parts by factor, in bytes: (states + activations) × (1 + fragmentation), reserve + bucket."""
    variable = (mem.states.total + mem.activations.total) * (1 + FRAGMENTATION)
    return {"memory": variable, "memory_fixed": mem.total - variable}


def calibrated_time(t: StepTime, hw: Hardware, dp: int, tp: int, pp: int, f: Factors) -> StepTime:
    """The step time with each part scaled by its factor (the parts keep their names)."""
    def comm(seconds: float, size: int, stride: int) -> float:
        return seconds * (f.intra_comm if _intra(hw, size, stride) else f.inter_comm)

    return StepTime(compute_s=t.compute_s * f.compute, tp_comm_s=comm(t.tp_comm_s, tp, 1),
                    pp_comm_s=comm(t.pp_comm_s, pp, tp * dp), bubble_s=t.bubble_s * f.bubble,
                    dp_comm_s=comm(t.dp_comm_s, dp, tp))


def calibrated_memory(mem: MemoryEstimate, f: Factors) -> MemoryEstimate:
    """The memory with the calibration folded into the allowance (states and activations stay as counted)."""
    cols = memory_columns(mem)
    total = cols["memory"] * f.memory + cols["memory_fixed"] * f.memory_fixed
    return replace(mem, allowance=total - mem.states.total - mem.activations.total)
