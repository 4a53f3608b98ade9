"""The FOCUS export: ``trainledger report focus --month YYYY-MM --format csv|parquet -o FILE``.

FinOps Open Cost and Usage Specification **1.2** columns (the release in
FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec, tag v1.2), plus the FOCUS 1.3
``ServiceProviderName`` and ``HostProviderName`` as custom ``x_`` columns (a dataset
declared 1.2 prefixes every column that is not a 1.2 column), plus the training figures as
``x_`` columns. Rows, for one billing period (a calendar month in the display
time zone; the FOCUS date-times are UTC) and each charge period in it (the month
cut where a price, exchange rate or carbon intensity takes effect):

* **a run on elastic rent**: ``Usage``, billed node-hours × the hourly rate in force;
* **a run on an owned or reserved fleet**: ``Usage`` drawn from the fleet, a commitment
  (``CommitmentDiscountStatus`` ``Used``): BilledCost 0, EffectiveCost = its allocation;
* **the fleet's idle node-hours**: ``Usage``, ``Unused`` (EffectiveCost = idle cost);
* **the fleet itself**: ``Purchase``, ``Recurring``: BilledCost = the fleet's cost of the
  period, EffectiveCost 0. For each fleet, Σ EffectiveCost of its Usage rows = its
  Purchase's BilledCost (the allocation identity, as FOCUS requires of commitments).

So Σ BilledCost = Σ EffectiveCost = the monthly report's actual cost (``report monthly``).
Money and quantities keep 10 decimals, unit prices 20 (:data:`PRICE_PLACES`): FOCUS leaves precision to
the data generator, and this is the one the export states. ListCost and ContractedCost are what FOCUS
defines them as, the product of the row's unit price and PricingQuantity as written, to 10 decimals
(:func:`_priced`; an allocated row of a split, within one unit of the 10th decimal, so the split adds up
to its origin), so ``ListUnitPrice × PricingQuantity = ListCost`` holds on every row of the file;
EffectiveCost and BilledCost are the ledger's own figures. Money is in the presented currency
(``--currency``). See docs/FOCUS.md for every column, and those left out.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import FleetCharge, RunSlice, month_charges
from trainledger.money.rates.costs import ZERO
from trainledger.reports.export import LFWriter, guard_formula
from trainledger.reports.focus_allocation import PRICED, WIDE

FOCUS_VERSION = "1.2"  # the default
FOCUS_VERSIONS = ("1.2", "1.3")
PLACES = Decimal("1e-10")
#: unit prices keep 20 decimals: × a quantity of up to 10¹⁰ node-hours they move a cost by under 10⁻¹⁰
PRICE_PLACES = Decimal("1e-20")
UNIT = "Node-Hours"
SERVICE = {"ServiceCategory": "Compute", "ServiceSubcategory": "Virtual Machines", "ServiceName": "GPU nodes"}
ACCOUNT = {"BillingAccountId": "trainledger/ledger", "BillingAccountName": "trainledger ledger"}
COMMITMENT_TYPE = {"own": "Owned fleet", "rent_reserved": "Reserved fleet"}

#: FOCUS columns (alphabetical), then the 1.3 provider columns, then the x_ training columns
FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd", "BillingPeriodStart",
    "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart",
    "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus", "CommitmentDiscountType", "CommitmentDiscountUnit", "ConsumedQuantity", "ConsumedUnit",
    "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice",
    "PricingCategory", "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ResourceId", "ResourceName",
    "ResourceType", "ServiceCategory", "ServiceName", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceId",
    "SubAccountId", "SubAccountName", "Tags",
]
#: FOCUS 1.3 columns ahead of the release: in a dataset declared 1.2 they are custom columns, so x_-prefixed
FOCUS_13_COLUMNS = ["x_HostProviderName", "x_ServiceProviderName"]
EXTENSION_COLUMNS = ["x_RunId", "x_RunName", "x_RunStatus", "x_NodeType", "x_Nodes", "x_GpuHours", "x_Tokens", "x_MFU",
                     "x_GpuUtil", "x_EnergyKWh", "x_CO2eKg", "x_CO2eBasis", "x_OfferKind", "x_PriceVersion",
                     "x_OfferCurrency", "x_FxRate", "x_CostFinality", "x_GoodputCost", "x_BadputCost"]
COLUMNS = FOCUS_COLUMNS + FOCUS_13_COLUMNS + EXTENSION_COLUMNS


def on_grid(value: Any, places: Decimal) -> Decimal:
    """``value`` on the file's grid (``places``), exact to 60 digits on the way."""
    return WIDE.quantize(Decimal(value), places)


def places_of(column: str) -> Decimal:
    """The decimals a Decimal column is written with: 20 for the unit prices, else 10."""
    return PRICE_PLACES if column in UNIT_PRICE_COLUMNS else PLACES


def columns(version: str) -> list[str]:
    """The dataset's columns: 1.2 as above; 1.3 adds the allocation columns and the provider names as FOCUS
    columns (in alphabetical order among them), then the x_ training columns."""
    if version == "1.2":
        return COLUMNS
    from trainledger.reports.focus_allocation import ALLOCATION_COLUMNS

    return sorted(FOCUS_COLUMNS + ALLOCATION_COLUMNS + [c[2:] for c in FOCUS_13_COLUMNS]) + EXTENSION_COLUMNS
DECIMAL_COLUMNS = {"BilledCost", "CommitmentDiscountQuantity", "ConsumedQuantity", "ContractedCost", "ContractedUnitPrice",
                   "EffectiveCost", "ListCost", "ListUnitPrice", "PricingQuantity", "x_GpuHours", "x_EnergyKWh",
                   "x_CO2eKg", "x_FxRate", "x_GoodputCost", "x_BadputCost"}
UNIT_PRICE_COLUMNS = {unit for unit, _ in PRICED}
INTEGER_COLUMNS = {"x_Nodes", "x_Tokens", "x_PriceVersion"}
FLOAT_COLUMNS = {"x_MFU", "x_GpuUtil"}
DATETIME_COLUMNS = {"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"}


@dataclass
class FocusExport:
    """The rows of one month, and the monthly report they reconcile with."""

    month: str
    currency: str
    rows: list[dict[str, Any]]
    actual_cost: Decimal  # the monthly report's (unrounded)
    version: str = FOCUS_VERSION
    columns: list[str] = field(default_factory=lambda: COLUMNS)


def focus_export(session: Session, month: str, *, currency: Optional[str] = None,
                 now: Optional[datetime] = None, version: str = FOCUS_VERSION) -> FocusExport:
    """The FOCUS rows of ``month``; a month with no run and no fleet is refused (nothing to export).

    ``version`` 1.3: the provider names become FOCUS columns and a fleet's idle shared back to projects
    (``fleet set --idle-share``) is split into allocated charges (:mod:`trainledger.reports.focus_allocation`)."""
    if version not in FOCUS_VERSIONS:
        raise LedgerInputError(f"--focus-version: expected {' or '.join(FOCUS_VERSIONS)}, got {version!r}")
    charges = month_charges(session, month, currency=currency, now=now)
    if not charges.lines and not charges.fleets:
        raise LedgerInputError(f"--month: {month} has no runs and no fleet in this ledger; nothing to export")
    rep = charges.report
    period = {"BillingCurrency": rep.currency, "BillingPeriodStart": charges.start, "BillingPeriodEnd": charges.end}
    rows = [_run_row(line, period) for line in charges.lines]
    _goodput_columns(session, rep, rows, now)
    for fc in charges.fleets:
        rows += _fleet_rows(fc, period)
    for row in rows:
        _priced(row)
    rows.sort(key=lambda r: (r["ChargePeriodStart"], r["ChargeCategory"] != "Purchase", r["ResourceId"] or "",
                             r["CommitmentDiscountStatus"] or ""))
    if version == "1.2":
        return FocusExport(month, rep.currency, rows, rep.summary["actual_cost"])
    from trainledger.money.allocation.idle_share import share_idle
    from trainledger.reports.focus_allocation import split_rows

    cols = columns(version)
    rows = [{c: r.get(c, r.get(f"x_{c}")) for c in cols} for r in split_rows(rows, share_idle(session, charges), PLACES)]
    return FocusExport(month, rep.currency, rows, rep.summary["actual_cost"], version, cols)


def _goodput_columns(session: Session, rep: Any, rows: list[dict[str, Any]], now: Optional[datetime]) -> None:
    """x_GoodputCost / x_BadputCost of each run row: its cost split as the run's month splits (they add up to it)."""
    from trainledger.reports.goodput_columns import run_goodput

    split = run_goodput(session, rep, now)
    month_cost = {line.run_id: line.cost for line in rep.runs}
    for row in rows:
        rid = row["x_RunId"]
        if rid in split and month_cost.get(rid):
            good = (row["EffectiveCost"] * split[rid][0] / month_cost[rid]).quantize(PLACES)
            row["x_GoodputCost"], row["x_BadputCost"] = good, row["EffectiveCost"] - good
        elif rid in split:
            row["x_GoodputCost"], row["x_BadputCost"] = ZERO, row["EffectiveCost"]


def _priced(row: dict[str, Any]) -> None:
    """The row's unit prices on their grid (:data:`PRICE_PLACES`) and ListCost / ContractedCost their product with
    PricingQuantity as written, to 10 decimals: FOCUS's "the product of ListUnitPrice and PricingQuantity MUST
    match the ListCost" (and the contracted pair), on the file's own values (within half a unit of the 10th
    decimal). Where a quantity has more than 10 decimals, ListCost differs from EffectiveCost (the ledger's cost)
    by at most (unit price + 2) × 0.5e-10."""
    qty = row["PricingQuantity"]
    for unit, cost in PRICED:
        if row[unit] is not None and qty is not None:
            row[unit] = on_grid(row[unit], PRICE_PLACES)
            row[cost] = on_grid(WIDE.multiply(row[unit], on_grid(qty, PLACES)), PLACES)


def _provider(offer: Any) -> dict[str, str]:
    """The ledger keeps no provider names: self-hosted for owned fleets, else the offer's name stands in."""
    name = "Self-hosted" if offer.kind.value == "own" else offer.name
    return {"ProviderName": name, "PublisherName": name, "InvoiceIssuerName": name, "x_ServiceProviderName": name,
            "x_HostProviderName": name}


def _sku(offer: Any, version: Optional[int]) -> dict[str, Any]:
    return {"SkuId": offer.name, "SkuPriceId": f"{offer.name}@v{version}" if version else offer.name,
            "SkuMeter": "GPU node usage", "x_OfferKind": offer.kind.value, "x_PriceVersion": version,
            "x_OfferCurrency": getattr(offer, "source_currency", None) or offer.currency,
            "x_FxRate": offer.fx.rate if getattr(offer, "fx", None) is not None else None}


def _commitment(offer: Any, names: list[str]) -> dict[str, Any]:
    return {"CommitmentDiscountId": f"trainledger/commitments/{offer.name}", "CommitmentDiscountCategory": "Usage",
            "CommitmentDiscountType": COMMITMENT_TYPE[offer.kind.value],
            "CommitmentDiscountName": ", ".join(names) if names else f"{offer.name} (sized by peak use)",
            "CommitmentDiscountUnit": UNIT}


def _base(period: dict[str, Any], start: datetime, end: datetime, offer: Any, version: Optional[int]) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS)
    row.update(period, **SERVICE, **ACCOUNT, **_provider(offer), **_sku(offer, version), ChargePeriodStart=start,
               ChargePeriodEnd=end, PricingUnit=UNIT)
    return row


def _run_row(line: RunSlice, period: dict[str, Any]) -> dict[str, Any]:
    """A run's part of one charge period: elastic usage, or usage drawn from a fleet (a commitment, Used)."""
    ch = line.charge
    row = _base(period, ch.start, ch.end, ch.offer, ch.price_version)
    fleet = ch.fleets is not None
    row.update(
        ChargeCategory="Usage", ChargeFrequency="Usage-Based", PricingCategory="Committed" if fleet else "Standard",
        ChargeDescription=f"Run {line.run_id} on {line.nodes} × {line.node_type} nodes ({ch.offer.name})",
        BilledCost=ZERO if fleet else line.cost, EffectiveCost=line.cost, ListCost=line.cost, ContractedCost=line.cost,
        PricingQuantity=ch.pricing_quantity, ListUnitPrice=ch.unit_price, ContractedUnitPrice=ch.unit_price,
        ConsumedQuantity=line.node_hours, ConsumedUnit=UNIT,
        ResourceId=f"trainledger/runs/{line.run_id}", ResourceName=line.name or line.run_id, ResourceType="Training run",
        SubAccountId=f"trainledger/projects/{line.project}" if line.project else None,
        SubAccountName=line.project or None, Tags=_tags(line),
        x_RunId=line.run_id, x_RunName=line.name, x_RunStatus=line.status, x_NodeType=line.node_type, x_Nodes=line.nodes,
        x_GpuHours=line.gpu_hours, x_Tokens=line.tokens, x_MFU=line.mfu, x_GpuUtil=line.gpu_util_mean,
        x_EnergyKWh=line.energy_kwh, x_CO2eKg=line.co2e_kg, x_CO2eBasis=line.co2e_basis, x_CostFinality=line.finality)
    if fleet:
        row.update(_commitment(ch.offer, ch.fleets), CommitmentDiscountStatus="Used",
                   CommitmentDiscountQuantity=line.node_hours)
    return row


def _tags(line: RunSlice) -> Optional[str]:
    tags = {f"trainledger/{k}": v for k, v in (("user", line.user), ("strategy", line.strategy)) if v}
    return json.dumps(tags, sort_keys=True, ensure_ascii=False) if tags else None


def _fleet_rows(fc: FleetCharge, period: dict[str, Any]) -> list[dict[str, Any]]:
    """A fixed-cost fleet's charge period: its Purchase (what it cost) and its Unused (idle) usage."""
    fm, offer = fc.fleet, fc.offer
    version = getattr(offer, "price_version", None)
    commitment = _commitment(offer, fc.fleets)
    names = ", ".join(fc.fleets) or f"{offer.name} (sized by peak use)"
    # FOCUS 1.2 commitment discounts: a commitment's purchase and its unused part are charges of the
    # commitment itself, so their ResourceId is the CommitmentDiscountId
    resource = {"ResourceId": commitment["CommitmentDiscountId"], "ResourceName": names, "ResourceType": "GPU fleet"}
    cap = fm.capacity_node_hours
    purchase = _base(period, fc.start, fc.end, offer, version)
    purchase.update(
        ChargeCategory="Purchase", ChargeFrequency="Recurring", PricingCategory="Standard",
        ChargeDescription=f"{COMMITMENT_TYPE[offer.kind.value]} {names}: {_nodes(cap, fc)} node-hours held",
        BilledCost=fm.total, EffectiveCost=ZERO, ListCost=fm.total, ContractedCost=fm.total, PricingQuantity=cap,
        ListUnitPrice=fm.total / cap if cap else ZERO, ContractedUnitPrice=fm.total / cap if cap else ZERO,
        CommitmentDiscountQuantity=cap, **commitment, **resource)
    rows = [purchase]
    idle_nh = fm.idle_node_hours if not fm.over_capacity else ZERO
    if idle_nh > 0 or fm.idle:
        unused = _base(period, fc.start, fc.end, offer, version)
        unit = fm.idle / idle_nh if idle_nh else ZERO
        unused.update(
            ChargeCategory="Usage", ChargeFrequency="Usage-Based", PricingCategory="Committed",
            ChargeDescription=f"Idle node-hours of {names}", BilledCost=ZERO, EffectiveCost=fm.idle, ListCost=fm.idle,
            ContractedCost=fm.idle, PricingQuantity=idle_nh, ListUnitPrice=unit, ContractedUnitPrice=unit,
            CommitmentDiscountStatus="Unused", CommitmentDiscountQuantity=idle_nh, **commitment, **resource)
        rows.append(unused)
    return rows


def _nodes(cap: Decimal, fc: FleetCharge) -> str:
    return format(cap.quantize(Decimal("0.001")).normalize(), "f")


# --- writers --------------------------------------------------------------------------

def _text(key: str, v: Any) -> str:
    """One CSV cell: FOCUS date-time (UTC, 'Z'), a plain decimal (no exponent, 10 places), or guarded text."""
    if v is None:
        return ""
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(v, Decimal):
        return format(on_grid(v, places_of(key)), "f")
    if isinstance(v, float):
        return repr(v)
    return guard_formula(str(v)) if isinstance(v, str) else str(v)


def to_csv(export: FocusExport) -> bytes:
    """CSV with a header of Column IDs; null is an empty field (FOCUS NullHandling); deterministic bytes."""
    buf = io.StringIO()
    w = LFWriter(buf)  # the monthly CSV's writer: a CR inside a name is quoted, not a row break
    w.writerow(export.columns)
    for r in export.rows:
        w.writerow([_text(c, r[c]) for c in export.columns])
    return buf.getvalue().encode("utf-8")


def to_parquet(export: FocusExport) -> bytes:
    """Parquet with typed columns: decimal128(38, 10) (unit prices decimal128(38, 20)), timestamp[ms, UTC], int64,
    float64, string (Tags: JSON text)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise LedgerInputError("--format parquet needs pyarrow: pip install 'trainledger[focus]' "
                               "(or use --format csv)") from None
    arrays, fields = [], []
    for c in export.columns:
        values = [r[c] for r in export.rows]
        if c in DECIMAL_COLUMNS:
            t = pa.decimal128(38, 20 if c in UNIT_PRICE_COLUMNS else 10)
            values = [None if v is None else on_grid(v, places_of(c)) for v in values]
        elif c in DATETIME_COLUMNS:
            t = pa.timestamp("ms", tz="UTC")  # Parquet keeps milliseconds at the finest; the values are whole seconds
            values = [v.astimezone(timezone.utc).replace(microsecond=0) for v in values]
        elif c in INTEGER_COLUMNS:
            t = pa.int64()
        elif c in FLOAT_COLUMNS:
            t = pa.float64()
        else:
            t = pa.string()
        arrays.append(pa.array(values, type=t))
        fields.append(pa.field(c, t, nullable=True))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata={
        b"focus_version": export.version.encode(), b"generator": b"trainledger"}))
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def render(export: FocusExport, fmt: str) -> bytes:
    if fmt == "csv":
        return to_csv(export)
    if fmt == "parquet":
        return to_parquet(export)
    raise LedgerInputError(f"--format: expected csv or parquet, got {fmt!r}")
