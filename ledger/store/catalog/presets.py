"""Hardware catalog and offers: the shipped presets and ``pricing import``.

Files are TOML with ``[[node_type]]`` and ``[[offer]]`` tables (see
``data/pricing.toml``). Everything is validated before anything is written;
a bad value is a one-line :class:`LedgerInputError` naming the entry and field.

Prices have a history (:mod:`trainledger.store.catalog.prices`): importing an existing offer
with other prices adds a version valid from its ``valid_from`` key (a TOML date
or date-time; default: the command's ``--from``, else now) instead of
overwriting it. Several ``[[offer]]`` tables with one name and distinct
``valid_from`` values are a price history. An offer's kind, node type and
currency cannot change (its past months were priced in them).
"""

from __future__ import annotations

import tomllib
from datetime import date, datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.catalog import prices
from trainledger.store.catalog.fx import check_currency
from trainledger.store.files import read_text
from trainledger.store.models import NodeType, Offer, OfferKind, OfferPrice
from trainledger.store.settings import display_timezone

PRESET_FILE = "pricing.toml"
#: Money columns are NUMERIC(20, 6): at most 14 digits before the point, 6 after
MONEY_MAX = Decimal("1e14")
MONEY_STEP = Decimal("0.000001")
#: names and labels: printable text (no control characters), as stored in VARCHAR(n)
NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"


class NodeTypeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=100, pattern=NO_CONTROL)
    gpu_model: str = Field(min_length=1, max_length=100, pattern=NO_CONTROL)
    gpus_per_node: int = Field(gt=0, le=1024)
    gpu_memory_gb: float = Field(gt=0, le=1e6)
    peak_bf16_tflops: float = Field(gt=0, le=1e9)
    interconnect: str = Field(default="", max_length=100, pattern=NO_CONTROL)
    network: str = Field(default="", max_length=100, pattern=NO_CONTROL)
    # link speeds for the planner (optional; a node type without them is planned on stated assumptions)
    intra_node_gbytes_per_s: Optional[float] = Field(default=None, gt=0, le=1e6)
    intra_node_latency_us: Optional[float] = Field(default=None, gt=0, le=1e6)
    inter_node_gbits_per_s: Optional[float] = Field(default=None, gt=0, le=1e6)
    inter_node_latency_us: Optional[float] = Field(default=None, gt=0, le=1e6)
    nominal_power_kw: Optional[Decimal] = Field(default=None, ge=0, lt=MONEY_MAX)  # per node at load, for CO2e estimates


NonNeg = Field(default=None, ge=0, lt=MONEY_MAX)
#: plausible ranges that catch a unit slip (W typed as kW, a price per node-month typed per node-hour)
PER_HOUR_MAX = Decimal("1e9")  # per node-hour, in any currency (≈ 40,000 USD in the weakest ISO currency)
KW_MAX = Decimal(100)  # a node draws a few kW, 15 kW at the most today
PUE_MAX = Decimal(3)


class OfferSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1, max_length=100, pattern=NO_CONTROL)
    node_type: str = Field(min_length=1, max_length=100)
    kind: Literal["rent_elastic", "rent_reserved", "own"]
    currency: str = Field(default="CNY", pattern=r"^[A-Z]{3}$")
    price_per_node_hour: Optional[Decimal] = Field(default=None, ge=0, le=PER_HOUR_MAX)
    price_per_node_month: Optional[Decimal] = NonNeg
    billing_granularity_hours: Optional[Decimal] = Field(default=None, ge=MONEY_STEP, lt=MONEY_MAX)
    minimum_hours: Optional[Decimal] = NonNeg
    capex_per_node: Optional[Decimal] = NonNeg
    depreciation_months: Optional[int] = Field(default=None, gt=0, le=1200)
    residual_value: Optional[Decimal] = NonNeg
    power_kw_load: Optional[Decimal] = Field(default=None, ge=0, le=KW_MAX)  # kW per node
    power_kw_idle: Optional[Decimal] = Field(default=None, ge=0, le=KW_MAX)
    electricity_price_per_kwh: Optional[Decimal] = Field(default=None, ge=0, le=PER_HOUR_MAX)
    pue: Optional[Decimal] = Field(default=None, ge=1, le=PUE_MAX)
    operations_per_node_month: Optional[Decimal] = NonNeg
    notes: str = Field(default="", max_length=500)
    valid_from: Optional[datetime | date] = None  # a price version from then (a date: its start in the display time zone)

    @model_validator(mode="after")
    def _kind_fields(self) -> "OfferSpec":
        check_currency(self.currency, "currency")
        if self.kind == "rent_elastic":
            if (self.price_per_node_hour is None) == (self.price_per_node_month is None):
                raise ValueError("rent_elastic needs exactly one of price_per_node_hour or price_per_node_month")
        elif self.kind == "rent_reserved":
            if self.price_per_node_month is None:
                raise ValueError("rent_reserved needs price_per_node_month")
        else:
            missing = [f for f in ("capex_per_node", "depreciation_months", "power_kw_load",
                                   "electricity_price_per_kwh", "operations_per_node_month")
                       if getattr(self, f) is None]
            if missing:
                raise ValueError(f"own needs {', '.join(missing)}")
            if (self.residual_value or 0) > self.capex_per_node:
                raise ValueError("residual_value cannot exceed capex_per_node")
        return self

    def to_row(self, node_type_id: int, source: str) -> dict[str, Any]:
        data = self.model_dump(exclude={"node_type", "valid_from"})
        if self.kind == "own":
            data.setdefault("residual_value", Decimal(0))
            data["residual_value"] = data["residual_value"] or Decimal(0)
            data["power_kw_idle"] = data["power_kw_idle"] if data["power_kw_idle"] is not None else data["power_kw_load"]
            data["pue"] = data["pue"] or Decimal(1)
        return {**data, "node_type_id": node_type_id, "kind": OfferKind(self.kind), "source": source}


class PricingFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_type: list[NodeTypeSpec] = []
    offer: list[OfferSpec] = []

    @model_validator(mode="after")
    def _unique_names(self) -> "PricingFile":
        names = [e.name for e in self.node_type]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise ValueError(f"node_type {twice!r} is defined twice; keep one")
        keys = [(e.name, e.valid_from) for e in self.offer]  # one name at several valid_from: a price history
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            at = f" from {twice[1]}" if twice[1] is not None else ""
            raise ValueError(f"offer {twice[0]!r} is defined twice{at} (its versions would overlap); keep one")
        for name in dict.fromkeys(e.name for e in self.offer):
            same = [e for e in self.offer if e.name == name]
            if len(same) > 1 and len({(e.kind, e.node_type, e.currency) for e in same}) > 1:
                raise ValueError(f"offer {name!r}: its versions differ in kind, node type or currency; an offer keeps them")
        return self


def _one_line(err: ValidationError, where: str, data: dict) -> str:
    first = err.errors()[0]
    loc = list(first["loc"])
    # point at the named entry: offer 'x' / node_type 'y'
    label = where
    if len(loc) >= 2 and isinstance(loc[1], int):
        section, idx = loc[0], loc[1]
        try:
            label = f"{where}: {section} {data[section][idx].get('name', '#' + str(idx + 1))!r}"
        except Exception:
            label = f"{where}: {section} #{idx + 1}"
        loc = loc[2:]
    field = ".".join(str(p) for p in loc) or "entry"
    msg = first["msg"].removeprefix("Value error, ")
    if field == "entry" and label == where:  # a check of the whole file (e.g. a name defined twice)
        return f"{where}: {msg}"
    got = first.get("input")
    shown = repr(got) if len(repr(got)) <= 80 else repr(got)[:77] + "..."
    got_s = "" if isinstance(got, dict) or loc == [] else f" (got {shown})"
    return f"{label}: {field}: {msg}{got_s}"


def parse_pricing(text: str, where: str = "pricing") -> PricingFile:
    """Parse and validate a pricing TOML document."""
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise LedgerInputError(f"{where}: not valid TOML: {exc}") from None
    try:
        return PricingFile.model_validate(data)
    except ValidationError as exc:
        raise LedgerInputError(_one_line(exc, where, data)) from None


def preset_text() -> str:
    return resources.files("trainledger.data").joinpath(PRESET_FILE).read_text(encoding="utf-8")


def apply_pricing(session: Session, spec: PricingFile, *, source: str, replace: bool,
                  valid_from: Optional[datetime] = None, retroactive: bool = False,
                  plans: Optional[list[prices.VersionPlan]] = None, note: str = "") -> dict[str, int]:
    """Add node types and offers (with ``replace``: update node types, and add price versions to offers)
    in one transaction.

    A new offer's first version starts at its first entry's ``valid_from``, else at the
    ledger's earliest run (else 1970-01-01). An existing offer with other prices gets a version
    from the entry's ``valid_from``, else ``valid_from``, else now; one in the past needs
    ``retroactive``. The versions added are appended to ``plans`` (for a confirmation).
    Raises :class:`LedgerInputError` for an unknown node type before writing anything.
    """
    known = {nt.name: nt for nt in session.exec(select(NodeType)).all()}
    new_names = {nt.name for nt in spec.node_type}
    for off in spec.offer:
        if off.node_type not in known and off.node_type not in new_names:
            raise LedgerInputError(
                f"offer {off.name!r}: node_type: unknown node type {off.node_type!r}; "
                f"use one of {', '.join(sorted(known | dict.fromkeys(new_names)))} or add a [[node_type]]"
            )
    counts = {"node_types": 0, "offers": 0}
    audit = source != "preset"  # the shipped presets a new ledger starts with are no one's change
    for nts in spec.node_type:
        row = known.get(nts.name)
        before = _node_type_fields(row) if row is not None else None
        if row is None:
            row = NodeType(**nts.model_dump(), source=source)
            session.add(row)
        elif replace:
            for k, v in nts.model_dump().items():
                setattr(row, k, v)
            row.source = source
        else:
            continue
        if audit:
            record_change(session, "node_type.set" if before else "node_type.add", nts.name, before,
                          _node_type_fields(row))
        known[nts.name] = row
        counts["node_types"] += 1
    session.flush()
    offers = {o.name: o for o in session.exec(select(Offer)).all()}
    tz = display_timezone(session)
    by_name: dict[str, list[OfferSpec]] = {}
    for ofs in spec.offer:
        by_name.setdefault(ofs.name, []).append(ofs)
    for name, entries in by_name.items():
        # dated versions in order, then one without a date (from --from, else now)
        entries.sort(key=lambda e: (e.valid_from is None, _instant(e.valid_from, tz).timestamp() if e.valid_from else 0))
        row = offers.get(name)
        if row is not None and not replace:
            continue
        if row is None:
            first, entries = entries[0], entries[1:]
            row = Offer(**first.to_row(known[first.node_type].id, source))
            session.add(row)
            session.flush()
            version = prices.add_first_version(session, row, _instant(first.valid_from, tz))
            if audit:
                record_change(session, "offer.add", name, None, _offer_fields(row, first.node_type, version))
            counts["offers"] += 1
            fresh = True
        else:
            fresh = False
        for ofs in entries:
            _offer_version(session, row, ofs, known[ofs.node_type].id, source, tz, valid_from=valid_from,
                           retroactive=retroactive or fresh, plans=None if fresh else plans, note=note)
            counts["offers"] += 1
    session.flush()
    return counts


def _instant(value: Optional[datetime | date], tz) -> Optional[datetime]:
    return prices.parse_valid_from(value, tz, "valid_from") if value is not None else None


def _offer_version(session: Session, row: Offer, ofs: OfferSpec, node_type_id: int, source: str, tz, *,
                   valid_from: Optional[datetime], retroactive: bool, plans: Optional[list], note: str = "") -> None:
    """An ``[[offer]]`` entry for an offer that exists: a new price version (if its prices differ), new notes."""
    values = ofs.to_row(node_type_id, source)
    for field, label in (("kind", "kind"), ("node_type_id", "node_type"), ("currency", "currency")):
        if getattr(row, field) != values[field]:
            shown = {"kind": row.kind.value, "node_type_id": "its node type", "currency": row.currency}[field]
            raise LedgerInputError(f"offer {row.name!r}: {label}: is {shown}; an offer's kind, node type and currency "
                                   "cannot change (its history is priced in them): import it under a new name")
    plan = prices.plan_version(session, row, values, _instant(ofs.valid_from, tz) or valid_from)
    prices.apply_version(session, plan, retroactive=retroactive, note=note)
    if plans is not None and not plan.noop:
        plans.append(plan)
    if source != "preset":
        record_change(session, "offer.notes", row.name, {"notes": row.notes}, {"notes": values["notes"]})
    row.notes, row.source = values["notes"], source


def _node_type_fields(row: NodeType) -> dict[str, Any]:
    return {k: getattr(row, k) for k in NodeTypeSpec.model_fields}


def _offer_fields(row: Offer, node_type: str, version: OfferPrice) -> dict[str, Any]:
    """A new offer as the audit log records it: kind, node type, currency, its prices and their start."""
    return {"kind": row.kind, "node_type": node_type, "currency": row.currency, "valid_from": version.valid_from,
            **{f: v for f, v in prices.price_values(row).items() if v is not None}, "notes": row.notes}


def import_pricing_file(session: Session, path: Path, valid_from: Optional[datetime] = None,
                        plans: Optional[list] = None) -> dict[str, int]:
    """``trainledger pricing import FILE.toml``: add or replace user node types, add offers and price versions
    (a version in the past is added too; the caller confirms it, see ``trainledger.money.rates.pricing.confirm_versions``)."""
    spec = parse_pricing(read_text(path), where=Path(path).name)
    try:
        return apply_pricing(session, spec, source="user", replace=True, valid_from=valid_from, retroactive=True,
                             plans=plans)
    except LedgerInputError as exc:
        raise LedgerInputError(f"{Path(path).name}: {exc}") from None


def ensure_presets(bind: Engine | Connection) -> None:
    """Insert the shipped presets that the ledger does not have yet (never overwrites).

    Given a Connection, it writes in that connection's transaction (the caller commits).
    A ledger held at an older revision (``db upgrade --revision``) lacks
    columns the models have; its presets are written with the columns it has,
    and the later migrations fill the rest.
    """
    spec = parse_pricing(preset_text(), where=PRESET_FILE)
    if not _schema_is_current(bind):
        _seed_older_schema(bind, spec)
        return
    with Session(bind) as session:
        apply_pricing(session, spec, source="preset", replace=False)
        session.commit()


def _schema_is_current(bind: Engine | Connection) -> bool:
    from sqlalchemy import inspect

    insp = inspect(bind)
    if not insp.has_table(OfferPrice.__tablename__):  # before migration 0009: no price versions yet
        return False
    return all({c["name"] for c in insp.get_columns(t.__tablename__)} >= set(t.__table__.columns.keys())
               for t in (NodeType, Offer))


def _seed_older_schema(bind: Engine | Connection, spec: PricingFile) -> None:
    """Presets into a ledger at an older revision: plain inserts of the columns its tables have."""
    from contextlib import nullcontext

    from sqlalchemy import insert, inspect

    insp = inspect(bind)
    have = {t: {c["name"] for c in insp.get_columns(t)} for t in ("node_type", "offer")}
    nt_table, offer_table = NodeType.__table__, Offer.__table__
    with bind.begin() if isinstance(bind, Engine) else nullcontext(bind) as conn:
        ids = dict(conn.execute(select(nt_table.c.name, nt_table.c.id)).all())
        for nts in spec.node_type:
            if nts.name not in ids:
                row = {k: v for k, v in {**nts.model_dump(), "source": "preset"}.items() if k in have["node_type"]}
                ids[nts.name] = conn.execute(insert(nt_table).values(row)).inserted_primary_key[0]
        offers = set(conn.execute(select(offer_table.c.name)).scalars())
        for ofs in spec.offer:
            if ofs.name not in offers and ofs.node_type in ids:
                row = ofs.to_row(ids[ofs.node_type], "preset")
                row["kind"] = row["kind"].value
                conn.execute(insert(offer_table).values({k: v for k, v in row.items() if k in have["offer"]}))
