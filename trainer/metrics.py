"""Reported numbers of a training run: step-time statistics and :class:`TrainResult`.

MFU is ``trainledger.money.rates.costs.mfu`` (the one MFU function). Imports no torch,
so the ledger can read results written by the trainer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from trainledger.sources.telemetry.sampling import percentile  # noqa: F401  (the one implementation; re-exported)


@dataclass
class TrainResult:
    """What a training run reports; ``to_dict()`` is JSON-serialisable.

    Units are in the names. ``tokens_per_s`` = tokens per step ÷ median step
    time (steady state, not diluted by the first step's warm-up).
    ``comm_share`` = seconds inside DeepSpeed communication calls ÷ step
    seconds on the reporting rank (``None`` when comm timing is off).
    ``peak_memory_bytes[r]`` is rank r's peak: CUDA max allocated on GPU,
    process max RSS on CPU (``memory_kind`` says which).
    """

    strategy: str
    plan: dict
    shape: dict
    params: int
    flops_per_token: int
    world_size: int
    nodes: int
    hostnames: list[str]
    backend: str
    device: str
    precision: str
    steps: int
    tokens: int
    tokens_per_step: int
    step_time_median_s: float
    step_time_p95_s: float
    tokens_per_s: float
    mfu: Optional[float]
    peak_tflops: Optional[float]
    peak_memory_bytes: list[int]
    memory_kind: str
    comm_time_s: Optional[float]
    comm_share: Optional[float]
    losses: list[float]
    final_loss: float
    wall_time_s: float
    samples_per_epoch: int
    epochs: float
    step_times_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)
