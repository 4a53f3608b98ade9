"""The bundled trainer measures its data waits and its straggler waits (issue #25): a real two-rank DeepSpeed run
on CPU (gloo) with a deliberately slow data loader and a deliberately slow rank (the test-only knobs
``TRAINLEDGER_TEST_DATA_DELAY_S`` and ``TRAINLEDGER_TEST_SLOW_RANK``) has ``data_wait`` and ``straggler_wait``
rows measured from every rank's step figures, and its goodput account adds up to its cost to the cent."""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest
from sqlmodel import Session, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.account import Category, goodput_account, seconds_decimal
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_of
from trainledger.store.db import make_engine
from trainledger.store.models import RunPhase, RunStatus
from trainledger.store.settings import display_timezone

from tests.tracking.conftest import CONFIGS, kill_leftover_runs, make_track_env, run_row, trainledger

pytestmark = pytest.mark.slow

STEPS = 4
DATA_DELAY = 0.05  # seconds per batch; zero1.yaml: micro-batch 4, global batch 16 on 2 ranks: 2 batches a step
SLOW = 1.0  # seconds rank 1 sleeps inside each step: well above the ranks' compute jitter on a loaded machine


def test_a_two_rank_run_records_measured_data_and_straggler_waits(sqlite_url, tmp_path, shard_cache):
    ledger_url = sqlite_url  # one backend: the identity on PostgreSQL is tests/test_goodput*.py's
    env = {**make_track_env(tmp_path, shard_cache), "TRAINLEDGER_TEST_DATA_DELAY_S": str(DATA_DELAY),
           "TRAINLEDGER_TEST_SLOW_RANK": f"1:{SLOW}"}
    out = trainledger(["launch", CONFIGS / "zero1.yaml", "--steps", STEPS, "--db", ledger_url, "--json"], env)
    d = json.loads(out.stdout)
    engine = make_engine(ledger_url)
    try:
        run = run_row(engine, d["run_id"])
        assert (run.status, run.world_size, run.steps) == (RunStatus.succeeded, 2, STEPS)
        with Session(engine) as s:
            rows = {r.phase: r for r in s.exec(select(RunPhase).where(RunPhase.run_id == run.id)).all()}
        # every rank waited DATA_DELAY for each of its 2 batches a step, inside the timed wait: the ranks' mean
        assert rows["data"].count == STEPS and rows["data"].seconds >= DATA_DELAY * 2 * STEPS
        # rank 0 waited for rank 1's SLOW seconds in each step, less the difference of the two ranks' own compute
        # time (rank 0 also runs the tracking threads: on a loaded 2-core machine CI saw it 0.14 s a step slower);
        # the mean wait over the 2 ranks is half of it
        assert rows["straggler_wait"].count == STEPS
        assert rows["straggler_wait"].seconds >= 0.6 * SLOW * STEPS / 2
        assert rows["straggler_wait"].seconds + rows["data"].seconds <= run.step_time_median_s * STEPS * 2
        assert rows["step"].count == STEPS and rows["step"].seconds > 0
        with Session(engine) as s:
            month = month_of(run.started_at, display_timezone(s))
            now = run.ended_at + timedelta(minutes=1)
            rep = goodput_account(s, month=month, run_id=run.id, now=now)
            line = next(r for r in monthly_report(s, month, now=now).runs if r.run_id == run.id)
        (acct,) = rep.runs
        assert acct.seconds[Category.data_wait] == seconds_decimal(rows["data"].seconds)
        assert acct.seconds[Category.straggler_wait] == seconds_decimal(rows["straggler_wait"].seconds)
        assert acct.cost[Category.data_wait] > 0 and acct.cost[Category.straggler_wait] > 0
        assert sum(acct.cost.values()) == acct.total_cost == acct.run_cost
        assert costs.cents(sum(acct.cost.values())) == costs.cents(line.cost) > 0
    finally:
        engine.dispose()
        kill_leftover_runs(ledger_url, [d["run_id"]])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
