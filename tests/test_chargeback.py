"""Idle charged back and chargeback statements: under every policy the statements add up to the month's spend.

November 2026 (720 h, UTC). Fleet ``own2``: 2 × rtx4090-own, so 1,440 node-hours held. Runs on it: ``llm-1``
2 nodes × 30 h and ``llm-2`` 1 × 20 h (failed, never checkpointed: all lost work), project llm; ``vis-1``
1 × 40 h, project vision; and ``vis-rent`` 1 × 10 h on rtx4090-rent (elastic, not drawn from the fleet).
Project ``audio`` exists but did not run. Busy 120 node-hours, idle 1,320.

Expected figures are written out from the preset prices (data/pricing.toml), as tests/month_helpers.py does:
owning a node costs 120,000 ÷ 36 + 6.67 per month of fixed cost, 4.0 kW at load and 0.8 kW idle at 0.5 per
kWh; renting 3,600 ÷ 730 per node-hour, billed per started hour.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime, timezone
from decimal import Decimal

from openpyxl import load_workbook
from trainledger.store.lookup import get_or_create
from trainledger.store.models import Project, RunStatus

from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc
MONTH = "2026-11"
HOURS = D(720)
FIXED = D(120_000) / 36 + D("6.67")
BUSY = FIXED / HOURS + D("4.0") * D("0.5")  # per owned node-hour in a run
IDLE = FIXED / HOURS + D("0.8") * D("0.5")  # per idle node-hour
RENT = D(3600) / 730
LLM_RUNS = 80 * BUSY
VISION_RUNS = 40 * BUSY + 10 * RENT
IDLE_COST = 1320 * IDLE
SPEND = LLM_RUNS + VISION_RUNS + IDLE_COST
LOST = 20 * BUSY

#: policy → (llm's, vision's, audio's share of idle, idle left unshared), from the node-hours above
EXPECTED = {
    "none": (D(0), D(0), D(0), IDLE_COST),
    "proportional": (IDLE_COST * 80 / 120, IDLE_COST * 40 / 120, D(0), D(0)),
    "even": (IDLE_COST / 2, IDLE_COST / 2, D(0), D(0)),
    "weights:llm=3,audio=1": (IDLE_COST * 3 / 4, D(0), IDLE_COST / 4, D(0)),
}
CENT = D("0.01")
Q = D("1e-10")


def _ledger(session):
    add_fleet(session, nodes=2, name="own2")
    add_run(session, "llm-1", datetime(2026, 11, 2, tzinfo=UTC), 30, nodes=2, project="llm")
    add_run(session, "llm-2", datetime(2026, 11, 5, tzinfo=UTC), 20, nodes=1, project="llm", status=RunStatus.failed)
    add_run(session, "vis-1", datetime(2026, 11, 9, tzinfo=UTC), 40, nodes=1, project="vision")
    add_run(session, "vis-rent", datetime(2026, 11, 12, tzinfo=UTC), 10, nodes=1, project="vision", offer_name="rtx4090-rent")
    get_or_create(session, Project, "audio")
    session.commit()


def _statement_totals(folder):
    with open(folder / f"{MONTH}-chargeback-summary.csv", newline="") as fh:
        return {r["statement"]: r for r in csv.DictReader(fh)}


def test_statements_add_up_to_spend_under_every_policy(cli, session, tmp_path):
    _ledger(session)
    for policy in EXPECTED:
        _check_policy(cli, session, tmp_path, policy)


def _check_policy(cli, session, tmp_path, policy):
    from trainledger.money.account.chargeback import chargeback

    r = cli("fleet", "set", "own2", "--idle-share", policy)
    assert r.exit_code == 0, r.output
    llm_idle, vision_idle, audio_idle, unshared = EXPECTED[policy]
    # the exact figures (Decimal), before any rounding
    cb = chargeback(session, MONTH, now=datetime(2026, 12, 5, tzinfo=UTC))
    session.commit()  # the rollup it brought up to date; and no read transaction left open for the CLI below
    assert cb.spend.quantize(Q) == SPEND.quantize(Q)
    assert cb.unshared_idle.quantize(Q) == unshared.quantize(Q)
    got = {s.project: s for s in cb.statements}
    assert got["llm"].run_cost.quantize(Q) == LLM_RUNS.quantize(Q)
    assert got["llm"].idle_share.quantize(Q) == llm_idle.quantize(Q)
    assert got["llm"].lost_work.quantize(Q) == LOST.quantize(Q)
    assert got["vision"].idle_share.quantize(Q) == vision_idle.quantize(Q)
    assert ("audio" in got) == bool(audio_idle)
    if audio_idle:
        assert got["audio"].total.quantize(Q) == audio_idle.quantize(Q) and not got["audio"].runs
    # the identity holds in Decimal (to its 28 digits): statements + idle left = spend
    assert abs(sum((s.total for s in cb.statements), D(0)) + cb.unshared_idle - cb.spend) < D("1e-18")

    out = tmp_path / policy.replace(":", "_").replace(",", "_")
    r = cli("report", "chargeback", "--month", MONTH, "-o", out, "--now", "2026-12-05T00:00:00Z", "--json")
    assert r.exit_code == 0, r.output
    rows = _statement_totals(out)
    # presented: each statement its exact figure half-up to the cent on its own (one rounding rule, issue 36);
    # the lines + a "rounding" line when their cents need one = the spend
    assert D(rows["spend"]["total"]) == SPEND.quantize(CENT)
    lines = [D(v["total"]) for k, v in rows.items() if k != "spend"]
    assert sum(lines) == SPEND.quantize(CENT)
    for name, exact in (("llm", LLM_RUNS + llm_idle), ("vision", VISION_RUNS + vision_idle), ("audio", audio_idle)):
        if exact:
            assert D(rows[name]["total"]) == exact.quantize(CENT)
    assert D(rows["idle (not charged back)"]["total"]) == unshared.quantize(CENT)
    # each statement's lines add up to its total: in the XLSX and in the HTML
    wb = load_workbook(out / f"{MONTH}-llm.xlsx")
    items = {k: v for k, v in wb["Statement"].iter_rows(min_row=2, values_only=True)}
    run_rows = list(wb["Runs"].iter_rows(min_row=2, values_only=True))
    run_costs = [D(str(row[9])) for row in run_rows]  # with a "(rounding)" line when the cents need one
    idle_parts = [D(str(row[5])) for row in wb["Idle share"].iter_rows(min_row=2, values_only=True)]
    assert D(str(items["run_cost"])) == LLM_RUNS.quantize(CENT) == sum(run_costs)
    assert D(str(items["idle_share"])) == llm_idle.quantize(CENT) == sum(idle_parts)
    assert D(str(items["total"])) == D(rows["llm"]["total"]) == D(str(items["run_cost"])) + D(
        str(items["idle_share"])) + D(str(items.get("rounding") or 0))
    assert D(str(items["lost_work_cost"])) == LOST.quantize(CENT)
    assert len([r for r in run_rows if r[0] != "(rounding)"]) == 2
    page = (out / f"{MONTH}-llm.html").read_text()
    assert f"<td class=\"n\">{rows['llm']['total']}</td>" in page
    # the printable page shows instants as people read them, in the statement's time zone; the files keep ISO
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", page)
    assert len(re.findall(r"<td>2026-1[12]-\d\d \d\d:\d\d [\w/+-]+</td>", page)) >= 4  # 2 runs' start and end
    assert json.loads(r.output)["spend"] == str(SPEND.quantize(CENT))
    if policy == "none":  # showback: each statement's total is the monthly export's project line
        monthly = json.loads(cli("report", "monthly", "--month", MONTH, "--format", "json", "--now", "2026-12-05T00:00:00Z").output)
        assert {p["project"]: p["cost"] for p in monthly["projects"]} == {k: v["total"] for k, v in rows.items()
                                                                          if k in ("llm", "vision")}


BAD = [("weights:llm=1,nosuch=2", "--idle-share: unknown project 'nosuch'"),
       ("weights:llm=0,vision=0", "--idle-share: the weights sum to zero"),
       ("fair", "--idle-share: unknown policy 'fair'"),
       ("weights:llm", "--idle-share: 'llm' is not project=weight")]


def test_bad_policy_is_refused_and_nothing_written(cli, session):
    _ledger(session)
    for value, message in BAD:
        r = cli("fleet", "set", "own2", "--idle-share", value, "--nodes", "5")
        assert r.exit_code == 2
        assert r.output.strip().count("\n") == 0 and message in r.output
        listed = json.loads(cli("fleet", "list", "--json").output)
        assert listed[0]["idle_share"] == "none" and listed[0]["node_count"] == 2


def test_project_filter_and_existing_files(cli, session, tmp_path):
    _ledger(session)
    evil = '=HYPERLINK("http://x")<b>'
    add_run(session, "evil-1", datetime(2026, 11, 20, tzinfo=UTC), 1, nodes=1, project=evil, offer_name="rtx4090-rent")
    session.commit()
    out = tmp_path / "st"
    r = cli("report", "chargeback", "--month", MONTH, "-o", out, "--project", "nosuch")
    assert r.exit_code == 2 and "--project: 'nosuch'" in r.output and not out.exists()
    r = cli("report", "chargeback", "--month", MONTH, "-o", out, "--project", "vision")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [f"{MONTH}-chargeback-summary.csv", f"{MONTH}-vision.html",
                                                     f"{MONTH}-vision.xlsx"]
    r = cli("report", "chargeback", "--month", MONTH, "-o", out)
    assert r.exit_code == 2 and "--force" in r.output
    assert not (out / f"{MONTH}-llm.xlsx").exists()  # nothing written: the summary was already there
    r = cli("report", "chargeback", "--month", MONTH, "-o", out, "--force", "--project", evil)
    assert r.exit_code == 0, r.output
    (xlsx,) = out.glob(f"{MONTH}-HYPERLINK_http_x_b-*.xlsx")  # a safe file name, with a hash of the project's
    items = dict(load_workbook(xlsx)["Statement"].iter_rows(min_row=2, values_only=True))
    assert items["project"] == "'" + evil  # a text cell, not a formula
    assert D(str(items["total"])) == (RENT * 1).quantize(CENT)  # one started hour on 1 rented node
    page = xlsx.with_suffix(".html").read_text()
    assert "&lt;b&gt;" in page and "<b>" not in page
