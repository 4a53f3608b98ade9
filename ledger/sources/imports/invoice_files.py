"""Reading a provider's invoice: FOCUS 1.0–1.3 (CSV or Parquet) or a provider CSV described by a mapping file.

The whole file is read and validated before anything is written (:mod:`trainledger.sources.imports.invoice_import`
writes it in one transaction): a bad value stops the import with ``FILE:LINE: field: reason; fix`` and nothing
is kept. Files are read up to :data:`MAX_BYTES` and :data:`MAX_LINES`.

**FOCUS** columns read (the rest are ignored): ``BilledCost``, ``BillingCurrency``, ``ChargePeriodStart``,
``ChargePeriodEnd`` (required); ``BillingPeriodStart``, ``ChargeCategory``, ``CommitmentDiscountStatus``,
``ResourceId``, ``SkuId``, ``ChargeDescription``, ``PricingQuantity``, ``PricingUnit``, ``ContractedUnitPrice``
(else ``ListUnitPrice``), ``InvoiceId``, ``InvoiceIssuerName`` (else ``ServiceProviderName``, 1.3, else
``ProviderName``), ``PricingCurrency`` with ``PricingCurrencyEffectiveCost`` (1.2), and the ledger's own
``x_OfferCurrency`` / ``x_FxRate``. A ``Purchase`` row is a commitment (a reserved term); a usage row a commitment
covered at no charge (``CommitmentDiscountStatus`` Used/Unused, BilledCost 0) is kept for the record only.

**Provider CSV**: the mapping file (TOML) names the columns, see docs/INVOICES.md.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tomllib
from dataclasses import astuple, dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from trainledger.errors import LedgerInputError
from trainledger.sources.imports.importer import check_text, parse_time
from trainledger.store.files import read_bounded

#: the largest invoice file read (bytes) and the most lines: an invoice is held in memory while it is checked
MAX_BYTES = 256 * 1024 * 1024
MAX_LINES = 1_000_000
MAPPING_MAX_BYTES = 64 * 1024
FOCUS_REQUIRED = ("BilledCost", "BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd")
#: unit words → the unit an invoice quantity is counted in (a mapping file's [units] adds its own)
UNITS = {"": "hours", "h": "hours", "hr": "hours", "hrs": "hours", "hour": "hours", "hours": "hours",
         "node-hour": "hours", "node-hours": "hours", "node hours": "hours", "nodehours": "hours",
         "month": "months", "months": "months", "node-month": "months", "node-months": "months",
         "node months": "months"}
MAPPED = ("period", "period_start", "period_end", "resource", "description", "quantity", "unit", "unit_price",
          "amount", "currency", "invoice_id", "pricing_currency", "fx_rate")
TEXT = {"resource": 300, "sku": 200, "description": 500}


@dataclass
class Line:
    """One invoice line as billed: money in ``currency``; ``unit`` hours or months."""

    line_no: int
    kind: str  # usage | commitment | info
    period_start: datetime
    period_end: datetime
    resource: str
    sku: str
    description: str
    quantity: Optional[Decimal]
    unit: str
    unit_price: Optional[Decimal]
    amount: Decimal
    currency: str
    pricing_currency: Optional[str] = None
    fx_rate: Optional[Decimal] = None
    rounding_bound: Decimal = Decimal(0)


@dataclass
class InvoiceFile:
    """A whole invoice, checked: its lines and what names it."""

    fmt: str
    lines: list[Line]
    providers: set[str]  # the provider names the file gives (FOCUS InvoiceIssuerName, the mapping's provider)
    numbers: set[str]  # its invoice ids (FOCUS InvoiceId, the mapped column)
    billing_start: Optional[datetime]

    def provider(self) -> Optional[str]:
        return one(self.providers, "--provider")

    def number(self) -> Optional[str]:
        return one(self.numbers, "--invoice-id")

    @property
    def currency(self) -> str:
        return self.lines[0].currency

    def digest(self) -> str:
        """SHA-256 of the lines' values (decimals normalized): the same invoice in CSV or Parquet digests alike."""
        h = hashlib.sha256()
        for line in self.lines:
            vals = [format(v.normalize(), "f") if isinstance(v, Decimal) else
                    v.isoformat() if isinstance(v, datetime) else v for v in astuple(line)[1:]]
            h.update(json.dumps(vals, ensure_ascii=False).encode())
        return h.hexdigest()


# --- values --------------------------------------------------------------------------------------------------

def number(text: Any, where: str, name: str, required: bool = True) -> Optional[Decimal]:
    """A finite decimal as written (its places kept), else a one-line error."""
    if text is None or (isinstance(text, str) and not text.strip()):
        if required:
            raise LedgerInputError(f"{where}: {name}: empty; every line needs it")
        return None
    if isinstance(text, Decimal):
        return text
    try:
        v = Decimal(str(text).strip().replace(",", "") if isinstance(text, str) else str(text))
    except InvalidOperation:
        raise LedgerInputError(f"{where}: {name}: expected a number such as 1234.56, got {str(text)[:40]!r}") from None
    if not v.is_finite() or abs(v) >= Decimal(10) ** 17:
        raise LedgerInputError(f"{where}: {name}: expected a finite number below 10^17, got {str(text)[:40]!r}")
    return v


def currency_code(text: Any, where: str, name: str) -> str:
    import pycountry

    code = str(text or "").strip().upper()
    if len(code) != 3 or pycountry.currencies.get(alpha_3=code) is None:
        raise LedgerInputError(f"{where}: {name}: expected an ISO 4217 code such as USD, got {str(text)[:20]!r}")
    return code


def instant(value: Any, where: str, name: str, tz: ZoneInfo) -> datetime:
    """A time (ISO 8601; naive: the display time zone), a date (its start there) or a Parquet timestamp, in UTC."""
    if isinstance(value, datetime):
        ts = value
    elif isinstance(value, date):
        ts = datetime.combine(value, time())
    else:
        text = str(value or "").strip()
        if not text:
            raise LedgerInputError(f"{where}: {name}: empty; every line needs it")
        ts = parse_time(text, where, name)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=tz)
    return ts.astimezone(timezone.utc)


def month_bounds(text: str, where: str, name: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """A period written as a month (``YYYY-MM``) or a day (``YYYY-MM-DD``): its start and end."""
    text = text.strip()
    try:
        if len(text) == 7:
            start = datetime.strptime(text, "%Y-%m")
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            start = datetime.strptime(text, "%Y-%m-%d")
            end = start + timedelta(days=1)
    except ValueError:
        raise LedgerInputError(f"{where}: {name}: expected a month YYYY-MM or a day YYYY-MM-DD, got {text[:20]!r}") from None
    return (start.replace(tzinfo=tz).astimezone(timezone.utc), end.replace(tzinfo=tz).astimezone(timezone.utc))


def half_unit(v: Optional[Decimal]) -> Decimal:
    """Half a unit of the last place ``v`` is written with (0 for none)."""
    if v is None:
        return Decimal(0)
    return Decimal(5).scaleb(v.as_tuple().exponent - 1)


def rounding_bound(amount: Decimal, price: Optional[Decimal], qty: Optional[Decimal]) -> Decimal:
    """How far ``amount`` can stand from ``price × qty`` only because each was rounded to the places written:
    ½ unit of the amount + |price| × ½ unit of the quantity + |quantity| × ½ unit of the price."""
    if price is None or qty is None:
        return Decimal(0)
    return half_unit(amount) + abs(price) * half_unit(qty) + abs(qty) * half_unit(price)


def unit_of(text: str, where: str, units: dict[str, str]) -> str:
    key = (text or "").strip().lower()
    if key not in units:
        raise LedgerInputError(f"{where}: unit: unknown unit {text[:40]!r}; use hours or months, or name it in the "
                               "mapping file's [units] table")
    return units[key]


def _text(value: Any, where: str, name: str, field_: str) -> str:
    return check_text(str(value or "").strip(), where, name, TEXT[field_])


# --- reading -------------------------------------------------------------------------------------------------

def read_bytes(path: Path, limit: Optional[int] = None, flag: str = "FILE") -> bytes:
    """The file's bytes, refused over ``limit`` (default :data:`MAX_BYTES`; one line, before reading it)."""
    limit = MAX_BYTES if limit is None else limit
    try:
        size = os.stat(path).st_size
        if size > limit:
            raise LedgerInputError(f"{flag}: {path} is {size:,} bytes; at most {limit:,} are read (split the file)")
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise LedgerInputError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise LedgerInputError(f"{flag}: {path} is over {limit:,} bytes (split the file)")
    return data


def csv_records(data: bytes, name: str, delimiter: str = ",") -> tuple[list[str], Iterable[tuple[int, dict]]]:
    """The header and (line number, record) of a CSV file; a record with the wrong number of fields is refused."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise LedgerInputError(f"{name}:1: empty file; an invoice needs a header and lines") from None
    except csv.Error as exc:
        raise LedgerInputError(f"{name}:1: {exc}") from None

    def records():
        try:
            for row in reader:
                line = reader.line_num
                if not any(c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise LedgerInputError(f"{name}:{line}: expected {len(header)} fields as in the header, got "
                                           f"{len(row)}; quote fields that hold the delimiter")
                if line > MAX_LINES + 1:
                    raise LedgerInputError(f"{name}:{line}: more than {MAX_LINES:,} lines; split the invoice")
                yield line, dict(zip(header, row))
        except csv.Error as exc:
            raise LedgerInputError(f"{name}:{reader.line_num}: {exc}") from None
    return header, records()


def parquet_records(data: bytes, name: str) -> tuple[list[str], Iterable[tuple[int, dict]]]:
    """The columns and (row number from 2, as a CSV line would be, record) of a Parquet file."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LedgerInputError(f"{name}: a Parquet invoice needs pyarrow: pip install 'trainledger[focus]'") from None
    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise LedgerInputError(f"{name}: not a readable Parquet file ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:120] if str(exc) else ''})") from None
    if table.num_rows > MAX_LINES:
        raise LedgerInputError(f"{name}: {table.num_rows:,} rows; at most {MAX_LINES:,} (split the invoice)")
    rows = table.to_pylist()
    return list(table.column_names), ((i + 2, r) for i, r in enumerate(rows))


def one(values: set, flag: str) -> Optional[str]:
    """The one value the file gives, None for none; several: a one-line error asking for ``flag``."""
    values = {v for v in values if v}
    if len(values) > 1:
        raise LedgerInputError(f"{flag}: the file names several ({', '.join(sorted(values)[:4])}); give {flag}")
    return values.pop() if values else None


def check_lines(lines: list[Line], name: str) -> None:
    """One currency per invoice, and at least one line."""
    if not lines:
        raise LedgerInputError(f"{name}: no invoice lines; nothing to import")
    first = lines[0]
    for line in lines:
        if line.currency != first.currency:
            raise LedgerInputError(f"{name}:{line.line_no}: currency: {line.currency}, but line {first.line_no} is in "
                                   f"{first.currency}; an invoice has one billing currency (split the file)")
        if line.period_end <= line.period_start:
            raise LedgerInputError(f"{name}:{line.line_no}: period: ends at or before it starts; fix the period")


# --- FOCUS ---------------------------------------------------------------------------------------------------

def _focus_kind(rec: dict, amount: Decimal) -> str:
    if (rec.get("ChargeCategory") or "") == "Purchase":
        return "commitment"
    if (rec.get("CommitmentDiscountStatus") or "") in ("Used", "Unused") and amount == 0:
        return "info"
    return "usage"


def _focus_fx(rec: dict, where: str, amount: Decimal, currency: str) -> tuple[Optional[str], Optional[Decimal]]:
    """The pricing currency and the provider's rate (1 pricing = rate billing), when the line states them."""
    pricing = rec.get("PricingCurrency") or rec.get("x_OfferCurrency")
    if not pricing:
        return None, None
    pricing = currency_code(pricing, where, "PricingCurrency")
    if pricing == currency:
        return None, None
    rate = number(rec.get("x_FxRate"), where, "x_FxRate", required=False)
    priced = number(rec.get("PricingCurrencyEffectiveCost"), where, "PricingCurrencyEffectiveCost", required=False)
    if rate is None and priced:
        rate = amount / priced
    if rate is not None and rate <= 0:
        raise LedgerInputError(f"{where}: x_FxRate: must be above 0, got {rate}")
    return pricing, rate


def focus_line(rec: dict, where: str, line_no: int, tz: ZoneInfo) -> Line:
    amount = number(rec.get("BilledCost"), where, "BilledCost")
    currency = currency_code(rec.get("BillingCurrency"), where, "BillingCurrency")
    qty = number(rec.get("PricingQuantity"), where, "PricingQuantity", required=False)
    price = number(rec.get("ContractedUnitPrice"), where, "ContractedUnitPrice", required=False)
    if price is None:
        price = number(rec.get("ListUnitPrice"), where, "ListUnitPrice", required=False)
    pricing, rate = _focus_fx(rec, where, amount, currency)
    unit = unit_of(str(rec.get("PricingUnit") or ""), where, UNITS) if qty is not None else "hours"
    return Line(line_no, _focus_kind(rec, amount), instant(rec.get("ChargePeriodStart"), where, "ChargePeriodStart", tz),
                instant(rec.get("ChargePeriodEnd"), where, "ChargePeriodEnd", tz),
                _text(rec.get("ResourceId"), where, "ResourceId", "resource"), _text(rec.get("SkuId"), where, "SkuId", "sku"),
                _text(rec.get("ChargeDescription"), where, "ChargeDescription", "description"),
                qty, unit, price, amount, currency, pricing, rate, rounding_bound(amount, price, qty))


def read_focus(path: Path, name: str, tz: ZoneInfo) -> InvoiceFile:
    """A FOCUS 1.0–1.3 file (CSV, or Parquet by its magic bytes), validated whole."""
    data = read_bytes(path)
    header, records = (parquet_records(data, name) if data[:4] == b"PAR1" else csv_records(data, name))
    missing = [c for c in FOCUS_REQUIRED if c not in header]
    if missing:
        raise LedgerInputError(f"{name}:1: not a FOCUS file: no {', '.join(missing)} column; a provider CSV needs "
                               "--format csv --mapping FILE")
    lines, providers, numbers, periods = [], set(), set(), set()
    for line_no, rec in records:
        where = f"{name}:{line_no}"
        lines.append(focus_line(rec, where, line_no, tz))
        providers.add(rec.get("InvoiceIssuerName") or rec.get("ServiceProviderName") or rec.get("ProviderName"))
        numbers.add(rec.get("InvoiceId"))
        if rec.get("BillingPeriodStart"):
            periods.add(instant(rec["BillingPeriodStart"], where, "BillingPeriodStart", tz))
    check_lines(lines, name)
    if len(periods) > 1:
        raise LedgerInputError(f"{name}: BillingPeriodStart: the file holds {len(periods)} billing periods; import "
                               "each period's invoice on its own")
    return InvoiceFile("focus", lines, providers, numbers, periods.pop() if periods else None)


# --- a provider's own CSV, through a mapping file ---------------------------------------------------------------

@dataclass
class Mapping:
    """A provider CSV's mapping file: which column holds each field, and its units."""

    columns: dict[str, str]
    provider: Optional[str]
    currency: Optional[str]
    delimiter: str
    units: dict[str, str]


def read_mapping(path: Path) -> Mapping:
    """The mapping file (TOML), checked: one line naming the key and the fix."""
    name = str(path)
    text = read_bounded(path, MAPPING_MAX_BYTES, "mapping file", "--mapping")  # FILE:LINE for a NUL or bad UTF-8
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LedgerInputError(f"--mapping: {name} is not valid TOML ({str(exc).splitlines()[0]})") from None
    cols = doc.get("columns")
    if not isinstance(cols, dict) or not all(isinstance(v, str) and v for v in cols.values()):
        raise LedgerInputError(f"--mapping: {name}: needs a [columns] table of field = \"column name\"")
    unknown = sorted(set(cols) - set(MAPPED))
    if unknown:
        raise LedgerInputError(f"--mapping: {name}: [columns] {unknown[0]}: not a field; use {', '.join(MAPPED)}")
    need = ["amount", "resource"] + ([] if "period" in cols else ["period_start", "period_end"])
    missing = [k for k in need if k not in cols] + ([] if "currency" in cols or doc.get("currency") else ["currency"])
    if missing:
        raise LedgerInputError(f"--mapping: {name}: [columns] needs {', '.join(missing)} (the period as `period`, "
                               "or `period_start` and `period_end`; currency as a column or a top-level `currency`)")
    units = dict(UNITS)
    for word, unit in (doc.get("units") or {}).items():
        if unit not in ("hours", "months"):
            raise LedgerInputError(f"--mapping: {name}: [units] {word}: expected \"hours\" or \"months\", got {unit!r}")
        units[str(word).strip().lower()] = unit
    delimiter = doc.get("delimiter", ",")
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise LedgerInputError(f"--mapping: {name}: delimiter: one character, got {delimiter!r}")
    currency = currency_code(doc["currency"], f"--mapping: {name}", "currency") if doc.get("currency") else None
    return Mapping(cols, doc.get("provider") or None, currency, delimiter, units)


def _mapped_period(rec: dict, m: Mapping, where: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    c = m.columns
    if "period" in c:
        return month_bounds(rec[c["period"]], where, c["period"], tz)
    return (instant(rec[c["period_start"]], where, c["period_start"], tz),
            instant(rec[c["period_end"]], where, c["period_end"], tz))


def mapped_line(rec: dict, m: Mapping, where: str, line_no: int, tz: ZoneInfo) -> Line:
    c = m.columns

    def get(field_: str) -> Any:
        return rec[c[field_]] if field_ in c else None

    amount = number(get("amount"), where, c["amount"])
    qty = number(get("quantity"), where, c.get("quantity", "quantity"), required=False)
    price = number(get("unit_price"), where, c.get("unit_price", "unit_price"), required=False)
    currency = currency_code(get("currency") or m.currency, where, c.get("currency", "currency"))
    unit = unit_of(get("unit") or "", where, m.units)
    pricing = get("pricing_currency")
    pricing = currency_code(pricing, where, c["pricing_currency"]) if pricing else None
    rate = number(get("fx_rate"), where, c.get("fx_rate", "fx_rate"), required=False)
    if rate is not None and rate <= 0:
        raise LedgerInputError(f"{where}: {c['fx_rate']}: must be above 0, got {rate}")
    start, end = _mapped_period(rec, m, where, tz)
    return Line(line_no, "commitment" if unit == "months" else "usage", start, end,
                _text(get("resource"), where, c["resource"], "resource"), "",
                _text(get("description"), where, c.get("description", "description"), "description"),
                qty, unit, price, amount, currency, pricing if pricing != currency else None,
                rate if pricing and pricing != currency else None, rounding_bound(amount, price, qty))


def read_mapped(path: Path, name: str, mapping: Mapping, tz: ZoneInfo) -> InvoiceFile:
    """A provider CSV read through its mapping, validated whole."""
    header, records = csv_records(read_bytes(path), name, mapping.delimiter)
    absent = [v for v in mapping.columns.values() if v not in header]
    if absent:
        raise LedgerInputError(f"{name}:1: no column {absent[0]!r}, which the mapping file names; the header has "
                               f"{', '.join(header[:12])}")
    lines, numbers = [], set()
    for line_no, rec in records:
        lines.append(mapped_line(rec, mapping, f"{name}:{line_no}", line_no, tz))
        if "invoice_id" in mapping.columns:
            numbers.add(rec[mapping.columns["invoice_id"]].strip())
    check_lines(lines, name)
    return InvoiceFile("csv", lines, {mapping.provider}, numbers, None)
