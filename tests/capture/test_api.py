"""``trainledger.track``: the Python API, as a context manager and a decorator (SQLite and PostgreSQL)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trainledger
from trainledger.money.rates import costs
from trainledger.sources.record.journal import read_events, sync_all
from trainledger.store.db import make_engine
from trainledger.store.models import RunStatus

from tests.capture.conftest import REPO, all_runs, job, nodes_of, samples_of

DOWN = "postgresql+psycopg://nobody@127.0.0.1:9/none"  # nothing listens on port 9


def _track(url: str, tmp_path: Path, **kw):
    return trainledger.track(project="api", db=url, journal_dir=tmp_path / "journal", flush_s=0.1, ledger_wait_s=5,
                        env={"USER": "ada"}, **kw)


def test_a_run_as_a_context_manager(ledger_url, tmp_path):
    with _track(ledger_url, tmp_path, name="ctx", tags={"k": "v"}) as run:
        for step in range(30):
            run.log(step=step, tokens=100, loss=3.0 - step / 10, lr=0.5)
            if step == 19:
                run.checkpoint(path="/ckpt/19")
    (row,) = all_runs(ledger_url)
    assert (row.id, row.name, row.status, row.launcher, row.exit_code) == (run.run_id, "ctx", RunStatus.succeeded, "api", 0)
    assert (row.steps, row.tokens, row.final_loss) == (30, 3000, pytest.approx(0.1))
    assert (row.last_checkpoint_step, row.last_checkpoint_path, row.lost_from) == (19, "/ckpt/19", None)
    assert row.config["tags"] == {"k": "v"} and row.util_source == "cpu" and row.mfu is None
    assert [v for _, _, v in samples_of(ledger_url, row.id, "tokens")] == [100.0 * (i + 1) for i in range(30)]
    assert len(samples_of(ledger_url, row.id, "lr")) == 30
    (node,) = nodes_of(ledger_url, row.id)
    assert node.status == "succeeded" and node.util_source == "cpu"


def test_a_decorated_function_is_one_run_per_call_and_errors_fail_it(ledger_url, tmp_path):
    @_track(ledger_url, tmp_path)
    def train(fail: bool):
        trainledger.current_run().log(step=0, tokens=7, loss=1.5)
        if fail:
            raise ValueError("bad batch\nsecond line")

    train(False)
    with pytest.raises(ValueError):
        train(True)
    assert trainledger.current_run() is None
    runs = sorted(all_runs(ledger_url), key=lambda r: r.started_at)
    assert [(r.status, r.tokens, r.error) for r in runs] == [
        (RunStatus.succeeded, 7, None), (RunStatus.failed, 7, "ValueError: bad batch")]
    assert runs[0].id != runs[1].id and runs[1].lost_from == runs[1].started_at


def test_keyboard_interrupt_cancels_the_run(ledger_url, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with _track(ledger_url, tmp_path) as run:
            run.log(step=0, tokens=1)
            raise KeyboardInterrupt
    (row,) = all_runs(ledger_url)
    assert (row.status, row.exit_code) == (RunStatus.cancelled, 130)


def test_rank_other_than_zero_records_nothing(ledger_url, tmp_path):
    with trainledger.track(db=ledger_url, journal_dir=tmp_path / "journal", env={"RANK": "1"}) as run:
        run.log(step=0, tokens=10, loss=1.0)
        run.checkpoint(step=0)
    assert not run.active and all_runs(ledger_url) == [] and not (tmp_path / "journal").exists()


def test_logging_never_waits_for_the_ledger_and_sync_applies_it_later(ledger_url, tmp_path):
    with trainledger.track(project="offline", db=DOWN, journal_dir=tmp_path / "journal", flush_s=0.1, ledger_wait_s=0,
                      run_id="offline-1") as run:
        for step in range(200):
            run.log(step=step, tokens=10, loss=1.0)
    events = read_events(tmp_path / "journal" / "offline-1.jsonl")
    assert {e["type"] for e in events} >= {"run", "samples", "heartbeat", "nodes"}
    assert sum(1 for e in events if e["type"] == "samples" for r in e["rows"] if r[2] == "loss") == 200
    engine = make_engine(ledger_url)
    assert sync_all(engine, tmp_path / "journal")["offline-1"] == len(events)
    engine.dispose()
    (row,) = all_runs(ledger_url)
    assert (row.id, row.status, row.tokens) == ("offline-1", RunStatus.succeeded, 2000)


def test_bad_ids_are_dropped_with_one_warning_and_training_goes_on(tmp_path, capfd):
    """Issue 37: a bad id never raises into training code (it was refused before): it is dropped, with one line
    naming the field, and the run gets an id of its own."""
    run = trainledger.track(run_id="../x", journal_dir=tmp_path)
    assert run.run_id is None and run.dropped == ["run_id"]
    run = trainledger.track(resume_of="", journal_dir=tmp_path)
    assert run.dropped == ["resume_of"]
    err = capfd.readouterr().err.splitlines()
    assert [line.split(" is ")[0] for line in err if "dropped" in line] == ["[trainledger] warning: run_id",
                                                                          "[trainledger] warning: resume_of"], err
    assert "'../x' is not a run id" in err[0]


@pytest.mark.slow
def test_mfu_uses_the_node_types_peak_on_a_gpu(ledger_url, capture_env, fake_nvml):
    """On a GPU (NVML's test double here), MFU = tokens/s × FLOPs per token ÷ (peak × GPUs), with the peak of
    the node type (RTX 4090: 165.2 TFLOP/s) when none is given; on CPU it stays null."""
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url, "LD_LIBRARY_PATH": str(fake_nvml),
           "CUDA_VISIBLE_DEVICES": "0", "FAKE_NVML_UTIL": "50"}
    out = subprocess.run(job("--track", 40, "--flops", 1e12), env=env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    (row,) = all_runs(ledger_url)
    assert row.util_source == "nvml" and row.gpu_util_mean == pytest.approx(0.5)
    assert row.mfu == pytest.approx(costs.mfu(row.tokens_per_s, 1e12, 165.2, 1), rel=1e-12) and row.mfu > 0
    out = subprocess.run(job("--track", 5, "--flops", 1e12), env={**capture_env, "TRAINLEDGER_DB_URL": ledger_url},
                         capture_output=True, cwd=REPO, timeout=120)
    cpu_run = next(r for r in all_runs(ledger_url) if r.id != row.id)
    assert out.returncode == 0 and cpu_run.util_source == "cpu" and cpu_run.mfu is None
