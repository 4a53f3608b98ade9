"""FOCUS 1.3 split cost allocation: a fleet's shared idle as allocated charges (``report focus --focus-version 1.3``).

FOCUS 1.3 (Data Generator-Calculated Split Cost Allocation) splits an *origin charge* into *allocated
charges*. Here the origin charge is a fleet's ``Unused`` row (its idle in one charge period) and, when
its fleet shares idle (:mod:`trainledger.money.allocation.idle_share`), it is replaced by one row per project taking a
share, plus one for any part left unshared (``AllocatedResourceId`` null: the unallocated portion).

As the attribute requires: the allocated rows' aggregatable metrics (EffectiveCost, ListCost,
ContractedCost, BilledCost, PricingQuantity, CommitmentDiscountQuantity) add up to the origin's exactly
(apportioned on the file's 10 decimals), every dimension and unit price is the origin's, and
each row keeps FOCUS's column rule "the product of ListUnitPrice and PricingQuantity MUST match the
ListCost" (and the contracted pair): the quantities are apportioned by the same weights as the cost
(the shares' amounts), and ListCost / ContractedCost are the origin's unit price × the row's quantity,
rounded by largest remainder so they add up to the origin's (each within one unit of the 10th decimal
of the product). EffectiveCost is apportioned by the amounts (the chargeback statements' shares). And
``AllocatedMethodDetails`` carries ``{"Elements": [{"AllocatedRatio": …}]}`` whose ratios add up to 1
exactly per origin charge. ``AllocatedMethodId`` is ``trainledger/idle-share/<policy>``; docs/MONEY.md
documents each method.
"""

from __future__ import annotations

import json
from decimal import Context, Decimal
from typing import Any

from trainledger.money.allocation.idle_share import NO_PROJECT, IdleCharge, IdleSharing, ratios
from trainledger.money.rates.costs import ZERO, round_preserving_sum

ALLOCATION_COLUMNS = ["AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId", "AllocatedResourceName",
                      "AllocatedTags"]
QUANTITIES = ("PricingQuantity", "CommitmentDiscountQuantity")
#: (unit price, the cost FOCUS defines as unit price × PricingQuantity)
PRICED = (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost"))
WIDE = Context(prec=60)  # products and grids of the file's values without rounding at 28 digits


def _json(obj: dict[str, Any]) -> str:
    """JSON text with Decimal values as plain numbers (no exponent, no float rounding)."""
    parts = []
    for k, v in obj.items():
        if isinstance(v, Decimal):
            parts.append(f"{json.dumps(k)}:{format(v.normalize(), 'f') if v else '0'}")
        elif isinstance(v, list):
            parts.append(f"{json.dumps(k)}:[{','.join(_json(x) for x in v)}]")
        else:
            parts.append(f"{json.dumps(k)}:{json.dumps(v, ensure_ascii=False)}")
    return "{" + ",".join(parts) + "}"


def _element(kind: str, ratio: Decimal, basis_unit: str | None, basis: Decimal | None, n: int) -> dict[str, Any]:
    el: dict[str, Any] = {"AllocatedRatio": ratio}
    if kind == "proportional":
        el.update(UsageUnit="Node-Hours", UsageQuantity=basis)
    elif kind == "even":
        el["x_Projects"] = n
    elif kind == "weights":
        el["x_Weight"] = basis
    el["x_IdleSharePolicy"] = kind
    return el


def split_rows(rows: list[dict[str, Any]], sharing: IdleSharing, places: Decimal) -> list[dict[str, Any]]:
    """``rows`` with each shared origin charge (a fleet's Unused row) replaced by its allocated charges."""
    by_origin: dict[tuple, list[IdleCharge]] = {}
    for c in sharing.charges:
        by_origin.setdefault((f"trainledger/commitments/{c.offer.name}", c.start), []).append(c)
    out: list[dict[str, Any]] = []
    for row in rows:
        key = (row["ResourceId"], row["ChargePeriodStart"])
        charges = by_origin.get(key) if row["CommitmentDiscountStatus"] == "Unused" else None
        if not charges or not any(c.shares for c in charges):
            out.append(row)
            continue
        out += _allocated(row, charges, places)
    return out


def _allocated(origin: dict[str, Any], charges: list[IdleCharge], places: Decimal) -> list[dict[str, Any]]:
    """The allocated rows of one origin: one per (charge part, project) and one per unshared part."""
    parts: list[tuple[Decimal, Decimal, dict[str, Any], str, str | None]] = []  # amount, node-hours, element, method, project
    for c in charges:
        kind = c.policy.split(":", 1)[0]
        for s in c.shares:
            parts.append((s.amount, c.idle_node_hours * s.ratio, _element(kind, s.ratio, s.basis_unit, s.basis_quantity,
                                                                           len(c.shares)), c.method_id, s.project))
        if c.unshared or not c.shares:
            parts.append((c.unshared, c.idle_node_hours if not c.shares else ZERO,
                          {"AllocatedRatio": ZERO, "x_IdleSharePolicy": "none"}, "trainledger/idle-share/none", None))
    amounts = [p[0] for p in parts]
    total = sum(amounts, ZERO)
    weights = amounts if total > 0 else [p[1] for p in parts]
    shares = ratios(weights) if sum(weights, ZERO) > 0 else [Decimal(1)] + [ZERO] * (len(parts) - 1)
    if len(charges) == 1 and not charges[0].unshared:  # the share's own ratio, as the statements show it
        shares = [p[2]["AllocatedRatio"] for p in parts]
    split = {q: _apportion(origin[q], weights, places) for q in QUANTITIES}  # by the cost's own weights
    split["EffectiveCost"] = _apportion(origin["EffectiveCost"], amounts, places)
    for unit, cost in PRICED:
        split[cost] = _priced(origin[cost], origin[unit], split["PricingQuantity"], amounts, places)
    out = []
    for i, (_, _, element, method, project) in enumerate(parts):
        row = dict(origin)
        for col, values in split.items():
            row[col] = values[i]
        row["BilledCost"] = ZERO
        element["AllocatedRatio"] = shares[i]
        row["AllocatedMethodId"] = method
        row["AllocatedMethodDetails"] = _json({"Elements": [element]})
        if project is not None:
            row["AllocatedResourceId"] = ("trainledger/no-project" if project == NO_PROJECT
                                          else f"trainledger/projects/{project}")
            row["AllocatedResourceName"] = project
            row["AllocatedTags"] = None if project == NO_PROJECT else _json({"trainledger/project": project})
        out.append(row)
    return out


def _priced(total: Any, unit: Any, quantities: list[Decimal], amounts: list[Decimal], places: Decimal) -> list[Decimal]:
    """An origin's ListCost (or ContractedCost) split as unit price × each row's quantity, rounded by largest remainder
    to add up to the origin's (without a unit price or quantity: apportioned by ``amounts``)."""
    if total is None or unit is None or None in quantities:
        return _apportion(total, amounts, places)
    raw = [WIDE.multiply(Decimal(unit), q) for q in quantities]
    return round_preserving_sum(raw, quantum=places, total=WIDE.quantize(Decimal(total), places))


def _apportion(total: Any, parts: list[Decimal], places: Decimal) -> list[Decimal]:
    """``total`` (an origin's metric) apportioned by ``parts`` on the file's grid: the written values add up to the
    written origin exactly."""
    if total is None:
        return [None] * len(parts)
    target = Decimal(total).quantize(places)
    weight = sum(parts, ZERO)
    raw = [target * p / weight for p in parts] if weight else [target] + [ZERO] * (len(parts) - 1)
    return round_preserving_sum(raw, quantum=places, total=target)
