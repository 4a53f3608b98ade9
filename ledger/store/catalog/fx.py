"""Exchange rates (``fx_rate``): ``trainledger fx set|import|list``.

A rate says 1 ``base`` = ``rate`` ``quote`` from the start of ``valid_from`` (a
calendar day in the display time zone) until the pair's next rate: daily rates
are one row a day, monthly rates one row a month. Currency codes are ISO 4217
(checked against pycountry's list of current codes); a rate must be > 0. A CSV
import is validated whole before anything is written.
"""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.files import read_text
from trainledger.store.models import FxRate
from trainledger.store.types import RATE_SCALE

#: the largest rate kept (NUMERIC(30, 12): 18 digits before the point)
RATE_MAX = Decimal("1e17")
#: exchange rates between ISO 4217 currencies lie well inside this (IRR→USD ≈ 2.4e-5, USD→IRR ≈ 42,000)
FX_PLAUSIBLE = (Decimal("1e-6"), Decimal("1e6"))
CSV_COLUMNS = ("base", "quote", "rate", "valid_from")


def check_currency(code: Any, field: str = "currency") -> str:
    """An ISO 4217 alphabetic code (``CNY``, ``USD``), else a one-line error naming ``field``."""
    import pycountry

    text = code if isinstance(code, str) else ""
    if not (len(text) == 3 and text.isascii() and text.isalpha() and text.isupper()):
        raise LedgerInputError(f"{field}: expected a 3-letter ISO 4217 code such as CNY or USD, got {code!r}")
    if pycountry.currencies.get(alpha_3=text) is None:
        raise LedgerInputError(f"{field}: {text!r} is not an ISO 4217 currency code (e.g. CNY, USD, EUR)")
    return text


def check_rate(value: Any, field: str = "RATE") -> Decimal:
    """A finite decimal > 0 that fits the column (12 decimal places kept)."""
    try:
        rate = Decimal(str(value).strip()) if not isinstance(value, Decimal) else value
    except (InvalidOperation, ValueError):
        raise LedgerInputError(f"{field}: expected a number such as 0.1387, got {value!r}") from None
    if not rate.is_finite() or rate <= 0:
        raise LedgerInputError(f"{field}: a rate must be a number > 0, got {value!r}")
    if rate >= RATE_MAX or rate.quantize(RATE_SCALE) == 0:
        raise LedgerInputError(f"{field}: {value!r} is out of range (from 1e-12 up to 1e17)")
    return rate


def check_fx_rate(value: Any, base: str, quote: str, field: str = "RATE") -> Decimal:
    """:func:`check_rate` within :data:`FX_PLAUSIBLE`: a rate outside it is a typo or the pair reversed."""
    rate = check_rate(value, field)
    low, high = FX_PLAUSIBLE
    if not low <= rate <= high:
        raise LedgerInputError(f"{field}: 1 {base} = {value} {quote} is out of range: exchange rates lie between "
                               f"{low:f} and {high:,f}; check the decimal point and the direction ({base}→{quote})")
    return rate


def check_day(value: Any, field: str = "--from") -> date:
    if isinstance(value, date):
        return value
    try:
        d = date.fromisoformat(str(value).strip())
    except ValueError:
        raise LedgerInputError(f"{field}: expected a date YYYY-MM-DD such as 2026-11-01, got {value!r}") from None
    if not 1970 <= d.year <= 9998:
        raise LedgerInputError(f"{field}: the year must be 1970 to 9998, got {value!r}")
    return d


def _pair(base: Any, quote: Any, where: str = "") -> tuple[str, str]:
    b, q = check_currency(base, f"{where}BASE"), check_currency(quote, f"{where}QUOTE")
    if b == q:
        raise LedgerInputError(f"{where}QUOTE: a rate converts between two currencies; got {b} to {q}")
    return b, q


def set_rate(session: Session, base: str, quote: str, rate: Any, valid_from: Any, source: str = "") -> dict[str, Any]:
    """Add a rate, or replace the pair's rate of that day. Returns the row as a dict."""
    b, q = _pair(base, quote)
    r = check_fx_rate(rate, b, q)
    d = check_day(valid_from)
    row = session.exec(select(FxRate).where(FxRate.base == b, FxRate.quote == q, FxRate.valid_from == d)).first()
    before = _audited(row)
    if row is None:
        row = FxRate(base=b, quote=q, valid_from=d, rate=r, source=source[:200])
        session.add(row)
    else:
        row.rate, row.source = r, source[:200]
    session.flush()
    record_change(session, "fx.set", f"{b}/{q} from {d}", before, _audited(row))
    return _row(row)


def _audited(row: Optional[FxRate]) -> Optional[dict[str, Any]]:
    return {"rate": row.rate, "source": row.source} if row is not None else None


def import_rates(session: Session, path: Path) -> dict[str, int]:
    """``trainledger fx import rates.csv``: columns base,quote,rate,valid_from (and an optional source).

    Every row is checked first (ISO codes, rate > 0, a date, no pair and day twice);
    then the rows are added or replace the same pair and day. Returns counts.
    """
    rows = _parse_rates(read_text(path, "utf-8-sig"), Path(path).name)
    added = replaced = 0
    for b, q, r, d, src in rows:
        existing = session.exec(select(FxRate).where(FxRate.base == b, FxRate.quote == q, FxRate.valid_from == d)).first()
        before = _audited(existing)
        if existing is None:
            existing = FxRate(base=b, quote=q, valid_from=d, rate=r, source=src)
            session.add(existing)
            added += 1
        else:
            existing.rate, existing.source = r, src
            replaced += 1
        record_change(session, "fx.import", f"{b}/{q} from {d}", before, _audited(existing))
    session.flush()
    return {"rates": len(rows), "added": added, "replaced": replaced}


def _parse_rates(text: str, name: str) -> list[tuple[str, str, Decimal, date, str]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise LedgerInputError(f"{name}: header: missing column(s) {', '.join(missing)}; expected "
                               f"{','.join(CSV_COLUMNS)}[,source]")
    out, seen = [], {}
    for i, raw in enumerate(reader, start=2):
        rec = {(k or "").strip(): (v or "").strip() if isinstance(v, str) else v for k, v in raw.items()}
        if None in raw:
            raise LedgerInputError(f"{name}: row {i}: more fields than columns")
        where = f"{name}: row {i}: "
        b, q = _pair(rec["base"], rec["quote"], where)
        r = check_fx_rate(rec["rate"], b, q, f"{where}rate")
        d = check_day(rec["valid_from"], f"{where}valid_from")
        if (b, q, d) in seen:
            raise LedgerInputError(f"{where}{b}→{q} from {d} is given twice (rows {seen[(b, q, d)]} and {i}); keep one")
        seen[(b, q, d)] = i
        src = rec.get("source") or ""
        if len(src) > 200 or any(ord(c) < 32 for c in src):
            raise LedgerInputError(f"{where}source: at most 200 printable characters")
        out.append((b, q, r, d, src))
    if not out:
        raise LedgerInputError(f"{name}: no rates (expected a header {','.join(CSV_COLUMNS)} and one row per rate)")
    return out


def list_rates(session: Session, base: Optional[str] = None, quote: Optional[str] = None) -> list[dict[str, Any]]:
    """Rates, by pair and date; ``valid_to`` is the pair's next rate's date (exclusive)."""
    q = select(FxRate).order_by(FxRate.base, FxRate.quote, FxRate.valid_from)
    if base:
        q = q.where(FxRate.base == check_currency(base, "--base"))
    if quote:
        q = q.where(FxRate.quote == check_currency(quote, "--quote"))
    rows = list(session.exec(q))
    out = []
    for i, r in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) and (rows[i + 1].base, rows[i + 1].quote) == (r.base, r.quote) else None
        out.append({**_row(r), "valid_to": nxt.valid_from if nxt else None})
    return out


def _row(r: FxRate) -> dict[str, Any]:
    return {"base": r.base, "quote": r.quote, "rate": r.rate, "valid_from": r.valid_from,
            "source": r.source}
