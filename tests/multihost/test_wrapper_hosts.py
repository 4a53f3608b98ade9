"""`trainledger run` on two hosts with one run id: one run, one RunNode per host under its own hostname."""

from __future__ import annotations

import sys

import pytest
from sqlmodel import Session, select
from trainledger.store.models import Run, RunNode

from tests.multihost.conftest import host_env, start_on, tail, trainledger, wait_all

pytestmark = pytest.mark.slow

#: about a second of CPU on each host, so that the wrapper samples its utilization
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0:\n    pass\nprint('done')"


def test_one_wrapper_per_host_records_one_run_with_both_hosts(hosts, ledger, tmp_path):
    run_id = "mh-wrap-1"
    procs, logs = [], []
    for h in hosts:
        env = host_env(tmp_path, h, ledger)
        log = tmp_path / f"{h.name}.log"
        cmd = trainledger("run", "--run-id", run_id, "--nodes", 2, "--node-rank", h.index, "--name", "two-hosts",
                          "--", sys.executable, "-c", BURN)
        procs.append(start_on(h, cmd, env, log))
        logs.append(log)
    assert wait_all(procs, logs, timeout=300) == [0, 0], "\n".join(tail(x) for x in logs)
    engine = ledger.engine()
    with Session(engine) as s:
        runs = s.exec(select(Run)).all()
        nodes = s.exec(select(RunNode).order_by(RunNode.node_rank)).all()
    engine.dispose()
    assert [r.id for r in runs] == [run_id]
    run = runs[0]
    assert (run.status.value, run.nodes, run.exit_code, run.name) == ("succeeded", 2, 0, "two-hosts")
    assert run.hostname == hosts[0].name  # node 0 owns the run
    assert [(n.hostname, n.node_rank, n.status, n.exit_code) for n in nodes] == [
        (hosts[0].name, 0, "succeeded", 0), (hosts[1].name, 1, "succeeded", 0)]
    assert all(n.util_source == "cpu" and n.gpu_util_mean is not None for n in nodes)
    # the run's utilization is the mean of its nodes' (journal._run_util_from_nodes)
    assert run.gpu_util_mean == pytest.approx(sum(n.gpu_util_mean for n in nodes) / 2)
    assert run.started_at <= min(n.heartbeat_at for n in nodes) and run.ended_at > run.started_at
