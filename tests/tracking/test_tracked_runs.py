"""Tracked runs end to end: real `trainledger launch` → torchrun → DeepSpeed ranks on CPU."""

from __future__ import annotations

import json
import os
import signal
from decimal import ROUND_HALF_UP, Decimal

import pytest
from sqlmodel import Session, func, select
from trainledger.money.rates import costs
from trainledger.sources.record.journal import Journal
from trainledger.store.db import make_engine
from trainledger.store.models import MetricSample, Offer, Run, RunNode, RunStatus

from tests.tracking.conftest import (
    CONFIGS,
    children,
    journal_samples,
    processes_of_run,
    sample_counts,
    trainledger,
    wait_for,
)
from tests.tracking.conftest import launch_detached as _launch_detached
from tests.tracking.conftest import run_row as _run

pytestmark = pytest.mark.slow


def _scrape(port: int, name: str) -> list[tuple[dict, float]]:
    """(labels, value) of metric ``name`` from a real /metrics endpoint."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return []
    return [(s.labels, s.value) for fam in text_string_to_metric_families(body) for s in fam.samples if s.name == name]


def _beat_after_start(engine, rid: str) -> bool:
    """The run is running and has heartbeaten since it started (its first heartbeat is its start)."""
    run = _run(engine, rid)
    return run is not None and run.status == RunStatus.running and run.heartbeat_at is not None \
        and run.heartbeat_at > run.started_at


def test_launched_zero2_run_is_recorded_with_every_field(sqlite_url, track_env):
    out = trainledger(["launch", CONFIGS / "zero2.yaml", "--steps", "12", "--project", "llm", "--user", "alice",
                       "--offer", "rtx4090-rent", "--metrics-port", "0", "--db", sqlite_url, "--json"], track_env)
    d = json.loads(out.stdout)
    assert d["status"] == "succeeded" and d["exit_code"] == 0
    engine = make_engine(sqlite_url)
    run = _run(engine, d["run_id"])
    assert (run.status, run.nodes, run.gpus_per_node, run.world_size) == (RunStatus.succeeded, 1, 2, 2)
    assert (run.strategy, run.dp, run.tp, run.pp, run.zero_stage) == ("zero2", 2, 1, 1, 2)
    assert (run.micro_batch, run.grad_accum, run.model_shape, run.steps) == (4, 2, "tiny", 12)
    assert run.tokens == 12 * 16 * run.seq_len and run.exit_code == 0 and run.error is None
    for field in ("started_at", "ended_at", "heartbeat_at", "step_time_median_s", "step_time_p95_s", "tokens_per_s",
                  "gpu_util_mean", "gpu_util_p95", "peak_mem_bytes", "comm_share", "final_loss", "params",
                  "tokens_per_epoch", "pid", "pgid", "hostname", "config"):
        assert getattr(run, field) is not None, field
    assert run.mfu is None and run.util_source == "cpu" and run.mem_kind == "cpu_max_rss"
    assert 0 < run.comm_share < 1 and 0 <= run.gpu_util_mean <= 1
    assert run.tokens_per_s == pytest.approx(16 * run.seq_len / run.step_time_median_s)
    with Session(engine) as s:
        nodes = s.exec(select(RunNode).where(RunNode.run_id == run.id)).all()
        assert len(nodes) == 1 and nodes[0].util_source == "cpu" and nodes[0].mem_peak_bytes > 0
        losses = s.exec(select(MetricSample.value).where(MetricSample.run_id == run.id, MetricSample.metric == "loss")
                        .order_by(MetricSample.ts)).all()
        assert len(losses) == 12 and losses[-1] == pytest.approx(run.final_loss)
        offer = s.exec(select(Offer).where(Offer.name == "rtx4090-rent")).one()
    # its cost is the cost engine's elastic figure for its node-hours (1 node, ≥ 1 h minimum)
    shown = json.loads(trainledger(["runs", "show", run.id, "--db", sqlite_url, "--json"], track_env).stdout)
    duration = costs.hours_between(run.started_at, run.ended_at)
    expected = costs.elastic_run_cost(offer, 1, duration)
    assert expected == Decimal(3600) / 730  # one billed hour
    assert shown["cost_actual"] == str(costs.cents(expected)) == "4.93"
    assert not processes_of_run(run.id)


def test_sigterm_cancels_and_kill9_of_the_launcher_crashes(sqlite_url, track_env):
    engine = make_engine(sqlite_url)
    # cancel: `runs cancel` → SIGTERM → rank 0 records cancelled with its end time
    from tests.tracking.conftest import free_port

    port = free_port()
    rid = _launch_detached(sqlite_url, track_env, "--steps", "100000", "--metrics-port", port)
    wait_for(lambda: _run(engine, rid).status == RunStatus.running and (_run(engine, rid).heartbeat_at is not None), 300, "running")
    # every rank serves Prometheus metrics on port + local_rank while it trains
    for rank in (0, 1):
        samples = wait_for(lambda: _scrape(port + rank, "trainledger_tokens_total"), 30, f"rank {rank} metrics")
        labels, tokens = samples[0]
        assert labels == {"run_id": rid, "node": labels["node"], "rank": str(rank)} and tokens > 0
        assert tokens % (16 * 128) == 0  # whole steps of global batch × seq len
        assert _scrape(port + rank, "trainledger_loss")[0][1] > 0
        assert _scrape(port + rank, "trainledger_step_seconds")[0][1] > 0
        util = wait_for(lambda: _scrape(port + rank, "trainledger_gpu_utilization_ratio"), 30, "utilization")
        assert util[0][0]["source"] == "cpu" and 0 <= util[0][1] <= 1
        assert wait_for(lambda: _scrape(port + rank, "trainledger_gpu_memory_used_bytes"), 30, "memory")[0][1] > 2**20
    out = json.loads(trainledger(["runs", "cancel", rid, "--db", sqlite_url, "--json"], track_env).stdout)
    assert out["status"] == "cancelled"
    run = _run(engine, rid)
    assert run.status == RunStatus.cancelled and run.ended_at is not None and run.error == "cancelled by signal"
    wait_for(lambda: not processes_of_run(rid), 30, "no processes of the cancelled run")

    # kill -9 of the launcher (torchrun) mid-run: ranks die with it, the run ends crashed at its last heartbeat (one
    # rank: however many there are, they die with it; issue 38: a rank is ~4.5 CPU-seconds)
    rid = _launch_detached(sqlite_url, track_env, "--steps", "100000", "--gpus-per-node", "1", config="dp.yaml")
    wait_for(lambda: _beat_after_start(engine, rid), 300, "running, with a heartbeat after its start")
    supervisor = _run(engine, rid).pid
    torchrun = wait_for(lambda: children(supervisor), 30, "the launcher process")[0]
    os.kill(torchrun, signal.SIGKILL)
    wait_for(lambda: _run(engine, rid).status == RunStatus.crashed, 60, "crashed")
    run = _run(engine, rid)
    assert run.ended_at == run.heartbeat_at and run.ended_at > run.started_at
    wait_for(lambda: not processes_of_run(rid), 30, "no orphan processes")
    shown = json.loads(trainledger(["runs", "show", rid, "--db", sqlite_url, "--json"], track_env).stdout)
    assert Decimal(shown["cost_actual"]) > 0  # crashed runs are costed too


def test_stale_heartbeat_is_reaped_as_crashed(sqlite_url, track_env):
    engine = make_engine(sqlite_url)
    # one rank: everything is killed at once, however many there are (issue 38: a rank is ~6 CPU-seconds)
    rid = _launch_detached(sqlite_url, track_env, "--steps", "100000", "--gpus-per-node", "1", config="dp.yaml")
    wait_for(lambda: _beat_after_start(engine, rid), 300, "running, with a heartbeat after its start")
    os.killpg(_run(engine, rid).pgid, signal.SIGKILL)  # everything dies at once: nobody settles the run
    wait_for(lambda: not processes_of_run(rid), 30, "all processes gone")
    assert _run(engine, rid).status == RunStatus.running
    # a fresh heartbeat is not stale: nothing reaped; once it is older than 2 s, the run is
    out = json.loads(trainledger(["runs", "reap", "--stale-after", "3600", "--db", sqlite_url, "--json"], track_env).stdout)
    assert out == {"reaped": 0}

    def reaped():
        return json.loads(trainledger(["runs", "reap", "--stale-after", "2", "--db", sqlite_url, "--json"],
                                      track_env).stdout)["reaped"]
    assert wait_for(reaped, 60, "the reaper to find the stale heartbeat") == 1
    run = _run(engine, rid)
    assert run.status == RunStatus.crashed and run.ended_at == run.heartbeat_at


def test_exception_in_training_step_fails_the_run_with_its_error(sqlite_url, track_env):
    env = {**track_env, "TRAINLEDGER_FAULT_STEP": "3"}  # one rank: the fault is raised by every rank alike
    out = trainledger(["launch", CONFIGS / "dp.yaml", "--gpus-per-node", "1", "--steps", "10", "--db", sqlite_url,
                       "--json"], env, check=False)
    assert out.returncode == 1
    rid = json.loads(out.stdout)["run_id"]
    run = _run(make_engine(sqlite_url), rid)
    assert run.status == RunStatus.failed
    assert run.error == "RuntimeError: injected fault at step 3 (TRAINLEDGER_FAULT_STEP)"
    assert run.ended_at is not None and run.exit_code == 1


def test_ledger_outage_mid_run_loses_and_doubles_nothing(track_env, tmp_path, pg_cluster):
    """The run is held (TRAINLEDGER_TEST_HOLD, ledger/sources/capture/hold.py) after step 10 until the ledger is down, and
    before its last step until it is back: the outage hits it mid-run however fast or slow the machine is."""
    pg = pg_cluster
    url = pg.url
    steps = 40
    down, back = tmp_path / "ledger-down", tmp_path / "ledger-back"
    env = {**track_env, "TRAINLEDGER_TEST_HOLD": f"10:{down},{steps - 1}:{back}"}
    make_engine(url).dispose()
    rid = _launch_detached(url, env, "--steps", str(steps), "--gpus-per-node", "1", config="dp.yaml")  # rank 0 writes
    engine = make_engine(url)
    wait_for(lambda: sample_counts(engine, rid).get("loss", 0) == 10, 300, "the run to hold after step 10")
    log_path = _run(engine, rid).log_path
    engine.dispose()
    pg.stop()
    down.touch()  # training goes on; events pile up in the journal
    journal_path = tmp_path / "journal" / f"{rid}.jsonl"
    wait_for(lambda: sum(r[2] == "loss" for r in journal_samples(journal_path)) >= 15, 300, "steps journaled meanwhile")
    pg.start()
    wait_for(lambda: "reachable again" in open(log_path).read(), 120, "rank 0 to reach the ledger again")
    back.touch()
    engine = make_engine(url)
    wait_for(lambda: _run(engine, rid).status == RunStatus.succeeded, 300, "succeeded")
    wait_for(lambda: not processes_of_run(rid), 60, "run processes gone")
    # a second replay of the whole journal changes nothing
    journal = Journal(tmp_path / "journal", rid)
    journal_losses = [r for r in journal_samples(journal.path) if r[2] == "loss"]
    journal.mark_applied(0)
    trainledger(["sync", "--db", url], track_env)
    counts = sample_counts(engine, rid)
    assert counts["loss"] == steps and counts["step_seconds"] == steps and counts["tokens"] == steps
    assert len(journal_losses) == steps
    run = _run(engine, rid)
    assert run.steps == steps and run.status == RunStatus.succeeded
    # the outage really hit the run: rank 0 saw the ledger go and come back
    log = open(run.log_path).read()
    assert "unreachable" in log and "training continues" in log and "reachable again" in log
    engine.dispose()


#: a sweep's strategies: plain data parallel on 2 ranks and 3D on 4. Every strategy runs and matches the
#: single-process loss in tests/trainer and tests/multihost; this test is about the sweep and its report, which treat
#: every strategy alike, so it runs two of them, the 3D one for its layout (seven took 55-160 s of the 2-core suite,
#: three 65 CPU-seconds: issue 38)
SWEEP = ("dp", "3d")


def test_sweep_of_strategies_gives_one_row_each(sqlite_url, track_env):
    out = trainledger(["sweep", CONFIGS / "dp.yaml", "--strategies", ",".join(SWEEP), "--steps", "4",
                       "--db", sqlite_url, "--json"], track_env, timeout=900)
    d = json.loads(out.stdout)
    assert [r["exit_code"] for r in d["runs"]] == [0] * len(SWEEP)
    weekly = json.loads(trainledger(["report", "weekly", "--sweep", d["sweep_id"], "--db", sqlite_url, "--json"], track_env).stdout)
    rows = weekly["rows"]
    assert sorted(r["strategy"] for r in rows) == sorted(SWEEP)
    assert sum(r["cheapest"] for r in rows) == 1 and rows[0]["cheapest"]
    costs_sorted = [Decimal(r["best_cost_per_1m_tokens"]) for r in rows]
    assert costs_sorted == sorted(costs_sorted)
    three_d = next(r for r in rows if r["strategy"] == "3d")
    assert (three_d["world_size"], three_d["tp"], three_d["pp"]) == (4, 2, 2)
    for r in rows:
        assert r["mfu"] is None and r["util_source"] == "cpu" and r["time_per_epoch_hours"] > 0
        # cost per 1M tokens under elastic rent = 1 node × 3600/730 per hour ÷ (tokens/s × 3600) × 1e6
        expected = Decimal(3600) / 730 / (Decimal(str(r["tokens_per_s"])) * 3600) * 1_000_000
        assert Decimal(r["cost_per_1m_tokens"]["rtx4090-rent"]) == expected.quantize(Decimal("0.0001"), ROUND_HALF_UP)


def test_bad_plan_is_refused_before_anything_starts(sqlite_url, track_env, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "3d.yaml").read_text().replace("tp: 2", "tp: 3"))
    out = trainledger(["launch", bad, "--gpus-per-node", "6", "--db", sqlite_url], track_env, check=False)
    assert out.returncode == 2 and "outside the allowed config directories" in out.stderr  # not in an allowed dir
    track_env = {**track_env, "TRAINLEDGER_CONFIG_DIRS": str(tmp_path)}
    out = trainledger(["launch", bad, "--gpus-per-node", "6", "--db", sqlite_url], track_env, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "bad.yaml:" in out.stderr and "tp" in out.stderr
    out = trainledger(["launch", CONFIGS / "zero2.yaml", "--nodes", "2", "--db", sqlite_url], track_env, check=False)
    assert out.returncode == 2 and "--run-id: a 2-node torchrun launch runs `trainledger launch` on every node" in out.stderr
    with Session(make_engine(sqlite_url)) as s:
        assert s.exec(select(func.count()).select_from(Run)).one() == 0


def test_slurm_script_uses_srun_and_torchrun_and_keeps_secrets_out(sqlite_url, track_env, tmp_path):
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    env = {**track_env, "PATH": str(no_slurm)}  # no sbatch on PATH (Slurm may be installed on this machine)
    out = trainledger(["launch", CONFIGS / "3d.yaml", "--launcher", "slurm", "--nodes", "2", "--gpus-per-node", "8",
                       "--db", sqlite_url, "--json"], env)
    d = json.loads(out.stdout)
    assert d["submitted"] is False
    script = open(d["script"]).read()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=8" in script
    assert "srun " in script and "torch.distributed.run --nnodes 2 --nproc-per-node 8" in script
    assert f"--run-id {d['run_id']}" in script and '--rdzv-endpoint "$head:29500"' in script
    assert "sqlite:" not in script and "TRAINLEDGER_DB_URL=" not in script
    run = _run(make_engine(sqlite_url), d["run_id"])
    assert run.status == RunStatus.queued and (run.nodes, run.gpus_per_node, run.world_size) == (2, 8, 16)


def test_deepspeed_launcher_runs_a_tracked_run(sqlite_url, track_env):
    out = trainledger(["launch", CONFIGS / "zero1.yaml", "--launcher", "deepspeed", "--steps", "3", "--db", sqlite_url,
                       "--json"], track_env)
    d = json.loads(out.stdout)
    run = _run(make_engine(sqlite_url), d["run_id"])
    assert d["status"] == "succeeded" and run.launcher == "deepspeed" and run.steps == 3 and run.world_size == 2


def test_trainledger_train_is_tracked_by_default(sqlite_url, track_env):
    trainledger(["train", CONFIGS / "dp.yaml", "--steps", "3", "--nproc-per-node", "1", "--project", "dev",
                 "--db", sqlite_url], track_env)
    with Session(make_engine(sqlite_url)) as s:
        runs = s.exec(select(Run)).all()
    assert len(runs) == 1
    run = runs[0]
    assert (run.status, run.steps, run.launcher, run.world_size, run.nodes) == (RunStatus.succeeded, 3, "local", 1, 1)
    assert run.pid is not None and run.hostname
