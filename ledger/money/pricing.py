"""Views of the catalog for ``trainledger pricing list|show``."""

from __future__ import annotations

from typing import Any, Optional

from sqlmodel import Session, select

from ledger.errors import LedgerInputError
from ledger.money import costs
from ledger.store.models import NodeType, Offer, OfferKind


def _offer_row(o: Offer, nt: NodeType) -> dict[str, Any]:
    row: dict[str, Any] = {"name": o.name, "node_type": nt.name, "kind": o.kind.value, "currency": o.currency}
    if o.kind == OfferKind.own:
        row["hourly_rate"] = costs.busy_rate_per_node_hour(o)
        row["full_month_cost"] = costs.own_cost_per_node_month(o)
    elif o.kind == OfferKind.rent_elastic:
        row["hourly_rate"] = costs.hourly_rate(o)
        row["full_month_cost"] = costs.elastic_full_month(o)
    else:
        row["hourly_rate"] = costs.fixed_cost_per_node_month(o) / costs.HOURS_PER_MONTH
        row["full_month_cost"] = costs.fixed_cost_per_node_month(o)
    row["source"] = o.source
    return row


def list_pricing(session: Session) -> dict[str, Any]:
    nts = {n.id: n for n in session.exec(select(NodeType).order_by(NodeType.name)).all()}
    offers = session.exec(select(Offer).order_by(Offer.name)).all()
    return {"node_types": [n.model_dump(exclude={"id"}) for n in nts.values()],
            "offers": [_offer_row(o, nts[o.node_type_id]) for o in offers]}


def show_pricing(session: Session, name: str) -> dict[str, Any]:
    o = session.exec(select(Offer).where(Offer.name == name)).first()
    if o is not None:
        nt = session.get(NodeType, o.node_type_id)
        data = {k: v for k, v in o.model_dump(exclude={"id", "node_type_id"}).items() if v is not None}
        data["node_type"] = nt.name
        derived = _offer_row(o, nt)
        data["hourly_rate"] = derived["hourly_rate"]
        data["full_month_cost"] = derived["full_month_cost"]
        return data
    nt = session.exec(select(NodeType).where(NodeType.name == name)).first()
    if nt is not None:
        return nt.model_dump(exclude={"id"})
    names = session.exec(select(Offer.name)).all() + session.exec(select(NodeType.name)).all()
    raise LedgerInputError(f"NAME: no offer or node type {name!r}; use one of {', '.join(sorted(names))}")


def offers_with_node_types(session: Session) -> list[tuple[Offer, str]]:
    return list(session.exec(select(Offer, NodeType.name).join(NodeType, NodeType.id == Offer.node_type_id).order_by(Offer.name)).all())


def node_types(session: Session) -> list[NodeType]:
    return list(session.exec(select(NodeType).order_by(NodeType.name)).all())


def offer_by_name(session: Session, name: str) -> Optional[Offer]:
    return session.exec(select(Offer).where(Offer.name == name)).first()
