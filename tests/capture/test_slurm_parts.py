"""Several wrapped steps of one Slurm job are one run with its steps (issue 24, item 4; docs/SLURM.md):
the first wrapped step owns the job's run ``slurm-<jobid>``; later steps (``SLURM_STEP_ID`` > 0), and a
wrapper started after the job's run ended, add their node row ``NODE/stepN`` and never register or end it.
With the Slurm environment variables the wrapper reads, around real jobs; a real cluster: tests/slurm."""

from __future__ import annotations

import subprocess
import sys

import pytest
from trainledger.sources.telemetry.topology import Flags, resolve
from trainledger.store.models import RunStatus

from tests.capture.conftest import HERE, REPO, all_runs, nodes_of, run_row, wrap_cmd
from tests.tracking.conftest import wait_for

JOB = HERE / "hostile_job.py"


def slurm_env(base: dict, step: int | None, nodes: int = 4, node_id: int = 0, node: str = "gpu01") -> dict:
    env = {**base, "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NODEID": str(node_id),
           "SLURMD_NODENAME": node, "SLURM_LOCALID": "0"}
    if step is not None:
        env["SLURM_STEP_ID"] = str(step)
    return env


def wrapped(url: str, env: dict, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen(wrap_cmd(url, command=[sys.executable, str(JOB), *map(str, args)]), env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.mark.slow
def test_sequential_and_concurrent_steps_are_one_run_with_its_steps(ledger_url, capture_env, tmp_path):
    # step 0 runs while step 1 runs beside it (concurrent), then step 2 after both (sequential)
    go0 = tmp_path / "go0"
    s0 = wrapped(ledger_url, slurm_env(capture_env, 0), "--started", tmp_path / "s0", "--wait-for", go0)
    wait_for((tmp_path / "s0").exists, 60, "step 0 to start")
    s1 = wrapped(ledger_url, slurm_env(capture_env, 1), "--exit", 3)
    assert s1.wait(timeout=120) == 3, s1.stderr.read().decode()
    go0.touch()
    assert s0.wait(timeout=120) == 0, s0.stderr.read().decode()
    s2 = wrapped(ledger_url, slurm_env(capture_env, 2, node_id=1, node="gpu02"), "--count", tmp_path / "n2")
    assert s2.wait(timeout=120) == 0, s2.stderr.read().decode()  # main: refused, "already ended"
    # a second wrapper in the batch script itself (no step), after the run ended: a part too
    b = wrapped(ledger_url, slurm_env(capture_env, None), "--count", tmp_path / "nb", "--exit", 5)
    assert b.wait(timeout=120) == 5, b.stderr.read().decode()
    assert (tmp_path / "n2").exists() and (tmp_path / "nb").exists()
    (run,) = all_runs(ledger_url)
    assert (run.id, run.status, run.exit_code, run.nodes) == ("slurm-4242", RunStatus.succeeded, 0, 4)
    rows = {n.hostname: (n.status, n.exit_code) for n in nodes_of(ledger_url, run.id)}
    batch = [h for h in rows if h.startswith("gpu01/part-")]
    assert len(batch) == 1
    assert rows == {"gpu01": ("succeeded", 0), "gpu01/step1": ("failed", 3), "gpu02/step2": ("succeeded", 0),
                    batch[0]: ("failed", 5)}
    assert run_row(ledger_url, "slurm-4242").ended_at is not None


def test_srun_on_k_nodes_of_a_larger_allocation_is_a_step_of_the_allocations_run():
    env = {"SLURM_JOB_ID": "77", "SLURM_JOB_NUM_NODES": "4", "SLURM_NODEID": "0", "SLURMD_NODENAME": "gpu01"}
    topo = resolve(Flags(), env, ["srun", "-N", "2", "--ntasks-per-node", "1", "python", "train.py"])
    assert (topo.run_id, topo.nodes, topo.node_rank, topo.owns_run, topo.part) == ("slurm-77", 4, 0, True, None)
    assert topo.facts["command"]["nodes"] == 2
    step = resolve(Flags(), {**env, "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_NODES": "2"}, ["python", "train.py"])
    assert (step.run_id, step.nodes, step.owns_run, step.part, step.node_key) == \
        ("slurm-77", 4, False, "step3", "gpu01/step3")
    batch = resolve(Flags(), {**env, "SLURM_STEP_ID": "4294967294"}, ["python", "train.py"])  # the batch step
    assert (batch.owns_run, batch.part) == (True, None)
