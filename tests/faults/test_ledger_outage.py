"""PostgreSQL goes away twice during a tracked run: once mid-run, once until after the run has ended.

The ledger is a throwaway cluster (tests/pgcluster.py) stopped with ``pg_ctl -m immediate``.
Training goes on; rank 0 journals everything and replays it when the ledger is back. The second
outage outlasts the run, so neither rank 0 nor the supervisor can write the end: ``trainledger
sync`` does it later. Every step must be in the ledger exactly once, also after a second replay
of the whole journal.

The run is held, not raced: ``TRAINLEDGER_TEST_HOLD`` (ledger/sources/capture/hold.py) stops it after step
``HOLD_AT`` until the first outage has begun, and before its last step until the second one has, so
it is still running at both outages however slow the machine is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainledger.sources.record.journal import Journal, read_events
from trainledger.store.db import make_engine
from trainledger.store.models import RunStatus

from tests.faults.conftest import audit_samples, log_of, run_lost, training
from tests.tracking.conftest import (
    journal_samples,
    launch_detached,
    make_track_env,
    processes_of_run,
    run_row,
    sample_counts,
    trainledger,
    wait_for,
)

pytestmark = pytest.mark.slow
STEPS = 30
HOLD_AT = 10  # the first outage begins with the run held after this step


def _journaled_steps(path: Path) -> int:
    return sum(1 for r in journal_samples(path) if r[2] == "loss")


def _ended_in_journal(path: Path) -> bool:
    return path.exists() and any(ev["type"] == "run" and ev["fields"].get("status") == "succeeded"
                                 for ev in read_events(path))


def test_ledger_outages_mid_run_and_past_its_end_lose_and_double_nothing(tmp_path, shard_cache, pg_cluster, fault_tally):
    pg = pg_cluster
    # rank 0 waits 1 s (not 30) for a ledger that is down at the end of the run
    go1, go2 = tmp_path / "outage-1-begun", tmp_path / "outage-2-begun"
    env = {**make_track_env(tmp_path, shard_cache), "TRAINLEDGER_LEDGER_WAIT_S": "1",
           "TRAINLEDGER_TEST_HOLD": f"{HOLD_AT}:{go1},{STEPS - 1}:{go2}"}
    engine = make_engine(pg.url)
    rid = launch_detached(pg.url, env, "--steps", STEPS, "--gpus-per-node", 1, config="dp.yaml")  # rank 0 is all it takes
    journal = tmp_path / "journal" / f"{rid}.jsonl"
    # held after step HOLD_AT: exactly that many steps reach the ledger
    wait_for(lambda: training(engine, rid, min_steps=HOLD_AT), 300, f"the run to train {HOLD_AT} steps and hold")
    assert sample_counts(engine, rid)["loss"] == HOLD_AT
    log_path = run_row(engine, rid).log_path
    engine.dispose()

    # outage 1, mid-run: training goes on into the journal; the ledger catches up when it is back
    pg.stop()
    go1.touch()
    wait_for(lambda: _journaled_steps(journal) >= HOLD_AT + 5, 300, "five more steps journaled during the outage")
    pg.start()
    wait_for(lambda: "reachable again" in Path(log_path).read_text(), 120, "rank 0 to reach the ledger again")
    engine = make_engine(pg.url)
    wait_for(lambda: sample_counts(engine, rid).get("loss", 0) >= HOLD_AT + 5, 120, "the outage's steps in the ledger")
    engine.dispose()

    # outage 2, until the run is over: nobody can write its end to the ledger. The run is held before its last step.
    wait_for(lambda: _journaled_steps(journal) == STEPS - 1, 300, "the run to hold before its last step")
    assert not _ended_in_journal(journal)
    pg.stop()
    go2.touch()
    wait_for(lambda: not processes_of_run(rid), 300, "the run to finish during the outage")
    assert _ended_in_journal(journal)
    pg.start()
    engine = make_engine(pg.url)
    assert run_row(engine, rid).status == RunStatus.running  # its end is only in the journal
    trainledger(["sync", "--db", pg.url], env)
    run = run_row(engine, rid)
    audit = audit_samples(engine, rid, journal=journal, steps=STEPS)
    # a second replay of the whole journal changes nothing
    Journal(journal.parent, rid).mark_applied(0)
    trainledger(["sync", "--db", pg.url], env)
    again = audit_samples(engine, rid, journal=journal, steps=STEPS)
    lost = run_lost(engine, rid)
    fault_tally.record("PostgreSQL outage mid-run + outage past the run's end", 2, [audit],
                       runs_lost=int(lost is not None), status=run.status.value, replayed_again=again)

    assert lost is None, lost
    assert run.status == RunStatus.succeeded and run.steps == STEPS and run.exit_code == 0
    assert audit["lost"] == 0 and audit["doubled"] == 0 and audit["steps"] == STEPS, audit
    assert again == audit and _journaled_steps(journal) == STEPS
    counts = sample_counts(engine, rid)
    assert (counts["loss"], counts["step_seconds"], counts["tokens"]) == (STEPS, STEPS, STEPS)
    # both outages really hit the run, and every process said so
    log = log_of(run)
    assert log.count("unreachable") >= 2 and "training continues" in log and "reachable again" in log
    assert "the ledger stayed unreachable; run `trainledger sync`" in log
    assert "ledger unreachable after the run" in log  # the supervisor could not settle it either
    engine.dispose()
