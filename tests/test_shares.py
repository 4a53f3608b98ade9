"""Allocation shares (trainledger.money.allocation.shares): a run pays for the part of each node it held.

sacct rows on one 8-GPU node type with ``gres/gpu=2`` and ``gres/gpu=8`` for 10 h each: the 2-GPU job costs
exactly a quarter of the 8-GPU one, on SQLite and PostgreSQL; two 4-GPU jobs on one node of a 1-node fleet are
one full node (peak 1, no over-use); Slurm's billing (``TRESBillingWeights``, ``MAX_TRES``) gives the share of
a partition billed by TRES; a MIG slice pays its fraction; the wrapper takes the share from
``CUDA_VISIBLE_DEVICES``. Every figure below is worked out by hand in its comment.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import pytest
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.allocation import shares
from trainledger.money.allocation.capacity import capacity_warnings
from trainledger.store.models import Run

from tests.helpers import add_fleet, add_run, node_type

UTC = timezone.utc
A100_OFFER = """[[offer]]
name = "a100-rent"
node_type = "a100-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "20"
"""
HEADER = "JobID|JobName|Partition|Account|User|NodeList|NNodes|AllocTRES|ElapsedRaw|State|ExitCode|Submit|Start|End\n"


def _ok(r):
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.output) if r.output.lstrip().startswith(("{", "[")) else r.output


def _job(job: str, host: str, tres: str, start: str = "2026-11-02T00:00:00", end: str = "2026-11-02T10:00:00") -> str:
    secs = int((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds())
    return f"{job}|j{job}|a100|proj|alice|{host}|1|{tres}|{secs}|COMPLETED|0:0|{start}|{start}|{end}\n"


def _setup(cli, tmp_path, *map_args: str) -> None:
    offer = tmp_path / "a100.toml"
    offer.write_text(A100_OFFER)
    _ok(cli("pricing", "import", offer))
    _ok(cli("slurm", "map", "add", "--partition", "a100", "--node-type", "a100-8x", "--offer", "a100-rent", *map_args))


def _import(cli, tmp_path, rows: str, *flags: str):
    f = tmp_path / "sacct.txt"
    f.write_text(HEADER + rows)
    return cli("import", f, "--tz", "UTC", "--json", *flags)


def _lines(engine) -> dict[str, object]:
    with Session(engine) as s:
        return {r.run_id: r for r in monthly_report(s, "2026-11").runs}


def test_a_2_gpu_job_pays_exactly_a_quarter_of_the_8_gpu_one(cli, engine, tmp_path):
    _setup(cli, tmp_path)
    rows = (_job("8001", "a100-01", "billing=16,cpu=16,gres/gpu=2,mem=100G,node=1")
            + _job("8002", "a100-02", "billing=64,cpu=64,gres/gpu=8,mem=500G,node=1"))
    assert _ok(_import(cli, tmp_path, rows))["imported"] == 2
    with Session(engine) as s:
        runs = {r.id: r for r in s.exec(select(Run)).all()}
    assert (runs["slurm-8001"].share, runs["slurm-8001"].share_basis) == ("1/4", "gpus")
    assert (runs["slurm-8002"].share, runs["slurm-8002"].share_basis) == (None, "gpus")  # all 8: the whole node
    lines = _lines(engine)
    small, big = lines["slurm-8001"], lines["slurm-8002"]
    assert big.cost == Decimal(200)  # 1 node × 10 h × 20
    assert small.cost == Decimal(50) == big.cost / 4  # 1/4 node × 10 h × 20, exactly
    assert (small.node_hours, small.gpu_hours) == (Decimal("2.5"), Decimal(20))  # node-hours held; 2 GPUs × 10 h
    assert (big.node_hours, big.gpu_hours) == (Decimal(10), Decimal(80))
    report = _ok(cli("report", "monthly", "--month", "2026-11", "--format", "json"))
    assert {r["run_id"]: r["cost"] for r in report["runs"]} == {"slurm-8001": "50.00", "slurm-8002": "200.00"}
    shown = _ok(cli("runs", "show", "slurm-8001", "--json"))
    assert (Decimal(str(shown["node_hours"])), Decimal(str(shown["gpu_hours"]))) == (Decimal("2.5"), Decimal(20))


def test_two_half_node_jobs_are_one_full_node_for_capacity_and_peaks(session):
    """Two 4-GPU runs at once on a 1-node own fleet: one full node, not over-use; a third is 1.5 nodes."""
    add_fleet(session, 1, offer_name="rtx4090-own")
    t0 = datetime(2026, 11, 10, tzinfo=UTC)
    for rid in ("h1", "h2"):
        r = add_run(session, rid, t0, 10, nodes=1)
        r.gpus_per_node, r.share, r.share_basis = 4, "1/2", "gpus"
    session.commit()
    end = datetime(2026, 12, 1, tzinfo=UTC)
    assert capacity_warnings(session, "2026-11", now=end) == []
    rep = monthly_report(session, "2026-11", now=end)
    nt = next(n for n in rep.node_types if n.node_type == "rtx4090-8x")
    assert (nt.peak_nodes, nt.node_hours, nt.gpu_hours) == (1, Decimal(10), Decimal(80))  # 2 × ½ node × 10 h
    third = add_run(session, "h3", t0 + timedelta(hours=2), 1, nodes=1)
    third.gpus_per_node, third.share, third.share_basis = 4, "1/2", "gpus"
    session.commit()
    assert capacity_warnings(session, "2026-11", now=end) == [
        {"node_type": "rtx4090-8x", "peak_nodes": Decimal("1.5000"), "fleet_nodes": 1, "runs": ["h1", "h2", "h3"]}]
    rep = monthly_report(session, "2026-11", now=end)
    assert next(n for n in rep.node_types if n.node_type == "rtx4090-8x").peak_nodes == 2  # 1.5 nodes held: 2


def test_billing_weights_give_slurm_billing_and_the_share(cli, engine, tmp_path):
    """CPU=1.0,Mem=0.25G,GRES/gpu=2.0 on a node of 64 CPUs, 512 GB, 8 GPUs: a whole node bills 64 + 128 + 16 = 208.
    Job 8101 (16 CPUs, 64 GB, 2 GPUs) bills 16 + 16 + 4 = 36, its share 36/208 = 9/52."""
    _setup(cli, tmp_path, "--billing-weights", "CPU=1.0,Mem=0.25G,GRES/gpu=2.0", "--node-tres", "cpu=64,mem=512G,gres/gpu=8")
    listed = _ok(cli("slurm", "map", "list", "--json"))
    assert [r["share_rule"] for r in listed] == ["billing"]
    rows = _job("8101", "a100-01", "billing=36,cpu=16,gres/gpu=2,mem=64G,node=1", end="2026-11-02T13:00:00")
    _ok(_import(cli, tmp_path, rows))
    with Session(engine) as s:
        run = s.get(Run, "slurm-8101")
        assert (run.share, run.share_basis, run.config["slurm"]["billing"]) == ("9/52", "billing", "36")
    # 9/52 node × 13 h × 20 = 45 exactly (52 = 4 × 13)
    assert _lines(engine)["slurm-8101"].cost == Decimal(45)


def test_billing_share_truncates_the_job_and_the_node_as_slurm_does(cli, engine, tmp_path):
    """CPU=0.25,GRES/gpu=2 on a node of 66 CPUs and 8 GPUs: 16.5 + 16 = 32.5, kept by Slurm as 32. Job 8102
    (3 CPUs, 1 GPU) weighs 0.75 + 2 = 2.75, written by Slurm as billing=2: its share is 2/32 = 1/16 (untruncated
    it would be 2.75/32.5 = 11/130), so 10 h at 20 per node-hour cost 1/16 × 10 × 20 = 12.50 (not 16.92)."""
    _setup(cli, tmp_path, "--billing-weights", "CPU=0.25,GRES/gpu=2", "--node-tres", "cpu=66,gres/gpu=8")
    # 8103: sacct's billing=0 is the job's billing (whatever these weights make of it): skipped with its reason
    rows = _job("8102", "a100-01", "billing=2,cpu=3,gres/gpu=1,mem=8G,node=1") + _job("8103", "a100-02",
                                                                                       "billing=0,cpu=1,gres/gpu=1,node=1")
    receipt = _ok(_import(cli, tmp_path, rows))
    assert (receipt["imported"], receipt["skipped"]["jobs that bill 0"]["first"]) == (1, ["8103"])
    with Session(engine) as s:
        run = s.get(Run, "slurm-8102")
        assert (run.share, run.share_basis, run.config["slurm"]["billing"]) == ("1/16", "billing", "2")
    assert _lines(engine)["slurm-8102"].cost == Decimal("12.5")


def test_billing_units_are_whole_and_sacct_billing_is_the_jobs():
    w = shares.parse_weights("CPU=0.25,GRES/gpu=2")
    node = shares.tres_counts({"cpu": "66", "gres/gpu": "8"})
    job = shares.tres_counts({"cpu": "3", "gres/gpu": "1", "billing": "2"})
    assert shares.slurm_billing(job, w) == Decimal("2.75")  # 3 × 0.25 + 1 × 2
    assert shares.job_billing_units(job, w, False) == 2  # truncated, as Slurm writes billing=
    assert shares.slurm_billing_units(shares.slurm_billing(node, w)) == 32  # 66 × 0.25 + 8 × 2 = 32.5
    assert shares.billing_share(job, node, w, False, 1, "a100-8x") == Fraction(2, 32)
    assert shares.billing_share(job, node, w, False, 2, "a100-8x") == Fraction(2, 64)  # 2 nodes: 2 × 32
    # PriorityFlags=MAX_TRES: the job max(0.75, 2) = 2, the node max(16.5, 16) = 16.5 → 16: 2/16
    assert shares.billing_share(job, node, w, True, 1, "a100-8x") == Fraction(1, 8)
    # sacct's billing= is the job's billing: 3 written there (weights changed since) → 3/32
    assert shares.reported_billing({"cpu": "3", "billing": "3"}) == 3
    assert shares.billing_share(job, node, w, False, 1, "a100-8x", reported=3) == Fraction(3, 32)
    assert [shares.reported_billing({"billing": v}) for v in ("", "2.5", "x", "²")] == [None] * 4
    assert shares.reported_billing({"cpu": "3"}) is None
    cpu_only = shares.tres_counts({"cpu": "3"})  # 0.75: Slurm bills it 0
    with pytest.raises(LedgerInputError, match=r"^AllocTRES: the job bills 0 under the partition's weights"):
        shares.billing_share(cpu_only, node, w, False, 1, "a100-8x")
    tiny = shares.tres_counts({"cpu": "3"})  # a node of 3 CPUs: 0.75 → 0, nothing to divide by
    with pytest.raises(LedgerInputError, match=r"^node_tres: one node of a100-8x bills 0"):
        shares.billing_share(job, tiny, w, False, 1, "a100-8x")


def test_max_tres_takes_the_largest_weighted_tres():
    w = shares.parse_weights("CPU=1.0,Mem=0.25G,GRES/gpu=2.0")
    assert w == {"cpu": Decimal(1), "mem": Decimal("0.25") / 1024, "gres/gpu": Decimal(2)}
    job = shares.tres_counts({"cpu": "8", "mem": "256G", "gres/gpu": "1", "node": "1", "billing": "72"})
    node = shares.tres_counts({"cpu": "64", "mem": "512G", "gres/gpu": "8"})
    assert shares.slurm_billing(job, w) == Decimal(74)  # 8 + 64 + 2
    assert shares.slurm_billing(job, w, max_tres=True) == Decimal(64)  # max(8, 64, 2)
    assert shares.billing_share(job, node, w, True, 1, "a100-8x") == Fraction(1, 2)  # 64 ÷ max(64, 128, 16)
    assert shares.billing_share(job, node, w, False, 1, "a100-8x") == Fraction(74, 208)


def test_a_mig_slice_pays_its_fraction(session):
    """A100 80GB 1g.10gb = 1/7 of one GPU; on an 8-GPU node 1/56 of the node: 56 h of it is 1 node-hour."""
    assert shares.mig_profiles("NVIDIA A100 80GB SXM")["1g.10gb"] == 1
    assert shares.mig_profiles("NVIDIA H100 80GB SXM")["3g.40gb"] == 3
    assert shares.mig_profiles("NVIDIA GeForce RTX 4090 24GB") == {}
    nt = node_type(session, "a100-8x")
    alloc = {"gpus": 1, "mig": 1, "mig_profile": "1g.10gb", "exclusive": False}
    assert shares.alloc_share(alloc, nt.name, nt.gpu_model, nt.gpus_per_node) == ("1/56", "mig:1g.10gb")
    from trainledger.store.models import Offer

    session.add(Offer(name="a100-rent", node_type_id=nt.id, kind="rent_elastic", currency="CNY",
                      price_per_node_hour=Decimal(20)))
    session.flush()
    r = add_run(session, "mig", datetime(2026, 11, 3, tzinfo=UTC), 56, nodes=1, offer_name="a100-rent",
                node_type_name="a100-8x")
    r.gpus_per_node, r.share, r.share_basis = 1, "1/56", "mig:1g.10gb"
    session.commit()
    line = next(x for x in monthly_report(session, "2026-11").runs if x.run_id == "mig")
    assert (line.cost, line.node_hours, line.gpu_hours) == (Decimal(20), Decimal(1), Decimal(8))  # 56 h × 1/7 GPU


def test_bad_shares_are_one_line_errors_and_nothing_is_written(cli, engine, tmp_path):
    with pytest.raises(LedgerInputError, match=r"^gpus: 9 GPUs exceed the 8 of node type a100-8x"):
        shares.gpu_share(9, 8, "a100-8x")
    with pytest.raises(LedgerInputError, match=r"^gpus: 0 GPUs held on GPU node type a100-8x"):
        shares.gpu_share(0, 8, "a100-8x")
    with pytest.raises(LedgerInputError, match=r"^--mig-profile: '9g.99gb' is not a MIG profile"):
        shares.mig_share(["9g.99gb"], "NVIDIA A100 80GB SXM", 8, "a100-8x", "--mig-profile")
    _setup(cli, tmp_path)
    _ok(cli("slurm", "map", "add", "--partition", "whole", "--node-type", "a100-8x", "--offer", "a100-rent", "--by-node"))
    shared = _job("8201", "a100-01", "cpu=16,gres/gpu=2,node=1")
    whole = _job("8202", "a100-01", "cpu=64,gres/gpu=8,node=1", start="2026-11-02T05:00:00",
                 end="2026-11-02T06:00:00").replace("|a100|", "|whole|")
    r = _import(cli, tmp_path, shared + whole)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1].endswith(
        "share: job 8202 held node a100-01 exclusively while job 8201 shared it; fix the runs' times, hosts or "
        "exclusive flag")
    with Session(engine) as s:
        assert s.exec(select(Run)).all() == []  # nothing written
    r = _ok(_import(cli, tmp_path, _job("8203", "a100-01", "cpu=16,gres/gpu=16,node=1")))
    assert r["imported"] == 0 and "more GPUs per node than the node type has" in r["skipped"]


def test_the_allocation_comes_from_cuda_visible_devices_and_slurm():
    from trainledger.sources.telemetry.topology import Flags, allocation, resolve

    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert resolve(Flags(), env, ["python", "x.py"]).alloc == {"gpus": 2, "mig": 0, "mig_profile": None,
                                                               "exclusive": False}
    slurm = {"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "1"}
    assert resolve(Flags(), slurm, ["python", "x.py"]).alloc["gpus"] == 4
    assert resolve(Flags(), slurm, ["srun", "--exclusive", "python", "x.py"]).alloc["exclusive"] is True
    mig = allocation(Flags(mig_profile="1g.10gb"), {}, [], ["MIG-aa", "MIG-bb"], None)
    assert shares.alloc_share(mig, "a100-8x", "NVIDIA A100 80GB SXM", 8) == ("1/28", "mig:1g.10gb")  # 2 × 1/7 ÷ 8
    assert shares.alloc_share({"gpus": 8, "mig": 0}, "a100-8x", "A100", 8) == (None, "gpus")  # all of it: whole
    assert shares.alloc_share({"gpus": None, "mig": 0}, "a100-8x", "A100", 8) == (None, None)  # not said: whole
    assert shares.alloc_share({"gpus": 2, "exclusive": True}, "a100-8x", "A100", 8) == (None, "exclusive")
    with pytest.raises(LedgerInputError, match=r"^CUDA_VISIBLE_DEVICES / SLURM_GPUS_ON_NODE: 12 GPUs exceed the 8"):
        shares.alloc_share({"gpus": 12, "mig": 0}, "a100-8x", "A100", 8)


@pytest.mark.slow
def test_the_wrapper_records_the_share_of_the_gpus_it_owns(sqlite_url, tmp_path):
    """`trainledger run` with CUDA_VISIBLE_DEVICES=0,1 on an 8-GPU node type: 1/4 of the node; --exclusive: all."""
    import os
    import subprocess
    import sys

    from tests.capture.conftest import run_row, wrap_cmd

    env = {**os.environ, "TRAINLEDGER_JOURNAL_DIR": str(tmp_path / "j"), "XDG_DATA_HOME": str(tmp_path / "x"),
           "CUDA_VISIBLE_DEVICES": "0,1"}
    for k in ("TRAINLEDGER_DB_URL", "TRAINLEDGER_RUN_ID", "TRAINLEDGER_WRAPPED", "SLURM_JOB_ID"):
        env.pop(k, None)
    for rid, extra in (("quarter", []), ("whole", ["--exclusive"])):
        cmd = wrap_cmd(sqlite_url, "--run-id", rid, "--node-type", "a100-8x", "-q", *extra,
                       command=[sys.executable, "-c", "pass"])
        out = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr.decode()
    assert (run_row(sqlite_url, "quarter").share, run_row(sqlite_url, "quarter").share_basis) == ("1/4", "gpus")
    assert (run_row(sqlite_url, "whole").share, run_row(sqlite_url, "whole").share_basis) == (None, "exclusive")
    bad = subprocess.run(wrap_cmd(sqlite_url, "--run-id", "bad", "--node-type", "a100-8x",
                                  command=[sys.executable, "-c", "pass"]),
                         env={**env, "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7,8"}, capture_output=True, timeout=120)
    # a wrong GPU count never refuses the job (issue 37): it runs, costed as the whole node, with the reason
    assert bad.returncode == 0, bad.stderr.decode()
    note = ("CUDA_VISIBLE_DEVICES / SLURM_GPUS_ON_NODE: 9 GPUs exceed the 8 of node type a100-8x (a share above 1); "
            "map the job to the right node type or record fewer GPUs; the run is costed as the whole node")
    assert f"[trainledger] warning: {note}" in bad.stderr.decode().splitlines()
    row = run_row(sqlite_url, "bad")
    assert (row.status.value, row.share, row.share_basis, row.config["wrapper"]["share_note"]) == (
        "succeeded", None, None, note)
