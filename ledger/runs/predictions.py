"""Planned vs measured on every run: the prediction stored at launch, compared with what the run measured.

``trainledger launch`` and ``trainledger sweep`` call :func:`store_prediction`
as they register a run: the planning model (``trainledger.trainer.plan``) evaluated for
the run's own plan on its node type (the CPU profile on a machine without an
NVIDIA device), scaled by the node type's newest calibration
(``trainledger.runs.calibrate``) when there is one, with the calibration's
residual range; "uncalibrated" when there is none. A prediction that cannot be
made (no peak TFLOPs known) is stored with its reason; a launch never fails on it.

:func:`planned_vs_measured` is what ``runs show``, the Runs page and the
Strategies page show: predicted and measured step time, memory per GPU and
cost, each with its error (predicted − measured) ÷ measured. Cost on one
basis for both: the run's offer (else the node type's first offer by name)
at list price, rent_elastic billed node-hours × hourly rate, own/reserved
node-hours × full-use rate; predicted hours = steps × predicted step time,
measured hours = the run's wall time (start to end, start-up included).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.months import run_interval
from trainledger.runs import calibrate as cal_mod
from trainledger.runs.registry import cost_under_offers
from trainledger.store.models import NodeType, Offer, Run, RunPrediction
from trainledger.store.types import utcnow
from trainledger.trainer.plan.factors import Factors
from trainledger.trainer.plan.memory import GIB


def predict_for_run(session: Session, run: Run, device: str) -> dict[str, Any]:
    """The (calibrated) prediction for a run's plan on ``device``: step time, memory, ranges, calibration."""
    if run.node_type_id is None:
        raise LedgerInputError(f"run {run.id} has no node type: its hardware is unknown")
    nt = session.get(NodeType, run.node_type_id)
    cal = cal_mod.latest(session, nt.id, device)
    if cal is None and device == "gpu":  # uncalibrated: the planner's own efficiency (measured MFU median or default)
        from trainledger.runs.hardware import hardware

        hw = hardware(session, nt)[0]
    else:
        hw = cal_mod.model_hardware(session, nt, device, run.gpus_per_node)
    model = cal_mod.run_model(run, hw, device)
    factors = Factors(**cal.factors) if cal else Factors()
    step, mem = cal_mod.predicted(model, factors)
    prov = cal.provenance if cal else {}
    return {"device": device, "calibration": cal_mod.label(cal), "calibration_id": cal.id if cal else None,
            "step_time_s": step, "step_time_range_s": cal_mod.with_range(step, prov.get("step_range")),
            "memory_bytes": mem, "memory_range_bytes": cal_mod.with_range(mem, prov.get("memory_range")),
            "steps": (run.config or {}).get("train", {}).get("steps"),
            "why_no_time": None if step is not None else f"no peak TFLOPs known for {nt.name}"}


def store_prediction(session: Session, run: Run, steps: Optional[int] = None,
                     device: Optional[str] = None) -> Optional[RunPrediction]:
    """Store the prediction of a run being launched (never raises for a prediction that cannot be made);
    ``device`` defaults to where this machine trains (``calibrate.launch_device``)."""
    try:
        p = predict_for_run(session, run, device or cal_mod.launch_device())
    except (LedgerInputError, ValueError, KeyError) as exc:
        p = {"error": f"no prediction: {exc}"}
    if steps is not None:
        p["steps"] = steps
    row = RunPrediction(run_id=run.id, calibration_id=p.get("calibration_id"), step_time_s=p.get("step_time_s"),
                        memory_bytes=p.get("memory_bytes"), detail=p)
    session.add(row)
    session.flush()
    return row


def _offer(session: Session, run: Run) -> Optional[Offer]:
    if run.offer_id:
        return session.get(Offer, run.offer_id)
    if run.node_type_id is None:
        return None
    return session.exec(select(Offer).where(Offer.node_type_id == run.node_type_id).order_by(Offer.name)).first()


def _error(pred: Any, meas: Any) -> Optional[float]:
    """(predicted − measured) ÷ measured, None when either is missing."""
    if pred is None or not meas:
        return None
    return float((Decimal(str(pred)) - Decimal(str(meas))) / Decimal(str(meas)))


def _costs(session: Session, run: Run, step_s: Optional[float], steps: Optional[int]) -> dict[str, Any]:
    """Predicted and measured cost of the run on one basis (module docstring)."""
    offer = _offer(session, run)
    if offer is None:
        return {"offer": None, "currency": None, "predicted": None, "measured": None}
    pred = meas = None
    if step_s is not None and steps:
        hours = Decimal(repr(steps * step_s / 3600))
        pred = costs.cents(cost_under_offers([offer], run.nodes, hours)[0]["cost"])
    iv = run_interval(run.started_at, run.ended_at, run.status.value, run.heartbeat_at, utcnow())
    if iv and run.ended_at:
        meas = costs.cents(cost_under_offers([offer], run.nodes, costs.hours_between(*iv))[0]["cost"])
    return {"offer": offer.name, "currency": offer.currency, "predicted": pred, "measured": meas}


def planned_vs_measured(session: Session, run: Run) -> dict[str, Any]:
    """The run's stored prediction beside its measurements: step time, memory per GPU and cost, with errors."""
    row = session.get(RunPrediction, run.id)
    if row is None:
        return {"prediction": None, "note": "no prediction stored (the run was not launched from a plan)", "rows": []}
    d = row.detail or {}
    if d.get("error"):
        return {"prediction": d, "note": d["error"], "rows": []}
    steps = run.steps or d.get("steps")
    cost = _costs(session, run, row.step_time_s, steps)
    mem_gib = None if row.memory_bytes is None else row.memory_bytes / GIB
    meas_gib = None if run.peak_mem_bytes is None else run.peak_mem_bytes / GIB
    mem_range = d.get("memory_range_bytes")
    rows = [
        {"quantity": "step time (s)", "predicted": row.step_time_s, "range": d.get("step_time_range_s"),
         "measured": run.step_time_median_s, "error": _error(row.step_time_s, run.step_time_median_s)},
        {"quantity": "memory per GPU (GiB)", "predicted": mem_gib,
         "range": [v / GIB for v in mem_range] if mem_range else None,
         "measured": meas_gib, "error": _error(mem_gib, meas_gib)},
        {"quantity": f"cost ({cost['currency'] or 'no offer'}, {cost['offer'] or '-'})", "predicted": cost["predicted"],
         "range": None, "measured": cost["measured"], "error": _error(cost["predicted"], cost["measured"])},
    ]
    note = d["calibration"] + ("" if run_device_matches(d, run) else
                               f"; predicted for {d['device']}, measured {run.mem_kind}")
    return {"prediction": {**d, "created_at": row.created_at}, "note": note, "rows": rows, "steps": steps,
            "cost_basis": "predicted: steps × predicted step time; measured: the run's wall time; "
                          "both at the offer's list price"}


def planned_vs_measured_of(session: Session, run_id: str) -> dict[str, Any]:
    """:func:`planned_vs_measured` of the run with this id."""
    return planned_vs_measured(session, session.get(Run, run_id))


def run_device_matches(detail: dict[str, Any], run: Run) -> bool:
    """Whether the run measured on the device it was predicted for (unknown until it has measured memory)."""
    return run.mem_kind is None or cal_mod.run_device(run.mem_kind) == detail.get("device")


def text_lines(pvm: dict[str, Any]) -> list[str]:
    """``runs show``'s lines for planned vs measured."""
    lines = [f"planned vs measured ({pvm['note']}):"]
    for r in pvm["rows"]:
        rng = f" [{_fmt(r['range'][0])}–{_fmt(r['range'][1])}]" if r.get("range") else ""
        err = f"{r['error']:+.1%}" if r["error"] is not None else "-"
        lines.append(f"  {r['quantity']}: predicted {_fmt(r['predicted'])}{rng}, measured {_fmt(r['measured'])}, "
                     f"error {err}")
    return lines


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,.2f}" if isinstance(v, Decimal) else f"{v:.4g}"
