"""A node type as the planning model sees it: GPUs, memory, peak, compute efficiency and link speeds.

Compute efficiency per node type: the median, over the ledger's succeeded
runs on it with a measured MFU, of MFU ÷ (1 − communication share) — the
share of peak the compute reached with communication taken out — else the
documented default for the GPU (``trainledger.trainer.plan.timing.DEFAULT_EFFICIENCY``).
Link speeds: the node type's catalog fields; where missing, the conservative
:data:`ASSUMED_LINKS` (PCIe via host memory, 25 Gb/s Ethernet), said in the output.
Used by ``trainledger.runs.plan`` (ranking), ``trainledger.runs.calibrate`` and
``trainledger.runs.predictions``.
"""

from __future__ import annotations

import statistics
from typing import Any

from sqlmodel import Session, select
from trainledger.store.models import NodeType, Run, RunStatus
from trainledger.trainer.plan.memory import GIB
from trainledger.trainer.plan.timing import Hardware, Link, default_efficiency

#: links assumed for a node type whose catalog entry has no link speeds (GB/s per GPU, Gb/s per node, µs)
ASSUMED_LINKS = {"intra_node_gbytes_per_s": 16.0, "intra_node_latency_us": 10.0,
                 "inter_node_gbits_per_s": 25.0, "inter_node_latency_us": 30.0}


def calibrated_efficiency(session: Session, nt: NodeType) -> tuple[float, str]:
    """(efficiency, where it came from): the median MFU ÷ (1 − comm share) of measured runs, else the default."""
    rows = session.exec(select(Run.mfu, Run.comm_share).where(
        Run.node_type_id == nt.id, Run.status == RunStatus.succeeded, Run.mfu.is_not(None))).all()
    samples = [mfu / (1 - (cs or 0.0)) for mfu, cs in rows if mfu and mfu > 0 and (cs or 0.0) < 1]
    if samples:
        eff = min(1.0, statistics.median(samples))
        return eff, f"calibrated: median of {len(samples)} measured run(s) on {nt.name}"
    return default_efficiency(nt.gpu_model), f"default for {nt.gpu_model} (no measured run with MFU)"


def hardware(session: Session, nt: NodeType) -> tuple[Hardware, str]:
    """The node type as the time model sees it, and where its link speeds came from."""
    eff, source = calibrated_efficiency(session, nt)
    missing = [k for k in ASSUMED_LINKS if getattr(nt, k, None) is None]
    value = {k: (getattr(nt, k, None) if k not in missing else v) for k, v in ASSUMED_LINKS.items()}
    links = "catalog" if not missing else f"assumed (not in the catalog): {', '.join(missing)}"
    hw = Hardware(
        name=nt.name, gpus_per_node=nt.gpus_per_node, gpu_memory_bytes=float(nt.gpu_memory_gb) * GIB,
        peak_tflops=nt.peak_bf16_tflops or None, efficiency=eff, efficiency_source=source,
        intra=Link(value["intra_node_gbytes_per_s"] * 1e9, value["intra_node_latency_us"] * 1e-6),
        inter=Link(value["inter_node_gbits_per_s"] * 1e9 / 8, value["inter_node_latency_us"] * 1e-6),
    )
    return hw, links


def hardware_summary(hw: Hardware, links: str, offers: list[str]) -> dict[str, Any]:
    return {"node_type": hw.name, "offers": offers, "gpus_per_node": hw.gpus_per_node,
            "gpu_memory_gib": hw.gpu_memory_bytes / GIB, "peak_bf16_tflops": hw.peak_tflops,
            "efficiency": (hw.calibration or {}).get("calibrated_efficiency") or hw.efficiency,
            "efficiency_source": hw.efficiency_source,
            "calibration": hw.calibration["label"] if hw.calibration else "uncalibrated",
            "intra_node_gbytes_per_s": hw.intra.bytes_per_s / 1e9, "inter_node_gbits_per_s": hw.inter.bytes_per_s * 8 / 1e9,
            "links": links}
