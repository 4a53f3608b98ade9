"""Rent vs own with editable assumptions: pure functions on ledger.money.costs (no database).

:func:`assumed_offer` makes a detached copy of an offer with edited prices;
``ledger.money.compare.compare_offers`` (what ``trainledger cost compare`` prints)
costs it, so the page tries out prices without saving them. The charts'
series below use the same ``ledger.money.costs`` functions.
"""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from ledger.money import costs
from ledger.money.monthly import MonthlyReport
from ledger.money.months import month_bounds

OFFER_ATTRS = ("name", "kind", "currency", "node_type_id", "price_per_node_hour", "price_per_node_month",
               "billing_granularity_hours", "minimum_hours", "capex_per_node", "depreciation_months",
               "residual_value", "power_kw_load", "power_kw_idle", "electricity_price_per_kwh", "pue",
               "operations_per_node_month")


def _kind(offer) -> str:
    return getattr(offer.kind, "value", offer.kind)


def assumed_offer(offer, **overrides) -> SimpleNamespace:
    """A detached copy of an offer with some fields replaced (nothing is written to the ledger)."""
    values = {a: getattr(offer, a, None) for a in OFFER_ATTRS}
    values["kind"] = _kind(offer)
    for k, v in overrides.items():
        if k not in OFFER_ATTRS:
            raise KeyError(k)
        values[k] = v
    return SimpleNamespace(**values)


def utilization_grid(step: Decimal = Decimal("0.05")) -> list[Decimal]:
    n = int(costs.ONE / step)
    return [step * i for i in range(n + 1)]


def cost_curve(offers: Iterable, grid: Optional[list[Decimal]] = None) -> list[dict[str, Any]]:
    """Cost of one node for a 730-hour month vs time utilization, per offer (the break-even chart).

    own: own_cost_per_node_month(u); rent_elastic: u × a full node-month;
    rent_reserved: the monthly price, used or not.
    """
    grid = grid or utilization_grid()
    rows = []
    for o in offers:
        kind = _kind(o)
        for u in grid:
            if kind == "own":
                c = costs.own_cost_per_node_month(o, u)
            elif kind == "rent_elastic":
                c = costs.elastic_full_month(o) * u
            else:
                c = costs.fixed_cost_per_node_month(o)
            rows.append({"utilization": float(u), "offer": f"{o.name} ({kind})", "cost": float(costs.cents(c))})
    return rows


def own_cash_per_node_month(own, utilization: Decimal) -> Decimal:
    """Owning's running cash cost per node-month: power + operations (depreciation is the capex itself)."""
    return (costs.own_cost_per_node_month(own, utilization) - costs.fixed_cost_per_node_month(own)
            + (own.operations_per_node_month or 0))


def cumulative_costs(own, rent, utilization: Decimal, nodes: int, months: int = 36) -> list[dict[str, Any]]:
    """Cumulative cash spent after m months: buy (capex up front + power + operations) vs rent elastic.

    own(m)  = nodes × (capex + m × (power + operations at u))
    rent(m) = nodes × m × u × a full node-month of rent
    The lines cross at the payback month (``costs.payback_months``).
    """
    u = Decimal(utilization)
    cash = own_cash_per_node_month(own, u)
    rent_month = costs.elastic_full_month(rent) * u
    capex = Decimal(own.capex_per_node or 0)
    rows = []
    for m in range(months + 1):
        rows.append({"month": m, "option": f"buy ({own.name})", "cost": float(costs.cents(nodes * (capex + m * cash)))})
        rows.append({"month": m, "option": f"rent elastic ({rent.name})", "cost": float(costs.cents(nodes * m * rent_month))})
    return rows


def peak_sizing(reports: list[MonthlyReport], node_type: str, own) -> dict[str, Any]:
    """Real usage over the given months: own enough nodes for the peak vs rent elastic.

    The owned fleet is sized once, to the largest number of nodes in use at the
    same time in any of the months; each month it costs
    ``costs.fleet_month(own, peak × hours, node-hours, hours in month)`` (idle included),
    over the hours of the month elapsed in the report (all of them once it has ended),
    so that a month to date compares owning and renting over the same days.
    Renting elastic costs what ``monthly_report`` billed for the same runs.
    """
    peak = 0
    per_month = []
    for rep in reports:
        nt = next((n for n in rep.node_types if n.node_type == node_type), None)
        per_month.append((rep, nt))
        if nt is not None:
            peak = max(peak, nt.peak_nodes)
    rows = []
    own_total = rent_total = costs.ZERO
    rent_known = True
    for rep, nt in per_month:
        ms, me = month_bounds(rep.month, ZoneInfo(rep.timezone))
        month_hours = costs.hours_between(ms, me)
        hours = rep.period.hours if rep.period is not None else month_hours  # to date while the month runs
        node_hours = nt.node_hours if nt else costs.ZERO
        own_cost = costs.fleet_month(own, Decimal(peak) * hours, [node_hours] if node_hours else [], month_hours).total
        elastic = nt.elastic_cost if nt else costs.ZERO
        if elastic is None:
            rent_known = False
        own_total += own_cost
        rent_total += elastic or costs.ZERO
        label = f"{rep.month} {rep.period.label}" if rep.is_partial else rep.month
        rows.append({"month": label, "node_hours": node_hours, "peak_nodes": nt.peak_nodes if nt else 0,
                     "own_for_peak_cost": own_cost, "elastic_cost": elastic,
                     "time_utilization": costs.time_utilization(node_hours, Decimal(peak) * hours) if peak else None})
    elastic_offers = sorted({nt.elastic_offer for _, nt in per_month if nt is not None and nt.elastic_offer})
    return {"node_type": node_type, "peak_nodes": peak, "months": rows, "own_for_peak_cost": own_total,
            "elastic_cost": rent_total if rent_known else None, "elastic_offers": elastic_offers}
