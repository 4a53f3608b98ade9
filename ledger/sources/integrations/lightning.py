"""PyTorch Lightning → the ledger (``pip install 'trainledger[lightning]'``).

    from ledger.sources.integrations.lightning import LedgerCallback

    L.Trainer(..., callbacks=[LedgerCallback(project="llm", tokens_per_batch=lambda b: b["input_ids"].numel())])

Tokens per step = ``tokens_per_batch`` of the rank's batch (a number or a
function of the batch; default: the number of elements of the batch's
``input_ids``, or of the batch when it is one tensor) × the world size; the
loss is the training step's output; every checkpoint Lightning saves is
recorded (``on_save_checkpoint``); ``on_train_end`` and ``on_exception`` end the
run. The callback runs on every rank; only global rank 0 records. Under
``trainledger run`` the wrapper records the status, the nodes and the utilization.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

from lightning.pytorch import Callback

from ledger.sources.sanitize import Guard
from ledger.sources.track import TrackedRun


def _default_tokens(batch: Any) -> Optional[int]:
    if isinstance(batch, dict):
        batch = batch.get("input_ids")
    elif isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    numel = getattr(batch, "numel", None)
    return int(numel()) if callable(numel) else None


class LedgerCallback(Callback):
    """Records a Lightning run; keyword arguments are :func:`ledger.track`'s."""

    def __init__(self, project: Optional[str] = None,
                 tokens_per_batch: Union[int, Callable[[Any], int], None] = None, **track_kwargs: Any):
        self.project = project
        self.tokens_per_batch = tokens_per_batch
        self.track_kwargs = track_kwargs
        self.run: Optional[TrackedRun] = None

    def on_train_start(self, trainer, pl_module) -> None:
        env = dict(os.environ)
        env.update(RANK=str(trainer.global_rank), WORLD_SIZE=str(trainer.world_size),
                   LOCAL_WORLD_SIZE=str(trainer.num_devices))
        try:
            self.run = TrackedRun(self.project, env=env, **self.track_kwargs).start()
        except Exception as exc:  # e.g. a bad run id: fit() trains anyway, unrecorded
            Guard().off(f"LedgerCallback: {exc}")

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
            ckpt = trainer.checkpoint_callback
            self.run.checkpoint(step=trainer.global_step, path=getattr(ckpt, "dirpath", None))

    def on_train_end(self, trainer, pl_module) -> None:
        if self.run is not None:
            self.run.finish(None)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.run is not None:
            self.run.finish(exception)
