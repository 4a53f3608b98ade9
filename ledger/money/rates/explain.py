"""Plain-language explanations of how a run was costed, for the figures where they stand (issue #18)."""

from __future__ import annotations

from typing import Optional

#: how each kind of offer turns hours into money (trainledger.money.rates.costs)
BASIS = {
    "own": "owned: amortized capex + energy + ops of the fleet's month, shared by node-hours (idle is its own line)",
    "rent_reserved": "rented reserved: the reservation's price per node-month for the fleet, shared by node-hours",
    "rent_elastic": "rented elastic: price per node-hour × billed node-hours (rounded up to the billing granularity)",
}


def costed_under(offers: list[str], kind: Optional[str], recorded: bool) -> str:
    """Which offer a run was costed under and why: ``recorded`` (the run's own offer) or the node type's default
    (its owned or reserved fleet when one is held, else elastic rent: ``trainledger.money.rates.catalog.default_offer``)."""
    if not offers:
        return "Not costed yet: the run has not started."
    names = ", ".join(offers)
    why = ("the offer recorded on the run" if recorded else
           "the node type's default offer: the run records none, so it draws on the node type's owned or reserved "
           "fleet when one is held that month, else elastic rent")
    basis = BASIS.get(kind, "")
    return f"Costed under {names}: {why}. {basis[:1].upper() + basis[1:]}."


WHAT_IF = {
    "own": "owned: the run's node-hours × the full-use rate per node-hour (capex + energy + ops, 730 h month)",
    "rent_reserved": "reserved: the run's node-hours × the full-use rate per node-hour (730 h month)",
    "rent_elastic": "rented: price per node-hour × billed node-hours",
}


def differs(kind: str, actual_kind: Optional[str]) -> str:
    """One line: why the cost under an offer of ``kind`` (``registry.cost_under_offers``) differs from the actual
    cost under an offer of ``actual_kind`` (the monthly report's: fleets allocated with their idle apart)."""
    actual = {"own": "owned fleet's month shared by node-hours",
              "rent_reserved": "reserved fleet's month shared by node-hours",
              "rent_elastic": "billed node-hours × hourly rate"}.get(actual_kind or "", "not costed")
    return f"{WHAT_IF.get(kind, kind)}; actual: {actual}"
