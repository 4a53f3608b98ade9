"""Rent vs own with editable assumptions: pure functions on trainledger.money.rates.costs (no database).

:func:`assumed_offer` makes a detached copy of an offer with edited prices;
``trainledger.money.account.compare.compare_offers`` (what ``trainledger cost compare`` prints)
costs it, so the page tries out prices without saving them. The charts'
series below use the same ``trainledger.money.rates.costs`` functions.
"""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from trainledger.money.account.monthly import MonthlyReport
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_bounds

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


def peak_sizing(reports: list[MonthlyReport], node_type: str, own=None) -> dict[str, Any]:
    """Real usage over the given months: own the fleet vs rent elastic, month by month.

    ``own`` None (the ledger's prices): each month's owned cost is the monthly report's "if owned"
    figure for the node type (``monthly_report(own=...)``: the fleet held, else that month's peak,
    each charge period at its price and exchange rate, measured power where it was collected), the
    same number the monthly report shows. ``own`` an edited offer (assumptions on the page): the fleet
    is sized once, to the largest number of nodes in use at the same time in any of the months, and
    costed ``costs.fleet_month(own, peak × hours, node-hours, hours in month)`` (idle included, nominal
    power, the entered prices) over the hours elapsed in the report. Renting elastic costs what
    ``monthly_report`` billed for the same runs (each charge period at its rate).
    """
    per_month = [(rep, next((n for n in rep.node_types if n.node_type == node_type), None)) for rep in reports]
    peak = max((nt.peak_nodes for _, nt in per_month if nt is not None), default=0)
    rows = []
    own_total, own_known, rent_total, rent_known = costs.ZERO, True, costs.ZERO, True
    for rep, nt in per_month:
        node_hours = nt.node_hours if nt else costs.ZERO
        if own is None:
            own_cost, own_nodes = (nt.own_cost, nt.own_nodes) if nt else (costs.ZERO, 0)
        else:
            own_cost, own_nodes = _edited_own_cost(rep, own, peak, node_hours), peak
        elastic = nt.elastic_cost if nt else costs.ZERO
        own_known, rent_known = own_known and own_cost is not None, rent_known and elastic is not None
        own_total += own_cost or costs.ZERO
        rent_total += elastic or costs.ZERO
        label = f"{rep.month} {rep.period.label}" if rep.is_partial else rep.month
        capacity = Decimal(own_nodes or 0) * (rep.period.hours if rep.period is not None else _month_hours(rep))
        rows.append({"month": label, "node_hours": node_hours, "peak_nodes": nt.peak_nodes if nt else 0,
                     "own_nodes": own_nodes, "own_for_peak_cost": own_cost, "elastic_cost": elastic,
                     "time_utilization": costs.time_utilization(node_hours, capacity) if capacity else None})
    elastic_offers = sorted({nt.elastic_offer for _, nt in per_month if nt is not None and nt.elastic_offer})
    return {"node_type": node_type, "peak_nodes": peak, "months": rows,
            "own_for_peak_cost": own_total if own_known else None,
            "elastic_cost": rent_total if rent_known else None, "elastic_offers": elastic_offers}


def _month_hours(rep: MonthlyReport) -> Decimal:
    ms, me = month_bounds(rep.month, ZoneInfo(rep.timezone))
    return costs.hours_between(ms, me)


def _edited_own_cost(rep: MonthlyReport, own, peak: int, node_hours: Decimal) -> Decimal:
    """An edited own offer on ``peak`` nodes over the report's elapsed hours (nominal power)."""
    month_hours = _month_hours(rep)
    hours = rep.period.hours if rep.period is not None else month_hours  # to date while the month runs
    return costs.fleet_month(own, Decimal(peak) * hours, [node_hours] if node_hours else [], month_hours).total
