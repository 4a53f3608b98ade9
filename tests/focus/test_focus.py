"""The FOCUS export follows the FOCUS 1.2 column rules and reconciles with the monthly report.

SQLite and PostgreSQL. November 2025: an owned 4-node fleet, elastic runs (one across a price
change on Nov 15), a reserved offer with no fleet (sized by peak use), a failed run, a run with no
project and one with no offer. The rules are the specification's (tests/focus/validate.py).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from datetime import date, datetime, timezone
from decimal import Decimal

from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates.costs import cents
from trainledger.store.models import RunStatus

from tests.focus.validate import problems
from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc


def _ledger(cli, engine) -> None:
    with Session(engine) as s:
        add_fleet(s, 4, valid_from=date(2025, 1, 1))
        add_run(s, "own-a", datetime(2025, 11, 3, tzinfo=UTC), 50, nodes=4, tokens=10**9, gpu_util=0.9)
        add_run(s, "own-b", datetime(2025, 11, 20, tzinfo=UTC), 30, nodes=2, status=RunStatus.failed, project="p2")
        add_run(s, "no-offer", datetime(2025, 11, 25, tzinfo=UTC), 10, nodes=1, offer_name=None, project="p2")
        add_run(s, "rent-across", datetime(2025, 11, 14, 18, tzinfo=UTC), 12.5, nodes=2, offer_name="rtx4090-rent")
        add_run(s, "rent-late", datetime(2025, 11, 28, tzinfo=UTC), 3, nodes=1, offer_name="rtx4090-rent", project="")
        add_run(s, "reserved", datetime(2025, 11, 10, tzinfo=UTC), 100, nodes=3, offer_name="rtx4090-reserved")
        s.commit()
    res = cli("pricing", "set", "rtx4090-rent", "price_per_node_month=4380", "--from", "2025-11-15", "--retroactive", "--yes")
    assert res.exit_code == 0, res.output


def _read(path) -> tuple[list[str], list[dict]]:
    text = path.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    return reader.fieldnames, list(reader)


def test_the_focus_csv_follows_the_column_rules_and_reconciles_with_the_monthly_report(cli, engine, tmp_path):
    _ledger(cli, engine)
    out = tmp_path / "nov.csv"
    res = cli("report", "focus", "--month", "2025-11", "-o", out, "--json")
    assert res.exit_code == 0, res.output
    header, rows = _read(out)
    assert problems(header, rows) == []
    report = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json").output)
    actual = report["summary"]["actual_cost"]
    assert str(cents(sum(D(r["EffectiveCost"]) for r in rows))) == actual == str(cents(sum(D(r["BilledCost"]) for r in rows)))
    assert json.loads(res.output)["effective_cost"] == actual
    kinds = sorted((r["ChargePeriodStart"][5:10], r["ChargeCategory"], r["CommitmentDiscountStatus"], r["x_RunId"] or r["ResourceId"])
                   for r in rows)
    fleets = [(period, cat, status, f"trainledger/commitments/{offer}") for period in ("11-01", "11-15")
              for cat, status in (("Purchase", ""), ("Usage", "Unused")) for offer in ("rtx4090-own", "rtx4090-reserved")]
    # the price change on Nov 15 cuts the node type's month in two charge periods: each fleet is charged in both
    assert kinds == sorted(fleets + [
        ("11-01", "Usage", "Used", "own-a"), ("11-15", "Usage", "Used", "own-b"), ("11-15", "Usage", "Used", "no-offer"),
        ("11-01", "Usage", "Used", "reserved"), ("11-01", "Usage", "", "rent-across"), ("11-15", "Usage", "", "rent-across"),
        ("11-15", "Usage", "", "rent-late")])
    # the run across the price change: one row per charge period, each at its version's hourly rate
    across = sorted((r for r in rows if r["x_RunId"] == "rent-across"), key=lambda r: r["ChargePeriodStart"])
    assert [(r["ChargePeriodStart"], r["ChargePeriodEnd"], r["SkuPriceId"], r["ListUnitPrice"][:8]) for r in across] == [
        ("2025-11-01T00:00:00Z", "2025-11-15T00:00:00Z", "rtx4090-rent@v1", str(D(3600) / 730)[:8]),
        ("2025-11-15T00:00:00Z", "2025-12-01T00:00:00Z", "rtx4090-rent@v2", "6.000000")]
    # 13 billed hours × 2 nodes, shared by time: 6 h of 12.5 before the change, 6.5 after
    assert [D(r["PricingQuantity"]) for r in across] == [D(26) * 6 / D("12.5"), D(26) * D("6.5") / D("12.5")]
    with Session(engine) as s:
        lines = {r.run_id: r.cost for r in monthly_report(s, "2025-11").runs}
    for rid, cost in lines.items():  # each run's rows add up to its line of the monthly report
        assert abs(sum(D(r["EffectiveCost"]) for r in rows if r["x_RunId"] == rid) - cost) < D("1e-8"), rid
    tags = json.loads(next(r for r in rows if r["x_RunId"] == "own-a")["Tags"])
    assert tags == {"trainledger/user": "u1"}
    assert next(r for r in rows if r["x_RunId"] == "own-a")["SubAccountName"] == "p1"
    assert next(r for r in rows if r["x_RunId"] == "rent-late")["SubAccountId"] == ""  # no project: null


def test_the_parquet_file_has_the_same_rows_with_types(cli, engine, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    _ledger(cli, engine)
    assert cli("report", "focus", "--month", "2025-11", "-o", tmp_path / "nov.csv").exit_code == 0
    assert cli("report", "focus", "--month", "2025-11", "-o", tmp_path / "nov.parquet", "--format", "parquet").exit_code == 0
    header, rows = _read(tmp_path / "nov.csv")
    table = pq.read_table(tmp_path / "nov.parquet")
    assert table.column_names == header and table.num_rows == len(rows)
    assert table.schema.field("EffectiveCost").type == pa.decimal128(38, 10)
    # unit prices keep 20 decimals, so unit price × PricingQuantity = ListCost to the cost's 10 on every row
    assert table.schema.field("ListUnitPrice").type == table.schema.field("ContractedUnitPrice").type == pa.decimal128(38, 20)
    assert table.schema.field("ChargePeriodStart").type == pa.timestamp("ms", tz="UTC")
    assert table.schema.metadata[b"focus_version"] == b"1.2"
    for got, want in zip(table.to_pylist(), rows):
        assert format(got["EffectiveCost"], "f") == want["EffectiveCost"] and got["ResourceId"] == (want["ResourceId"] or None)
        assert format(got["ListUnitPrice"], "f") == want["ListUnitPrice"]
        assert abs(got["ListUnitPrice"] * got["PricingQuantity"] - got["ListCost"]) <= D("0.5e-10")
        assert got["ChargePeriodStart"].strftime("%Y-%m-%dT%H:%M:%SZ") == want["ChargePeriodStart"]


def test_the_focus_export_in_usd_converts_each_charge_period(cli, engine, tmp_path):
    _ledger(cli, engine)
    assert cli("fx", "set", "CNY", "USD", "0.14", "--from", "2025-11-01").exit_code == 0
    assert cli("fx", "set", "CNY", "USD", "0.15", "--from", "2025-11-16").exit_code == 0
    out = tmp_path / "usd.csv"
    assert cli("report", "focus", "--month", "2025-11", "-o", out, "--currency", "USD").exit_code == 0
    header, rows = _read(out)
    assert problems(header, rows) == []
    assert {r["BillingCurrency"] for r in rows} == {"USD"} and {r["x_OfferCurrency"] for r in rows} == {"CNY"}
    assert {r["x_FxRate"] for r in rows} == {"0.1400000000", "0.1500000000"}
    usd = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json", "--currency", "USD").output)
    assert str(cents(sum(D(r["EffectiveCost"]) for r in rows))) == usd["summary"]["actual_cost"]
    # the same rows in CNY, each × its own period's rate, give the same dollars
    assert cli("report", "focus", "--month", "2025-11", "-o", tmp_path / "cny.csv").exit_code == 0
    _, cny = _read(tmp_path / "cny.csv")
    rate = {"2025-11-01T00:00:00Z": D("0.14"), "2025-11-15T00:00:00Z": D("0.14"), "2025-11-16T00:00:00Z": D("0.15")}
    assert cents(sum(D(r["EffectiveCost"]) * rate[r["ChargePeriodStart"]] for r in cny)) == D(usd["summary"]["actual_cost"])


def test_a_month_with_no_data_or_no_pyarrow_is_refused_and_nothing_is_written(cli, engine, tmp_path, monkeypatch):
    out = tmp_path / "empty.csv"
    res = cli("report", "focus", "--month", "2025-01", "-o", out)
    assert res.exit_code == 2 and res.stderr == ("error: --month: 2025-01 has no runs and no fleet in this ledger; "
                                                 "nothing to export\n") and not out.exists()
    res = cli("report", "focus", "--month", "2025-01", "-o", out, "--format", "xlsx")
    assert res.exit_code == 2 and "--format: expected csv or parquet" in res.stderr
    _ledger(cli, engine)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as on a laptop without the [focus] extra
    res = cli("report", "focus", "--month", "2025-11", "-o", tmp_path / "x.parquet", "--format", "parquet")
    assert res.exit_code == 2 and "pip install 'trainledger[focus]'" in res.stderr and not (tmp_path / "x.parquet").exists()


def test_the_validator_finds_each_kind_of_violation(cli, engine, tmp_path):
    """The checks above can fail: one broken copy of a valid export per rule."""
    _ledger(cli, engine)
    out = tmp_path / "nov.csv"
    assert cli("report", "focus", "--month", "2025-11", "-o", out).exit_code == 0
    header, rows = _read(out)
    unused = next(i for i, r in enumerate(rows) if r["CommitmentDiscountStatus"] == "Unused")
    elastic = next(i for i, r in enumerate(rows) if r["x_RunId"] == "rent-late")
    breaks = [
        (header + ["Colour"], None, None, "Colour: not a FOCUS 1.2 column and not prefixed x_"),
        ([c for c in header if c != "BilledCost"], None, None, "BilledCost: a Mandatory column is missing"),
        (header, elastic, {"ChargeCategory": "Refund"}, "'Refund' is not one of ['Usage', 'Purchase', 'Tax', 'Credit', 'Adjustment']"),
        (header, elastic, {"BilledCost": ""}, "BilledCost MUST NOT be null"),
        (header, elastic, {"BilledCost": "+1.5"}, "BilledCost: '+1.5' is not in NumericFormat"),
        (header, elastic, {"ChargePeriodStart": "2025-11-01 00:00:00"}, "is not 'YYYY-MM-DDTHH:mm:ssZ'"),
        (header, elastic, {"BillingCurrency": "XXY"}, "BillingCurrency: 'XXY' is not an ISO 4217 code"),
        (header, elastic, {"ListCost": "1"}, "ListUnitPrice × PricingQuantity MUST match ListCost"),
        (header, elastic, {"ConsumedUnit": ""}, "ConsumedUnit MUST be null iff ConsumedQuantity is"),
        (header, unused, {"ConsumedQuantity": "1", "ConsumedUnit": "Node-Hours"}, "ConsumedQuantity MUST be null when"),
        (header, unused, {"EffectiveCost": "0"}, "Σ EffectiveCost of Usage"),
        (header, elastic, {"Tags": "[1, 2]"}, "is not a JSON object of scalar values"),
        (header + ["HostProviderName"], None, None, "HostProviderName: not a FOCUS 1.2 column and not prefixed x_"),
        (header, unused, {"ResourceId": "trainledger/fleets/rtx4090-own"}, "ResourceId MUST be the CommitmentDiscountId"),
    ]
    for cols, i, change, needle in breaks:
        broken = [dict(r) for r in rows]
        if i is not None:
            broken[i].update(change)
        found = problems(cols, [{c: r.get(c, "") for c in cols} for r in broken])
        assert any(needle in p for p in found), (needle, found)
