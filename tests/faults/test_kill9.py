"""kill -9 of rank 0, of rank 1 and of the launcher (torchrun) in the middle of tracked runs.

The three runs (2 ranks each, tiny, CPU) are launched together with `trainledger launch --detach`
and, once the ledger shows all three training, each gets its kill. Every run must
end failed or crashed with the right end time, be costed, leave no process behind, and keep every
sample it journaled exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from trainledger.store.db import make_engine
from trainledger.store.models import RunStatus

from tests.faults.conftest import _utc, audit_samples, rank_pid, run_lost, training
from tests.tracking.conftest import (
    CONFIGS,
    REPO,
    children,
    kill_leftover_runs,
    make_track_env,
    processes_of_run,
    run_row,
    sample_counts,
    wait_for,
)

pytestmark = pytest.mark.slow
CASES = ("rank0", "rank1", "launcher")
HOLD_AT = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shard_cache):
    """Three long tracked runs on one SQLite ledger, started at once; once all three train, each gets its
    kill -9 (rank 0 of the first, rank 1 of the second, torchrun of the third) and the ledger settles them."""
    base = tmp_path_factory.mktemp("kill9")
    env = make_track_env(base, shard_cache)
    url = f"sqlite:///{base / 'ledger.db'}"
    make_engine(url).dispose()
    # each run holds after step HOLD_AT (TRAINLEDGER_TEST_HOLD) until its kill is due: all three are still
    # training when the kills come, however long the others took to start
    gates = {case: base / f"go-{case}" for case in CASES}
    procs = {case: subprocess.Popen([sys.executable, "-m", "trainledger.cli", "launch", str(CONFIGS / "zero2.yaml"),
                                     "--steps", "1000", "--name", f"kill-{case}", "--db", url, "--detach", "--json"],
                                    env={**env, "TRAINLEDGER_TEST_HOLD": f"{HOLD_AT}:{gates[case]}"}, cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for case in CASES}
    rids = {}
    for case, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        rids[case] = json.loads(out)["run_id"]
    engine = make_engine(url)
    try:
        killed_at = {}
        for case in CASES:
            rid = rids[case]
            wait_for(lambda: training(engine, rid, min_steps=HOLD_AT), 300, f"run {rid} ({case}) to train and hold")
        for case in CASES:
            gates[case].touch()  # released: killed while it trains again (past the hold), not while it waits
            wait_for(lambda: sample_counts(engine, rids[case]).get("loss", 0) > HOLD_AT, 120,
                     f"run {rids[case]} ({case}) to train past its hold")
            supervisor = run_row(engine, rids[case]).pid
            launcher = wait_for(lambda: children(supervisor), 30, "the launcher process")[0]
            victim = launcher if case == "launcher" else wait_for(lambda: rank_pid(launcher, int(case[-1])), 30, case)
            killed_at[case] = datetime.now(timezone.utc).replace(tzinfo=None)
            os.kill(victim, signal.SIGKILL)
        for case, rid in rids.items():
            wait_for(lambda: run_row(engine, rid).status not in (RunStatus.queued, RunStatus.running), 120,
                     f"run {rid} to end after kill -9 of {case}")
            wait_for(lambda: not processes_of_run(rid), 60, f"no orphan processes of run {rid}")
        yield SimpleNamespace(url=url, env=env, engine=engine, rids=rids, journal=base / "journal", killed_at=killed_at)
    finally:
        try:
            kill_leftover_runs(url, rids.values())
        finally:
            engine.dispose()


def _check_killed(ctx, case: str, fault_tally):
    """What every killed run must satisfy; returns its row and when its process was killed."""
    rid = ctx.rids[case]
    run = run_row(ctx.engine, rid)
    audit = audit_samples(ctx.engine, rid, journal=ctx.journal / f"{rid}.jsonl")
    lost = run_lost(ctx.engine, rid)
    fault_tally.record(f"kill -9 {case}", 1, [audit], runs_lost=int(lost is not None), status=run.status.value,
                       error=run.error)
    assert not processes_of_run(rid)
    assert lost is None, lost
    assert audit["lost"] == 0 and audit["doubled"] == 0, audit
    assert audit["steps"] >= 3 and audit["journal_missing"] == 0
    assert run.exit_code not in (None, 0)
    assert _utc(run.started_at) < _utc(run.ended_at)
    return run, ctx.killed_at[case]


def test_kill9_rank0_crashes_the_run_at_its_last_heartbeat(runs, fault_tally):
    run, killed_at = _check_killed(runs, "rank0", fault_tally)
    assert run.status == RunStatus.crashed, (run.status, run.error)
    assert run.ended_at == run.heartbeat_at and _utc(run.ended_at) <= killed_at
    # the supervisor names the rank that died, from torchrun's failure report
    assert "without a final status" in run.error and "rank 0 (local_rank 0) was killed by SIGKILL" in run.error


def test_kill9_of_rank1_fails_the_run_at_the_failure(runs, fault_tally):
    run, killed_at = _check_killed(runs, "rank1", fault_tally)
    # rank 0 notices (a broken collective, or the launcher's SIGTERM) and records the end itself;
    # nobody cancelled this run, so it is failed, with the rank that died as the cause
    assert run.status == RunStatus.failed, (run.status, run.error)
    assert "rank 1 (local_rank 1) was killed by SIGKILL" in run.error
    assert _utc(run.ended_at) >= killed_at  # the failure time, as rank 0 saw it


def test_kill9_of_the_launcher_crashes_the_run_and_leaves_no_orphans(runs, fault_tally):
    run, killed_at = _check_killed(runs, "launcher", fault_tally)
    # the ranks die with their launcher (PR_SET_PDEATHSIG); the supervisor settles the run
    assert run.status == RunStatus.crashed, (run.status, run.error)
    assert run.ended_at == run.heartbeat_at and _utc(run.ended_at) <= killed_at
    assert run.exit_code == -signal.SIGKILL


@pytest.mark.parametrize("cancel_requested", [False, True], ids=["nobody-cancelled", "runs-cancel"])
def test_rank0_stopped_by_the_launcher_is_failed_unless_someone_cancelled(runs, tmp_path, cancel_requested):
    """When rank 1 dies, torchrun may SIGTERM rank 0 before rank 0 notices the broken collective; rank 0
    then records ``cancelled``. The supervisor knows whether anyone asked for a cancel: if not, the run
    failed, and torchrun's report (here the real one of the rank-1 run above) names the cause."""
    from datetime import timedelta

    from sqlmodel import Session
    from trainledger.runs.launch import settle
    from trainledger.store.models import Run

    from tests.helpers import add_run

    report = run_row(runs.engine, runs.rids["rank1"]).log_path
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    with Session(engine) as s:
        add_run(s, "stopped", datetime.now(timezone.utc) - timedelta(minutes=2), 0.01, nodes=1, offer_name=None,
                status=RunStatus.cancelled)
        run = s.get(Run, "stopped")
        run.error, run.exit_code = "cancelled by signal", 130
        s.commit()
    settle("stopped", url, 1, cancel_requested=cancel_requested, log_path=Path(report))
    run = run_row(engine, "stopped")
    engine.dispose()
    if cancel_requested:
        assert (run.status, run.error, run.exit_code) == (RunStatus.cancelled, "cancelled by signal", 130)
    else:
        assert run.status == RunStatus.failed and run.exit_code == 1
        assert run.error == "rank 1 (local_rank 1) was killed by SIGKILL; the launcher then stopped the other ranks"


@pytest.mark.parametrize("cancel_requested", [False, True], ids=["nobody-cancelled", "runs-cancel"])
def test_rank0_stopped_before_it_recorded_its_end_is_failed_not_crashed(runs, tmp_path, cancel_requested):
    """Under load torchrun can stop rank 0 before rank 0 has recorded anything (found by tests/stress.sh: the
    rank-1 test above once saw ``crashed``). The launcher itself exited with 1 and its report (the real one of
    the rank-1 run) names rank 1's death: the run failed, ended when the launcher let go of the nodes. Asked to
    cancel, the supervisor leaves it as before (crashed at the last heartbeat)."""
    from datetime import timedelta

    from sqlmodel import Session
    from trainledger.runs.launch import settle
    from trainledger.store.models import Run

    from tests.helpers import add_run

    report = run_row(runs.engine, runs.rids["rank1"]).log_path
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    beat = datetime.now(timezone.utc) - timedelta(minutes=1)
    with Session(engine) as s:
        add_run(s, "unrecorded", beat - timedelta(minutes=1), 0.01, nodes=1, offer_name=None, status=RunStatus.running)
        run = s.get(Run, "unrecorded")
        run.ended_at, run.heartbeat_at = None, beat
        s.commit()
    before = datetime.now(timezone.utc)
    settle("unrecorded", url, 1, cancel_requested=cancel_requested, log_path=Path(report))
    run = run_row(engine, "unrecorded")
    engine.dispose()
    if cancel_requested:
        assert (run.status, _utc(run.ended_at)) == (RunStatus.crashed, _utc(beat))
    else:
        assert (run.status, run.exit_code) == (RunStatus.failed, 1)
        assert run.error == ("rank 1 (local_rank 1) was killed by SIGKILL; the launcher then stopped the other ranks "
                             "before rank 0 recorded its end")
        assert _utc(run.ended_at) >= _utc(before)
