"""``trainledger run -- COMMAND`` around real processes that are not ours (SQLite and PostgreSQL).

Each test starts real wrappers as subprocesses and waits for states by polling,
never by sleeping a fixed time.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import timedelta, timezone
from decimal import Decimal

import pytest
from trainledger.store.models import RunStatus

from tests.capture.conftest import (
    HERE,
    REPO,
    alive,
    all_runs,
    job,
    nodes_of,
    run_id_of,
    run_row,
    run_wrapped,
    samples_of,
    wrap_cmd,
)
from tests.tracking.conftest import wait_for

pytestmark = pytest.mark.slow


def test_a_two_process_torchrun_script_is_recorded(ledger_url, capture_env, tmp_path):
    cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", HERE / "ddp_job.py", tmp_path, 3000]
    t0 = time.time()
    out = run_wrapped(ledger_url, capture_env, "--project", "llm", "--tag", "team=nlp", command=cmd, timeout=180)
    wall = time.time() - t0
    assert out.returncode == 0, out.stderr.decode()
    run = run_row(ledger_url, run_id_of(out.stderr))
    assert (run.status, run.exit_code, run.error, run.launcher) == (RunStatus.succeeded, 0, None, "torchrun")
    assert (run.nodes, run.gpus_per_node, run.world_size) == (1, 2, 2)
    (node,) = nodes_of(ledger_url, run.id)
    assert (node.processes, node.status, node.exit_code, node.node_rank) == (2, "succeeded", 0, 0)
    # the duration covers what each rank measured itself, and no more than the wrapper's own wall time
    rank_secs = [float((tmp_path / f"rank{r}.txt").read_text().split()[2]) for r in (0, 1)]
    assert [(tmp_path / f"rank{r}.txt").read_text().split()[:2] for r in (0, 1)] == [["2", "2"]] * 2
    duration = (run.ended_at - run.started_at).total_seconds()
    assert max(rank_secs) < duration < wall
    # the process tree's CPU utilization, labelled as such (never GPU-Util, and no MFU on CPU)
    assert run.util_source == node.util_source == "cpu" and run.mfu is None
    assert 0 < run.gpu_util_mean <= 1 and run.gpu_util_mean == node.gpu_util_mean
    cpu = samples_of(ledger_url, run.id, "cpu_util")
    assert cpu and all(0 <= v <= 1 for _, _, v in cpu) and {(n, g) for n, g, _ in cpu} == {(node.hostname, -1)}
    assert run.config["tags"] == {"team": "nlp"} and run.config["wrapper"]["command"][0] == "torchrun"


def test_exit_3_fails_the_run_with_its_code_and_stderr_and_passes_output_through(ledger_url, capture_env):
    out = run_wrapped(ledger_url, capture_env, "--quiet", command=job("--out", "exact bytes\n", "--err-lines", 30,
                                                                        "--exit", 3))
    assert out.returncode == 3
    assert out.stdout == b"exact bytes\n"  # stdout untouched; nothing of ours on it
    assert out.stderr.decode().splitlines() == [f"stderr line {i}" for i in range(30)]  # --quiet: only the command's
    (run,) = all_runs(ledger_url)
    assert (run.status, run.exit_code) == (RunStatus.failed, 3)
    assert run.error.splitlines() == ["exit code 3; stderr:"] + [f"stderr line {i}" for i in range(10, 30)]
    assert run.lost_from == run.started_at and run.lost_until == run.ended_at  # never checkpointed: all of it lost


def test_sigterm_cancels_forwards_to_the_process_group_and_kills_after_the_grace(ledger_url, capture_env, tmp_path):
    # a job that handles SIGTERM (exit 7), with a grandchild in its process group
    started, term, child = tmp_path / "started", tmp_path / "term", tmp_path / "child"
    p = subprocess.Popen(wrap_cmd(ledger_url, "--grace", 60, command=job("--started", started, "--on-term", term,
                                                                      "--child", child, "--sleep", 600)),
                         env=capture_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wait_for(lambda: started.exists() and child.exists(), 180, "the job to start")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 7  # the command's exit status is the wrapper's
    assert term.read_text() == f"{started.read_text()} SIGTERM"
    wait_for(lambda: not alive(int(child.read_text())), 30, "the grandchild to go")  # it got the group's SIGTERM
    run = run_row(ledger_url, run_id_of(err))
    assert (run.status, run.exit_code, run.error) == (RunStatus.cancelled, 7, "cancelled by SIGTERM")
    # a job that ignores SIGTERM is SIGKILLed after the grace period, and is still a cancel
    started2 = tmp_path / "started2"
    p = subprocess.Popen(wrap_cmd(ledger_url, "--grace", 1, command=job("--started", started2, "--ignore-term",
                                                                     "--sleep", 600)),
                         env=capture_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wait_for(started2.exists, 180, "the second job to start")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGKILL
    run = run_row(ledger_url, run_id_of(err))
    assert (run.status, run.exit_code) == (RunStatus.cancelled, 137)
    assert run.error == "cancelled by SIGTERM; processes were killed after the grace period"


def test_kill9_of_the_wrapper_leaves_no_orphan_and_reaps_as_crashed(ledger_url, capture_env, tmp_path):
    started, child, loner = tmp_path / "started", tmp_path / "child", tmp_path / "loner"
    p = subprocess.Popen(wrap_cmd(ledger_url, command=job("--started", started, "--child", child,
                                                         "--setsid-child", loner, "--sleep", 600)),
                         env=capture_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wait_for(lambda: started.exists() and child.exists() and loner.exists(), 180, "the job and its children")
    pids = [int(f.read_text()) for f in (started, child, loner)]
    run_id = None

    def registered():
        nonlocal run_id
        runs = all_runs(ledger_url)
        run_id = runs[0].id if runs else None
        return runs and runs[0].heartbeat_at > runs[0].started_at
    wait_for(registered, 180, "a heartbeat after the start")
    p.kill()
    p.wait(timeout=30)
    # the job, its grandchild and one in a session of its own (as torchrun's workers are): all gone
    wait_for(lambda: not any(alive(pid) for pid in pids), 30, "no process of the job left")
    run = run_row(ledger_url, run_id)
    assert run.status == RunStatus.running  # nobody wrote an end: the reaper will
    wait_for(lambda: _reap(ledger_url, capture_env) == 1, 180, "the reaper to find the stale heartbeat")
    run = run_row(ledger_url, run_id)
    assert (run.status, run.ended_at) == (RunStatus.crashed, run.heartbeat_at)
    assert (run.lost_from, run.lost_until) == (run.started_at, run.heartbeat_at)
    (node,) = nodes_of(ledger_url, run_id)
    assert node.status == "crashed"


def test_two_wrappers_with_one_run_id_make_one_run_with_two_nodes(ledger_url, capture_env, tmp_path):
    common = ["--run-id", "shared-run", "--nodes", 2]
    # node 1 starts first: its events wait in its journal until node 0 has registered the run. Its wrapper waits
    # for that as long as it takes (600 s: an upper bound, not the 20 s of capture_env that a slow start of node 0
    # on a loaded machine outlasted), so node 0 may start as late as it likes
    n1 = subprocess.Popen(wrap_cmd(ledger_url, *common, "--node-rank", 1, "--node-name", "node-b",
                                   command=job("--busy", 1.5)), env={**capture_env, "TRAINLEDGER_LEDGER_WAIT_S": "600"},
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=REPO)
    wait_for(lambda: list((tmp_path / "journal").glob("shared-run.node1.jsonl")), 180, "node 1's journal")
    n0 = subprocess.Popen(wrap_cmd(ledger_url, *common, "--node-rank", 0, "--node-name", "node-a",
                                   command=job("--busy", 1.5)), env=capture_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=REPO)
    assert n0.wait(timeout=300) == 0 and n1.wait(timeout=700) == 0, (n0.stderr.read(), n1.stderr.read())
    (run,) = all_runs(ledger_url)
    assert (run.id, run.nodes, run.status) == ("shared-run", 2, RunStatus.succeeded)
    nodes = nodes_of(ledger_url, run.id)
    assert [(n.hostname, n.node_rank, n.status, n.util_source) for n in nodes] == [
        ("node-a", 0, "succeeded", "cpu"), ("node-b", 1, "succeeded", "cpu")]
    # the run's GPU-Util (here the CPU share) is the mean of its nodes'
    assert run.gpu_util_mean == pytest.approx(sum(n.gpu_util_mean for n in nodes) / 2)


def test_bad_input_is_one_line_exit_2_and_nothing_starts(ledger_url, capture_env, tmp_path):
    marker = tmp_path / "started"
    cases = [
        (["trainledger", "run", "--db", ledger_url, *job("--started", marker)], "missing `--` before the command"),
        (wrap_cmd(ledger_url, "--node-type", "nope", command=job("--started", marker)), "--node-type: unknown node type 'nope'"),
        (wrap_cmd(ledger_url, "--offer", "nope", command=job("--started", marker)), "--offer: 'nope' is not an offer"),
        (wrap_cmd(ledger_url, "--nodes", 2, "--run-id", "r", command=["torchrun", "--nnodes", 1, *job("--started", marker)]),
         "--nodes 2 conflicts with torchrun nodes in the command = 1"),
        (wrap_cmd(ledger_url, "--resume-of", "nope", command=job("--started", marker)), "--resume-of: no run 'nope'"),
        (wrap_cmd(ledger_url, "--tag", "novalue", command=job("--started", marker)), "--tag: expected KEY=VALUE"),
        (wrap_cmd(ledger_url, command=[]), "COMMAND: nothing after `--`"),
    ]
    for argv, message in cases:
        out = subprocess.run(argv, env=capture_env, capture_output=True, text=True, cwd=REPO, timeout=120)
        assert (out.returncode, out.stdout) == (2, ""), (argv, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    out = subprocess.run(wrap_cmd(ledger_url, command=["no-such-command-xyz", "--flag"]), env=capture_env,
                         capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 127 and out.stderr.strip() == (
        "error: COMMAND: 'no-such-command-xyz' not found on PATH; nothing was registered or started")
    assert not marker.exists() and all_runs(ledger_url) == []


def test_an_unreachable_ledger_does_not_stop_the_run_and_sync_replays_it(ledger_url, capture_env, tmp_path):
    down = "postgresql+psycopg://nobody@127.0.0.1:9/none"  # nothing listens on port 9
    env = {**capture_env, "TRAINLEDGER_LEDGER_WAIT_S": "1"}
    out = run_wrapped(down, env, "--project", "offline", command=job("--busy", 0.5, "--out", "done\n"))
    assert out.returncode == 0 and out.stdout == b"done\n"
    err = out.stderr.decode()
    assert "unreachable" in err and "the run starts and its events wait in the journal" in err
    run_id = run_id_of(out.stderr)
    assert (tmp_path / "journal" / f"{run_id}.jsonl").exists()
    synced = subprocess.run([sys.executable, "-m", "trainledger.cli", "sync", "--db", ledger_url, "--json"], env=capture_env,
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert json.loads(synced.stdout)["applied"][run_id] > 0
    run = run_row(ledger_url, run_id)
    assert (run.status, run.exit_code) == (RunStatus.succeeded, 0) and nodes_of(ledger_url, run_id)[0].status == "succeeded"


def test_the_api_under_the_wrapper_attaches_to_its_run(ledger_url, capture_env, tmp_path):
    out = run_wrapped(ledger_url, capture_env, "--project", "wrapped", command=job("--track", 40, "--checkpoint-at", 29))
    assert out.returncode == 0, out.stderr.decode()
    (run,) = all_runs(ledger_url)  # one run, not a second one opened by the API
    assert (run.status, run.launcher, run.steps, run.tokens) == (RunStatus.succeeded, "python", 40, 40 * 256)
    assert run.final_loss == pytest.approx(4.0 - 39 / 100)
    assert (run.last_checkpoint_step, run.last_checkpoint_path) == (29, "/ckpt/29")
    assert run.lost_from is None  # it succeeded: nothing lost
    assert len(samples_of(ledger_url, run.id, "loss")) == 40
    journals = sorted(p.name for p in (tmp_path / "journal").glob("*.jsonl"))
    assert journals[0].startswith(f"{run.id}.api-") and journals[1] == f"{run.id}.jsonl"


def test_a_run_killed_after_a_checkpoint_loses_the_gpu_hours_since_it(ledger_url, capture_env, tmp_path):
    """kill -9 of a wrapped job that checkpointed: reaped as crashed, its lost work is exactly the GPU-hours
    from the checkpoint to its last heartbeat."""
    started = tmp_path / "started"
    p = subprocess.Popen(wrap_cmd(ledger_url, "--gpus-per-node", 8, command=job("--track", 5, "--checkpoint-at", 4,
                                                                              "--started", started, "--sleep", 600)),
                         env=capture_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wait_for(started.exists, 180, "the job")
    run_id = None

    def checkpointed():
        nonlocal run_id
        runs = all_runs(ledger_url)
        ok = runs and runs[0].last_checkpoint_at is not None and runs[0].heartbeat_at > runs[0].last_checkpoint_at
        run_id = runs[0].id if ok else None
        return ok
    wait_for(checkpointed, 180, "the checkpoint and a later heartbeat")
    p.kill()
    p.wait(timeout=30)
    wait_for(lambda: _reap(ledger_url, capture_env) == 1, 180, "the reaper to find the stale heartbeat")
    run = run_row(ledger_url, run_id)
    assert run.status == RunStatus.crashed and (run.lost_from, run.lost_until) == (run.last_checkpoint_at, run.ended_at)
    from sqlmodel import Session
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.rates import costs
    from trainledger.money.rates.months import month_of
    from trainledger.runs.registry import show_run
    from trainledger.store.db import make_engine

    engine = make_engine(ledger_url)
    with Session(engine) as s:
        shown = show_run(s, run_id)
        line = next(r for r in monthly_report(s, month_of(run.started_at, timezone.utc)).runs if r.run_id == run_id)
    engine.dispose()
    lost_us = (run.ended_at - run.last_checkpoint_at) // timedelta(microseconds=1)
    assert lost_us > 0 and shown["lost_since"] == "checkpoint"
    # 1 node × 8 GPUs × the µs from the checkpoint to the last heartbeat
    assert shown["lost_gpu_hours"] == line.lost_gpu_hours == Decimal(8 * lost_us) / Decimal(3_600_000_000)
    # costed at the run's rate: its share of the run's cost by time (the default offer here is an owned fleet's)
    run_us = (run.ended_at - run.started_at) // timedelta(microseconds=1)
    assert costs.cents(line.lost_work_cost) == costs.cents(line.cost * lost_us / run_us) > 0


def test_nvml_samples_only_the_gpus_the_job_owns(ledger_url, capture_env, fake_nvml, tmp_path):
    reads = tmp_path / "nvml-power-reads"
    env = {**capture_env, "LD_LIBRARY_PATH": str(fake_nvml), "CUDA_VISIBLE_DEVICES": "1,3",
           "FAKE_NVML_UTIL": "10,20,30,40", "FAKE_NVML_MEM_MIB": "100,200,300,400", "FAKE_NVML_POWER_W": "50,100,150,200",
           "FAKE_NVML_READS_FILE": str(reads)}
    # the job lasts until the wrapper has read both GPUs' power twice: two samples, so energy accrues between them
    out = run_wrapped(ledger_url, env, command=job("--wait-bytes", reads, 4))
    assert out.returncode == 0, out.stderr.decode()
    (run,) = all_runs(ledger_url)
    (node,) = nodes_of(ledger_url, run.id)
    assert run.gpus_per_node == 2 and run.util_source == node.util_source == "nvml"
    assert run.gpu_util_mean == pytest.approx(0.3) and node.gpu_util_p95 == pytest.approx(0.4)  # GPUs 1 and 3 only
    assert node.mem_peak_bytes == 400 * 2**20 and run.mem_kind == "nvml_used"
    util = samples_of(ledger_url, run.id, "gpu_util")
    assert {(g, v) for _, g, v in util} == {(0, 0.2), (1, 0.4)}  # recorded as the job's CUDA devices 0 and 1
    # energy = power × time between samples: 300 W for at most the run's duration
    duration_h = (run.ended_at - run.started_at).total_seconds() / 3600
    assert 0 < node.energy_kwh <= 0.3 * duration_h


def test_runs_cancel_stops_a_wrapped_run(ledger_url, capture_env, tmp_path):
    started, term = tmp_path / "started", tmp_path / "term"
    p = subprocess.Popen(wrap_cmd(ledger_url, command=job("--started", started, "--on-term", term, "--sleep", 600)),
                         env=capture_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    wait_for(lambda: started.exists() and all_runs(ledger_url), 180, "the job and its run")
    run_id = all_runs(ledger_url)[0].id
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "runs", "cancel", run_id, "--db", ledger_url, "--json"],
                         env=capture_env, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert json.loads(out.stdout) == {"run_id": run_id, "status": "cancelled", "signalled": True,
                                      "killed_after_grace": False}
    assert p.wait(timeout=60) == 7 and term.exists()  # the wrapper forwarded the SIGTERM; the job handled it
    assert run_row(ledger_url, run_id).error == "cancelled by SIGTERM"


def _reap(url: str, env: dict) -> int:
    """``trainledger runs reap --stale-after 1``: how many runs it marked crashed."""
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "runs", "reap", "--stale-after", "1", "--db", url, "--json"],
                         env=env, capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    return json.loads(out.stdout)["reaped"]
