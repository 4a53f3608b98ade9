"""``trainledger invoice import|map|reconcile|list``: providers' invoices against the ledger (docs/INVOICES.md).

``invoice reconcile`` prints the month's status and exits 1 when differences remain (like ``budget check``), so a
month-end job can stop on it::

    trainledger invoice import 2026-11-focus.parquet --provider gpucloud
    trainledger invoice reconcile --month 2026-11 || mail -s "2026-11 does not reconcile" finance@example.com
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, decimal_option, emit, group, session

app = group("Providers' invoices: import them (FOCUS or a mapped provider CSV), map their resources to offers, and "
            "reconcile a month with the ledger.")

ProviderOpt = Annotated[Optional[str], typer.Option("--provider", help="The provider the invoice is from (default: the file's InvoiceIssuerName, or the mapping file's provider).")]


@app.command("import")
@command
def invoice_import(file: Annotated[Path, typer.Argument(help="The invoice: FOCUS 1.0-1.3 CSV or Parquet, or a provider CSV with --mapping.")],
                   provider: ProviderOpt = None,
                   fmt: Annotated[Optional[str], typer.Option("--format", help="focus | csv (default: csv with --mapping, else focus).")] = None,
                   mapping: Annotated[Optional[Path], typer.Option("--mapping", help="A provider CSV's mapping file (TOML: which column holds period, resource, description, quantity, unit, unit price, amount, currency).")] = None,
                   invoice_id: Annotated[Optional[str], typer.Option("--invoice-id", help="The invoice's number (default: the file's InvoiceId, else PROVIDER/YYYY-MM). The same number with other lines is a correction that replaces the earlier invoice.")] = None,
                   db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Import an invoice whole (validated before anything is written; a bad value is FILE:LINE and nothing is
    kept). The same invoice imported again is recognised, not doubled; a corrected one replaces the earlier."""
    from trainledger.sources.imports.invoice_import import import_invoice, receipt_text
    from trainledger.store.db import get_engine

    receipt = import_invoice(get_engine(db), file, fmt=fmt, provider=provider, mapping=mapping, invoice_id=invoice_id)
    emit(receipt, as_json, receipt_text)


@app.command("map")
@command
def invoice_map(pattern: Annotated[Optional[str], typer.Argument(help="A resource id as the invoice writes it, or a glob over them (gpu-node-*). Leave out to list the mapping.")] = None,
                offer: Annotated[Optional[str], typer.Option("--offer", help="The offer the resource is paid under.")] = None,
                node: Annotated[str, typer.Option("--node", help="The node (a host name of the runs' nodes) the resource is; '*': the resource id is the host name; leave out for the offer as a whole.")] = "",
                provider: Annotated[str, typer.Option("--provider", help="Only for this provider's invoices (default: any provider).")] = "",
                remove: Annotated[bool, typer.Option("--remove", help="Remove the rule for PATTERN (and --provider).")] = False,
                db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Map an invoice's resource to an offer (and a node): `invoice map 'gpu-node-*' --offer h100-rent --provider
    gpucloud`. Without PATTERN: list the rules."""
    from trainledger.errors import LedgerInputError
    from trainledger.reports.present import table
    from trainledger.store.mappings.invoice_map import load_rules, remove_rule, set_rule

    with session(db) as s:
        if pattern is None:
            rules = [r.as_dict() for r in sorted(load_rules(s), key=lambda r: (r.provider, r.pattern))]
            emit(rules, as_json, lambda rs: table(rs) if rs else
                 "no invoice mapping; add one with `trainledger invoice map PATTERN --offer OFFER [--node HOST]`")
            return
        if remove:
            remove_rule(s, pattern, provider=provider)
            emit({"removed": pattern, "provider": provider or None}, as_json, lambda d: f"removed the mapping {pattern}")
            return
        if not offer:
            raise LedgerInputError("--offer: name the offer the resource is paid under (`trainledger pricing` lists them)")
        rule = set_rule(s, pattern, offer, provider=provider, node=node)
    emit(rule.as_dict(), as_json, lambda d: f"{d['pattern']} ({d['provider']}) → offer {d['offer']}"
         + (f", node {d['node']}" if d["node"] else ""))


@app.command("reconcile")
@command
def invoice_reconcile(month: Annotated[str, typer.Option(help="YYYY-MM (a calendar month in the display time zone).")],
                      provider: Annotated[Optional[str], typer.Option("--provider", help="Only this provider's invoices and the offers it bills (default: every invoice of the month).")] = None,
                      tolerance: Annotated[str, typer.Option("--tolerance", help="A difference counts when above this amount per invoice line (in the invoice's currency).")] = "0.01",
                      output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the reconciliation to this file (-: standard output, instead of the text; xlsx: not to a terminal).")] = None,
                      fmt: Annotated[str, typer.Option("--format", help="The file's format: csv (the differences) | xlsx (summary, charges, differences).")] = "csv",
                      force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")] = False,
                      db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Per offer and charge period, expected vs billed, and each difference classified with its amount; the
    month's status. Exit 1 when differences remain."""
    from trainledger.errors import LedgerInputError
    from trainledger.money.invoice.reconcile import reconcile
    from trainledger.reports.invoices import reconciliation_dict, reconciliation_text, to_csv, to_xlsx
    from trainledger.store.files import check_output, is_stdout, write_output

    if fmt not in ("csv", "xlsx"):
        raise LedgerInputError(f"--format: expected csv or xlsx, got {fmt!r}")
    if output is not None:
        check_output(output, force=force, binary=fmt == "xlsx")
    with session(db) as s:
        rec = reconcile(s, month, provider=provider, tolerance=decimal_option(tolerance, "--tolerance"),
                        now=clock(now))
    data = reconciliation_dict(rec)
    if output is not None:
        write_output(output, to_csv(data) if fmt == "csv" else to_xlsx(data), force=force, binary=fmt == "xlsx")
    if not is_stdout(output):
        emit(data, as_json, reconciliation_text)
    if not rec.reconciled:
        raise typer.Exit(1)


@app.command("list")
@command
def invoice_list(month: Annotated[Optional[str], typer.Option(help="YYYY-MM: only that month's invoices.")] = None,
                 db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every imported invoice, newest first; a corrected one names the invoice that replaced it."""
    from trainledger.reports.present import table
    from trainledger.sources.imports.invoice_import import list_invoices

    with session(db) as s:
        rows = list_invoices(s, month)
    emit(rows, as_json, lambda rs: table(rs, ["invoice", "provider", "number", "month", "currency", "lines",
                                              "billed_cost", "replaced_by"]) if rs else
         "no invoices; import one with `trainledger invoice import FILE`")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="invoice")
