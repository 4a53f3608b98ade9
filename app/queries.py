"""Ledger reads and writes the dashboard needs that ledger/ does not offer yet.

Each is a thin function on the ledger's models and cost engine (no figure is
computed differently from the CLI); they are candidates to move into ledger/
(noted per function). Aggregates run in SQL; nothing loads a whole table of runs.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any, Optional

from sqlalchemy import func
from sqlmodel import Session, select

from ledger.accounting import month_of
from ledger.errors import LedgerInputError
from ledger.models import Fleet, MetricSample, NodeType, Offer, OfferKind, Project, Run, RunStatus, User
from ledger.runs import get_run, reap_stale
from ledger.settings import display_timezone
from ledger.sweep import planned_sweeps
from ledger.types import utcnow

SWEEP_LIMIT = 50


# --- filters and months (→ ledger/runs.py) ---------------------------------------

def run_month_span(session: Session) -> Optional[tuple[str, str]]:
    """First and last month (display time zone) in which a run started; None for an empty ledger."""
    first, last = session.exec(select(func.min(Run.started_at), func.max(Run.started_at))).one()
    if first is None:
        return None
    tz = display_timezone(session)
    return month_of(first, tz), month_of(last, tz)


def current_month(session: Session) -> str:
    return month_of(utcnow(), display_timezone(session))


def filter_values(session: Session) -> dict[str, list[str]]:
    """Distinct projects, users and strategies for the Runs filters (SELECT DISTINCT, not a scan in Python)."""
    return {
        "project": list(session.exec(select(Project.name).order_by(Project.name)).all()),
        "user": list(session.exec(select(User.name).order_by(User.name)).all()),
        "strategy": [s for s in session.exec(select(Run.strategy).distinct().order_by(Run.strategy)).all() if s],
    }


def loss_curve(session: Session, run_id: str, metric: str = "loss") -> list[dict[str, Any]]:
    """A run's run-level series of ``metric`` (MetricSample, gpu = -1 or any), oldest first."""
    rows = session.exec(select(MetricSample.ts, MetricSample.value, MetricSample.node)
                        .where(MetricSample.run_id == run_id, MetricSample.metric == metric)
                        .order_by(MetricSample.ts)).all()
    return [{"ts": ts, "value": v, "node": node or "run"} for ts, v, node in rows]


# --- sweeps (→ ledger/runs.py) ----------------------------------------------------

def sweeps(session: Session, limit: int = SWEEP_LIMIT) -> list[dict[str, Any]]:
    """Sweeps (runs sharing a sweep id), newest first, aggregated in SQL; plus recorded sweep
    plans that have no run yet (a sweep that is just starting), with ``runs`` = 0."""
    rows = session.exec(
        select(Run.sweep_id, func.count(Run.id), func.min(Run.started_at), func.max(Run.nodes), func.max(Run.created_at))
        .where(Run.sweep_id.is_not(None))
        .group_by(Run.sweep_id)
        .order_by(func.max(Run.created_at).desc(), Run.sweep_id)
        .limit(limit)).all()
    tz = display_timezone(session)
    out = [{"sweep_id": sid, "runs": n, "started_at": started.astimezone(tz) if started else None, "nodes": nodes,
            "_created": created.replace(tzinfo=created.tzinfo or timezone.utc)}
           for sid, n, started, nodes, created in rows]
    plans = planned_sweeps(session)
    with_runs = set(session.exec(select(Run.sweep_id).where(Run.sweep_id.in_(list(plans))).distinct()).all()) if plans else set()
    for sid, plan in plans.items():
        if sid in with_runs:
            continue
        try:
            created = datetime.fromisoformat(plan.get("created_at") or "")
        except ValueError:
            continue
        out.append({"sweep_id": sid, "runs": 0, "started_at": None, "nodes": plan.get("nodes"), "_created": created})
    out.sort(key=lambda r: r.pop("_created"), reverse=True)
    return out[:limit]


# --- live progress of one run (the Launch page) ----------------------------------------

ACTIVE = (RunStatus.queued, RunStatus.running)


def active_runs(session: Session, limit: int = 20) -> list[dict[str, Any]]:
    """Queued and running runs, newest first (stale ones are reaped first, as ``runs list`` does)."""
    reap_stale(session)
    rows = session.exec(select(Run.id, Run.name, Run.status, Run.strategy, Run.sweep_id)
                        .where(Run.status.in_(ACTIVE)).order_by(Run.created_at.desc(), Run.id).limit(limit)).all()
    return [{"id": rid, "name": name, "status": st.value, "strategy": strat, "sweep_id": sweep}
            for rid, name, st, strat, sweep in rows]


def run_progress(session: Session, run_id: str) -> dict[str, Any]:
    """Where a run is: status, steps done of planned, heartbeat age, loss so far.

    steps done = the run's recorded steps once it has ended, else the latest
    ``tokens`` sample (cumulative tokens) ÷ tokens per step, with tokens per step
    = micro-batch × grad-accum × dp × seq len; planned steps from its config.
    """
    reap_stale(session)
    run = get_run(session, run_id)
    per_step = (run.micro_batch or 0) * (run.grad_accum or 0) * (run.dp or 0) * (run.seq_len or 0)
    tokens_seen = session.exec(select(func.max(MetricSample.value))
                               .where(MetricSample.run_id == run.id, MetricSample.metric == "tokens")).one()
    planned = ((run.config or {}).get("train") or {}).get("steps")
    if run.steps is not None:
        done = run.steps
    elif tokens_seen and per_step:
        done = int(round(tokens_seen / per_step))
    else:
        done = 0
    now = utcnow()
    hb = run.heartbeat_at.replace(tzinfo=run.heartbeat_at.tzinfo or timezone.utc) if run.heartbeat_at else None
    loss = loss_curve(session, run.id)
    return {"id": run.id, "name": run.name, "status": run.status.value, "active": run.status in ACTIVE,
            "strategy": run.strategy, "world_size": run.world_size, "sweep_id": run.sweep_id,
            "steps_done": done, "steps_planned": planned,
            "heartbeat_age_s": (now - hb).total_seconds() if hb else None,
            "loss": loss, "last_loss": loss[-1]["value"] if loss else run.final_loss,
            "final_loss": run.final_loss, "tokens_per_s": run.tokens_per_s, "error": run.error,
            "exit_code": run.exit_code, "log_path": run.log_path, "cancellable": run.pgid is not None or run.status == RunStatus.queued}


# --- fleets (→ ledger/fleets.py, with a `trainledger fleet` command) ---------------

def list_fleets(session: Session) -> list[dict[str, Any]]:
    rows = session.exec(select(Fleet, Offer.name, Offer.kind).join(Offer, Offer.id == Fleet.offer_id).order_by(Fleet.name)).all()
    return [{"name": f.name, "offer": oname, "kind": getattr(kind, "value", kind), "node_count": f.node_count,
             "valid_from": f.valid_from, "valid_to": f.valid_to} for f, oname, kind in rows]


def save_fleet(session: Session, name: str, offer: str, node_count: int, valid_from: date,
               valid_to: Optional[date], *, original: Optional[str] = None) -> str:
    """Add a fleet, or edit the fleet named ``original``; validated first, one-line LedgerInputError.

    Returns "added" or "updated".
    """
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise LedgerInputError("fleet name: 1 to 100 characters")
    o = session.exec(select(Offer).where(Offer.name == offer)).first()
    if o is None:
        raise LedgerInputError(f"fleet offer: no offer named {offer!r}")
    if o.kind not in (OfferKind.own, OfferKind.rent_reserved):
        raise LedgerInputError(f"fleet offer: {offer!r} is {o.kind.value}; a fleet is held under an own or rent_reserved offer")
    if not isinstance(node_count, int) or node_count < 1:
        raise LedgerInputError(f"fleet nodes: must be a positive whole number, got {node_count!r}")
    if valid_to is not None and valid_to <= valid_from:
        raise LedgerInputError(f"fleet valid to: {valid_to} must be after valid from {valid_from} (valid to is exclusive)")
    row = session.exec(select(Fleet).where(Fleet.name == (original or name))).first() if original else None
    clash = session.exec(select(Fleet).where(Fleet.name == name)).first()
    if clash is not None and clash is not row:
        raise LedgerInputError(f"fleet name: a fleet named {name!r} already exists; pick it to edit it")
    if row is None:
        session.add(Fleet(name=name, offer_id=o.id, node_count=node_count, valid_from=valid_from, valid_to=valid_to))
        session.flush()
        return "added"
    row.name, row.offer_id, row.node_count, row.valid_from, row.valid_to = name, o.id, node_count, valid_from, valid_to
    session.flush()
    return "updated"


# --- offers form → the same validation as `trainledger pricing import` -------------

OFFER_FIELDS = {
    "rent_elastic": ["price_per_node_hour", "price_per_node_month", "billing_granularity_hours", "minimum_hours"],
    "rent_reserved": ["price_per_node_month"],
    "own": ["capex_per_node", "depreciation_months", "residual_value", "power_kw_load", "power_kw_idle",
            "electricity_price_per_kwh", "pue", "operations_per_node_month"],
}


def _toml_value(key: str, text: str) -> str:
    import json

    if key == "depreciation_months" and text.lstrip("-").isdigit():
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def offer_toml(values: dict[str, str]) -> str:
    """One ``[[offer]]`` table from form fields (empty fields left out), for ``presets.parse_pricing``.

    Money goes in as strings, which the pricing format accepts, so values stay exact.
    """
    lines = ["[[offer]]"]
    for key, text in values.items():
        text = (text or "").strip()
        if text:
            lines.append(f"{key} = {_toml_value(key, text)}")
    return "\n".join(lines) + "\n"


def offer_form_defaults(o: Optional[Offer], node_type_name: str) -> dict[str, str]:
    """Current values of an offer as form text (exact decimals, trailing zeros dropped)."""
    out: dict[str, str] = {}
    if o is None:
        return out
    for fields in OFFER_FIELDS.values():
        for f in fields:
            v = getattr(o, f)
            if v is None:
                continue
            out[f] = format(Decimal(v).normalize(), "f") if isinstance(v, Decimal) else str(v)
    out["currency"] = o.currency
    out["notes"] = o.notes or ""
    out["node_type"] = node_type_name
    return out


def offers_with_node_types(session: Session) -> list[tuple[Offer, str]]:
    return list(session.exec(select(Offer, NodeType.name).join(NodeType, NodeType.id == Offer.node_type_id).order_by(Offer.name)).all())


def node_types(session: Session) -> list[NodeType]:
    return list(session.exec(select(NodeType).order_by(NodeType.name)).all())


def offer_by_name(session: Session, name: str) -> Optional[Offer]:
    return session.exec(select(Offer).where(Offer.name == name)).first()
