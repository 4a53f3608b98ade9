"""``trainledger.track`` and the callbacks never raise into training (issue 24, item 2), on SQLite and PostgreSQL.

Bad values (NaN, infinities, negative counts, integers beyond 64 bits) are dropped with one warning per
field; a full journal disk (a real tmpfs filled up) turns recording off with one warning and the loop goes
on; ``sys.exit(0)`` ends the run ``succeeded``, ``sys.exit(n)`` records exit code n.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trainledger
from trainledger.store.models import RunStatus

from tests.capture.conftest import all_runs, samples_of
from tests.tmpfs import mounted


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs that the test fills up."""
    yield from mounted(tmp_path / "disk")


def _track(url: str, journal: Path, **kw):
    return trainledger.track(project="api", db=url, journal_dir=journal, flush_s=0.05, heartbeat_s=0.05, ledger_wait_s=10,
                             node_type="rtx4090-8x",
                             env={"USER": "ada"}, **kw)


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[trainledger] warning:")]


def test_bad_values_are_dropped_with_one_warning_per_field(ledger_url, tmp_path, capfd):
    with _track(ledger_url, tmp_path / "journal", name="bad") as run:
        run.log(step=0, tokens=100, loss=2.0, lr=0.1)
        run.log(step=1, tokens=float("nan"), loss=float("nan"), lr=float("inf"))
        run.log(step=2, tokens=2**70, loss=float("-inf"), lr=float("nan"))
        run.log(step=3, tokens=-5, loss=1.5, lr=0.2)
        run.log(step=4, tokens_total=2**70)
        run.log(step=5, tokens=100, loss=1.0, lr=0.3)
    warned = _warnings(capfd.readouterr().err)
    assert [w.split()[2].split("=")[0] for w in warned] == ["tokens", "loss", "lr", "tokens_total"], warned
    (row,) = all_runs(ledger_url)
    assert (row.status, row.exit_code, row.steps, row.tokens, row.final_loss) == (RunStatus.succeeded, 0, 6, 200, 1.0)
    assert [v for _, _, v in samples_of(ledger_url, row.id, "lr")] == [0.1, 0.2, 0.3]
    assert [v for _, _, v in samples_of(ledger_url, row.id, "loss")] == [2.0, 1.5, 1.0]
    assert [v for _, _, v in samples_of(ledger_url, row.id, "tokens")] == [100.0, 100.0, 100.0, 100.0, 100.0, 200.0]


@pytest.mark.parametrize("code, status, exit_code", [(0, RunStatus.succeeded, 0), (None, RunStatus.succeeded, 0),
                                                     (3, RunStatus.failed, 3)])
def test_sys_exit_inside_track_records_its_code(ledger_url, tmp_path, code, status, exit_code):
    with pytest.raises(SystemExit) as raised:
        with _track(ledger_url, tmp_path / "journal") as run:
            run.log(step=0, tokens=10)
            raise SystemExit(code)
    assert raised.value.code == code  # it still propagates, as Python requires
    (row,) = all_runs(ledger_url)
    assert (row.status, row.exit_code, row.tokens) == (status, exit_code, 10)


def _wait(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_full_journal_disk_turns_recording_off_and_training_goes_on(ledger_url, tiny_disk, capfd):
    with _track(ledger_url, tiny_disk.dir, name="full") as run:
        for step in range(5):
            run.log(step=step, tokens=10, loss=1.0)
        tiny_disk.fill()
        _wait(lambda: run.writer.error is not None, "the journal write to fail")
        for step in range(5, 50):  # today: JournalWriteError raised here, into the loop
            run.log(step=step, tokens=10, loss=1.0)
            run.checkpoint(step=step)
    err = capfd.readouterr().err
    off = [w for w in _warnings(err) if "recording of this run is off" in w]
    assert len(off) == 1 and "cannot write the run journal" in off[0], off
    assert sum("cannot write the run journal" in line for line in err.splitlines()) == 1, err
    (row,) = all_runs(ledger_url)  # the end went straight to the ledger
    assert (row.name, row.status, row.exit_code) == ("full", RunStatus.succeeded, 0)


def test_a_full_journal_disk_at_start_never_stops_the_body(ledger_url, tiny_disk, capfd):
    tiny_disk.fill()
    ran = []
    with _track(ledger_url, tiny_disk.dir / "journal", name="full-at-start") as run:
        for step in range(10):
            run.log(step=step, tokens=10, loss=1.0)
            ran.append(step)
    assert ran == list(range(10))
    off = [w for w in _warnings(capfd.readouterr().err) if "recording of this run is off" in w]
    assert len(off) == 1, off


def test_a_dead_writer_thread_turns_recording_off_once(ledger_url, tmp_path, capfd):
    with _track(ledger_url, tmp_path / "journal", name="dead-writer") as run:
        run.log(step=0, tokens=10, loss=1.0)
        run.writer._halt.set()  # the real writer thread ends its loop
        run.writer.join(60)
        steps = iter(range(1, 10**6))
        _wait(lambda: (run.log(step=next(steps), tokens=10), run.guard.off_reason)[1] is not None,
              "the next hand-over to notice")
    off = [w for w in _warnings(capfd.readouterr().err) if "recording of this run is off" in w]
    assert len(off) == 1 and "writer thread stopped" in off[0], off
    (row,) = all_runs(ledger_url)
    assert (row.name, row.status, row.exit_code) == ("dead-writer", RunStatus.succeeded, 0)


@pytest.mark.slow  # a real framework run
def test_lightning_fit_never_sees_a_full_journal_disk(ledger_url, tiny_disk, capfd):
    import lightning as L
    import torch
    from trainledger.integrations.lightning import LedgerCallback

    ledger_cb = LedgerCallback(project="lightning", name="lt-full", tokens_per_batch=8, db=ledger_url,
                               journal_dir=tiny_disk.dir, flush_s=0.05, heartbeat_s=0.05, ledger_wait_s=10)

    class FillAtStep3(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 3:
                tiny_disk.fill()
                _wait(lambda: ledger_cb.run.writer.error is not None, "the journal write to fail")

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    torch.manual_seed(0)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=12, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False, default_root_dir=str(tiny_disk.dir.parent),
                        callbacks=[FillAtStep3(), ledger_cb])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(64, 4), batch_size=4))
    assert trainer.global_step == 12
    off = [w for w in _warnings(capfd.readouterr().err) if "recording of this run is off" in w]
    assert len(off) == 1, off
    (row,) = all_runs(ledger_url)
    assert (row.name, row.status) == ("lt-full", RunStatus.succeeded)


@pytest.mark.slow  # a real framework run
def test_hf_trainer_never_sees_a_full_journal_disk(ledger_url, tiny_disk, tmp_path, capfd):
    import torch
    from trainledger.integrations.hf import LedgerCallback
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from tests.capture.tiny_tokens import BATCH, SEQ, VOCAB, Tokens

    ledger_cb = LedgerCallback(project="hf", name="hf-full", db=ledger_url, journal_dir=tiny_disk.dir, flush_s=0.05,
                               heartbeat_s=0.05, ledger_wait_s=10)

    class FillAtStep3(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                tiny_disk.fill()
                _wait(lambda: ledger_cb.run.writer.error is not None, "the journal write to fail")

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=VOCAB, n_positions=SEQ))
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), max_steps=8, per_device_train_batch_size=BATCH,
                             use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
                             include_num_input_tokens_seen="all", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(labels=True), callbacks=[FillAtStep3(), ledger_cb])
    trainer.train()
    assert trainer.state.global_step == 8
    off = [w for w in _warnings(capfd.readouterr().err) if "recording of this run is off" in w]
    assert len(off) == 1, off
    (row,) = all_runs(ledger_url)
    assert (row.name, row.status) == ("hf-full", RunStatus.succeeded)
