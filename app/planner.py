"""Planner arithmetic: model-state memory per GPU for each parallel strategy, and training time.

Model states per GPU follow the ZeRO paper (Rajbhandari et al., 2020, §5.1
and Figure 1) for mixed-precision Adam, Ψ parameters:

    parameters  2 bytes/param (fp16/bf16)
    gradients   2 bytes/param (fp16/bf16)
    optimizer   K = 12 bytes/param (fp32 master weights 4 + momentum 4 + variance 4)

    baseline (ZeRO-0)   (2 + 2 + K)·Ψ
    ZeRO-1 (P_os)       2Ψ + 2Ψ + K·Ψ/N_d
    ZeRO-2 (P_os+g)     2Ψ + (2 + K)·Ψ/N_d
    ZeRO-3 (P_os+g+p)   (2 + 2 + K)·Ψ/N_d

Tensor and pipeline parallelism divide the parameters (and with them their
gradients and optimizer states) evenly: Ψ → Ψ / (tp·pp). Activations,
communication buffers and allocator fragmentation come on top; the planner
says so rather than guess them.

Plans are validated by the trainer's own rules (``trainer.parallel``), so a
plan the planner marks valid is one ``trainledger train`` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from trainer.parallel import STRATEGY_ZERO_STAGE, ParallelPlan, PlanError
from trainer.shapes import ModelShape, flops_per_token, param_count

BYTES_PARAM = 2  # fp16/bf16 weights
BYTES_GRAD = 2  # fp16/bf16 gradients
K_ADAM = 12  # fp32 master weights + Adam momentum + variance
GIB = 2**30


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states held by one GPU."""

    params: Fraction
    grads: Fraction
    optimizer: Fraction

    @property
    def total(self) -> Fraction:
        return self.params + self.grads + self.optimizer


def model_states_per_gpu(n_params: int, dp: int = 1, tp: int = 1, pp: int = 1, zero_stage: int = 0,
                         k: int = K_ADAM) -> ModelStates:
    """Model-state bytes per GPU (ZeRO paper formulas; see the module docstring).

    Ψ_gpu = Ψ / (tp·pp); optimizer states are sharded over dp from ZeRO-1,
    gradients from ZeRO-2, parameters from ZeRO-3.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    for name, v in (("dp", dp), ("tp", tp), ("pp", pp), ("n_params", n_params)):
        if v < 1:
            raise ValueError(f"{name} must be positive, got {v!r}")
    psi = Fraction(n_params, tp * pp)
    return ModelStates(
        params=BYTES_PARAM * psi / (dp if zero_stage >= 3 else 1),
        grads=BYTES_GRAD * psi / (dp if zero_stage >= 2 else 1),
        optimizer=k * psi / (dp if zero_stage >= 1 else 1),
    )


@dataclass(frozen=True)
class PlanRow:
    strategy: str
    dp: int
    tp: int
    pp: int
    zero_stage: int
    states: Optional[ModelStates]
    fits: Optional[bool]  # None when the plan is invalid
    error: Optional[str]

    def as_dict(self, gpu_memory_bytes: float) -> dict:
        s = self.states
        gib = (lambda b: float(b) / GIB) if s else (lambda b: None)
        return {
            "strategy": self.strategy, "dp": self.dp, "tp": self.tp, "pp": self.pp, "zero_stage": self.zero_stage,
            "params_gib": gib(s.params) if s else None, "grads_gib": gib(s.grads) if s else None,
            "optimizer_gib": gib(s.optimizer) if s else None, "total_gib": gib(s.total) if s else None,
            "headroom_gib": (gpu_memory_bytes - float(s.total)) / GIB if s else None,
            "fits": self.fits, "error": self.error,
        }


def _plan_dims(strategy: str, world: int, tp: int, pp: int) -> tuple[int, int, int]:
    if strategy in ("dp", "zero1", "zero2", "zero3"):
        tp, pp = 1, 1
    elif strategy == "tp":
        pp = 1
    elif strategy == "pp":
        tp = 1
    dp = max(1, world // (tp * pp))
    return dp, tp, pp


def plans(shape: ModelShape, nodes: int, gpus_per_node: int, gpu_memory_bytes: float, tp: int, pp: int,
          k: int = K_ADAM) -> list[PlanRow]:
    """Every strategy on this cluster: dims, model states per GPU, whether they fit, or why the plan is invalid.

    dp/zero1/zero2/zero3 use all GPUs for data parallelism; tp uses ``tp``,
    pp uses ``pp``, 3d uses both (ZeRO-1), and dp fills the rest.
    """
    world = nodes * gpus_per_node
    n = param_count(shape)
    out = []
    for strategy, stage in STRATEGY_ZERO_STAGE.items():
        dp, t, p = _plan_dims(strategy, world, tp, pp)
        try:
            ParallelPlan(strategy=strategy, dp=dp, tp=t, pp=p, zero_stage=stage, micro_batch=1, grad_accum=1,
                         global_batch=dp, nodes=nodes, gpus_per_node=gpus_per_node, world_size=world).validate(shape)
        except PlanError as exc:
            out.append(PlanRow(strategy, dp, t, p, stage, None, None, str(exc)))
            continue
        states = model_states_per_gpu(n, dp=dp, tp=t, pp=p, zero_stage=stage, k=k)
        out.append(PlanRow(strategy, dp, t, p, stage, states, float(states.total) <= gpu_memory_bytes, None))
    return out


def training_hours(tokens: float, shape: ModelShape, mfu: float, peak_tflops_per_gpu: float, n_gpus: int) -> float:
    """Wall-clock hours to train on ``tokens`` at a given MFU.

    hours = tokens × FLOPs per token ÷ (MFU × peak FLOP/s per GPU × GPUs) ÷ 3600,
    FLOPs per token = 6N + 12·L·H·Q·T (PaLM; ``trainer.shapes.flops_per_token``).
    """
    if not (0 < mfu <= 1):
        raise ValueError(f"MFU must be in (0, 1], got {mfu!r}")
    if peak_tflops_per_gpu <= 0 or n_gpus < 1:
        raise ValueError("peak TFLOPs and GPU count must be positive")
    return tokens * flops_per_token(shape) / (mfu * peak_tflops_per_gpu * 1e12 * n_gpus) / 3600
