"""Slurm sacct import on recorded output: the mapping, the tolerant import and its receipt, --strict,
state families, requeued chains, steps' GPU-Util, DST, and a tracked run merged rather than doubled.

``tests/slurm/data/sacct_mixed.txt`` is sacct ``--parsable2 --duplicates`` output in the format the
fixture Slurm writes (``recorded_22.05_fixture.txt`` is a verbatim recording), for a cluster with two
partitions (``a100``: a100-[01-07], ``rtx``: rtx-[01-10]) and typed GPUs: steps, an array (3 tasks run,
a pending range), a het job, pending and running jobs, an uneven GPU spread (10 GPUs over 3 nodes),
a SPECIAL_EXIT, a requeued job, a job cancelled before it started, a GPU type on the other partition,
a 16-GPU node and a partition no rule maps. The runs' costs below are worked out by hand.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlmodel import Session, func, select
from trainledger.store.models import Run, RunStatus

from tests.helpers import node_type

DATA = Path(__file__).parent / "slurm" / "data"
MIXED = DATA / "sacct_mixed.txt"
UTC = timezone.utc
A100_OFFER = """[[offer]]
name = "a100-rent"
node_type = "a100-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "20"
billing_granularity_hours = "1"
minimum_hours = "1"
"""
HEADER = "JobID|JobName|Partition|Account|User|NodeList|NNodes|AllocTRES|ElapsedRaw|State|ExitCode|Submit|Start|End|Cluster\n"


def _ok(r):
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.output) if r.output.lstrip().startswith(("{", "[")) else r.output


def _map(cli, tmp_path):
    offer = tmp_path / "a100.toml"
    offer.write_text(A100_OFFER)
    _ok(cli("pricing", "import", offer))
    _ok(cli("slurm", "map", "add", "--partition", "a100", "--node-type", "a100-8x", "--offer", "a100-rent"))
    _ok(cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent"))
    _ok(cli("slurm", "map", "add", "--gpu-type", "a100", "--node-type", "a100-8x", "--offer", "a100-rent"))


def _runs(engine) -> dict[str, Run]:
    with Session(engine) as s:
        return {r.id: r for r in s.exec(select(Run)).all()}


def _skipped(receipt) -> dict[str, tuple[int, list[str]]]:
    return {k: (v["rows"], v["first"]) for k, v in receipt["skipped"].items()}


def _costs(cli) -> dict[str, str]:
    rep = _ok(cli("report", "monthly", "--month", "2026-11", "--format", "json"))
    return {r["run_id"]: r["cost"] for r in rep["runs"]}


def test_mixed_file_imports_every_costable_job_and_skips_the_rest(cli, engine, tmp_path):
    _map(cli, tmp_path)
    receipt = _ok(cli("import", MIXED, "--json"))
    assert (receipt["format"], receipt["rows_read"], receipt["imported"], receipt["updated"]) == ("sacct", 32, 11, 0)
    assert _skipped(receipt) == {
        "job steps": (14, ["7101.batch", "7101.extern", "7101.0", "7101.1", "7102.batch"]),
        "pending jobs": (2, ["7103_[4-6]", "7105"]),
        "jobs without GPUs": (1, ["7104+1"]),
        "uneven GPU spread": (1, ["7107"]),
        "no Slurm mapping": (1, ["7109"]),
        "never started": (1, ["7111"]),
        "more GPUs per node than the node type has": (1, ["7113"]),
    }
    runs = _runs(engine)
    attempt, final = "slurm-7110", "slurm-7110-r1"  # numbered as Slurm counts restarts (the wrapper's ids)
    assert set(runs) == {"slurm-7101", "slurm-7102", "slurm-7103_1", "slurm-7103_2", "slurm-7103_3", "slurm-7104.0",
                         "slurm-7106", "slurm-7108", attempt, final, "slurm-7112"}
    status = {rid: r.status for rid, r in runs.items()}
    assert status["slurm-7102"] == status["slurm-7108"] == RunStatus.failed  # FAILED 3:0, SPECIAL_EXIT 42:0
    assert (runs["slurm-7102"].exit_code, runs["slurm-7108"].exit_code) == (3, 42)
    assert runs["slurm-7108"].error == "Slurm: SPECIAL_EXIT (exit 42)"
    assert status["slurm-7106"] == RunStatus.running and runs["slurm-7106"].ended_at is None
    assert runs["slurm-7106"].heartbeat_at is None  # a Slurm job is never reaped for a missing heartbeat
    # the requeued job reads as one chain: the attempt that ran first, then the record that completed
    assert (status[attempt], runs[attempt].started_at, runs[attempt].ended_at) == (
        RunStatus.cancelled, datetime(2026, 11, 7, 0, 0, tzinfo=UTC), datetime(2026, 11, 7, 1, 0, tzinfo=UTC))
    assert runs[final].resume_of == attempt and runs[attempt].resume_of is None
    assert runs[final].status == RunStatus.succeeded
    # steps are not runs, and their GPU usage is their job's: (90 % × 27,000 s + 78 % × 9,000 s) / 36,000 s
    p = runs["slurm-7101"]
    assert (p.nodes, p.gpus_per_node, p.world_size, p.util_source) == (4, 8, 32, "slurm")
    assert p.gpu_util_mean == pytest.approx(0.87, abs=1e-12)
    assert (p.peak_mem_bytes, p.mem_kind) == (70000 * 2**20, "slurm_gres_gpumem")  # max over the steps' TRESUsageInMax
    assert runs["slurm-7102"].gpu_util_mean is None  # no gres/gpuutil: missing, never zero
    with Session(engine) as s:
        a100, rtx = node_type(s, "a100-8x").id, node_type(s, "rtx4090-8x").id
    # a GPU-type rule (more specific) beats the partition rule: a100 GPUs on the rtx partition
    assert runs["slurm-7112"].node_type_id == a100 and runs["slurm-7103_1"].node_type_id == rtx
    assert runs["slurm-7104.0"].node_type_id == a100  # het job component 7104+0
    with Session(engine) as s:  # the running job costs up to now (and moves the cents): leave it out of the figures
        s.delete(s.get(Run, "slurm-7106"))
        s.commit()
    # rtx4090-rent: 3,600/730 per node-hour, per started hour; a100-rent: 20 per node-hour, per started hour
    assert _costs(cli) == {
        "slurm-7101": "800.00",       # 4 nodes × 10 h × 20 (not counted again for its 4 steps)
        "slurm-7102": "29.59",        # 2 nodes × 3 billed h (2 h 10 min) × 3600/730
        "slurm-7103_1": "4.93", "slurm-7103_2": "4.93", "slurm-7103_3": "4.93",  # 1 h each
        "slurm-7104.0": "40.00",      # 2 h × 20
        "slurm-7108": "4.93",         # 30 min, billed 1 h
        attempt: "4.93",              # the hour the requeued attempt ran
        final: "9.86",                # 2 h = 9.863..., half-up on its own (issue 36: no cent moved between runs)
        "slurm-7112": "20.00",
    }


def test_by_node_mapping_costs_an_uneven_spread_and_strict_refuses_the_file(cli, engine, tmp_path):
    _map(cli, tmp_path)
    strict = cli("import", MIXED, "--strict")
    assert strict.exit_code == 2
    assert strict.stderr.strip() == ("error: sacct_mixed.txt:22: AllocTRES: 10 GPUs do not split evenly over 3 nodes; "
                                     "cost them by nodes with a mapping rule that says --by-node")
    with Session(engine) as s:
        assert s.exec(select(func.count()).select_from(Run)).one() == 0  # nothing partial
    # 7107's GPUs are typed a100: the GPU-type rule (3) is more specific than the partition rule, so it decides
    rule = _ok(cli("slurm", "map", "add", "--gpu-type", "a100", "--node-type", "a100-8x", "--offer", "a100-rent",
                   "--by-node", "--replace", "--json"))
    assert (rule["id"], rule["result"], rule["by_node"]) == (3, "updated", True)
    receipt = _ok(cli("import", MIXED, "--json"))
    assert receipt["imported"] == 12 and "uneven GPU spread" not in receipt["skipped"]
    spread = _runs(engine)["slurm-7107"]
    assert (spread.nodes, spread.gpus_per_node, spread.world_size) == (3, 4, 10)  # 4+4+2: paid by node
    assert _costs(cli)["slurm-7107"] == "240.00"  # 3 nodes × 4 h × 20
    again = _ok(cli("import", MIXED, "--json"))
    assert (again["imported"], again["updated"], again["already_present"]) == (0, 0, 12)


STATES = [  # sacct State → run status (docs/SLURM.md, "State families")
    ("COMPLETED", "succeeded"), ("FAILED", "failed"), ("TIMEOUT", "failed"), ("OUT_OF_MEMORY", "failed"),
    ("DEADLINE", "failed"), ("SPECIAL_EXIT", "failed"), ("NODE_FAIL", "crashed"), ("BOOT_FAIL", "crashed"),
    ("CANCELLED by 1000", "cancelled"), ("PREEMPTED", "cancelled"), ("REVOKED", "cancelled"),
    ("RUNNING", "running"), ("SUSPENDED", "running"), ("COMPLETING", "running"),
]


def test_state_families(cli, engine, tmp_path):
    rows = []
    for i, (state, _) in enumerate(STATES):
        end = "Unknown" if state in ("RUNNING", "SUSPENDED", "COMPLETING") else "2026-11-10T01:00:00"
        rows.append(f"{900 + i}|s{i}|rtx|llm|bob|rtx-01|1|gres/gpu:rtx4090=8,node=1|3600|{state}|0:0|"
                    f"2026-11-10T00:00:00|2026-11-10T00:00:00|{end}|gpu1\n")
    rows.append("999|odd|rtx|llm|bob|rtx-01|1|gres/gpu:rtx4090=8,node=1|3600|HALF_DONE|0:0|"
                "2026-11-10T00:00:00|2026-11-10T00:00:00|2026-11-10T01:00:00|gpu1\n")
    f = tmp_path / "states.txt"
    f.write_text(HEADER + "".join(rows))
    _ok(cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x"))
    receipt = _ok(cli("import", f, "--json"))
    assert _skipped(receipt) == {"unknown Slurm state": (1, ["999"])}
    runs = _runs(engine)
    assert {rid: r.status.value for rid, r in runs.items()} == {f"slurm-{900 + i}": want for i, (_, want) in enumerate(STATES)}
    strict = cli("import", f, "--strict")
    assert strict.exit_code == 2 and "states.txt:16: State: unknown Slurm state 'HALF_DONE'" in strict.stderr


def test_node_type_shortcut_skips_a_gpu_type_that_is_not_its_own(cli, engine, tmp_path):
    f = tmp_path / "x.txt"
    f.write_text(HEADER + "1|a|p|llm|bob|n1|1|gres/gpu:a100=8,node=1|60|COMPLETED|0:0|"
                 "2026-11-10T00:00:00|2026-11-10T00:00:00|2026-11-10T00:01:00|c\n"
                 "2|b|p|llm|bob|n1|1|gres/gpu:rtx4090=8,node=1|60|COMPLETED|0:0|"
                 "2026-11-10T00:00:00|2026-11-10T00:00:00|2026-11-10T00:01:00|c\n")
    receipt = _ok(cli("import", f, "--node-type", "rtx4090-8x", "--json"))
    assert receipt["imported"] == 1 and _skipped(receipt) == {"GPU type is not the node type's": (1, ["1"])}
    assert receipt["skipped"]["GPU type is not the node type's"]["hint"] == \
        "map it: trainledger slurm map add --gpu-type a100 --node-type NAME"
    assert set(_runs(engine)) == {"slurm-2"}


# --- DST: a local time a change of the clocks skips or repeats ------------------------------------------

def _sacct_one(tmp_path, start: str, end: str, elapsed: str = "") -> Path:
    f = tmp_path / "dst.txt"
    f.write_text(HEADER + f"42|dst|rtx|llm|bob|rtx-01|1|gres/gpu:rtx4090=8,node=1|{elapsed}|COMPLETED|0:0|"
                 f"{start}|{start}|{end}|gpu1\n")
    return f


def test_sacct_time_in_a_dst_gap_is_skipped_and_counted_refused_with_strict_unless_dst_says_how(cli, engine, tmp_path):
    _ok(cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x"))
    f = _sacct_one(tmp_path, "2026-03-08T02:30:00", "2026-03-08T04:00:00")  # 02:30 does not exist in New York
    receipt = _ok(cli("import", f, "--tz", "America/New_York", "--json"))  # tolerant: skipped with a counted reason
    assert receipt["imported"] == 0 and _skipped(receipt) == {"local time skipped or repeated by a DST change": (1, ["42"])}
    r = cli("import", f, "--tz", "America/New_York", "--strict")
    assert r.exit_code == 2 and r.stderr.startswith(
        "error: dst.txt:2: Start: local time skipped or repeated by a DST change; run sacct with TZ=UTC")
    assert _runs(engine) == {}
    _ok(cli("import", f, "--tz", "America/New_York", "--dst", "earliest"))
    run = _runs(engine)["slurm-42"]
    # earliest reading of 02:30: with the summer offset (-4) = 06:30 UTC; 04:00 EDT = 08:00 UTC
    assert (run.started_at, run.ended_at) == (datetime(2026, 3, 8, 6, 30, tzinfo=UTC), datetime(2026, 3, 8, 8, 0, tzinfo=UTC))


def test_sacct_time_in_a_dst_overlap_is_settled_by_elapsed_or_refused(cli, engine, tmp_path):
    _ok(cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x"))
    # 01:30 happens twice on 2026-11-01 in New York; the job ran 2.5 h until 03:00 EST (08:00 UTC):
    # only the first 01:30 (EDT, 05:30 UTC) is 9,000 s before the end
    f = _sacct_one(tmp_path, "2026-11-01T01:30:00", "2026-11-01T03:00:00", elapsed="9000")
    _ok(cli("import", f, "--tz", "America/New_York"))
    run = _runs(engine)["slurm-42"]
    assert (run.started_at, run.ended_at) == (datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 8, 0, tzinfo=UTC))
    g = _sacct_one(tmp_path, "2026-11-01T01:30:00", "2026-11-01T03:00:00", elapsed="")
    r = cli("import", g, "--tz", "America/New_York", "--strict")
    assert r.exit_code == 2 and "dst.txt:2: Start: local time skipped or repeated by a DST change" in r.stderr
    r = cli("import", g, "--tz", "America/New_York", "--dst", "latest")  # said how: no longer ambiguous
    assert r.exit_code == 0, r.output


def test_csv_naive_time_in_a_dst_gap_is_refused_naming_the_row(cli, engine, tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text("name,node_type,nodes,start,end,status\n"
                 "ok,rtx4090-8x,1,2026-03-07T02:30,2026-03-07T04:00,succeeded\n"
                 "gap,rtx4090-8x,1,2026-03-08T02:30,2026-03-08T04:00,succeeded\n")
    r = cli("import", f, "--tz", "America/New_York")
    assert r.exit_code == 2 and r.stderr.strip() == (
        "error: runs.csv:3: start: 2026-03-08T02:30:00 does not exist in America/New_York (the clocks moved "
        "forward); give the time with its offset or pass --dst earliest|latest")
    assert _runs(engine) == {}  # the good row is not imported either: nothing partial
    _ok(cli("import", f, "--tz", "America/New_York", "--dst", "latest"))
    gap = next(r for r in _runs(engine).values() if r.name == "gap")
    # latest reading of 02:30: with the winter offset (-5) = 07:30 UTC
    assert gap.started_at == datetime(2026, 3, 8, 7, 30, tzinfo=UTC)
    assert cli("import", f, "--dst", "never").stderr.strip() == "error: --dst: expected earliest or latest, got 'never'"


# --- run ids (issue 20, item 10) ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["../../../../var/log/dpkg", "a/b", ".hidden", "-x", "x" * 65, "a..b"])
def test_csv_ids_must_be_run_ids(cli, engine, tmp_path, bad):
    f = tmp_path / "runs.csv"
    f.write_text(f"id,name,node_type,nodes,start,end,status\n{bad},n,rtx4090-8x,1,2026-11-01T00:00,2026-11-01T01:00,succeeded\n")
    r = cli("import", f)
    assert r.exit_code == 2 and r.stderr.startswith("error: runs.csv:2: id: ") and r.stderr.count("\n") == 1, r.stderr
    assert _runs(engine) == {}


# --- a run that was tracked is merged with its sacct record, never counted twice ---------------------------

def test_tracked_run_with_the_slurm_id_is_updated_not_doubled(cli, engine, tmp_path):
    from trainledger.store.ids import slurm_run_id

    rid = slurm_run_id("7201")
    with Session(engine) as s:  # as the run wrapper (`srun trainledger run -- ...`) registers it inside the job
        nt = node_type(s, "rtx4090-8x")
        s.add(Run(id=rid, name="wrapped", launcher="wrapper", node_type_id=nt.id, nodes=1, gpus_per_node=8,
                  status=RunStatus.running, started_at=datetime(2026, 11, 12, 0, 0, 30, tzinfo=UTC),
                  heartbeat_at=datetime(2026, 11, 12, 0, 59, tzinfo=UTC), tokens=123_456, steps=40))
        s.commit()
    f = tmp_path / "one.txt"
    f.write_text(HEADER + "7201|wrapped|rtx|llm|bob|rtx-[01-02]|2|gres/gpu:rtx4090=16,node=2|3600|TIMEOUT|0:0|"
                 "2026-11-12T00:00:00|2026-11-12T00:00:00|2026-11-12T01:00:00|gpu1\n")
    _ok(cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent"))
    receipt = _ok(cli("import", f, "--json"))
    assert (receipt["imported"], receipt["updated"]) == (0, 1)
    runs = _runs(engine)
    assert set(runs) == {rid}
    run = runs[rid]
    # the allocation (what is paid for) from Slurm; the tracked figures stay
    assert (run.started_at, run.ended_at, run.nodes) == (datetime(2026, 11, 12, tzinfo=UTC), datetime(2026, 11, 12, 1, tzinfo=UTC), 2)
    assert (run.status, run.error, run.launcher, run.tokens, run.steps) == (RunStatus.failed, "Slurm: TIMEOUT", "wrapper", 123_456, 40)
    assert run.config["slurm"]["job_id"] == "7201"
    assert _costs(cli) == {rid: "9.86"}  # 2 nodes × 1 h × 3600/730: once
    again = _ok(cli("import", f, "--json"))
    assert (again["imported"], again["updated"], again["already_present"]) == (0, 0, 1)
