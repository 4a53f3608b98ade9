"""PyTorch Lightning → the ledger (``pip install 'trainledger[lightning]'``).

    from trainledger.integrations.lightning import LedgerCallback

    L.Trainer(..., callbacks=[LedgerCallback(project="llm", tokens_per_batch=lambda b: b["input_ids"].numel())])

Tokens per step = ``tokens_per_batch`` of the rank's batch (a number or a
function of the batch; default: the number of elements of the batch's
``input_ids``, or of the batch when it is one tensor) × the world size; the
loss is the training step's output; every checkpoint Lightning saves is
recorded (``on_save_checkpoint``); ``on_train_end`` and ``on_exception`` end the
run. The run opens at ``setup`` (fit), so the goodput account sees start-up,
the checkpoint restore (``on_load_checkpoint`` to ``on_train_start``) and the
sanity check; steps are ``on_train_batch_start`` to ``on_train_batch_end``;
validation (``on_validation_start`` to ``on_validation_end``) is ``eval``; a save
runs from ``on_save_checkpoint`` (called before the file is written) to the next
hook that fires (:mod:`trainledger.sources.record.phases`). The callback runs on every rank; only global rank 0 records. Under
``trainledger run`` the wrapper records the status, the nodes and the utilization.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional, Union

from lightning.pytorch import Callback
from trainledger.sources.capture.track import TrackedRun
from trainledger.sources.record.sanitize import Guard


def _default_tokens(batch: Any) -> Optional[int]:
    if isinstance(batch, dict):
        batch = batch.get("input_ids")
    elif isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    numel = getattr(batch, "numel", None)
    return int(numel()) if callable(numel) else None


class LedgerCallback(Callback):
    """Records a Lightning run; keyword arguments are :func:`trainledger.track`'s."""

    def __init__(self, project: Optional[str] = None,
                 tokens_per_batch: Union[int, Callable[[Any], int], None] = None, **track_kwargs: Any):
        self.project = project
        self.tokens_per_batch = tokens_per_batch
        self.track_kwargs = track_kwargs
        self.run: Optional[TrackedRun] = None
        self._loaded_at: Optional[float] = None  # on_load_checkpoint: a restore in progress
        self._saving: Optional[tuple[float, int, Any]] = None  # on_save_checkpoint: (began, step, dir)
        self._val_at: Optional[float] = None  # on_validation_start
        self.mark = 0.0  # the time this callback's last hook read (its durations are differences of these)

    def _now(self) -> float:
        self.mark = time.time()
        return self.mark

    def _open(self, trainer) -> None:
        if self.run is not None and self.run._open:
            return
        env = dict(os.environ)
        env.update(RANK=str(trainer.global_rank), WORLD_SIZE=str(trainer.world_size),
                   LOCAL_WORLD_SIZE=str(trainer.num_devices))
        try:
            self.run = TrackedRun(self.project, env=env, **self.track_kwargs).start()
        except Exception as exc:  # e.g. a bad run id: fit() trains anyway, unrecorded
            Guard().off(f"LedgerCallback: {exc}")

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            self._open(trainer)

    def on_load_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self._loaded_at = self._now()

    def on_train_start(self, trainer, pl_module) -> None:
        self._open(trainer)
        now = self._now()
        if self._loaded_at is not None:
            self.run.phase_span("checkpoint_restore", now - self._loaded_at)
            self._loaded_at = None

    def _saved(self, now: float) -> None:
        """The save begun at ``on_save_checkpoint`` is over by the next hook: record the checkpoint and its time."""
        if self._saving is not None and self.run is not None:
            began, step, path = self._saving
            self._saving = None
            self.run.checkpoint(step=step, path=path, seconds=now - began)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._saved(self._now())
        if self.run is not None and self.run.active:
            self.run.step_begin()

    def on_validation_start(self, trainer, pl_module) -> None:
        self._val_at = self._now()
        self._saved(self._val_at)

    def on_validation_end(self, trainer, pl_module) -> None:
        now = self._now()
        if self._val_at is not None and self.run is not None and self.run.active:
            self.run.phase_span("eval", now - self._val_at)
        self._val_at = None

    def _tokens(self, batch: Any, world: int) -> Optional[int]:
        t = self.tokens_per_batch
        try:
            per_rank = t(batch) if callable(t) else (t if t is not None else _default_tokens(batch))
            return per_rank * world if per_rank is not None else None
        except Exception as exc:  # the user's tokens_per_batch failed: this step's tokens are unknown
            self.run.guard.warn("tokens_per_batch", f"tokens_per_batch failed ({type(exc).__name__}: {exc}); dropped")
            return None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.run is None or not self.run.active:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        try:
            loss = float(loss) if loss is not None else None
        except (TypeError, ValueError, RuntimeError):  # not a scalar: no loss this step
            loss = None
        self.run.log(step=trainer.global_step, tokens=self._tokens(batch, trainer.world_size), loss=loss)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if self.run is not None:
            now = self._now()
            self._saved(now)
            ckpt = trainer.checkpoint_callback
            self._saving = (now, trainer.global_step, getattr(ckpt, "dirpath", None))

    def on_train_end(self, trainer, pl_module) -> None:
        if self.run is not None:
            self._saved(self._now())
            self.run.finish(None)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.run is not None:
            self.run.finish(exception)
