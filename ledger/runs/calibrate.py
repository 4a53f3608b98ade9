"""The planner learns from the ledger: factors fitted to measured runs, predictions with ranges.

``trainledger plan calibrate`` (and every finished ``trainledger sweep``)
takes the ledger's succeeded runs with a known plan (their trainer config,
dp × tp × pp, ZeRO stage, micro-batches) and a measured median step time and
peak memory, evaluates the planning model for each (``trainledger.trainer.plan``), and
fits the model's factors (``trainledger.trainer.plan.factors``) per node type by least
squares on the relative error:

    minimise Σ_runs (Σ_k f_k · part_k / measured − 1)²

one fit for the step time (compute, intra-node comm, inter-node comm,
bubble), one for the memory (states + activations, reserve + bucket). The fit
is solved for the factors' deviation from 1 with ``numpy.linalg.lstsq``
(its minimum-norm solution): a part that no run exercises (no run crossed
nodes, none had a pipeline) keeps factor 1 and is reported as not fitted.
A factor the fit would make ≤ :data:`MIN_FACTOR` is held there and the
others refitted.

Each calibration is stored (``plan_calibration``) with its provenance: the
runs used, each run's residual r = measured ÷ calibrated prediction − 1, and
the range [min r, max r] that ``plan recommend`` and run predictions show as
the error bar (predicted × (1 + r)).

Runs that measured CPU memory (``mem_kind`` ``cpu_max_rss``: trials run on
CPU but booked to a GPU node type) calibrate the node type's **cpu** profile
(:func:`cpu_hardware`), never its GPUs; ``plan recommend`` uses only the
**gpu** calibration. Nothing here imports torch or DeepSpeed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.models import NodeType, PlanCalibration, Run, RunStatus
from trainledger.trainer.plan.factors import MEMORY_FACTORS, TIME_FACTORS, Factors, memory_columns, time_columns
from trainledger.trainer.plan.memory import MemoryEstimate
from trainledger.trainer.plan.timing import Hardware, Link, StepTime, default_efficiency

DEVICES = ("gpu", "cpu")
#: a fitted factor is kept at least this (a part cannot take negative time)
MIN_FACTOR = 0.05
#: the CPU profile's nominal figures; the calibration's factors scale them to what runs measure
CPU_NOMINAL_GFLOPS_PER_PROCESS = 100.0
CPU_LINK = Link(bytes_per_s=1e9, latency_s=50e-6)  # gloo over loopback, nominal
CPU_RESERVED_BYTES = 256 * 2**20  # resident set of a process with torch, DeepSpeed and gloo loaded


def run_device(mem_kind: Optional[str]) -> str:
    """``cpu`` for a run that measured CPU memory (peak RSS), else ``gpu``."""
    return "cpu" if mem_kind == "cpu_max_rss" else "gpu"


def launch_device() -> str:
    """Where a launched run will train: ``cpu`` on a machine without an NVIDIA device node, else ``gpu``."""
    return "gpu" if os.path.exists("/dev/nvidiactl") else "cpu"


def cpu_hardware(processes_per_node: int, cores: Optional[int] = None,
                 gflops_per_process: Optional[float] = None) -> Hardware:
    """The CPU profile: a nominal FLOP rate per process, shared when processes outnumber the cores; or,
    ``gflops_per_process`` given, the rate a process was measured to get at the time (``bench.cpu_probe``,
    sharing and the machine's other load included). gloo's collectives run on the same CPUs (copies,
    reductions, the loopback stack, the wait for a descheduled peer), so the probed profile scales the link
    by the same share: β × rate ÷ nominal, α × nominal ÷ rate."""
    if gflops_per_process:
        share = gflops_per_process / CPU_NOMINAL_GFLOPS_PER_PROCESS
        link = Link(bytes_per_s=CPU_LINK.bytes_per_s * share, latency_s=CPU_LINK.latency_s / share)
        return Hardware(name="cpu", gpus_per_node=max(1, processes_per_node), gpu_memory_bytes=float("inf"),
                        peak_tflops=gflops_per_process / 1e3, efficiency=1.0, intra=link, inter=link,
                        efficiency_source="cpu profile, probed rate")
    cores = cores or os.cpu_count() or 1
    return Hardware(name="cpu", gpus_per_node=max(1, processes_per_node), gpu_memory_bytes=float("inf"),
                    peak_tflops=CPU_NOMINAL_GFLOPS_PER_PROCESS / 1e3,
                    efficiency=min(1.0, cores / max(1, processes_per_node)),
                    intra=CPU_LINK, inter=CPU_LINK, efficiency_source="cpu profile")


def model_hardware(session: Session, nt: NodeType, device: str, gpus_per_node: int) -> Hardware:
    """The hardware a calibration's factors scale: the node type's catalog figures with the *default*
    compute efficiency (so a factor means the same at fit and at use), or the CPU profile."""
    from trainledger.runs.hardware import hardware

    if device == "cpu":
        return cpu_hardware(gpus_per_node)
    hw, _ = hardware(session, nt)
    return replace(hw, efficiency=default_efficiency(nt.gpu_model), efficiency_source="default")


# --------------------------------------------------------------------------- the model of one run


@dataclass(frozen=True)
class RunModel:
    """The planning model evaluated for one run's plan on its hardware (uncalibrated)."""

    time: Optional[StepTime]
    memory: MemoryEstimate
    dims: tuple[int, int, int]  # dp, tp, pp
    hw: Hardware


def run_model(record: dict[str, Any], hw: Hardware, device: str) -> RunModel:
    """The model's step time and memory for a run (a ``Run`` row or a dict with its fields)."""
    from trainledger.trainer.config import ConfigError, config_from_dict
    from trainledger.trainer.plan.memory import memory_per_gpu
    from trainledger.trainer.plan.timing import step_time

    get = record.get if isinstance(record, dict) else lambda k: getattr(record, k)
    try:
        cfg = config_from_dict(((get("config") or {}).get("train")) or {})
    except (ConfigError, TypeError, ValueError) as exc:
        raise LedgerInputError(f"run {get('id')}: its stored config is not a trainer config ({exc})") from None
    precision = cfg.precision if cfg.precision != "auto" else ("fp32" if device == "cpu" else "bf16")
    recompute = "full" if cfg.model.activation_checkpointing else "none"
    dims = dict(dp=get("dp") or 1, tp=get("tp") or 1, pp=get("pp") or 1, zero_stage=get("zero_stage") or 0,
                micro_batch=get("micro_batch") or cfg.parallel.micro_batch)
    m = get("grad_accum") or 1
    reserved = CPU_RESERVED_BYTES if device == "cpu" else None
    mem = memory_per_gpu(cfg.shape, **dims, micro_batches=m, recompute=recompute, precision=precision,
                         **({"reserved": reserved} if reserved is not None else {}))
    t = step_time(cfg.shape, hw, **dims, micro_batches=m, stage_params=mem.params, recompute=recompute,
                  precision=precision)
    return RunModel(t, mem, (dims["dp"], dims["tp"], dims["pp"]), hw)


def predicted(model: RunModel, f: Factors) -> tuple[Optional[float], float]:
    """(step seconds, memory bytes) of the model scaled by the factors."""
    step = None
    if model.time is not None:
        cols = time_columns(model.time, model.hw, *model.dims)
        step = sum(cols[k] * getattr(f, k) for k in TIME_FACTORS)
    mcols = memory_columns(model.memory)
    return step, sum(mcols[k] * getattr(f, k) for k in MEMORY_FACTORS)


# --------------------------------------------------------------------------- the fit


def _solve(columns: np.ndarray, measured: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    """Least squares on the relative error, for the factors' deviation from 1 (minimum norm); factors the fit
    would push to or below :data:`MIN_FACTOR` are held there and the rest refitted."""
    a = columns / measured[:, None]
    held: dict[int, float] = {}
    for _ in range(len(names) + 1):
        free = [j for j in range(len(names)) if j not in held]
        fixed = sum((a[:, j] * v for j, v in held.items()), np.zeros(len(measured)))
        target = 1.0 - fixed - a[:, free].sum(axis=1)
        delta = np.linalg.lstsq(a[:, free], target, rcond=None)[0] if free else np.zeros(0)
        values = {j: 1.0 + d for j, d in zip(free, delta)}
        low = [j for j, v in values.items() if v <= MIN_FACTOR]
        if not low:
            break
        held.update({j: MIN_FACTOR for j in low})
    return {names[j]: float(held.get(j, values.get(j, 1.0))) for j in range(len(names))}


def fit(models: list[RunModel], steps: list[float], memories: list[float]) -> Factors:
    """The factors that best fit the measured step times and memories (module docstring)."""
    timed = [(mdl, s) for mdl, s in zip(models, steps) if mdl.time is not None and s]
    out: dict[str, float] = {}
    if timed:
        cols = np.array([[time_columns(mdl.time, mdl.hw, *mdl.dims)[k] for k in TIME_FACTORS] for mdl, _ in timed])
        out.update(_solve(cols, np.array([s for _, s in timed], dtype=float), TIME_FACTORS))
    sized = [(mdl, b) for mdl, b in zip(models, memories) if b]
    if sized:
        cols = np.array([[memory_columns(mdl.memory)[k] for k in MEMORY_FACTORS] for mdl, _ in sized])
        out.update(_solve(cols, np.array([b for _, b in sized], dtype=float), MEMORY_FACTORS))
    return Factors(**out)


def fitted_parts(models: list[RunModel]) -> dict[str, bool]:
    """Which factors the runs could fit: a part some run's model gives a non-zero share."""
    seen = dict.fromkeys(TIME_FACTORS + MEMORY_FACTORS, False)
    for mdl in models:
        cols = {**(time_columns(mdl.time, mdl.hw, *mdl.dims) if mdl.time else {}), **memory_columns(mdl.memory)}
        for k, v in cols.items():
            seen[k] = seen[k] or v > 0
    return seen


def residual(measured: Optional[float], pred: Optional[float]) -> Optional[float]:
    """measured ÷ predicted − 1 (None when either is missing)."""
    return measured / pred - 1 if measured and pred else None


def _span(values: list[Optional[float]]) -> Optional[list[float]]:
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


# --------------------------------------------------------------------------- the ledger


def _measured_runs(session: Session, node_type: Optional[str], sweep_id: Optional[str]) -> list[tuple[Run, str]]:
    """The succeeded runs with a plan and a measured step time or memory, with their node type's name."""
    q = (select(Run, NodeType.name).join(NodeType, NodeType.id == Run.node_type_id)
         .where(Run.status == RunStatus.succeeded, Run.config.is_not(None))
         .where((Run.step_time_median_s.is_not(None)) | (Run.peak_mem_bytes.is_not(None))))
    if node_type:
        if session.exec(select(NodeType.id).where(NodeType.name == node_type)).first() is None:
            names = sorted(session.exec(select(NodeType.name)).all())
            raise LedgerInputError(f"--node-type: unknown {node_type!r}; use one of {', '.join(names)}")
        q = q.where(NodeType.name == node_type)
    if sweep_id:
        if session.exec(select(Run.id).where(Run.sweep_id == sweep_id)).first() is None:
            raise LedgerInputError(f"--from-sweep: no run in sweep {sweep_id!r}; see `trainledger sweep --help` "
                                   f"or `trainledger runs list`")
        q = q.where(Run.sweep_id == sweep_id)
    rows = [(r, name) for r, name in session.exec(q.order_by(Run.created_at, Run.id)).all()
            if isinstance(r.config, dict) and r.config.get("train")]  # a known plan: the trainer's own config
    if not rows:
        where = " ".join(x for x in (f"on {node_type}" if node_type else "",
                                     f"in sweep {sweep_id}" if sweep_id else "") if x)
        raise LedgerInputError(f"no measured run to fit{' ' + where if where else ''}: a calibration needs succeeded "
                               f"runs with a plan (run `trainledger sweep` or `trainledger launch` first)")
    return rows


def calibrate(session: Session, node_type: Optional[str] = None, sweep_id: Optional[str] = None) -> list[dict[str, Any]]:
    """Fit and store one calibration per (node type, device) of the measured runs; their summaries."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run, nt_name in _measured_runs(session, node_type, sweep_id):
        groups.setdefault((nt_name, run_device(run.mem_kind)), []).append(run)
    out = []
    for (nt_name, device), runs in sorted(groups.items()):
        nt = session.exec(select(NodeType).where(NodeType.name == nt_name)).one()
        out.append(summary(session, _fit_and_store(session, nt, device, runs, sweep_id)))
    return out


def _fit_and_store(session: Session, nt: NodeType, device: str, runs: list[Run],
                   sweep_id: Optional[str]) -> PlanCalibration:
    models = [run_model(r, model_hardware(session, nt, device, r.gpus_per_node), device) for r in runs]
    f = fit(models, [r.step_time_median_s for r in runs], [r.peak_mem_bytes for r in runs])
    per_run = []
    for r, mdl in zip(runs, models):
        step, mem = predicted(mdl, f)
        per_run.append({"run_id": r.id, "strategy": r.strategy, "sweep_id": r.sweep_id,
                        "measured_step_time_s": r.step_time_median_s, "fitted_step_time_s": step,
                        "step_residual": residual(r.step_time_median_s, step),
                        "measured_memory_bytes": r.peak_mem_bytes, "fitted_memory_bytes": mem,
                        "memory_residual": residual(r.peak_mem_bytes, mem)})
    cal = PlanCalibration(
        node_type_id=nt.id, device=device, sweep_id=sweep_id, n_runs=len(runs), factors=f.as_dict(),
        provenance={"runs": per_run, "fitted": fitted_parts(models),
                    "step_range": _span([p["step_residual"] for p in per_run]),
                    "memory_range": _span([p["memory_residual"] for p in per_run]),
                    "method": "numpy.linalg.lstsq on relative errors, minimum-norm deviation from 1"})
    session.add(cal)
    session.flush()
    return cal


def latest(session: Session, node_type_id: int, device: str = "gpu") -> Optional[PlanCalibration]:
    """The node type's newest calibration for ``device``, if any."""
    return session.exec(select(PlanCalibration).where(PlanCalibration.node_type_id == node_type_id,
                                                      PlanCalibration.device == device)
                        .order_by(PlanCalibration.created_at.desc(), PlanCalibration.id.desc())).first()


def label(cal: Optional[PlanCalibration]) -> str:
    """How a prediction was made: ``calibrated #3 (7 runs, 2026-12-04)`` or ``uncalibrated``."""
    if cal is None:
        return "uncalibrated"
    return f"calibrated #{cal.id} ({cal.n_runs} run{'s' if cal.n_runs != 1 else ''}, {cal.created_at:%Y-%m-%d})"


def summary(session: Session, cal: PlanCalibration) -> dict[str, Any]:
    """A calibration as the CLI's --json prints it."""
    nt = session.get(NodeType, cal.node_type_id)
    eff = None
    if cal.device == "gpu" and cal.factors.get("compute"):
        eff = default_efficiency(nt.gpu_model) / cal.factors["compute"]
    p = cal.provenance
    return {"id": cal.id, "node_type": nt.name, "device": cal.device, "created_at": cal.created_at,
            "sweep_id": cal.sweep_id, "n_runs": cal.n_runs, "factors": cal.factors,
            "fitted": p.get("fitted"), "calibrated_efficiency": eff, "label": label(cal),
            "step_range": p.get("step_range"), "memory_range": p.get("memory_range"), "runs": p.get("runs")}


def with_range(value: Optional[float], span: Optional[list[float]]) -> Optional[list[float]]:
    """[low, high] = value × (1 + min residual), value × (1 + max residual); None without a calibration."""
    if value is None or not span:
        return None
    return [value * (1 + span[0]), value * (1 + span[1])]
