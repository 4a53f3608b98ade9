"""The trainer on two hosts: torchrun on each, its static rendezvous on host 0, gloo over the hosts' link.

Each host runs its own ``torchrun --nnodes 2 --node-rank R --master-addr <host 0's name>`` (what
``trainledger launch --nodes 2 --hostfile F`` runs there, without ssh), two ranks per host: every strategy
reaches the losses of a single-process run of the same seed, data and global batch (8 × 128 tokens)
within the single-host parity tolerance (tests/trainer/test_trainer_parallel_runs.py, 2e-5 at each of 4 steps).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from sqlmodel import Session, select
from trainledger.store.models import Run, RunNode

from tests.multihost.conftest import REPO, host_env, start_on, tail, trainledger, wait_all
from tests.trainer.conftest import PARITY_STEPS, parity_config

pytestmark = pytest.mark.slow

TOLERANCE = 2e-5  # tests/trainer/test_trainer_parallel_runs.py
WORKER = REPO / "tests" / "trainer" / "multi_strategy_worker.py"
#: 4 ranks on 2 hosts (2 each); global batch 8 everywhere: dp and zero2 at micro-batch 2 (dp 4), pp and tp
#: (pp 2 or tp 2, × dp 2), 3d (tp 2 × pp 2, dp 1)
STRATEGIES = {"dp": {"micro_batch": 2}, "zero2": {"micro_batch": 2}, "pp": {"pp": 2, "micro_batch": 2},
              "tp": {"tp": 2}, "3d": {"tp": 2, "pp": 2}}


def _torchrun(host_index: int, nodes: int, nproc: int, master: str, port: int, target: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(host_index),
            "--nproc-per-node", str(nproc), "--master-addr", master, "--master-port", str(port),
            "--max-restarts", "0", *target]


@pytest.fixture(scope="module")
def parity(hosts, tmp_path_factory):
    """Every strategy on 2 hosts × 2 ranks (one launch per host), and the single-process reference run
    (in the root namespace, at the same time)."""
    tmp = tmp_path_factory.mktemp("mh-parity")
    cache = tmp / "cache"
    runs = [{"name": name, "config": parity_config(name, cache, **dims)} for name, dims in STRATEGIES.items()]
    (tmp / "runs.json").write_text(json.dumps(runs), encoding="utf-8")
    (tmp / "ref.json").write_text(json.dumps([{"name": "ref", "config": parity_config("dp", cache)}]), encoding="utf-8")
    from tests.multihost.conftest import Ledger

    none = Ledger("sqlite:///" + str(tmp / "unused.db"))  # the parity runs are untracked
    procs, logs = [], []
    for h in hosts:
        env = host_env(tmp, h, none)
        log = tmp / f"{h.name}.log"
        cmd = _torchrun(h.index, 2, 2, hosts[0].name, 29411, [str(WORKER), str(tmp / "multi.json"), str(tmp / "runs.json")])
        procs.append(start_on(h, cmd, env, log))
        logs.append(log)
    ref_log = tmp / "ref.log"
    with open(ref_log, "wb") as fh:
        env = host_env(tmp, hosts[0], none)
        env.pop("GLOO_SOCKET_IFNAME")
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(tmp / "ref.json"), str(tmp / "ref.json")],
                                      cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT))
    logs.append(ref_log)
    assert wait_all(procs, logs, timeout=600) == [0, 0, 0], "\n".join(tail(x) for x in logs)
    return json.loads((tmp / "multi.json").read_text()), json.loads((tmp / "ref.json").read_text())["ref"]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_each_strategy_on_two_hosts_reaches_the_single_process_loss(parity, hosts, strategy):
    runs, ref = parity
    run = runs[strategy]
    assert run["callbacks"]["start"]["hostnames"] == [hosts[0].name] * 2 + [hosts[1].name] * 2
    assert (run["nodes"], run["world_size"]) == (2, 4)
    plan = run["plan"]
    assert (plan["dp"], plan["tp"], plan["pp"]) == {"dp": (4, 1, 1), "zero2": (4, 1, 1), "pp": (2, 1, 2),
                                                    "tp": (2, 2, 1), "3d": (1, 2, 2)}[strategy]
    assert len(run["losses"]) == len(ref["losses"]) == PARITY_STEPS
    for step, (got, want) in enumerate(zip(run["losses"], ref["losses"])):
        assert abs(got - want) <= TOLERANCE, f"{strategy} step {step}: {got!r} vs single process {want!r}"
    assert 0 < run["comm_share"] < 1  # gloo over the link between the hosts: measured, not assumed


def test_launch_on_each_host_records_one_run_with_both_hosts(hosts, ledger, tmp_path, parity):
    """`trainledger launch CONFIG --nodes 2 --hostfile F --run-id ID` on each host (no ssh): one run, two
    nodes under their hostnames with their own utilization, the measured comm share, the reference loss."""
    _, ref = parity
    configs = tmp_path / "configs"
    configs.mkdir()
    config = configs / "dp.yaml"
    config.write_text(yaml.safe_dump(parity_config("dp", tmp_path / "cache")), encoding="utf-8")
    hostfile = hosts.hostfile(tmp_path / "hostfile")
    run_id = "mh-launch-dp"
    procs, logs = [], []
    for h in hosts:
        env = host_env(tmp_path, h, ledger, TRAINLEDGER_CONFIG_DIRS=str(configs))
        log = tmp_path / f"{h.name}.log"
        procs.append(start_on(h, trainledger("launch", config, "--nodes", 2, "--hostfile", hostfile, "--run-id", run_id,
                                             "--master-port", 29412, "--json"), env, log))
        logs.append(log)
    codes = wait_all(procs, logs)
    assert codes == [0, 0], "\n".join(tail(x) for x in logs)
    engine = ledger.engine()
    with Session(engine) as s:
        run = s.get(Run, run_id)
        nodes = s.exec(select(RunNode).where(RunNode.run_id == run_id).order_by(RunNode.node_rank)).all()
        count = len(s.exec(select(Run)).all())
    engine.dispose()
    assert count == 1
    assert (run.status.value, run.nodes, run.gpus_per_node, run.world_size, run.steps) == ("succeeded", 2, 1, 2, PARITY_STEPS)
    assert (run.strategy, run.dp, run.launcher, run.hostname) == ("dp", 2, "torchrun", hosts[0].name)
    assert abs(run.final_loss - ref["losses"][-1]) <= TOLERANCE
    assert 0 < run.comm_share < 1
    assert [(n.hostname, n.node_rank, n.status, n.processes) for n in nodes] == [
        (hosts[0].name, 0, "succeeded", 1), (hosts[1].name, 1, "succeeded", 1)]
    for n in nodes:  # each host's own CPU utilization (no GPU here), and its share of step time outside comm
        assert n.util_source == "cpu" and n.gpu_util_mean is not None and n.gpu_util_mean > 0
        assert n.step_time_share == pytest.approx(1 - run.comm_share)
    assert nodes[0].gpu_util_mean != nodes[1].gpu_util_mean  # measured per host, not one figure copied
