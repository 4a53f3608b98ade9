"""Strategy comparison: the table behind ``trainledger report weekly`` and the
dashboard's Strategies page.

For each succeeded run of a sweep (or of the last ``days`` days):

* time per epoch   = tokens per epoch ÷ tokens/s
* memory per GPU   = peak memory of the busiest rank (``mem_kind`` says CUDA or CPU RSS)
* communication share, GPU-Util (labelled with its source), MFU (null on CPU)
* measured by ``trainledger collect`` (DCGM): GPU-Util of the run's nodes
  (``measured_gpu_util_mean``, source ``dcgm``) and energy (``measured_energy_kwh``,
  Σ of its nodes; null unless every node was measured)
* cost per 1M tokens under offer o = nodes × rate_o ÷ (tokens/s × 3,600) × 10⁶,
  with rate_o the offer's price of a node-hour in use (elastic: hourly rate;
  own and reserved: the full-use rate of a 730-hour month).

Rows are sorted by the cheapest cost per 1M tokens; the cheapest is marked. A run without a node type, or
on a node type without an offer, is listed last with ``not_costed`` (the reason) and no cost: never left out,
never priced as another node type (docs/MONEY.md, "Not costed").
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.money.rates import costs
from trainledger.money.rates.fx import at_list_prices
from trainledger.store.defaults import not_costed_reason
from trainledger.store.models import NodeType, Offer, OfferKind, Run, RunNode, RunStatus
from trainledger.store.types import utcnow


def node_hour_rate(offer: Offer) -> Decimal:
    """Price of one node-hour in use under ``offer``."""
    if offer.kind == OfferKind.rent_elastic:
        return costs.hourly_rate(offer)
    return costs.busy_rate_per_node_hour(offer)


def latest_sweep_id(session: Session) -> Optional[str]:
    row = session.exec(select(Run.sweep_id).where(Run.sweep_id.is_not(None))
                       .order_by(Run.created_at.desc()).limit(1)).first()
    return row


def strategy_comparison(session: Session, sweep_id: Optional[str] = None, days: Optional[int] = None,
                        currency: Optional[str] = None) -> dict[str, Any]:
    """The comparison table for a sweep (default: the latest) or for the last ``days`` days; costs at the offers'
    list prices, in ``currency`` (else the Settings currency once set) at the rate in force now."""
    from trainledger.runs.registry import reap_stale

    reap_stale(session)
    q = select(Run, NodeType).join(NodeType, NodeType.id == Run.node_type_id, isouter=True)  # not costed too
    if days is not None:
        q = q.where(Run.created_at >= utcnow() - timedelta(days=days))
        label = f"last {days} days"
    else:
        sweep_id = sweep_id or latest_sweep_id(session)
        q = q.where(Run.sweep_id == sweep_id) if sweep_id else q.where(False)
        label = f"sweep {sweep_id}" if sweep_id else "no sweep yet"
    pairs = session.exec(q.order_by(Run.created_at)).all()
    measured = _measured(session, [(run.id, run.nodes) for run, _ in pairs])
    offers_by_nt: dict[int, list[Offer]] = {}
    rows = []
    pending = []
    for run, nt in pairs:
        if run.status != RunStatus.succeeded or not run.tokens_per_s:
            pending.append({"run_id": run.id, "strategy": run.strategy, "status": run.status.value,
                            "error": run.error})
            continue
        if nt is not None and nt.id not in offers_by_nt:
            offers_by_nt[nt.id] = at_list_prices(
                session, session.exec(select(Offer).where(Offer.node_type_id == nt.id).order_by(Offer.name)).all(), currency)
        per_offer = {}
        for o in offers_by_nt.get(nt.id, []) if nt is not None else []:
            per_hour = node_hour_rate(o) * run.nodes
            per_offer[o.name] = per_hour / (Decimal(str(run.tokens_per_s)) * 3600) * 1_000_000
        rows.append({
            "strategy": run.strategy, "run_id": run.id, "nodes": run.nodes, "world_size": run.world_size,
            "dp": run.dp, "tp": run.tp, "pp": run.pp, "zero_stage": run.zero_stage,
            "tokens_per_s": run.tokens_per_s,
            "time_per_epoch_hours": (Decimal(run.tokens_per_epoch) / Decimal(str(run.tokens_per_s)) / 3600) if run.tokens_per_epoch else None,
            "peak_mem_per_gpu_bytes": run.peak_mem_bytes, "mem_kind": run.mem_kind,
            "comm_share": run.comm_share, "gpu_util_mean": run.gpu_util_mean, "util_source": run.util_source,
            "mfu": run.mfu, "final_loss": run.final_loss, "node_type": nt.name if nt is not None else None,
            "cost_per_1m_tokens": per_offer,
            "not_costed": None if per_offer else not_costed_reason(nt.name if nt is not None else None),
            **measured.get(run.id, {"measured_gpu_util_mean": None, "measured_util_source": None, "measured_energy_kwh": None}),
        })

    def best(r):
        vals = [v for v in r["cost_per_1m_tokens"].values()]
        return min(vals) if vals else Decimal("Infinity")

    rows.sort(key=lambda r: (best(r), r["strategy"]))
    for i, r in enumerate(rows):
        r["cheapest"] = i == 0 and best(r) != Decimal("Infinity")
        r["best_cost_per_1m_tokens"] = best(r) if best(r) != Decimal("Infinity") else None
    currencies = sorted({o.currency for os_ in offers_by_nt.values() for o in os_})
    return {"scope": label, "sweep_id": sweep_id, "currency": ", ".join(currencies) or None, "rows": rows,
            "not_measured": pending}


def _measured(session: Session, runs: list[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """Per run: mean DCGM GPU-Util of its nodes and Σ their energy (None unless all nodes have one)."""
    if not runs:
        return {}
    nodes_of = dict(runs)
    by_run: dict[str, list[RunNode]] = {}
    for n in session.exec(select(RunNode).where(RunNode.run_id.in_(list(nodes_of)))).all():
        by_run.setdefault(n.run_id, []).append(n)
    out = {}
    for rid, ns in by_run.items():
        utils = [n.gpu_util_mean for n in ns if n.util_source == "dcgm" and n.gpu_util_mean is not None]
        energy = [n.energy_kwh for n in ns]
        out[rid] = {"measured_gpu_util_mean": sum(utils) / len(utils) if utils else None,
                    "measured_util_source": "dcgm" if utils else None,
                    "measured_energy_kwh": sum(energy) if len(ns) >= nodes_of[rid] and all(e is not None for e in energy) else None}
    return out
