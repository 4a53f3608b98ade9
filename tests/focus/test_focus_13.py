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
