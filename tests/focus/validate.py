"""Check a FOCUS dataset (CSV text or rows from Parquet) against the FOCUS 1.2 column rules.

The rules come from ``focus-1.2-columns.json`` (extracted from the specification's
column pages at tag v1.2 by ``extract_spec.py``): Column IDs, feature level, whether
nulls are allowed, data type and format, allowed values. The conditional rules
(which columns must or must not be null together, unit price × quantity = cost,
commitments) are written out below, each with the sentence of the specification
it checks. :func:`problems` returns every violation as a line (empty: valid).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Optional

import pycountry

SPEC = json.loads((Path(__file__).with_name("focus-1.2-columns.json")).read_text(encoding="utf-8"))
COLUMNS = {c["id"]: c for c in SPEC["columns"]}
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
NUMERIC = re.compile(r"^-?(\d+(\.\d+)?|\.\d+)(E-?\d+)?$")  # NumericFormat: no '+', no commas, E notation
UNIT = re.compile(r"^(\d+ )?[A-Z][A-Za-z]*(-[A-Z][a-z]+|/(\d+ )?[A-Z][a-z]+)?$")  # UnitFormat's three shapes
TOLERANCE = Decimal("1e-6")
#: unit price × PricingQuantity vs its cost: the export's stated precision, costs on 10 decimals (FOCUS leaves
#: precision to the data generator, NumericFormat); a split's allocated row is within one unit of the 10th
PRODUCT_TOLERANCE = Decimal("1e-10")


def _d(v: Any) -> Optional[Decimal]:
    if v is None or v == "":
        return None
    return Decimal(str(v))


def _cell_problems(col: str, v: Any, spec: dict) -> list[str]:
    """Data type, format and allowed values of one non-null cell."""
    out = []
    dtype, fmt = spec.get("data_type"), spec.get("value_format", "")
    if dtype == "Decimal":
        if not NUMERIC.match(str(v)):
            out.append(f"{col}: {v!r} is not in NumericFormat")
    elif dtype == "Date/Time":
        if not DATETIME.match(str(v)):
            out.append(f"{col}: {v!r} is not 'YYYY-MM-DDTHH:mm:ssZ'")
    elif dtype == "JSON":
        obj = json.loads(v)
        if not isinstance(obj, dict) or any(isinstance(x, (dict, list)) for x in obj.values()):
            out.append(f"{col}: {v!r} is not a JSON object of scalar values (KeyValueFormat)")
    if fmt.lower() == "allowed values" and v not in spec["allowed_values"]:
        out.append(f"{col}: {v!r} is not one of {spec['allowed_values']}")
    if fmt == "Currency Format" and pycountry.currencies.get(alpha_3=str(v)) is None:
        out.append(f"{col}: {v!r} is not an ISO 4217 code")
    if fmt.startswith("Unit Format") and not UNIT.match(str(v)):
        out.append(f"{col}: {v!r} does not follow UnitFormat")
    return out


def header_problems(header: list[str]) -> list[str]:
    out = []
    for c in header:
        if not c.startswith("x_") and c not in COLUMNS:
            out.append(f"{c}: not a FOCUS 1.2 column and not prefixed x_ (ColumnHandling)")
        if not re.fullmatch(r"(x_)?[A-Z][A-Za-z0-9]*", c):
            out.append(f"{c}: a Column ID is PascalCase, alphanumeric (ColumnHandling)")
    first_custom = next((i for i, c in enumerate(header) if c.startswith("x_")), len(header))
    if any(not c.startswith("x_") for c in header[first_custom:]):
        out.append("custom x_ columns SHOULD come after all FOCUS columns (ColumnHandling, Column Order)")
    for c, spec in COLUMNS.items():
        if spec.get("feature_level") == "Mandatory" and c not in header:
            out.append(f"{c}: a Mandatory column is missing")
    return out


def _row_rules(r: dict[str, Any]) -> list[str]:
    """The conditional requirements of the column pages, one row at a time."""
    out = []
    cat, status, cdi = r.get("ChargeCategory"), r.get("CommitmentDiscountStatus"), r.get("CommitmentDiscountId")
    usage_or_purchase = cat in ("Usage", "Purchase") and r.get("ChargeClass") != "Correction"

    def need(cond: bool, rule: str) -> None:
        if not cond:
            out.append(f"{r.get('ResourceId')} {r.get('ChargePeriodStart')}: {rule}")

    for c in ("PricingQuantity", "PricingUnit", "ListUnitPrice", "ContractedUnitPrice", "SkuId", "SkuPriceId",
              "PricingCategory"):
        need(not usage_or_purchase or r.get(c) is not None,
             f"{c} MUST NOT be null when ChargeCategory is \"Usage\" or \"Purchase\" and ChargeClass is not \"Correction\"")
    need((r.get("PricingUnit") is None) == (r.get("PricingQuantity") is None),
         "PricingUnit MUST be null when PricingQuantity is null / MUST NOT be null when it is not null")
    need((status is None) == (cdi is None) or (cdi is not None and cat != "Usage"),
         "CommitmentDiscountStatus MUST be null when CommitmentDiscountId is null; MUST NOT be null for Usage with an id")
    for c in ("CommitmentDiscountCategory", "CommitmentDiscountType"):
        need((r.get(c) is None) == (cdi is None), f"{c} MUST be null iff CommitmentDiscountId is null")
    need(cdi is not None or r.get("CommitmentDiscountName") is None, "CommitmentDiscountName MUST be null when CommitmentDiscountId is null")
    need((r.get("CommitmentDiscountQuantity") is not None) == (cdi is not None and usage_or_purchase),
         "CommitmentDiscountQuantity MUST NOT be null for Usage/Purchase with a commitment, MUST be null otherwise")
    need((r.get("CommitmentDiscountUnit") is None) == (r.get("CommitmentDiscountQuantity") is None),
         "CommitmentDiscountUnit MUST be null iff CommitmentDiscountQuantity is null")
    consumed = cat == "Usage" and status != "Unused"
    need((r.get("ConsumedQuantity") is not None) == consumed,
         "ConsumedQuantity MUST be null when ChargeCategory is not \"Usage\" or the commitment is \"Unused\"; not null otherwise")
    need((r.get("ConsumedUnit") is None) == (r.get("ConsumedQuantity") is None), "ConsumedUnit MUST be null iff ConsumedQuantity is")
    need((r.get("ResourceType") is None) == (r.get("ResourceId") is None), "ResourceType MUST be null iff ResourceId is null")
    # FOCUS 1.2, commitment discounts: the purchase of a commitment and its unused part are charges of the
    # commitment itself, whose resource is the commitment: ResourceId = CommitmentDiscountId
    need(cdi is None or not (cat == "Purchase" or status == "Unused") or r.get("ResourceId") == cdi,
         "ResourceId MUST be the CommitmentDiscountId on a commitment's Purchase and Unused rows")
    need(r.get("SkuId") is not None or r.get("SkuMeter") is None, "SkuMeter MUST be null when SkuId is null")
    need((r.get("SubAccountName") is None) == (r.get("SubAccountId") is None), "SubAccountName goes with SubAccountId")
    need(not (cat == "Purchase" and r.get("ChargeFrequency") == "Usage-Based"),
         "ChargeFrequency MUST NOT be \"Usage-Based\" when ChargeCategory is \"Purchase\"")
    need(cat != "Purchase" or _d(r.get("EffectiveCost")) == 0,
         "EffectiveCost MUST be 0 when ChargeCategory is \"Purchase\" and it covers future eligible charges")
    need(cdi is None or cat == "Purchase" or r.get("PricingCategory") == "Committed",
         "PricingCategory MUST be \"Committed\" when the charge is subject to a commitment discount")
    for unit, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):
        if r.get(unit) is not None and r.get("PricingQuantity") is not None and r.get(cost) is not None:
            need(abs(_d(r[unit]) * _d(r["PricingQuantity"]) - _d(r[cost])) <= PRODUCT_TOLERANCE,
                 f"{unit} × PricingQuantity MUST match {cost}")
            need(_d(r[unit]) >= 0, f"{unit} MUST be a non-negative decimal value")
    periods = [r.get(c) or "" for c in ("BillingPeriodStart", "ChargePeriodStart", "ChargePeriodEnd", "BillingPeriodEnd")]
    need(periods[1] < periods[2], "ChargePeriodStart is before ChargePeriodEnd (exclusive)")
    need(periods[0] <= periods[1] and periods[2] <= periods[3], "the charge period lies in the billing period")
    return out


def problems(header: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """Every violation of the FOCUS 1.2 column rules by this dataset ('' cells are null)."""
    out = header_problems(header)
    rows = [{k: (None if v == "" else v) for k, v in r.items()} for r in rows]
    for i, r in enumerate(rows, start=2):
        for c in header:
            spec = COLUMNS.get(c)
            if spec is None:
                continue
            v = r.get(c)
            if v is None:
                if spec.get("allows_nulls") == "False":
                    out.append(f"row {i}: {c} MUST NOT be null")
                continue
            try:
                out += [f"row {i}: {p}" for p in _cell_problems(c, v, spec)]
            except (ValueError, InvalidOperation) as exc:
                out.append(f"row {i}: {c}: {v!r}: {exc}")
        out += [f"row {i}: {p}" for p in _row_rules(r)]
    # For a given CommitmentDiscountId: "The sum of EffectiveCost where ChargeCategory is "Usage" MUST equal the
    # sum of BilledCost where ChargeCategory is "Purchase"."
    usage, purchase = defaultdict(Decimal), defaultdict(Decimal)
    for r in rows:
        if r.get("CommitmentDiscountId"):
            if r.get("ChargeCategory") == "Usage":
                usage[r["CommitmentDiscountId"]] += _d(r.get("EffectiveCost")) or Decimal(0)
            elif r.get("ChargeCategory") == "Purchase":
                purchase[r["CommitmentDiscountId"]] += _d(r.get("BilledCost")) or Decimal(0)
    for cdi in sorted(set(usage) | set(purchase)):
        if abs(usage[cdi] - purchase[cdi]) > TOLERANCE:
            out.append(f"{cdi}: Σ EffectiveCost of Usage {usage[cdi]} != Σ BilledCost of Purchase {purchase[cdi]}")
    return out
