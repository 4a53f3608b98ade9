"""A node type as the planning model sees it: GPUs, memory, peak, compute efficiency and link speeds.

Compute efficiency per node type: the median, over the ledger's succeeded
runs on it with a measured MFU, of MFU ÷ (1 − communication share) — the
share of peak the compute reached with communication taken out — else the
documented default for the GPU (``trainledger.trainer.plan.timing.DEFAULT_EFFICIENCY``).
The database computes each run's ratio and orders them, and returns only the
middle one or two (:func:`calibrated_efficiencies`, every node type in one
read): the same IEEE double
arithmetic as Python's (one subtraction, one division; SQLite's REAL and
PostgreSQL's double precision), so the median is the one ``statistics.median``
gives over every run's ratio, to the last bit (tests/test_plan.py, both
databases), without reading every run (tens of thousands on a busy ledger).
Link speeds: the node type's catalog fields; where missing, the conservative
:data:`ASSUMED_LINKS` (PCIe via host memory, 25 Gb/s Ethernet), said in the output.
Used by ``trainledger.runs.plan`` (ranking), ``trainledger.runs.calibrate`` and
``trainledger.runs.predictions``.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import func
from sqlmodel import Session, select
from trainledger.store.models import NodeType, Run, RunStatus
from trainledger.trainer.plan.memory import GIB
from trainledger.trainer.plan.timing import Hardware, Link, default_efficiency

#: links assumed for a node type whose catalog entry has no link speeds (GB/s per GPU, Gb/s per node, µs)
ASSUMED_LINKS = {"intra_node_gbytes_per_s": 16.0, "intra_node_latency_us": 10.0,
                 "inter_node_gbits_per_s": 25.0, "inter_node_latency_us": 30.0}


def calibrated_efficiency(session: Session, nt: NodeType) -> tuple[float, str]:
    """(efficiency, where it came from): the median MFU ÷ (1 − comm share) of measured runs, else the default."""
    return calibrated_efficiencies(session, [nt])[nt.id]


def calibrated_efficiencies(session: Session, nts: list[NodeType]) -> dict[int, tuple[float, str]]:
    """:func:`calibrated_efficiency` of each node type (by id), from one read of the runs.

    The runs measured: succeeded, MFU above 0, communication share (none: 0) below 1. The median of a node type's n
    ratios is the middle one, or the mean of the middle two (``statistics.median``'s rule): the database numbers each
    node type's ratios in order (``row_number``) and returns only those (2 × number between n and n + 2)."""
    comm = func.coalesce(Run.comm_share, 0.0)
    ratio = Run.mfu / (1.0 - comm)
    ranked = select(Run.node_type_id, ratio.label("ratio"),
                    func.row_number().over(partition_by=Run.node_type_id, order_by=ratio).label("rn"),
                    func.count().over(partition_by=Run.node_type_id).label("n")).where(
        Run.node_type_id.in_(sorted({nt.id for nt in nts})), Run.status == RunStatus.succeeded, Run.mfu > 0,
        comm < 1).subquery()
    middle: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    for nt_id, value, n in session.exec(select(ranked.c.node_type_id, ranked.c.ratio, ranked.c.n)
                                        .where((ranked.c.rn * 2).between(ranked.c.n, ranked.c.n + 2))
                                        .order_by(ranked.c.node_type_id, ranked.c.rn)).all():
        middle.setdefault(nt_id, []).append(value)
        counts[nt_id] = n
    out = {}
    for nt in nts:
        mid = middle.get(nt.id)
        if mid:
            eff = min(1.0, mid[0] if len(mid) == 1 else (mid[0] + mid[1]) / 2)
            out[nt.id] = (eff, f"calibrated: median of {counts[nt.id]} measured run(s) on {nt.name}")
        else:
            out[nt.id] = (default_efficiency(nt.gpu_model), f"default for {nt.gpu_model} (no measured run with MFU)")
    return out


def hardware(session: Session, nt: NodeType,
             efficiency: Optional[tuple[float, str]] = None) -> tuple[Hardware, str]:
    """The node type as the time model sees it, and where its link speeds came from; ``efficiency``: its
    :func:`calibrated_efficiency` when the caller has read it (:func:`calibrated_efficiencies`)."""
    eff, source = efficiency or calibrated_efficiency(session, nt)
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
