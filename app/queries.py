"""Ledger reads and writes the dashboard needs that ledger/ does not offer yet.

Each is a thin function on the ledger's models and cost engine (no figure is
computed differently from the CLI); they are candidates to move into ledger/
(noted per function). Aggregates run in SQL; nothing loads a whole table of runs.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any, Optional

from sqlalchemy import func
from sqlmodel import Session, select

from ledger import costs
from ledger.accounting import month_of
from ledger.errors import LedgerInputError
from ledger.models import Fleet, MetricSample, NodeType, Offer, OfferKind, Project, Run, User
from ledger.settings import display_timezone
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


# --- cost of one run under every offer (→ ledger/runs.py; show_run should call it) ---

def cost_under_offers(offers: list, nodes: int, duration_hours: Decimal) -> list[dict[str, Any]]:
    """A run of ``nodes`` × ``duration_hours`` costed under each offer, exactly as ``show_run`` does.

    rent_elastic: nodes × billed hours × hourly rate;
    own / rent_reserved: node-hours × full-use rate per node-hour (730 h month).
    """
    nh = costs.node_hours(nodes, duration_hours)
    out = []
    for o in sorted(offers, key=lambda o: o.name):
        kind = getattr(o.kind, "value", o.kind)
        if kind == OfferKind.rent_elastic.value:
            c = costs.elastic_run_cost(o, nodes, duration_hours)
            basis = "billed node-hours × hourly rate"
        else:
            c = nh * costs.busy_rate_per_node_hour(o)
            basis = "node-hours × full-use rate per node-hour (730 h month)"
        out.append({"offer": o.name, "kind": kind, "currency": o.currency, "cost": c, "basis": basis})
    return out


# --- sweeps (→ ledger/runs.py) ----------------------------------------------------

def sweeps(session: Session, limit: int = SWEEP_LIMIT) -> list[dict[str, Any]]:
    """Sweeps (runs sharing a sweep id), newest first, aggregated in SQL."""
    rows = session.exec(
        select(Run.sweep_id, func.count(Run.id), func.min(Run.started_at), func.max(Run.nodes))
        .where(Run.sweep_id.is_not(None))
        .group_by(Run.sweep_id)
        .order_by(func.max(Run.created_at).desc(), Run.sweep_id)
        .limit(limit)).all()
    tz = display_timezone(session)
    return [{"sweep_id": sid, "runs": n, "started_at": started.astimezone(tz) if started else None, "nodes": nodes}
            for sid, n, started, nodes in rows]


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
