"""``trainledger import``: our CSV and Slurm sacct, validated whole, costed exactly."""

from __future__ import annotations

import json
from decimal import Decimal

from sqlmodel import Session, func, select
from trainledger.store.models import Project, Run, RunStatus

CSV = """name,project,user,node_type,offer,nodes,gpus_per_node,start,end,status,tokens,gpu_util_mean
pretrain-a,llm,alice,rtx4090-8x,rtx4090-rent,8,8,2026-11-02T00:00:00Z,2026-11-03T06:30:00Z,succeeded,123456789,0.91
sft-b,chat,bob,rtx4090-8x,rtx4090-rent,2,8,2026-11-05T10:00:00,2026-11-05T12:10:00,failed,,
"""

SACCT = """JobID|JobName|Account|User|Start|End|NNodes|AllocTRES|State
4101|pretrain|llm|alice|2026-11-02T00:00:00|2026-11-02T10:00:00|4|billing=256,cpu=256,gres/gpu=32,mem=2000G,node=4|COMPLETED
4101.batch|batch|llm||2026-11-02T00:00:00|2026-11-02T10:00:00|1|cpu=64,gres/gpu=8,mem=500G,node=1|COMPLETED
4102|sft|chat|bob|2026-11-03T08:00:00|2026-11-03T08:20:00|1|cpu=32,gres/gpu:rtx4090=4,node=1|CANCELLED by 1000
4103|prep|data|carol|2026-11-03T09:00:00|2026-11-03T11:00:00|1|cpu=32,mem=100G,node=1|COMPLETED
4104|live|llm|alice|2026-11-04T09:00:00|Unknown|2|cpu=32,gres/gpu=16,node=2|RUNNING
4105|oom|llm|alice|2026-11-04T09:00:00|2026-11-04T09:30:00|1|cpu=32,gres/gpu=8,node=1|OUT_OF_MEMORY
"""


def _runs(engine) -> int:
    with Session(engine) as s:
        return s.exec(select(func.count()).select_from(Run)).one()


def test_csv_import_costs_out_exactly(cli, engine, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(CSV)
    r = cli("import", f, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == {"source": "runs.csv", "format": "csv", "rows_read": 2, "imported": 2, "updated": 0,
                                    "already_present": 0, "skipped_rows": 0, "skipped": {}}
    rep = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json").output)
    runs = {x["name"]: x for x in rep["runs"]}
    # 8 nodes × 30.5 h → 31 billed hours × 3600/730 = 1,223.01; 2 nodes × 2h10m → 3 h × 2 × 3600/730 = 29.59
    assert runs["pretrain-a"]["cost"] == "1223.01"
    assert runs["sft-b"]["cost"] == "29.59"
    assert runs["pretrain-a"]["node_hours"] == 244.0 and runs["pretrain-a"]["tokens"] == 123456789
    assert rep["summary"]["actual_cost"] == "1252.60"
    assert rep["summary"]["failed_run_cost"] == "29.59" and rep["summary"]["idle_cost"] == "0.00"
    with Session(engine) as s:
        assert s.exec(select(Run.status).where(Run.name == "sft-b")).one() == RunStatus.failed
        assert sorted(s.exec(select(Project.name)).all()) == ["chat", "llm"]
    again = json.loads(cli("import", f, "--json").output)
    assert again["imported"] == 0 and again["already_present"] == 2
    assert _runs(engine) == 2


def test_sacct_import(cli, engine, tmp_path):
    f = tmp_path / "sacct.txt"
    f.write_text(SACCT)
    r = cli("import", f, "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["format"] == "sacct" and d["imported"] == 4 and d["rows_read"] == 6
    assert {k: (v["rows"], v["first"]) for k, v in d["skipped"].items()} == {
        "job steps": (1, ["4101.batch"]), "jobs without GPUs": (1, ["4103"])}
    with Session(engine) as s:
        runs = {r.id: r for r in s.exec(select(Run)).all()}
    assert set(runs) == {"slurm-4101", "slurm-4102", "slurm-4104", "slurm-4105"}
    assert runs["slurm-4104"].status == RunStatus.running and runs["slurm-4104"].ended_at is None
    assert (runs["slurm-4101"].nodes, runs["slurm-4101"].gpus_per_node) == (4, 8)
    assert runs["slurm-4102"].gpus_per_node == 4 and runs["slurm-4102"].status == RunStatus.cancelled
    assert runs["slurm-4105"].status == RunStatus.failed
    with Session(engine) as s:  # the running job is costed up to now: leave it out of the month's exact figure
        s.delete(s.get(Run, "slurm-4104"))
        s.commit()
    rep = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json").output)
    # 4 × 10 h + ½ × 1 h (4102: 20 min, 1 h minimum, 4 of the node's 8 GPUs: half the node, issue 27)
    # + 1 × 1 h = 41.5 node-hours × 3600/730 = 204.657...
    assert Decimal(rep["summary"]["actual_cost"]) == (Decimal("41.5") * Decimal(3600) / Decimal(730)).quantize(Decimal("0.01"))
    assert rep["summary"]["actual_cost"] == "204.66"
    assert runs["slurm-4102"].share == "1/2" and runs["slurm-4101"].share in (None, "", "1")


def test_one_bad_row_rejects_the_file(cli, engine, tmp_path):
    bad = CSV + "oops,llm,alice,rtx4090-8x,rtx4090-rent,2,8,2026-11-07T10:00:00,2026-11-07T09:00:00,succeeded,,\n"
    f = tmp_path / "bad.csv"
    f.write_text(bad)
    r = cli("import", f)
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: bad.csv:4: end: 2026-11-07T09:00:00+00:00 is before start "
                                "2026-11-07T10:00:00+00:00; fix the times")
    assert _runs(engine) == 0


def test_row_errors_name_line_and_field(cli, engine, tmp_path):
    header = "name,node_type,nodes,start,end,status,gpu_util_mean\n"
    cases = [
        ("a,rtx4090-8x,zero,2026-11-01T00:00,2026-11-01T01:00,succeeded,\n", "x.csv:2: nodes: expected a whole number, got 'zero'"),
        ("a,rtx4090-8x,0,2026-11-01T00:00,2026-11-01T01:00,succeeded,\n", "x.csv:2: nodes: must be at least 1, got 0"),
        ("a,v100,1,2026-11-01T00:00,2026-11-01T01:00,succeeded,\n", "x.csv:2: node_type: unknown 'v100'"),
        ("a,rtx4090-8x,1,yesterday,2026-11-01T01:00,succeeded,\n", "x.csv:2: start: expected an ISO 8601 time"),
        ("a,rtx4090-8x,1,2026-11-01T00:00,2026-11-01T01:00,running,\n", "x.csv:2: status: import takes finished runs"),
        ("a,rtx4090-8x,1,2026-11-01T00:00,2026-11-01T01:00,succeeded,91\n", "x.csv:2: gpu_util_mean: must be a ratio between 0 and 1"),
    ]
    f = tmp_path / "x.csv"
    for row, needle in cases:
        f.write_text(header + row)
        r = cli("import", f)
        assert r.exit_code == 2 and needle in r.stderr and r.stderr.count("\n") == 1, (row, r.stderr)
    f.write_text("name,nodes,start,end,status,colour\n")
    assert "x.csv:1: header: unknown column 'colour'" in cli("import", f).stderr
    f.write_text(SACCT)
    assert "x.csv:2: node_type: missing; pass --node-type or add a Slurm mapping" in cli("import", f).stderr
    assert _runs(engine) == 0
