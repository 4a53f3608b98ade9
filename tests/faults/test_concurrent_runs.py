"""Eight tracked runs at once on one embedded SQLite ledger.

Eight `trainledger launch --detach` start together on a ledger file that does not exist yet (so
they also race to create its schema); each holds after its first steps until all eight train, then all
eight rank-0 writers go on at once, flushing into it every 0.5 s. SQLite takes one writer at a time: all
must queue (WAL + BEGIN IMMEDIATE + busy timeout), none may see "database is locked", and every run must
have all of its samples, exactly once.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from trainledger.store.db import make_engine
from trainledger.store.models import RunNode, RunStatus

from tests.faults.conftest import audit_samples, log_of, run_lost, training
from tests.tracking.conftest import (
    CONFIGS,
    REPO,
    kill_leftover_runs,
    make_track_env,
    processes_of_run,
    run_row,
    sample_counts,
    wait_for,
)

pytestmark = pytest.mark.slow
RUNS = 8
#: each run holds after HOLD_AT steps until all eight have trained that far (TRAINLEDGER_TEST_HOLD), so its last
#: STEPS - HOLD_AT steps are written while the seven others write: however staggered their starts on two cores, the
#: eight writers overlap (before the hold, 20 steps each made that likely, at ~0.3 CPU-s a step)
STEPS = 8
HOLD_AT = 2


def test_eight_concurrent_runs_on_one_sqlite_ledger(tmp_path, shard_cache, fault_tally):
    gate = tmp_path / "go"
    env = {**make_track_env(tmp_path, shard_cache), "TRAINLEDGER_TEST_HOLD": f"{HOLD_AT}:{gate}"}
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    # one rank each (dp.yaml): eight writers, not sixteen trainers, on two cores
    launches = [subprocess.Popen([sys.executable, "-m", "trainledger.cli", "launch", str(CONFIGS / "dp.yaml"),
                                  "--gpus-per-node", "1", "--steps", str(STEPS), "--name", f"concurrent-{i}",
                                  "--db", url, "--detach", "--json"],
                                 env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(RUNS)]
    results = [p.communicate(timeout=300) for p in launches]
    assert [p.returncode for p in launches] == [0] * RUNS, [err for _, err in results]
    rids = [json.loads(out)["run_id"] for out, _ in results]
    engine = make_engine(url)
    try:
        wait_for(lambda: all(training(engine, r, min_steps=HOLD_AT) for r in rids), 600, "all eight runs to hold")
        assert all(sample_counts(engine, r)["loss"] == HOLD_AT for r in rids)  # held: none went on alone
        gate.touch()
        wait_for(lambda: all(not processes_of_run(r) for r in rids), 600, "all eight runs to finish")
    finally:
        kill_leftover_runs(url, rids)
    runs = [run_row(engine, r) for r in rids]
    audits = [audit_samples(engine, r, journal=tmp_path / "journal" / f"{r}.jsonl", steps=STEPS) for r in rids]
    lost = {r: why for r in rids if (why := run_lost(engine, r))}
    locked = [r.id for r in runs if "database is locked" in log_of(r)] + \
             [i for i, (out, err) in enumerate(results) if "locked" in out + err]
    fault_tally.record(f"{RUNS} concurrent runs on one SQLite ledger", 1, audits, runs_lost=len(lost),
                       locked=locked, statuses=[r.status.value for r in runs])

    assert lost == {}
    assert [r.status for r in runs] == [RunStatus.succeeded] * RUNS, [(r.status, r.error) for r in runs]
    assert [r.steps for r in runs] == [STEPS] * RUNS and all(r.exit_code == 0 for r in runs)
    assert locked == []
    for r in runs:  # the ledger never went away for any of them
        assert r.log_path and Path(r.log_path).exists() and "unreachable" not in log_of(r), r.id
    for a in audits:
        assert a["lost"] == 0 and a["doubled"] == 0 and a["steps"] == STEPS and a["journal_missing"] == 0, a
        assert a["per_metric"] == {"loss": STEPS, "step_seconds": STEPS, "tokens": STEPS}, a
    from sqlmodel import Session, func, select

    with Session(engine) as s:
        per_run = dict(s.exec(select(RunNode.run_id, func.count()).group_by(RunNode.run_id)).all())
    assert per_run == {r: 1 for r in rids}
    engine.dispose()
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()
