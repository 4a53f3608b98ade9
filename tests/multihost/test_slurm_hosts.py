"""Slurm across hosts: a 2-node job, `srun trainledger run -- torchrun ...` on each host, is one run with
two RunNodes under the hosts' names, its duration sacct's ``ElapsedRaw`` once `trainledger slurm sync` ran."""

from __future__ import annotations

import json
import os
import sys

import pytest
from sqlmodel import Session, select
from trainledger.store.ids import slurm_run_id
from trainledger.store.models import Run, RunNode, RunStatus

from tests.multihost.conftest import REPO
from tests.slurm.cluster import missing_programs

pytestmark = pytest.mark.slow

SRUN = REPO / "tests" / "slurm" / "srun.sh"
#: every rank: one all-reduce over gloo between the hosts, then the sum and its host
ALLREDUCE = """import os, socket, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} on {socket.gethostname()}: sum {t.item():.0f}", flush=True)
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def slurm_hosts(hosts):
    missing = missing_programs()
    if missing:
        message = f"Slurm not installed ({', '.join(missing)}): apt-get install slurm-wlm slurmdbd munge"
        if os.environ.get("CI"):
            raise AssertionError(message)
        pytest.skip(message)
    from tests.multihost.slurm_hosts import HostsSlurm

    cluster = HostsSlurm(hosts).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_two_node_job_is_one_run_with_both_hosts(hosts, slurm_hosts, ledger, tmp_path):
    slurm = slurm_hosts
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE, encoding="utf-8")
    journal = tmp_path / "journal"
    env = (f"--export=ALL,TRAINLEDGER_JOURNAL_DIR={journal},TRAINLEDGER_FLUSH_S=0.5,TRAINLEDGER_HEARTBEAT_S=1,"
           f"GLOO_SOCKET_IFNAME=eth0,OMP_NUM_THREADS=1,PYTHONPATH={REPO}")
    command = [sys.executable, "-m", "trainledger.cli", "run", "--name", "two-host-job", "--node-type", "rtx4090-8x",
               "--db", ledger.url, "--", sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
               "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{hosts[0].name}:29431",
               "--rdzv-id", "mh-slurm", str(script)]
    out = tmp_path / "job.out"
    job = slurm.sbatch("-N", "2", "--ntasks-per-node=1", "-J", "two-hosts", f"--output={out}", env, str(SRUN), *command)
    state = slurm.wait_for(f"job {job} done", lambda: (s := slurm.job_state(job)) in ("COMPLETED", "FAILED") and s,
                           timeout=420)
    text = out.read_text(errors="replace") if out.exists() else ""
    assert state == "COMPLETED", text[-4000:] + slurm.log_tails()
    # each host ran one rank, and the all-reduce between them summed 1 + 2 (c10d numbers ranks by arrival)
    lines = [x.split(" on ", 1)[1] for x in text.splitlines() if x.startswith("rank ")]
    assert sorted(lines) == [f"{h.name}: sum 3" for h in hosts], text[-4000:]
    from trainledger.cli.commands import app
    from typer.testing import CliRunner

    for args in (["slurm", "map", "add", "--partition", "debug", "--node-type", "rtx4090-8x", "--by-node"],
                 ["slurm", "sync", "--tz", "UTC", "--json"]):  # no GPUs here: the partition costed by whole nodes
        r = CliRunner().invoke(app, [*args, "--db", ledger.url], env={"SLURM_CONF": str(slurm.conf)},
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
    fields = ["JobID", "State", "ElapsedRaw", "NNodes", "NodeList"]
    rec = dict(zip(fields, slurm.run("sacct", "-n", "-P", "-X", "-j", job, "-o", ",".join(fields)).stdout.split("|")))
    engine = ledger.engine()
    with Session(engine) as s:
        runs = s.exec(select(Run)).all()
        nodes = s.exec(select(RunNode).order_by(RunNode.node_rank)).all()
    engine.dispose()
    run_id = slurm_run_id(job, "")
    assert [r.id for r in runs] == [run_id]
    run = runs[0]
    assert (run.status, run.nodes, run.name) == (RunStatus.succeeded, 2, "two-host-job") and int(rec["NNodes"]) == 2
    assert json.loads(r.output)["updated"] == 1, r.output  # the wrapper's run took the allocation's times
    assert (run.ended_at - run.started_at).total_seconds() == int(rec["ElapsedRaw"].strip()), (r.output, rec)
    assert [(n.hostname, n.node_rank, n.status, n.exit_code) for n in nodes] == [
        (hosts[0].name, 0, "succeeded", 0), (hosts[1].name, 1, "succeeded", 0)]
