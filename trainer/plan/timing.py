"""Step time of a parallel plan: compute, alpha-beta collectives, and the pipeline bubble.

Compute
-------
Per GPU and micro-batch of b sequences of length s:

    t_compute = flops_per_token · b · s · r / (tp · pp) / (peak · efficiency)

with ``trainledger.trainer.shapes.flops_per_token`` (6N + 12·L·H·Q·T), r = 4/3 with full
activation recomputation (the forward pass runs twice: 8N instead of 6N) and
1 without. ``efficiency`` is the share of the dense peak the matmuls reach:
calibrated from measured runs in the ledger (``trainledger.runs.plan``), else
:data:`DEFAULT_EFFICIENCY` for the GPU.

Communication (alpha-beta, ring algorithms as NCCL and gloo use them)
--------------------------------------------------------------------
For a message of M bytes over a group of n ranks with per-message latency α
and bandwidth β (Thakur et al. 2005; the nccl-tests "bus bandwidth" convention):

    all-reduce       2(n−1)·α + 2(n−1)/n · M/β
    reduce-scatter   (n−1)·α + (n−1)/n · M/β        (M = the whole, unsharded tensor)
    all-gather       (n−1)·α + (n−1)/n · M/β
    point-to-point   α + M/β

Ranks are laid out as DeepSpeed's ``PipeModelDataParallelTopology``: tp
adjacent, then dp, then pp. A group whose members sit in one node uses the
node's intra-node link (β per GPU: NVLink or PCIe); one that spans nodes is
limited by the node's network shared by every group crossing it: β = node
bandwidth × (members per node) / (GPUs per node), and α of the network.

What each strategy sends, per optimizer step with m micro-batches (16-bit
gradients and weights of the P parameters on the rank; G = 2·P bytes):

    ZeRO-0 (dp, pp, tp)   all-reduce G over dp, once
    ZeRO-1 (zero1, 3d)    reduce-scatter G + all-gather G over dp, once
    ZeRO-2                reduce-scatter G every micro-batch + all-gather G once
    ZeRO-3                per micro-batch: all-gather G forward, all-gather G backward
                          (again in the recomputed forward), reduce-scatter G
    TP                    per layer and micro-batch: 2 all-reduces of b·s·h·2 bytes forward,
                          2 backward (2 more with full recomputation), over tp
    PP                    per micro-batch and stage boundary: the activation forward and its
                          gradient backward, b·s·h·2 bytes point-to-point

Pipeline (1F1B): a step is (m + pp − 1) slots of one micro-batch's forward +
backward on one stage (compute + TP + point-to-point); the (pp − 1) extra slots
are the bubble, a share (pp − 1)/(m + pp − 1) of the pipeline time
(Narayanan et al. 2021, §2.2). The data-parallel collectives are added after
the pipeline as not overlapped (DeepSpeed's overlap_comm hides part of them
on GPUs, so the figure errs long). The optimizer update and kernel launch
overheads are not modelled; they are inside the calibrated efficiency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from trainledger.trainer.plan.memory import element_bytes
from trainledger.trainer.shapes import ModelShape, flops_per_token

#: Share of the dense bf16 peak the matmuls reach when no measured run calibrates it (0–1), by GPU model
#: substring. Sources: Narayanan et al. 2021 (Megatron-LM, SC'21) report 44–52% of the A100 peak end to
#: end at 1–3k GPUs; Meta's Llama 3 paper (2024, §3.3.4) reports 38–43% MFU on H100 at 8–16k GPUs, with
#: communication included, so compute alone runs higher; the RTX 4090 figure is an assumption (no
#: published large-scale training MFU), set lower for its smaller caches and PCIe-only host.
DEFAULT_EFFICIENCY: tuple[tuple[str, float], ...] = (
    ("H200", 0.50), ("H100", 0.50), ("A100", 0.55), ("RTX 4090", 0.45),
)
#: the efficiency of a GPU model not listed above (its peak must still be known)
FALLBACK_EFFICIENCY = 0.40
RECOMPUTE_FACTOR = {"none": 1.0, "full": 4.0 / 3.0}


def default_efficiency(gpu_model: str) -> float:
    """The documented default compute efficiency for a GPU model name (see :data:`DEFAULT_EFFICIENCY`)."""
    upper = (gpu_model or "").upper()
    for needle, eff in DEFAULT_EFFICIENCY:
        if needle in upper:
            return eff
    return FALLBACK_EFFICIENCY


@dataclass(frozen=True)
class Link:
    """One kind of link: bandwidth in bytes/s (per GPU intra-node, per node across nodes) and latency α in s."""

    bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Hardware:
    """What the time model needs of a node type.

    ``peak_tflops`` is dense bf16 per GPU (None: unknown, so no time estimate
    is made — never a guessed peak); ``efficiency`` the compute share of it.
    """

    name: str
    gpus_per_node: int
    gpu_memory_bytes: float
    peak_tflops: Optional[float]
    efficiency: float
    intra: Link
    inter: Link
    efficiency_source: str = "default"
    calibration: Optional[dict] = field(default=None, compare=False, hash=False)  # trainledger.runs.calibrate summary


def all_reduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-reduce: 2(n−1)·α + 2(n−1)/n · M/β (0 for one rank)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes / link.bytes_per_s


def all_gather_s(nbytes: float, n: int, link: Link) -> float:
    """Ring all-gather (or reduce-scatter) of an M-byte tensor: (n−1)·α + (n−1)/n · M/β."""
    if n <= 1:
        return 0.0
    return (n - 1) * link.latency_s + (n - 1) / n * nbytes / link.bytes_per_s


reduce_scatter_s = all_gather_s


def p2p_s(nbytes: float, link: Link) -> float:
    """Point-to-point send: α + M/β."""
    return link.latency_s + nbytes / link.bytes_per_s


def group_link(hw: Hardware, size: int, stride: int) -> Link:
    """The link a group of ``size`` ranks ``stride`` apart runs on (module docstring)."""
    gpn = hw.gpus_per_node
    if size <= 1 or size * stride <= gpn:
        return hw.intra
    per_node = max(1, gpn // stride) if stride < gpn else 1
    share = hw.inter.bytes_per_s * per_node / gpn
    return Link(min(share, hw.intra.bytes_per_s), hw.inter.latency_s)


@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step and its parts (per step, on the slowest stage)."""

    compute_s: float
    tp_comm_s: float
    pp_comm_s: float
    bubble_s: float
    dp_comm_s: float

    @property
    def total_s(self) -> float:
        return self.compute_s + self.tp_comm_s + self.pp_comm_s + self.bubble_s + self.dp_comm_s

    @property
    def comm_share(self) -> float:
        """Share of the step spent in communication (TP, PP point-to-point, data-parallel collectives)."""
        return (self.tp_comm_s + self.pp_comm_s + self.dp_comm_s) / self.total_s

    @property
    def bottleneck(self) -> str:
        """The largest part: compute, tensor-parallel all-reduce, pipeline bubble, pipeline p2p or data-parallel sync."""
        parts = {"compute": self.compute_s, "tensor-parallel all-reduce": self.tp_comm_s,
                 "pipeline p2p": self.pp_comm_s, "pipeline bubble": self.bubble_s,
                 "data-parallel sync": self.dp_comm_s}
        return max(parts, key=parts.get)


def dp_comm_s(grad_bytes: float, dp: int, zero_stage: int, micro_batches: int, recompute: str, link: Link) -> float:
    """Data-parallel collectives per step by ZeRO stage (module docstring's table)."""
    if dp <= 1:
        return 0.0
    if zero_stage == 0:
        return all_reduce_s(grad_bytes, dp, link)
    rs = reduce_scatter_s(grad_bytes, dp, link)
    ag = all_gather_s(grad_bytes, dp, link)
    if zero_stage == 1:
        return rs + ag
    if zero_stage == 2:
        return micro_batches * rs + ag
    gathers = 3 if recompute == "full" else 2
    return micro_batches * (gathers * ag + rs)


def step_time(shape: ModelShape, hw: Hardware, *, dp: int, tp: int, pp: int, zero_stage: int, micro_batch: int,
              micro_batches: int, stage_params: int, recompute: str = "none",
              precision: str = "bf16") -> Optional[StepTime]:
    """The step time of a plan on ``hw`` (module docstring), or None when the peak is unknown."""
    if not hw.peak_tflops or hw.efficiency <= 0:
        return None
    e = element_bytes(precision)
    tokens_mb = micro_batch * shape.seq_len
    flops_mb = flops_per_token(shape) * tokens_mb * RECOMPUTE_FACTOR[recompute] / (tp * pp)
    t_compute = flops_mb / (hw.peak_tflops * 1e12 * hw.efficiency)
    act = tokens_mb * shape.d_model * e
    t_tp = 0.0
    if tp > 1:
        per_layer = 6 if recompute == "full" else 4
        t_tp = shape.n_layers // pp * per_layer * all_reduce_s(act, tp, group_link(hw, tp, 1))
    t_p2p = 2 * p2p_s(act, group_link(hw, pp, tp * dp)) if pp > 1 else 0.0
    slot = t_compute + t_tp + t_p2p
    m = micro_batches
    t_dp = dp_comm_s(stage_params * e, dp, zero_stage, m, recompute, group_link(hw, dp, tp))
    return StepTime(compute_s=m * t_compute, tp_comm_s=m * t_tp, pp_comm_s=m * t_p2p,
                    bubble_s=(pp - 1) * slot, dp_comm_s=t_dp)
