"""``trainledger invoice import`` and ``invoice map``: whole or nothing, FILE:LINE errors, an invoice imported twice
recognised, a corrected one replacing the earlier with a record of both; the mapping's rules."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.store.models import Invoice, InvoiceLine

from tests.invoice import scenario

D = Decimal


def _counts(engine) -> tuple[int, int]:
    with Session(engine) as s:
        return len(s.exec(select(Invoice.id)).all()), len(s.exec(select(InvoiceLine.id)).all())


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_bad_lines_are_refused_with_file_line_and_nothing_is_written(cli, engine, tmp_path):
    good = scenario.focus_invoice()
    cases = {
        "BilledCost": (good.replace("\n12.00,USD", "\ntwelve,USD"), "bad.csv:7: BilledCost: expected a number such "
                       "as 1234.56, got 'twelve'"),
        "currency": (good.replace("\n12.00,USD", "\n12.00,EUR"), "bad.csv:7: currency: EUR, but line 2 is in USD; an "
                     "invoice has one billing currency (split the file)"),
        "period": (good.replace("2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,GPU node node-z9",
                                "2026-11-31T00:00:00Z,2026-12-01T00:00:00Z,GPU node node-z9"),
                   "bad.csv:7: ChargePeriodStart: expected an ISO 8601 time such as 2026-11-03T08:00:00, got "
                   "'2026-11-31T00:00:00Z'"),
        "unit": (good.replace(",Hours,node-z9", ",Gigawatts,node-z9"), "bad.csv:7: unit: unknown unit 'Gigawatts'; use "
                 "hours or months, or name it in the mapping file's [units] table"),
        "fields": (good.replace("\n12.00,USD,", "\n12.00,USD,extra,"), "bad.csv:7: expected 17 fields as in the "
                   "header, got 18; quote fields that hold the delimiter"),
        "header": (good.replace("BilledCost,", "Cost,", 1), "bad.csv:1: not a FOCUS file: no BilledCost column; a "
                   "provider CSV needs --format csv --mapping FILE"),
    }
    for case, (text, message) in cases.items():
        res = cli("invoice", "import", _write(tmp_path, "bad.csv", text))
        assert (res.exit_code, res.output.strip()) == (2, f"error: {message}"), case
    assert _counts(engine) == (0, 0)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_mapping_file_is_checked_before_the_csv(cli, engine, tmp_path):
    invoice = _write(tmp_path, "gpuhub.csv", scenario.mapped_invoice())
    cases = {
        'provider = "x"\n': "--mapping: {m}: needs a [columns] table of field = \"column name\"",
        '[columns]\namount = "Total"\nresource = "Instance"\nperiod = "Billing month"\nprice = "Rate"\n':
            "--mapping: {m}: [columns] price: not a field; use period, period_start, period_end, resource, "
            "description, quantity, unit, unit_price, amount, currency, invoice_id, pricing_currency, fx_rate",
        '[columns]\namount = "Total"\nresource = "Instance"\n': "--mapping: {m}: [columns] needs period_start, "
            "period_end, currency (the period as `period`, or `period_start` and `period_end`; currency as a column "
            "or a top-level `currency`)",
        'currency = "USD"\n[columns]\namount = "Amount"\nresource = "Instance"\nperiod = "Billing month"\n':
            "gpuhub.csv:1: no column 'Amount', which the mapping file names; the header has Invoice, Billing month, "
            "Instance, Item, Qty, Unit, Rate, Total, Cur, Priced in, FX",
        "[columns\n": "--mapping: {m} is not valid TOML (",
    }
    for text, message in cases.items():
        mapping = _write(tmp_path, "m.toml", text)
        res = cli("invoice", "import", invoice, "--mapping", mapping, "--provider", "gpuhub")
        assert res.exit_code == 2 and res.output.strip().startswith("error: " + message.format(m=mapping)), res.output
    res = cli("invoice", "import", invoice)
    assert (res.exit_code, res.output.strip()) == (2, "error: gpuhub.csv:1: not a FOCUS file: no BilledCost, "
               "BillingCurrency, ChargePeriodStart, ChargePeriodEnd column; a provider CSV needs --format csv "
               "--mapping FILE")
    assert _counts(engine) == (0, 0)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_files_are_read_with_a_size_limit(cli, engine, tmp_path, monkeypatch):
    from trainledger.sources.imports import invoice_files

    monkeypatch.setattr(invoice_files, "MAX_BYTES", 100)
    path = _write(tmp_path, "big.csv", scenario.focus_invoice())
    res = cli("invoice", "import", path)
    assert res.exit_code == 2
    assert res.output.strip() == f"error: FILE: {path} is {path.stat().st_size:,} bytes; at most 100 are read (split the file)"


def test_an_invoice_imported_twice_is_recognised_and_a_correction_replaces_it(cli, engine, tmp_path):
    scenario.ledger(cli, engine, tmp_path)
    first = _write(tmp_path, "inv.csv", scenario.focus_invoice())
    a = json.loads(cli("invoice", "import", first, "--json").output)
    assert (a["status"], a["number"], a["month"], a["replaces"]) == ("imported", "INV-2026-11", "2026-11", None)
    again = cli("invoice", "import", first, "--json")
    assert again.exit_code == 0 and json.loads(again.output) == {**a, "status": "already imported"}
    assert _counts(engine) == (1, 8)
    # the correction: the provider credits the rate difference on node-a1 and bills r4's hours it had left out
    fixed = [line if line[0] != "node-a1" else ("node-a1", "10", "hours", "2.40", "24.00", None, None)
             for line in scenario.LINES] + [("node-c1", "3", "hours", "2.40", "7.20", None, None)]
    b = json.loads(cli("invoice", "import", _write(tmp_path, "inv-v2.csv", scenario.focus_invoice(fixed)), "--json").output)
    assert (b["status"], b["number"], b["replaces"], b["lines"]) == ("replaced", "INV-2026-11", a["invoice"], 9)
    assert _counts(engine) == (2, 17)  # both kept
    listed = json.loads(cli("invoice", "list", "--json").output)
    assert [(i["invoice"], i["replaced_by"]) for i in listed] == [(b["invoice"], None), (a["invoice"], b["invoice"])]
    doc = json.loads(cli("invoice", "reconcile", "--month", "2026-11", "--json").output)
    assert [i["invoice"] for i in doc["invoices"]] == [b["invoice"]]
    assert sorted(d["class"] for d in doc["differences"]) == sorted(
        ["minimum_or_granularity", "rounding", "fx", "billed_without_runs", "unmatched"])


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_mapping_rules(cli, engine, tmp_path):
    from trainledger.store.mappings.invoice_map import load_rules, resolve

    assert cli("invoice", "map").output.strip().startswith("no invoice mapping")
    for args in (("node-*", "--offer", "rtx4090-rent"), ("node-7", "--offer", "rtx4090-reserved", "--node", "gpu07"),
                 ("node-*", "--offer", "rtx4090-own", "--provider", "acme")):
        assert cli("invoice", "map", *args).exit_code == 0
    with Session(engine) as s:
        rules = load_rules(s)
    assert resolve(rules, "other", "node-3").offer == "rtx4090-rent"
    assert (resolve(rules, "other", "node-7").offer, resolve(rules, "other", "node-7").node) == ("rtx4090-reserved", "gpu07")
    assert resolve(rules, "acme", "node-3").offer == "rtx4090-own"  # the provider's own rule first
    assert resolve(rules, "other", "disk-1") is None
    res = cli("invoice", "map", "x", "--offer", "nope")
    assert res.exit_code == 2 and res.output.startswith("error: --offer: unknown offer 'nope'; use one of ")
    assert cli("invoice", "map", "node-*", "--remove").exit_code == 0
    assert [(r["provider"], r["pattern"]) for r in json.loads(cli("invoice", "map", "--json").output)] == [
        ("(any)", "node-7"), ("acme", "node-*")]
    res = cli("invoice", "map", "node-*", "--remove")
    assert (res.exit_code, res.output.strip()) == (2, "error: PATTERN: no mapping 'node-*' for any provider; see "
                                                      "`trainledger invoice map`")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_provider_csv_with_its_own_delimiter_times_and_units(cli, engine, tmp_path):
    mapping = _write(tmp_path, "m.toml", 'provider = "market"\ncurrency = "USD"\ndelimiter = ";"\n'
                     '[columns]\nperiod_start = "from"\nperiod_end = "to"\nresource = "box"\nquantity = "h"\n'
                     'unit = "u"\nunit_price = "price"\namount = "total"\n[units]\n"gpu-box-hour" = "hours"\n')
    invoice = _write(tmp_path, "market.csv", "from;to;box;h;u;price;total\n"
                     "2026-11-03T08:00:00;2026-11-03T10:30:00;box-1;2.5;gpu-box-hour;2.40;6.00\n"
                     "2026-11-04;2026-11-05;box-2;24;hours;2.40;57.60\n")
    res = cli("invoice", "import", invoice, "--mapping", mapping, "--json")
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.output)
    assert (receipt["provider"], receipt["number"], receipt["month"], receipt["lines"], receipt["billed_cost"]) == (
        "market", "market/2026-11", "2026-11", 2, "63.60")
    with Session(engine) as s:
        lines = s.exec(select(InvoiceLine).order_by(InvoiceLine.line_no)).all()
    assert [(ln.line_no, ln.resource, ln.quantity, ln.unit, ln.period_start.isoformat(), ln.period_end.isoformat())
            for ln in lines] == [
        (2, "box-1", D("2.5"), "hours", "2026-11-03T08:00:00+00:00", "2026-11-03T10:30:00+00:00"),
        (3, "box-2", D(24), "hours", "2026-11-04T00:00:00+00:00", "2026-11-05T00:00:00+00:00")]
