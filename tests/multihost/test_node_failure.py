"""A host dies mid-run, or loses its link: the run ends failed with the error, its lost work is costed,
the dead node shows in the run detail, and nothing is left running on the other host.

Both runs are held after step 5 (``TRAINLEDGER_TEST_HOLD``, ledger/sources/capture/hold.py) with a checkpoint at
step 4, so the failure always comes at the same place: between step 5 and step 6, one step after the
last checkpoint. The surviving side ends on its own: a dead peer's connection is closed at once; a cut
link leaves the ranks waiting until the trainer's collective timeout (``TRAINLEDGER_COMM_TIMEOUT_S``).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml
from sqlalchemy import func
from sqlmodel import Session, select
from trainledger.money.rates import costs
from trainledger.runs.registry import show_run
from trainledger.store.models import MetricSample, Run

from tests.multihost.conftest import host_env, poll, start_on, tail, trainledger, wait_all
from tests.trainer.conftest import parity_config

pytestmark = pytest.mark.slow

HELD_AT, CHECKPOINT_EVERY, STEPS = 5, 4, 8
COMM_TIMEOUT_S = "20"


def _start(hosts, ledger, tmp_path, run_id: str):
    configs = tmp_path / "configs"
    configs.mkdir()
    config = configs / "dp.yaml"
    cfg = parity_config("dp", tmp_path / "cache")
    cfg.update(steps=STEPS, checkpoint={"dir": str(tmp_path / "ckpt"), "every": CHECKPOINT_EVERY})
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    gate = tmp_path / "go"
    procs, logs = [], []
    for h in hosts:
        env = host_env(tmp_path, h, ledger, TRAINLEDGER_CONFIG_DIRS=str(configs),
                       TRAINLEDGER_TEST_HOLD=f"{HELD_AT}:{gate}", TRAINLEDGER_COMM_TIMEOUT_S=COMM_TIMEOUT_S)
        log = tmp_path / f"{h.name}.log"
        procs.append(start_on(h, trainledger("launch", config, "--nodes", 2, "--hostfile", hosts.hostfile(tmp_path / "hostfile"),
                                             "--run-id", run_id, "--master-port", 29421), env, log))
        logs.append(log)
    engine = ledger.engine()

    def held():
        with Session(engine) as s:
            run = s.get(Run, run_id)
            losses = s.exec(select(func.count()).select_from(MetricSample).where(
                MetricSample.run_id == run_id, MetricSample.metric == "loss")).one()
            return run is not None and run.last_checkpoint_step == CHECKPOINT_EVERY and losses == HELD_AT

    try:
        poll(held, timeout=420, message="the run held after step 5 with its step-4 checkpoint:\n"
             + "\n".join(tail(x) for x in logs))
    except BaseException:
        for h in hosts:
            h.kill_all()
        raise
    return engine, gate, procs, logs


def _detail(engine, run_id: str) -> dict:
    with Session(engine) as s:
        return show_run(s, run_id)


def _assert_failed_with_lost_work(d: dict, hosts, error_part: str) -> None:
    assert d["status"] == "failed" and d["exit_code"] not in (None, 0)
    assert error_part in d["error"], d["error"]
    # the dead node is in the run detail: it never reported its end
    assert [(n["hostname"], n["node_rank"], n["status"]) for n in d["nodes_detail"]] == [
        (hosts[0].name, 0, "failed"), (hosts[1].name, 1, "crashed")]
    # the work since the step-4 checkpoint is lost: from it to the run's end, costed at the run's own rate
    assert d["last_checkpoint_step"] == CHECKPOINT_EVERY and d["lost_since"] == "checkpoint"
    lost_h = costs.hours_between(d["last_checkpoint_at"], d["ended_at"])
    assert lost_h > 0 and d["lost_hours"] == lost_h
    assert d["gpus_per_node"] == 1  # one rank per host here
    nano = Decimal("1e-9")  # GPU-hours to the nano-hour: the ledger sums its months, here one product
    assert d["lost_gpu_hours"].quantize(nano) == costs.gpu_hours(costs.node_hours(2, lost_h), 1).quantize(nano)
    share = d["cost_actual"] * lost_h / d["duration_hours"]  # the run's cost shared by time (an elastic offer)
    assert costs.cents(d["lost_work_cost"]) == costs.cents(share) and d["lost_work_cost"] > Decimal(0)


def test_a_host_killed_mid_run(hosts, ledger, tmp_path):
    engine, gate, procs, logs = _start(hosts, ledger, tmp_path, "mh-kill")
    killed = hosts[1].kill_all()
    assert killed and poll(lambda: not hosts[1].pids(), timeout=60, message="host 1 empty")
    gate.touch()
    codes = wait_all(procs[:1], logs)
    assert codes == [1], tail(logs[0])
    assert poll(lambda: not hosts[0].pids(), timeout=120, message="no process left on host 0")
    d = _detail(engine, "mh-kill")
    engine.dispose()
    # gloo on host 0 saw its peer's connection close (the peer is host 1's address)
    _assert_failed_with_lost_work(d, hosts, hosts[1].addr)


def test_a_host_cut_off_mid_run(hosts, ledger, tmp_path):
    engine, gate, procs, logs = _start(hosts, ledger, tmp_path, "mh-cut")
    hosts[1].cut()
    try:
        gate.touch()
        codes = wait_all(procs, logs)
        # host 1's ranks gave up after the collective timeout too, and its launch could not reach the ledger
        assert codes[0] == 1 and codes[1] != 0, "\n".join(tail(x) for x in logs)
        assert poll(lambda: not hosts[0].pids() and not hosts[1].pids(), timeout=120, message="no process left")
    finally:
        hosts[1].mend()
    d = _detail(engine, "mh-cut")
    engine.dispose()
    _assert_failed_with_lost_work(d, hosts, "Timed out")
