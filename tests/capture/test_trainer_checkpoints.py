"""The bundled trainer records its checkpoints: a run that fails after one loses only the work since it."""

from __future__ import annotations

import json
import sys

import pytest
from sqlmodel import Session, select
from trainledger.money.rates import costs
from trainledger.runs.registry import show_run
from trainledger.store.db import make_engine
from trainledger.store.models import RunPhase, RunStatus

from tests.capture.conftest import samples_of
from tests.tracking.conftest import CONFIGS, kill_leftover_runs, make_track_env, run_row, trainledger

pytestmark = pytest.mark.slow


def test_a_trainer_run_failing_after_a_checkpoint_loses_the_work_since_it(ledger_url, tmp_path, shard_cache):
    config = tmp_path / "configs" / "ckpt.yaml"
    config.parent.mkdir()
    config.write_text((CONFIGS / "dp.yaml").read_text()
                      + f"checkpoint:\n  dir: {tmp_path / 'ckpt'}\n  every: 3\n")
    env = {**make_track_env(tmp_path, shard_cache), "TRAINLEDGER_CONFIG_DIRS": str(config.parent),
           "TRAINLEDGER_FAULT_STEP": "7"}
    out = trainledger(["launch", config, "--steps", 12, "--gpus-per-node", 1, "--db", ledger_url, "--json"], env,
                      check=False)
    d = json.loads(out.stdout)
    try:
        assert d["status"] == "failed" and d["exit_code"] != 0, out.stderr[-2000:]
        engine = make_engine(ledger_url)
        run = run_row(engine, d["run_id"])
        # checkpoints after steps 3 and 6 (DeepSpeed's own format, tags step<N>); the fault hits step 7 (0-based)
        assert [v for _, _, v in samples_of(ledger_url, run.id, "checkpoint_step")] == [3.0, 6.0]
        assert (run.last_checkpoint_step, run.last_checkpoint_path) == (6, str(tmp_path / "ckpt" / "step6"))
        assert (tmp_path / "ckpt" / "step6").is_dir() and (tmp_path / "ckpt" / "step3").is_dir()
        assert run.status == RunStatus.failed and "injected fault at step 7" in run.error
        assert (run.lost_from, run.lost_until) == (run.last_checkpoint_at, run.ended_at)
        with Session(engine) as s:
            shown = show_run(s, run.id)
        lost_h = costs.hours_between(run.last_checkpoint_at, run.ended_at)
        assert shown["lost_since"] == "checkpoint" and 0 < shown["lost_gpu_hours"]
        assert shown["lost_gpu_hours"] == costs.gpu_hours(costs.node_hours(1, lost_h), run.gpus_per_node)
        # goodput phases: 7 steps done, 6 of them kept by the checkpoint after step 6; two timed saves
        with Session(engine) as s:
            phases = {r.phase: r for r in s.exec(select(RunPhase).where(RunPhase.run_id == run.id)).all()}
        assert (phases["step"].count, phases["step"].ckpt_count) == (7, 6)
        assert phases["checkpoint_save"].count == 2 and phases["checkpoint_save"].seconds > 0
        assert phases["startup"].seconds > 0
        engine.dispose()
    finally:
        kill_leftover_runs(ledger_url, [d["run_id"]])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
