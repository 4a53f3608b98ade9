"""Input that cannot block a month or invent usage (issue 26, item 5).

* a run on a node type with no offer is refused at import (it could not be costed, and every report
  of its month would fail): our CSV whole, naming the row; a sacct record skipped and counted;
* a finished run that ends in the future is refused (CSV) or skipped and counted (sacct);
* an ambiguous local time in a tolerant sacct import is skipped with a counted reason (test_slurm_import);
* intensities, prices and exchange rates out of any plausible range are refused with the field and the fix.
"""

from __future__ import annotations

import json

from sqlmodel import Session, func, select
from trainledger.store.models import NodeType, Run

HEADER = "JobID|JobName|Partition|Account|User|NodeList|NNodes|AllocTRES|ElapsedRaw|State|ExitCode|Submit|Start|End|Cluster\n"
CSV = "name,node_type,nodes,start,end,status\n"


def _count(engine) -> int:
    with Session(engine) as s:
        return s.exec(select(func.count()).select_from(Run)).one()


def _bare_node_type(engine) -> None:
    with Session(engine) as s:
        s.add(NodeType(name="gh200-bare", gpu_model="H100", gpus_per_node=8, gpu_memory_gb=80, peak_bf16_tflops=989,
                       interconnect="NVLink", network="IB 400G"))
        s.commit()


def test_a_run_no_offer_can_cost_is_refused_and_other_months_keep_working(cli, engine, tmp_path):
    _bare_node_type(engine)
    f = tmp_path / "runs.csv"
    f.write_text(CSV + "ok,rtx4090-8x,1,2025-11-03T00:00,2025-11-03T10:00,succeeded\n"
                       "bare,gh200-bare,1,2025-11-04T00:00,2025-11-04T10:00,succeeded\n")
    r = cli("import", f)
    assert r.exit_code == 2 and r.stderr.strip() == (
        "error: runs.csv:3: node_type: gh200-bare has no offer to cost its runs; add an offer for the node type with "
        "`trainledger pricing import`, then import again")
    assert _count(engine) == 0  # nothing partial
    f.write_text(CSV + "ok,rtx4090-8x,1,2025-11-03T00:00,2025-11-03T10:00,succeeded\n")
    assert cli("import", f).exit_code == 0
    rep = cli("report", "monthly", "--month", "2025-11", "--format", "json")
    assert rep.exit_code == 0 and json.loads(rep.output)["summary"]["runs"] == 1
    # sacct: the record is skipped and counted, the rest imported
    assert cli("slurm", "map", "add", "--partition", "gh200", "--node-type", "gh200-bare").exit_code == 0
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    g = tmp_path / "sacct.txt"
    g.write_text(HEADER + "41|a|gh200|llm|bob|h-01|1|gres/gpu=8,node=1|3600|COMPLETED|0:0|2025-11-05T00:00:00|"
                          "2025-11-05T00:00:00|2025-11-05T01:00:00|c\n"
                          "42|b|rtx|llm|bob|r-01|1|gres/gpu=8,node=1|3600|COMPLETED|0:0|2025-11-05T00:00:00|"
                          "2025-11-05T00:00:00|2025-11-05T01:00:00|c\n")
    receipt = json.loads(cli("import", g, "--tz", "UTC", "--json").output)
    assert receipt["imported"] == 1 and receipt["skipped"]["node type without an offer"]["rows"] == 1
    assert cli("import", g, "--tz", "UTC", "--strict").exit_code == 2
    assert _count(engine) == 2


def test_a_finished_run_that_ends_in_the_future_is_refused(cli, engine, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(CSV + "ahead,rtx4090-8x,1,2025-11-03T00:00,2199-01-01T00:00,succeeded\n")
    r = cli("import", f)
    assert r.exit_code == 2 and r.stderr.startswith("error: runs.csv:2: end: 2199-01-01T00:00:00+00:00 is after now (")
    assert _count(engine) == 0
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    g = tmp_path / "sacct.txt"
    g.write_text(HEADER + "43|c|rtx|llm|bob|r-01|1|gres/gpu=8,node=1|3600|COMPLETED|0:0|2199-01-01T00:00:00|"
                          "2199-01-01T00:00:00|2199-01-01T01:00:00|c\n")
    receipt = json.loads(cli("import", g, "--tz", "UTC", "--json").output)
    assert receipt["imported"] == 0 and receipt["skipped"]["end in the future"]["rows"] == 1
    assert _count(engine) == 0


def test_absurd_intensities_rates_and_prices_are_refused_naming_the_field(cli, engine, tmp_path):
    r = cli("carbon", "set", "100000000", "--from", "2025-11-01")
    assert r.exit_code == 2 and r.stderr.strip() == (
        "error: G_PER_KWH: 100000000 gCO2e/kWh is out of range: grid intensities are at most 2,000 gCO2e/kWh "
        "(coal ≈ 1,000); give grams of CO2e per kWh, e.g. 475")
    assert cli("carbon", "set", "1100", "--from", "2025-11-01").exit_code == 0  # a coal grid is plausible
    r = cli("fx", "set", "CNY", "USD", "14000000", "--from", "2025-11-01")
    assert r.exit_code == 2 and r.stderr.strip() == (
        "error: RATE: 1 CNY = 14000000 USD is out of range: exchange rates lie between 0.000001 and 1,000,000; "
        "check the decimal point and the direction (CNY→USD)")
    rates = tmp_path / "rates.csv"
    rates.write_text("base,quote,rate,valid_from\nCNY,USD,0.14,2025-11-01\nUSD,CNY,0.0000001,2025-11-01\n")
    r = cli("fx", "import", rates)
    assert r.exit_code == 2 and r.stderr.startswith("error: rates.csv: row 3: rate: 1 USD = 0.0000001 CNY is out of range")
    assert json.loads(cli("fx", "list", "--json").output) in ([], {"rates": []})  # nothing written
    offer = tmp_path / "own.toml"
    offer.write_text('[[offer]]\nname = "watts"\nnode_type = "rtx4090-8x"\nkind = "own"\ncurrency = "CNY"\n'
                     'capex_per_node = "120000"\ndepreciation_months = 36\npower_kw_load = "4000"\n'
                     'electricity_price_per_kwh = "0.5"\noperations_per_node_month = "100"\n')
    r = cli("pricing", "import", offer)
    assert r.exit_code == 2 and "offer 'watts': power_kw_load: Input should be less than or equal to 100" in r.stderr


def test_a_recorded_run_no_offer_can_cost_is_shown_unpriced_and_blocks_nothing(cli, engine, tmp_path):
    """A run already in the ledger on a node type with no offer (a tracked run on h100-8x, which the presets
    price nowhere): the month's report, FOCUS, the forecast, budgets and `runs show` of other runs work, and
    the report says how many runs it could not price and where."""
    from datetime import datetime, timezone

    from tests.helpers import add_run

    utc = timezone.utc
    with Session(engine) as s:
        add_run(s, "priced", datetime(2025, 11, 3, tzinfo=utc), 10, nodes=1, offer_name="rtx4090-rent")
        add_run(s, "unpriced", datetime(2025, 11, 4, tzinfo=utc), 10, nodes=1, offer_name=None, node_type_name="h100-8x")
        s.commit()
    rep = cli("report", "monthly", "--month", "2025-11", "--format", "json")
    assert rep.exit_code == 0, rep.output
    d = json.loads(rep.output)
    assert (d["summary"]["runs"], d["summary"]["unpriced_runs"], d["summary"]["unpriced_node_types"]) == (1, 1, ["h100-8x"])
    assert [r["run_id"] for r in d["runs"]] == ["priced"] and d["summary"]["actual_cost"] == "49.32"
    assert "unpriced_runs,1\nunpriced_node_types,h100-8x\n" in cli("report", "monthly", "--month", "2025-11").output
    assert cli("runs", "show", "priced", "--json").exit_code == 0
    r = cli("report", "focus", "--month", "2025-11", "-o", tmp_path / "focus.csv")
    assert r.exit_code == 0, r.output
    text = (tmp_path / "focus.csv").read_text()
    assert "trainledger/runs/priced" in text and "trainledger/runs/unpriced" not in text
    assert cli("budget", "set", "100000").exit_code == 0
    assert cli("budget", "check", "--month", "2025-11", "--now", "2025-11-10T00:00:00+00:00").exit_code == 0
