"""A November 2026 ledger rented from one provider, and its invoice with one planted difference of each class.

Offers (node type rtx4090-8x): ``hub-h100`` elastic at 2.40 USD per node-hour billed exactly (no granularity, no
minimum), ``hub-cny`` elastic at 20 CNY per node-hour (the ledger's rate CNY→USD 0.14), ``hub-reserved`` 1,500 USD
per node-month with a 2-node reservation for November. The provider's invoice (USD) bills per node; the planted
differences and their amounts, computed here from the prices (never read from the output):

=====================  ===========  ===============================================================
class                  resource     what the invoice does
=====================  ===========  ===============================================================
rate                   node-a1      bills r1's 10 h on node-a1 at 2.50 instead of 2.40
minimum_or_granularity node-b1      bills r3's 0.5 h as a whole hour
rounding               node-d1      bills r2's 3.3 h × 2.40 = 7.92 as 8 (whole dollars)
runs_without_billing   (offer)      leaves r4's 3 h on node-c1 out
fx                     node-e1      converts r5's 200 CNY at 0.15, not the ledger's 0.14
billed_without_runs    node-z9      bills 5 h on a node no run used
unmatched              support      a support fee no mapping places
=====================  ===========  ===============================================================
"""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from sqlmodel import Session
from trainledger.store.models import RunNode

from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc
RATE, RATE_CNY, LEDGER_FX, PROVIDER_FX, RESERVED = D("2.40"), D("20"), D("0.14"), D("0.15"), D("1500")

#: the offers: (name, kind, currency, price field, price), each priced from 2026-10-01
OFFER_ROWS = [("hub-h100", "rent_elastic", "USD", "price_per_node_hour", "2.40"),
              ("hub-cny", "rent_elastic", "CNY", "price_per_node_hour", "20"),
              ("hub-reserved", "rent_reserved", "USD", "price_per_node_month", "1500")]
OFFERS = "".join(f'[[offer]]\nname = "{n}"\nnode_type = "rtx4090-8x"\nkind = "{k}"\ncurrency = "{c}"\n{f} = "{p}"\n'
                 "valid_from = 2026-10-01\n\n" for n, k, c, f, p in OFFER_ROWS)

#: (run, offer, start day, hours, hosts)
RUNS = [("r1", "hub-h100", 2, D(10), ["node-a1", "node-a2"]), ("r2", "hub-h100", 4, D("3.3"), ["node-d1"]),
        ("r3", "hub-h100", 6, D("0.5"), ["node-b1"]), ("r4", "hub-h100", 8, D(3), ["node-c1"]),
        ("r5", "hub-cny", 10, D(10), ["node-e1"])]

#: the invoice: (resource, quantity, unit, unit price, amount, pricing currency, provider's rate)
LINES = [
    ("node-a1", "10", "hours", "2.50", "25.00", None, None),
    ("node-a2", "10", "hours", "2.40", "24.00", None, None),
    ("node-d1", "3.3", "hours", "2.40", "8", None, None),
    ("node-b1", "1", "hours", "2.40", "2.40", None, None),
    ("node-e1", "10", "hours", "3.00", "30.00", "CNY", "0.15"),
    ("node-z9", "5", "hours", "2.40", "12.00", None, None),
    ("reservation-1", "2", "node-months", "1500", "3000.00", None, None),
    ("support", "1", "hours", "50", "50.00", None, None),
]

#: the planted differences: (class, resource as the reconciliation names it, amount)
PLANTED = sorted([
    ("rate", "node:node-a1", D("25.00") - 10 * RATE),
    ("minimum_or_granularity", "node:node-b1", (1 - D("0.5")) * RATE),
    ("rounding", "node:node-d1", D(8) - D("3.3") * RATE),
    ("runs_without_billing", None, -3 * RATE),
    ("fx", "node:node-e1", D("30.00") - 10 * RATE_CNY * LEDGER_FX),
    ("billed_without_runs", "node:node-z9", 5 * RATE),
    ("unmatched", "support", D("50.00")),
])


def ledger(cli, engine, tmp_path: Path) -> None:
    """The offers (through `pricing import`), the rate, the reservation, the runs and their nodes, the mapping."""
    offers = tmp_path / "offers.toml"
    offers.write_text(OFFERS)
    for args in (("pricing", "import", offers), ("fx", "set", "CNY", "USD", str(LEDGER_FX), "--from", "2026-10-01"),
                 ("invoice", "map", "node-*", "--offer", "hub-h100", "--node", "*"),
                 ("invoice", "map", "node-e*", "--offer", "hub-cny", "--node", "*"),
                 ("invoice", "map", "reservation-*", "--offer", "hub-reserved")):
        res = cli(*args)
        assert res.exit_code == 0, (args, res.output)
    with Session(engine) as s:
        add_fleet(s, 2, offer_name="hub-reserved", valid_from=date(2026, 11, 1), valid_to=date(2026, 12, 1))
        for run_id, offer, day, hours, hosts in RUNS:
            start = datetime(2026, 11, day, 8, tzinfo=UTC)
            run = add_run(s, run_id, start, 0, nodes=len(hosts), offer_name=offer)
            run.ended_at = run.heartbeat_at = start + timedelta(seconds=int(hours * 3600))
            s.add(run)
            for host in hosts:
                s.add(RunNode(run_id=run_id, hostname=host))
        s.commit()


def _period(resource: str) -> tuple[str, str]:
    return "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"


FOCUS_HEADER = ["BilledCost", "BillingCurrency", "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory",
                "ChargePeriodStart", "ChargePeriodEnd", "ChargeDescription", "ContractedUnitPrice", "InvoiceId",
                "InvoiceIssuerName", "PricingCurrency", "PricingCurrencyEffectiveCost", "PricingQuantity",
                "PricingUnit", "ResourceId", "SkuId"]


def focus_invoice(lines=LINES) -> str:
    """The invoice as a FOCUS 1.2 CSV (the FX line states its pricing currency and amount in it)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(FOCUS_HEADER)
    for resource, qty, unit, price, amount, pricing, fx in lines:
        start, end = _period(resource)
        priced = str(D(amount) / D(fx)) if fx else ""
        w.writerow([amount, "USD", start, end, "Purchase" if unit == "node-months" else "Usage", start, end,
                    f"GPU node {resource}", price, "INV-2026-11", "GPU Hub", pricing or "", priced, qty,
                    "Node-Months" if unit == "node-months" else "Hours", resource, "gpu-node"])
    return buf.getvalue()


MAPPING = """
provider = "gpuhub"
[columns]
period = "Billing month"
resource = "Instance"
description = "Item"
quantity = "Qty"
unit = "Unit"
unit_price = "Rate"
amount = "Total"
currency = "Cur"
pricing_currency = "Priced in"
fx_rate = "FX"
invoice_id = "Invoice"
[units]
"node-months" = "months"
"""


def mapped_invoice(lines=LINES) -> str:
    """The invoice as the provider's own CSV (columns named by :data:`MAPPING`)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Invoice", "Billing month", "Instance", "Item", "Qty", "Unit", "Rate", "Total", "Cur", "Priced in", "FX"])
    for resource, qty, unit, price, amount, pricing, fx in lines:
        w.writerow(["GH-1001", "2026-11", resource, f"GPU node {resource}", qty, unit, price, amount, "USD",
                    pricing or "", fx or ""])
    return buf.getvalue()
