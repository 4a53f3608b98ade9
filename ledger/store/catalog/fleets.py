"""Fleets: the clusters held under fixed-cost offers (own, reserved), listed and edited from the CLI
(``trainledger fleet list|set|remove``) and the dashboard's Settings page."""

from __future__ import annotations

from datetime import date
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.models import Fleet, Offer, OfferKind


def list_fleets(session: Session) -> list[dict[str, Any]]:
    rows = session.exec(select(Fleet, Offer.name, Offer.kind).join(Offer, Offer.id == Fleet.offer_id).order_by(Fleet.name)).all()
    return [{"name": f.name, "offer": oname, "kind": getattr(kind, "value", kind), "node_count": f.node_count,
             "valid_from": f.valid_from, "valid_to": f.valid_to, "idle_share": f.idle_share or "none"} for f, oname, kind in rows]


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
        row = Fleet(name=name, offer_id=o.id, node_count=node_count, valid_from=valid_from, valid_to=valid_to)
        session.add(row)
        session.flush()
        record_change(session, "fleet.add", name, None, fleet_fields(session, row))
        return "added"
    before = fleet_fields(session, row)
    row.name, row.offer_id, row.node_count, row.valid_from, row.valid_to = name, o.id, node_count, valid_from, valid_to
    session.flush()
    record_change(session, "fleet.set", original, before, fleet_fields(session, row))
    return "updated"


def fleet_fields(session: Session, row: Fleet) -> dict[str, Any]:
    """A fleet as the audit log records it (its offer by name)."""
    offer = session.get(Offer, row.offer_id)
    return {"name": row.name, "offer": offer.name if offer else row.offer_id, "node_count": row.node_count,
            "valid_from": row.valid_from, "valid_to": row.valid_to, "idle_share": row.idle_share or "none"}


def remove_fleet(session: Session, name: str) -> None:
    """Delete the fleet called ``name`` (to stop holding one, give it a ``valid_to`` instead)."""
    row = session.exec(select(Fleet).where(Fleet.name == name)).first()
    if row is None:
        names = session.exec(select(Fleet.name).order_by(Fleet.name)).all()
        raise LedgerInputError(f"NAME: no fleet named {name!r}; fleets: {', '.join(names) or '(none)'}")
    before = fleet_fields(session, row)
    session.delete(row)
    session.flush()
    record_change(session, "fleet.remove", name, before, None)
