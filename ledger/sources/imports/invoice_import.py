"""``trainledger invoice import``: a provider's invoice into the ledger, whole or not at all.

1. The file is read and checked whole (:mod:`trainledger.sources.imports.invoice_files`): a bad value is one line,
   ``FILE:LINE: field: reason; fix``, and nothing is written.
2. One transaction writes the invoice and all its lines. The same lines imported again for the same provider are
   recognised by their digest and not written twice; an invoice with the provider and number of one already
   imported but other lines is a *correction*: it is written and the earlier one is marked replaced by it (its
   lines are kept, and only the newest counts in the reconciliation).
"""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

from sqlalchemy import insert
from sqlalchemy.engine import Engine
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.sources.imports.invoice_files import InvoiceFile, read_focus, read_mapped, read_mapping
from trainledger.store.db import session_scope
from trainledger.store.models import Invoice, InvoiceLine
from trainledger.store.settings import display_timezone

FORMATS = ("focus", "csv")
NUMBER_LIMIT, PROVIDER_LIMIT = 200, 100


def read_invoice(path: Path, fmt: Optional[str], mapping: Optional[Path], tz) -> InvoiceFile:
    """The invoice file in ``fmt`` (focus | csv; None: csv when a mapping is given, else focus)."""
    fmt = fmt or ("csv" if mapping is not None else "focus")
    if fmt not in FORMATS:
        raise LedgerInputError(f"--format: expected focus or csv, got {fmt!r}")
    name = Path(path).name
    if fmt == "csv":
        if mapping is None:
            raise LedgerInputError("--mapping: a provider CSV needs its mapping file (--mapping FILE.toml; "
                                   "docs/INVOICES.md); a FOCUS file needs --format focus")
        return read_invoice_csv(path, name, mapping, tz)
    if mapping is not None:
        raise LedgerInputError("--mapping: a FOCUS file names its own columns; leave --mapping out or use --format csv")
    return read_focus(Path(path), name, tz)


def read_invoice_csv(path: Path, name: str, mapping: Path, tz) -> InvoiceFile:
    return read_mapped(Path(path), name, read_mapping(Path(mapping)), tz)


def _month_of(inv: InvoiceFile, tz) -> str:
    start = inv.billing_start or min(line.period_start for line in inv.lines)
    return f"{start.astimezone(tz):%Y-%m}"


def _names(inv: InvoiceFile, provider: Optional[str], invoice_id: Optional[str], month: str) -> tuple[str, str]:
    provider = (provider or inv.provider() or "").strip()
    if not provider:
        raise LedgerInputError("--provider: the file names no provider (FOCUS InvoiceIssuerName, the mapping "
                               "file's provider); give --provider NAME")
    number = (invoice_id or inv.number() or f"{provider}/{month}").strip()
    for flag, value, limit in (("--provider", provider, PROVIDER_LIMIT), ("--invoice-id", number, NUMBER_LIMIT)):
        if len(value) > limit or any(ord(c) < 32 for c in value):
            raise LedgerInputError(f"{flag}: at most {limit} printable characters, got {value[:40]!r}")
    return provider, number


def import_invoice(engine: Engine, path: Path, *, fmt: Optional[str] = None, provider: Optional[str] = None,
                   mapping: Optional[Path] = None, invoice_id: Optional[str] = None) -> dict[str, Any]:
    """Import one invoice file; a receipt: ``status`` imported | already imported | replaced, the invoice's id,
    provider, number, month, currency, lines and billed cost (Σ amounts), and the invoice it replaces."""
    with Session(engine) as s:
        tz = display_timezone(s)
    inv = read_invoice(path, fmt, mapping, tz)
    month = _month_of(inv, tz)
    provider, number = _names(inv, provider, invoice_id, month)
    digest = inv.digest()
    total = sum((line.amount for line in inv.lines), Decimal(0))
    with session_scope(engine) as s:
        same = s.exec(select(Invoice).where(Invoice.provider == provider, Invoice.digest == digest)).first()
        if same is not None:
            return _receipt(same, "already imported", None)
        earlier = s.exec(select(Invoice).where(Invoice.provider == provider, Invoice.number == number,
                                               Invoice.replaced_by.is_(None))).first()
        row = Invoice(provider=provider, number=number, month=month, currency=inv.currency, fmt=inv.fmt,
                      source=str(Path(path).name)[:500], digest=digest, lines=len(inv.lines), billed_cost=total)
        s.add(row)
        s.flush()
        _write_lines(s, row.id, inv)
        if earlier is not None:
            earlier.replaced_by = row.id
            s.add(earlier)
        return _receipt(row, "replaced" if earlier is not None else "imported", earlier)


def _write_lines(s: Session, invoice_id: int, inv: InvoiceFile) -> None:
    values = []
    for line in inv.lines:
        d = asdict(line)
        d.pop("currency")
        values.append({**d, "invoice_id": invoice_id})
    for i in range(0, len(values), 1000):
        s.execute(insert(InvoiceLine), values[i:i + 1000])


def _receipt(row: Invoice, status: str, earlier: Optional[Invoice]) -> dict[str, Any]:
    return {"status": status, "invoice": row.id, "provider": row.provider, "number": row.number, "month": row.month,
            "currency": row.currency, "format": row.fmt, "lines": row.lines, "billed_cost": row.billed_cost,
            "replaces": earlier.id if earlier is not None else None}


def receipt_text(d: dict[str, Any]) -> str:
    head = {"imported": "imported", "already imported": "already imported (nothing written):",
            "replaced": "imported a correction:"}[d["status"]]
    text = (f"{head} invoice #{d['invoice']} {d['number']} of {d['provider']} for {d['month']}: {d['lines']} lines, "
            f"billed {d['billed_cost']:,.2f} {d['currency']}")
    if d["replaces"]:
        text += f"; it replaces invoice #{d['replaces']} (kept, marked replaced)"
    return text


def list_invoices(session: Session, month: Optional[str] = None) -> list[dict[str, Any]]:
    """Every imported invoice (newest first): what it is and whether a correction replaced it."""
    q = select(Invoice).order_by(Invoice.id.desc())
    if month:
        q = q.where(Invoice.month == month)
    return [{"invoice": r.id, "provider": r.provider, "number": r.number, "month": r.month, "currency": r.currency,
             "format": r.fmt, "lines": r.lines, "billed_cost": r.billed_cost, "imported_at": r.imported_at,
             "source": r.source, "replaced_by": r.replaced_by} for r in session.exec(q)]
