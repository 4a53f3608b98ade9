"""Real tiny Hugging Face Trainer and Lightning runs on CPU, recorded by their callbacks.

The models are built from config objects in the scripts (tests/capture/hf_train.py,
lightning_train.py): nothing is downloaded. Tokens are checked against the
batches the runs were given: steps × batch × sequence length × processes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from trainledger.store.models import RunStatus

from tests.capture.conftest import BIN, HERE, REPO, all_runs, nodes_of, run_wrapped, samples_of

pytestmark = pytest.mark.slow
#: Each framework run is a real process (torch, and transformers or Lightning: 6-7 CPU-seconds; a torchrun or DDP
#: run two or three of them), so each test runs on one backend, the two alternating across the file and
#: tests/capture/test_goodput_capture.py: what these tests check (the callbacks' tokens, loss, checkpoints and
#: phases) does not depend on the backend, and the writer each callback records through is tested on both
#: (tests/capture/test_api.py, test_capture_promise.py). Issue 38: fewer multi-process runs per backend.


def tiny_batch() -> tuple[int, int]:
    """(BATCH, SEQ) of the scripts' batches, from tests/capture/tiny_tokens.py: imported by the tests that run, not at
    collection (it imports torch: 2 CPU-seconds in every pytest worker, most of which never run these tests)."""
    from tests.capture.tiny_tokens import BATCH, SEQ

    return BATCH, SEQ


def _python(script: str, *args, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / script), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_hf_trainer_run_records_tokens_loss_and_checkpoints(ledger_url, capture_env, tmp_path):
    out = _python("hf_train.py", tmp_path / "out", 6, 4, env={**capture_env, "TRAINLEDGER_DB_URL": ledger_url})
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = all_runs(ledger_url)
    assert (run.name, run.status, run.launcher, run.nodes, run.world_size) == ("hf-tiny-gpt2", RunStatus.succeeded,
                                                                             "api", 1, 1)
    BATCH, SEQ = tiny_batch()
    assert (run.steps, run.tokens) == (6, 6 * BATCH * SEQ)  # the Trainer's own num_input_tokens_seen
    losses = samples_of(ledger_url, run.id, "loss")
    assert len(losses) == 6 and run.final_loss == pytest.approx(losses[-1][2])
    # every on_save is a checkpoint (every 4 steps, and the Trainer's save at the end): the last one is kept
    assert [v for _, _, v in samples_of(ledger_url, run.id, "checkpoint_step")] == [4.0, 6.0]
    assert (run.last_checkpoint_step, run.last_checkpoint_path) == (6, str(tmp_path / "out" / "checkpoint-6"))
    assert (tmp_path / "out" / "checkpoint-4").is_dir()
    assert run.util_source == "cpu" and run.mfu is None and run.tokens_per_s > 0


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_hf_trainer_failing_after_a_checkpoint_is_failed_with_lost_work(ledger_url, capture_env, tmp_path):
    out = _python("hf_train.py", tmp_path / "out", 8, 2, 5, env={**capture_env, "TRAINLEDGER_DB_URL": ledger_url})
    assert out.returncode == 1 and "injected failure at step 5" in out.stderr
    (run,) = all_runs(ledger_url)
    assert (run.status, run.error) == (RunStatus.failed, "RuntimeError: injected failure at step 5")
    assert run.last_checkpoint_step == 4 and (run.lost_from, run.lost_until) == (run.last_checkpoint_at, run.ended_at)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_hf_trainer_under_torchrun_and_the_wrapper_is_one_run_with_global_tokens(ledger_url, capture_env, tmp_path):
    cmd = [BIN / "torchrun", "--standalone", "--nproc-per-node", 2, HERE / "hf_train.py", tmp_path / "out", 6, 3]
    out = run_wrapped(ledger_url, capture_env, "--project", "hf", command=cmd, timeout=240)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    (run,) = all_runs(ledger_url)  # the callback attached to the wrapper's run on rank 0; rank 1 recorded nothing
    assert (run.status, run.launcher, run.world_size, run.gpus_per_node) == (RunStatus.succeeded, "torchrun", 2, 2)
    BATCH, SEQ = tiny_batch()
    assert (run.steps, run.tokens) == (6, 6 * BATCH * SEQ * 2)  # the global count, as both ranks see it
    assert len(samples_of(ledger_url, run.id, "loss")) == 6 and run.last_checkpoint_step == 6
    assert nodes_of(ledger_url, run.id)[0].processes == 2


@pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)
def test_lightning_ddp_run_from_plain_python_records_tokens_and_loss(ledger_url, capture_env, tmp_path):
    out = _python("lightning_train.py", tmp_path / "out", 6,
                  env={**capture_env, "TRAINLEDGER_DB_URL": ledger_url, "DEVICES": "2"})
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = all_runs(ledger_url)  # both ranks ran the callback; global rank 0 recorded
    assert (run.name, run.status, run.world_size, run.gpus_per_node) == ("lightning-tiny-llama", RunStatus.succeeded, 2, 2)
    BATCH, SEQ = tiny_batch()
    assert (run.steps, run.tokens) == (6, 6 * BATCH * SEQ * 2)
    losses = samples_of(ledger_url, run.id, "loss")
    assert len(losses) == 6 and run.final_loss == pytest.approx(losses[-1][2])
    assert run.last_checkpoint_step == 6  # Lightning's end-of-training checkpoint
