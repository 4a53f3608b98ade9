"""FOCUS 1.3 split cost allocation: a fleet's idle shared back to projects as allocated charges.

November 2026 (720 h, UTC), SQLite and PostgreSQL. Two fleets of rtx4090-own: ``own2`` (2 nodes, idle
shared ``proportional``) and ``own1`` (1 node, ``none``): 2,160 node-hours held. Runs drawn from them:
``llm-1`` 2 nodes × 30 h and ``llm-2`` 1 × 20 h (project llm, 80 node-hours), ``vis-1`` 1 × 40 h
(project vision). Idle: 2,040 node-hours; the offer's idle is split by the fleets' capacity first (2 : 1),
so llm takes 2/3 × 80/120 = 4/9 of it, vision 2/9, and 1/3 stays unallocated.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from decimal import Decimal

from sqlmodel import Session

from tests.focus.validate import problems
from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc
FIXED = D(120_000) / 36 + D("6.67")
IDLE = 2040 * (FIXED / 720 + D("0.8") * D("0.5"))  # idle node-hours × the idle rate (data/pricing.toml)
Q = D("1e-10")


def _read(path):
    reader = csv.DictReader(io.StringIO(path.read_text(encoding="utf-8")))
    return reader.fieldnames, list(reader)


def test_focus_13_splits_shared_idle_into_allocated_charges_whose_ratios_sum_to_one(cli, engine, tmp_path):
    from trainledger.money.account.chargeback import chargeback

    with Session(engine) as s:
        add_fleet(s, 2, name="own2")
        add_fleet(s, 1, name="own1")
        add_run(s, "llm-1", datetime(2026, 11, 2, tzinfo=UTC), 30, nodes=2, project="llm")
        add_run(s, "llm-2", datetime(2026, 11, 5, tzinfo=UTC), 20, nodes=1, project="llm")
        add_run(s, "vis-1", datetime(2026, 11, 9, tzinfo=UTC), 40, nodes=1, project="vision")
        s.commit()
    assert cli("fleet", "set", "own2", "--idle-share", "proportional").exit_code == 0
    v12, v13 = tmp_path / "v12.csv", tmp_path / "v13.csv"
    assert cli("report", "focus", "--month", "2026-11", "-o", v12).exit_code == 0
    res = cli("report", "focus", "--month", "2026-11", "-o", v13, "--focus-version", "1.3", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["focus_version"] == "1.3"
    h12, rows12 = _read(v12)
    h13, rows13 = _read(v13)
    assert "AllocatedMethodId" not in h12 and "x_ServiceProviderName" in h12  # 1.2 stays the default, unchanged
    for col in ("AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId", "AllocatedResourceName",
                "AllocatedTags", "ServiceProviderName", "HostProviderName"):
        assert col in h13 and f"x_{col}" not in h13
    origin = next(r for r in rows12 if r["CommitmentDiscountStatus"] == "Unused")
    assert D(origin["EffectiveCost"]) == IDLE.quantize(Q)
    allocated = [r for r in rows13 if r["AllocatedMethodId"]]
    assert len(allocated) == 3 and all(r["CommitmentDiscountStatus"] == "Unused" for r in allocated)
    details = [json.loads(r["AllocatedMethodDetails"], parse_float=D) for r in allocated]
    ratio = {r["AllocatedResourceId"] or None: d["Elements"][0]["AllocatedRatio"] for r, d in zip(allocated, details)}
    # the ratios of the one origin charge add up to exactly 1; each is its share on 10 places
    assert sum(ratio.values()) == 1
    # 4/9, 2/9 and 1/3 floored to 10 places leave 1e-10, handed to the largest remainder (4/9's: 0.44…)
    assert ratio == {"trainledger/projects/llm": D("0.4444444445"), "trainledger/projects/vision": D("0.2222222222"),
                     None: D("0.3333333333")}
    # the allocated charges add up to the origin: cost and quantity; dimensions and unit prices are the origin's
    assert sum(D(r["EffectiveCost"]) for r in allocated) == D(origin["EffectiveCost"])
    assert sum(D(r["PricingQuantity"]) for r in allocated) == D(origin["PricingQuantity"]) == D(2040)
    by = {r["AllocatedResourceId"]: r for r in allocated}
    assert abs(D(by["trainledger/projects/llm"]["EffectiveCost"]) - IDLE * 4 / 9) < D("1e-9")
    llm = by["trainledger/projects/llm"]
    assert llm["AllocatedMethodId"] == "trainledger/idle-share/proportional" and llm["AllocatedResourceName"] == "llm"
    assert json.loads(llm["AllocatedTags"]) == {"trainledger/project": "llm"}
    assert details[[r["AllocatedResourceId"] for r in allocated].index("trainledger/projects/llm")]["Elements"][0][
        "UsageQuantity"] == 80
    rest = by[""]
    assert rest["AllocatedMethodId"] == "trainledger/idle-share/none" and rest["AllocatedResourceName"] == ""
    for r in allocated:
        for col in ("ResourceId", "ChargeDescription", "ChargePeriodStart", "ListUnitPrice", "SkuPriceId", "SubAccountId"):
            assert r[col] == origin[col]
    # the rest of the dataset is the 1.2 one: same totals, and the 1.2 rules still hold on the split rows
    assert sum(D(r["EffectiveCost"]) for r in rows13) == sum(D(r["EffectiveCost"]) for r in rows12)
    back = [{**{c: r.get(c[2:]) if c in ("x_ServiceProviderName", "x_HostProviderName") else r.get(c) for c in h12}}
            for r in rows13]
    assert problems(h12, back) == []
    # the chargeback statements carry the same shares
    with Session(engine) as s:
        cb = chargeback(s, "2026-11")
    shares = {st.project: st.idle_share for st in cb.statements}
    assert abs(shares["llm"] - IDLE * 4 / 9) < D("1e-9") and abs(cb.unshared_idle - IDLE / 3) < D("1e-9")


def test_every_row_s_unit_price_times_quantity_is_its_list_cost_and_the_splits_add_up_to_their_origin(
        cli, engine, tmp_path):
    """November 2026 (720 h, UTC), two charge periods: the own offer's electricity goes from 0.5 to 0.6 CNY/kWh on
    Nov 16. Fleets of rtx4090-own: ``own3`` (3 nodes, idle shared ``weights:llm=2,vision=1``) and ``own1`` (1 node,
    ``none``). Runs, all in the first period (Nov 1-16, 360 h): llm-1 2 nodes × 30 h 17 min 13 s and vis-1
    1 node × 40 h 0 min 7 s drawn from the fleets (100 + 2,073/3,600 node-hours: not on any decimal grid), el-1
    3 nodes × 7 h 18 min on elastic rent. Each period's Unused row (the origin) is split by capacity 3 : 1, then
    2 : 1: llm 1/2, vision 1/4, unallocated 1/4 of it. FOCUS: "The product of ListUnitPrice and PricingQuantity MUST
    match the ListCost" (and ContractedUnitPrice, ContractedCost), on every row; allocated charges add up to their
    origin charge in every summable column (Data Generator-Calculated Split Cost Allocation Handling)."""
    from datetime import timedelta

    from trainledger.store.models import Run

    with Session(engine) as s:
        add_fleet(s, 3, name="own3")
        add_fleet(s, 1, name="own1")
        for rid, start, length, nodes, offer, project in (
                ("llm-1", datetime(2026, 11, 2, tzinfo=UTC), timedelta(hours=30, minutes=17, seconds=13), 2,
                 "rtx4090-own", "llm"),
                ("vis-1", datetime(2026, 11, 9, tzinfo=UTC), timedelta(hours=40, seconds=7), 1, "rtx4090-own", "vision"),
                ("el-1", datetime(2026, 11, 3, tzinfo=UTC), timedelta(hours=7, minutes=18), 3, "rtx4090-rent", "vision")):
            add_run(s, rid, start, 1, nodes=nodes, offer_name=offer, project=project)
            run = s.get(Run, rid)
            run.ended_at = run.heartbeat_at = start + length
        s.commit()
    assert cli("fleet", "set", "own3", "--idle-share", "weights:llm=2,vision=1").exit_code == 0
    res = cli("pricing", "set", "rtx4090-own", "electricity_price_per_kwh=0.6", "--from", "2026-11-16",
              "--retroactive", "--yes")
    assert res.exit_code == 0, res.output
    v12, v13 = tmp_path / "v12.csv", tmp_path / "v13.csv"
    assert cli("report", "focus", "--month", "2026-11", "-o", v12).exit_code == 0
    assert cli("report", "focus", "--month", "2026-11", "-o", v13, "--focus-version", "1.3").exit_code == 0
    _, rows12 = _read(v12)
    _, rows13 = _read(v13)

    # every row of both files: unit price × quantity = cost, to the file's 10 decimals (a split's row: within 1e-10)
    for r in rows12 + rows13:
        limit = D("1e-10") if r.get("AllocatedMethodId") else D("0.5e-10")
        for unit, cost in (("ListUnitPrice", "ListCost"), ("ContractedUnitPrice", "ContractedCost")):
            assert abs(D(r[unit]) * D(r["PricingQuantity"]) - D(r[cost])) <= limit, (r["ChargeDescription"], unit)

    # the origins, by hand: idle node-hours × the idle rate (fixed ÷ 720 h + 0.8 kW × the price of a kWh)
    origins = [r for r in rows12 if r["CommitmentDiscountStatus"] == "Unused"]
    idle_nh = [1440 - 100 - D(2073) / 3600, D(1440)]  # first period: 4 nodes × 360 h less the runs; second: all
    rate = [FIXED / 720 + D("0.8") * D("0.5"), FIXED / 720 + D("0.8") * D("0.6")]
    assert [D(r["PricingQuantity"]) for r in origins] == [q.quantize(Q) for q in idle_nh] == [
        D("1339.4241666667"), D("1440.0000000000")]
    assert [D(r["ListUnitPrice"]) for r in origins] == [x.quantize(D("1e-20")) for x in rate] == [
        D("5.03889351851851851852"), D("5.11889351851851851852")]
    assert [D(r["EffectiveCost"]) for r in origins] == [(q * x).quantize(Q) for q, x in zip(idle_nh, rate)]

    # each origin's allocated rows add up to it exactly; llm 1/2, vision 1/4, unallocated 1/4 of its quantity
    summable = ("EffectiveCost", "ListCost", "ContractedCost", "BilledCost", "PricingQuantity",
                "CommitmentDiscountQuantity")
    for origin, nh in zip(origins, idle_nh):
        split = [r for r in rows13 if r["AllocatedMethodId"] and r["ChargePeriodStart"] == origin["ChargePeriodStart"]]
        assert len(split) == 3
        for col in summable:
            assert sum(D(r[col]) for r in split) == D(origin[col]), col
        for r in split:
            assert (r["ListUnitPrice"], r["ContractedUnitPrice"]) == (origin["ListUnitPrice"], origin["ContractedUnitPrice"])
        qty = {r["AllocatedResourceId"]: D(r["PricingQuantity"]) for r in split}
        for who, part in (("trainledger/projects/llm", D(1) / 2), ("trainledger/projects/vision", D(1) / 4), ("", D(1) / 4)):
            assert abs(qty[who] - nh * part) <= D("1e-10"), who
    # and the rest of the 1.3 file is the 1.2 one
    assert sum(D(r["EffectiveCost"]) for r in rows13) == sum(D(r["EffectiveCost"]) for r in rows12)
