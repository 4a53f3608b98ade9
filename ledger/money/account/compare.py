"""Rent vs own: the figures behind ``trainledger cost compare``."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report, period_summary
from trainledger.money.rates import costs
from trainledger.money.rates.fx import at_list_prices
from trainledger.store.lookup import by_name
from trainledger.store.models import NodeType, Offer, OfferKind


def _offer(session: Session, nt: NodeType, name: Optional[str], kind: OfferKind, flag: str) -> Offer:
    q = select(Offer).where(Offer.node_type_id == nt.id, Offer.kind == kind)
    if name:
        found = session.exec(select(Offer).where(Offer.name == name)).first()
        if found is None or found.kind != kind or found.node_type_id != nt.id:
            names = [o.name for o in session.exec(q).all()]
            raise LedgerInputError(
                f"{flag}: {name!r} is not a {kind.value} offer for {nt.name}; use one of {', '.join(names) or '(none)'}")
        return found
    offers = sorted(session.exec(q).all(), key=lambda o: (o.source != "preset", o.name))
    if not offers:
        raise LedgerInputError(f"{flag}: node type {nt.name} has no {kind.value} offer; add one with `trainledger pricing import FILE.toml`")
    return offers[0]


def node_type_by_name(session: Session, name: str) -> NodeType:
    return by_name(session, NodeType, name, "--node-type", "node type")


def compare_offers(own, rent, utilization: Decimal, node_type: str) -> dict[str, Any]:
    """Own vs elastic rent for one node for one 730-hour month at time utilization u, for two given offers.

    own_per_node_month  = own cost at utilization u (idle power when idle)
    rent_per_node_month = u × elastic rent of a full node-month
    savings_pct         = |own − rent| ÷ the dearer × 100 (the cheaper option saves it)
    break_even_utilization = own at full load ÷ rent of a full node-month (SPEC §4)
    payback_months      = capex ÷ (rent avoided − owning's power and operations)

    The offers may be ledger rows or detached copies with edited prices (the
    dashboard's Rent vs own page costs assumptions without saving them).
    """
    u = Decimal(utilization)
    own_month = costs.own_cost_per_node_month(own, u)
    own_full = costs.own_cost_per_node_month(own, costs.ONE)
    rent_full = costs.elastic_full_month(rent)
    rent_month = rent_full * u
    cheaper, saving, pct = costs.savings(own_month, rent_month)
    u_star = costs.break_even_utilization(own_full, rent_full)
    u_star_power = costs.break_even_utilization_power_adjusted(own, rent_full)
    cash = own_month - costs.fixed_cost_per_node_month(own) + (own.operations_per_node_month or 0)
    payback = costs.payback_months(own.capex_per_node, rent_month, cash)
    return {
        "node_type": node_type,
        "currency": own.currency,
        "utilization": u,
        "own_offer": own.name,
        "rent_offer": rent.name,
        "own_per_node_month": own_month,
        "rent_per_node_month": rent_month,
        "cheaper": {"a": "own", "b": "rent", "equal": "equal"}[cheaper],
        "savings_per_node_month": saving,
        "savings_pct": pct,
        "break_even_utilization": u_star,
        "break_even_utilization_power_adjusted": u_star_power,
        "renting_always_cheaper": u_star >= 1,
        "payback_months": payback,
        "depreciation_months": own.depreciation_months,
        "pays_back_within_depreciation": payback is not None and payback <= own.depreciation_months,
    }


def compare_node_type(session: Session, node_type: str, utilization: Decimal = costs.ONE,
                      own: Optional[str] = None, rent: Optional[str] = None,
                      currency: Optional[str] = None) -> dict[str, Any]:
    """Own vs elastic rent for one node-month of ``node_type``: :func:`compare_offers` on the ledger's offers.

    ``own``/``rent`` name the offers; by default the node type's (presets first). Both at their list
    prices (newest version); with a presentation currency, converted at the rate in force now.
    """
    u = Decimal(utilization)
    if not (0 <= u <= 1):
        raise LedgerInputError(f"--utilization: must be between 0 and 1, got {u}")
    nt = node_type_by_name(session, node_type)
    own_o = _offer(session, nt, own, OfferKind.own, "--own")
    rent_o = _offer(session, nt, rent, OfferKind.rent_elastic, "--rent")
    own_o, rent_o = at_list_prices(session, [own_o, rent_o], currency)
    if own_o.currency != rent_o.currency:
        raise LedgerInputError(f"--rent: {rent_o.name} is priced in {rent_o.currency} but {own_o.name} in {own_o.currency}; compare offers in one currency")
    return compare_offers(own_o, rent_o, u, nt.name)


def compare_month(session: Session, month: str, own: Optional[str] = None, rent: Optional[str] = None,
                  reserved: Optional[str] = None, now: Optional[datetime] = None,
                  currency: Optional[str] = None) -> dict[str, Any]:
    """Own fleet vs elastic vs reserved for the ledger's real usage of ``month`` (to ``now`` while it runs)."""
    rep = monthly_report(session, month, own=own, rent=rent, reserved=reserved, lines=False, now=now, currency=currency)
    rows = []
    for n in rep.node_types:
        options = {k: v for k, v in (("own", n.own_cost), ("rent_elastic", n.elastic_cost),
                                     ("rent_reserved", n.reserved_cost)) if v is not None}
        cheapest = min(options, key=lambda k: (options[k], k)) if options else None
        dearest = max(options.values()) if options else None
        own_vs_rent = None
        if n.own_cost is not None and n.elastic_cost is not None:
            c, s, p = costs.savings(n.own_cost, n.elastic_cost)
            own_vs_rent = {"cheaper": {"a": "own", "b": "rent_elastic", "equal": "equal"}[c], "savings": s, "savings_pct": p}
        rows.append({
            "node_type": n.node_type, "node_hours": n.node_hours, "gpu_hours": n.gpu_hours,
            "peak_nodes": n.peak_nodes, "own_nodes": n.own_nodes, "own_nodes_from": n.own_nodes_from,
            "actual_cost": n.actual_cost, "idle_cost": n.idle_cost,
            "own_offer": n.own_offer, "own_cost": n.own_cost,
            "elastic_offer": n.elastic_offer, "elastic_cost": n.elastic_cost,
            "reserved_offer": n.reserved_offer, "reserved_cost": n.reserved_cost,
            "cheapest": cheapest, "cheapest_saves_vs_dearest": (dearest - options[cheapest]) if cheapest else None,
            "own_vs_rent": own_vs_rent,
        })
    s = rep.summary
    total = {k: s[k] for k in ("node_hours", "gpu_hours", "actual_cost", "idle_cost", "own_cost",
                               "elastic_cost", "reserved_cost", "cheapest_option", "time_utilization")}
    if s["own_cost"] is not None and s["elastic_cost"] is not None:
        c, sv, p = costs.savings(s["own_cost"], s["elastic_cost"])
        total["own_vs_rent"] = {"cheaper": {"a": "own", "b": "rent_elastic", "equal": "equal"}[c], "savings": sv, "savings_pct": p}
    out = {"month": rep.month, "timezone": rep.timezone, "currency": rep.currency}
    if rep.is_partial:  # a month that has not ended is compared to date
        out.update(period_summary(rep.period))
    return {**out, "node_types": rows, "total": total}
