"""Views of the catalog for ``trainledger pricing list|show|history``, and price edits (``pricing set``).

A price edit adds a version (:mod:`trainledger.store.catalog.prices`); one that starts in the
past rewrites months already reported: :func:`confirm_versions` names them and
refuses unless the caller confirmed (``--retroactive``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_of, months_between
from trainledger.store.catalog import prices
from trainledger.store.catalog.presets import OfferSpec, PricingFile, _one_line, apply_pricing
from trainledger.store.models import PRICE_FIELDS, NodeType, Offer, OfferKind
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow


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
        dump = o.model_dump(exclude={"id", "node_type_id"})
        order = ["name", "kind", "currency", *PRICE_FIELDS, "source", "notes"]
        data = {k: dump[k] for k in order if dump.get(k) is not None}
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


# --- price edits -----------------------------------------------------------------------

def changed_months(plan: prices.VersionPlan, tz) -> list[str]:
    """The calendar months (display time zone) whose figures a retroactive version rewrites."""
    if not plan.retroactive:
        return []
    last = max(plan.valid_from, plan.retroactive_until - timedelta(microseconds=1))
    return months_between(month_of(plan.valid_from, tz), month_of(last, tz))


def confirm_versions(session: Session, plans: list[prices.VersionPlan], retroactive: bool) -> list[dict[str, Any]]:
    """The versions added, each with the months it rewrites; refuses past ones without ``retroactive``."""
    tz = display_timezone(session)
    out = [{"offer": p.offer.name, "valid_from": p.valid_from, "months_changed": changed_months(p, tz)} for p in plans]
    past = [v for v in out if v["months_changed"]]
    if past and not retroactive:
        months = sorted({m for v in past for m in v["months_changed"]})
        first = min(v["valid_from"] for v in past)
        raise LedgerInputError(
            f"--from: {first.astimezone(tz):%Y-%m-%d %H:%M} ({tz}) is in the past: the new price would rewrite "
            f"{', '.join(months)}; pass --retroactive to confirm, or leave --from out to change it from now")
    return out


def set_prices(session: Session, name: str, assignments: list[str], valid_from: Optional[datetime],
               plans: list[prices.VersionPlan], note: str = "") -> None:
    """``pricing set NAME FIELD=VALUE ...``: the version in force at ``valid_from`` (None: now) with the
    fields changed, as a new version; validated as ``pricing import`` validates an offer."""
    o = prices.offer_named(session, name)
    changes = _assignments(assignments)
    at = valid_from or utcnow()
    history = prices.versions(session, o.id)
    base = max((v for v in history if v.valid_from <= at), key=lambda v: v.valid_from, default=None)
    values = prices.price_values(base if base is not None else (history[0] if history else o))
    values.update(changes)
    entry = {"name": o.name, "node_type": session.get(NodeType, o.node_type_id).name, "kind": o.kind.value,
             "currency": o.currency, "notes": o.notes, **{k: v for k, v in values.items() if v is not None}}
    try:
        spec = PricingFile(offer=[OfferSpec.model_validate(entry)])
    except Exception as exc:  # pydantic ValidationError: one line naming the field
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):
            raise LedgerInputError(_one_line(exc, f"offer {o.name!r}", {"offer": [entry]})) from None
        raise
    apply_pricing(session, spec, source="user", replace=True, valid_from=valid_from, retroactive=True, plans=plans,
                  note=note)


def _assignments(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in PRICE_FIELDS:
            raise LedgerInputError(f"FIELD=VALUE: expected one of {', '.join(PRICE_FIELDS)} as FIELD=VALUE, got {item!r}")
        value = value.strip()
        out[key] = None if value.lower() in ("", "none") else value
    if not out:
        raise LedgerInputError("FIELD=VALUE: give at least one price, e.g. price_per_node_month=4380")
    return out
