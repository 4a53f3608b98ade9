"""Hugging Face ``transformers.Trainer`` → the ledger (``pip install 'trainledger[hf]'``).

    from trainledger.integrations.hf import LedgerCallback

    args = TrainingArguments(..., include_num_input_tokens_seen="all")   # tokens from the Trainer's own counter
    Trainer(model, args, ..., callbacks=[LedgerCallback(project="llm", node_type="h100-8x")]).train()

Tokens are the Trainer's ``state.num_input_tokens_seen`` (the global count, set
with ``include_num_input_tokens_seen``; without it no token count is recorded),
the loss and the other logged numbers come from ``on_log``, every ``on_save``
is a checkpoint (``<output_dir>/checkpoint-<step>``), ``on_train_end`` ends the
run. Phases for the goodput account (:mod:`trainledger.sources.record.phases`): steps from
``on_step_begin`` to ``on_step_end``; an evaluation from the step's end (or the
last hook) to ``on_evaluate``; a checkpoint save from the last hook to ``on_save``
(the Trainer has no hook before either starts, so these are the callbacks' own
timestamps); start-up from ``on_train_begin`` to the first step. **Resuming**: the
Trainer restores a checkpoint (``train(resume_from_checkpoint=...)``) before
``on_train_begin``, where the run starts; the callback sees it (``state.global_step``
is already the checkpoint's) and links the run to the run that saved it (``resume_of``,
read from ``trainledger-run.json``, which it leaves in every checkpoint directory it
saves). When that run was interrupted, the time from its end to this run's start,
the restore included, is the chain's ``recovery`` (``trainledger.money.goodput.account``). The callback runs on every rank; only rank 0 records. MFU needs
``flops_per_token`` (default: Hugging Face's own estimate, 6 × the model's
non-embedding parameters, the figure ``Trainer.floating_point_ops`` uses) and a
GPU. A run that dies in the training loop (an exception, SIGTERM) is ended
``failed``/``cancelled`` when the process exits; under ``trainledger run`` the
wrapper records the status.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from typing import Any, Optional

from trainledger.sources.capture.track import TrackedRun
from trainledger.sources.record.sanitize import Guard, warn
from transformers import TrainerCallback

#: logged keys that are not step figures (the running time and rate the Trainer adds to every log)
#: left in each checkpoint directory the callback saves: which run saved it (a resumed run's ``resume_of``)
MARKER = "trainledger-run.json"
_NOT_STEP = ("epoch", "loss", "train_runtime", "train_tokens_per_second", "train_samples_per_second",
             "train_steps_per_second", "total_flos", "num_input_tokens_seen")


class LedgerCallback(TrainerCallback):
    """Records a ``transformers.Trainer`` run; keyword arguments are :func:`trainledger.track`'s."""

    def __init__(self, project: Optional[str] = None, flops_per_token: Optional[float] = None, **track_kwargs: Any):
        self.project = project
        self.flops_per_token = flops_per_token
        self.track_kwargs = track_kwargs
        self.run: Optional[TrackedRun] = None
        self._error: Optional[BaseException] = None
        self.mark = 0.0  # time of the last step end, eval or save: where the next eval or save began

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        fpt = self.flops_per_token
        if fpt is None and model is not None and hasattr(model, "num_parameters"):
            fpt = 6 * model.num_parameters(exclude_embeddings=True)
        env = dict(os.environ)
        env["RANK"] = str(args.process_index)
        env["WORLD_SIZE"] = str(args.world_size)
        kwargs = dict(self.track_kwargs)
        if kwargs.get("resume_of") is None and state.global_step:
            kwargs["resume_of"] = _saved_by(args, state)
        try:
            self.run = TrackedRun(self.project, flops_per_token=fpt, env=env, **kwargs).start()
        except Exception as exc:  # e.g. a bad run id: the Trainer trains anyway, unrecorded
            Guard().off(f"LedgerCallback: {exc}")
            return
        if self.run.active:
            self._watch_exit()

    def _tokens(self, state) -> Optional[int]:
        return getattr(state, "num_input_tokens_seen", None) or None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.run is not None:
            self.run.step_begin()

    def on_step_end(self, args, state, control, **kwargs):
        if self.run is not None:
            self.run.log(step=state.global_step, tokens_total=self._tokens(state))
            self.mark = time.time()

    def on_evaluate(self, args, state, control, **kwargs):
        if self.run is not None and self.mark:
            now = time.time()
            self.run.phase_span("eval", now - self.mark)
            self.mark = now

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or not logs or "train_loss" in logs:  # "train_loss": the end-of-training summary
            return
        numbers = {k: v for k, v in logs.items()
                   if k not in _NOT_STEP and isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.run.log(step=state.global_step, tokens_total=self._tokens(state), loss=logs.get("loss"), **numbers)

    def on_save(self, args, state, control, **kwargs):
        if self.run is not None:
            now = time.time()
            path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
            self.run.checkpoint(step=state.global_step, seconds=(now - self.mark) if self.mark else None, path=path)
            self.mark = now
            if self.run.active and self.run.run_id and os.path.isdir(path):
                try:
                    with open(os.path.join(path, MARKER), "w", encoding="utf-8") as fh:
                        json.dump({"run_id": self.run.run_id, "step": state.global_step}, fh)
                except OSError as exc:  # a read-only or full disk: the checkpoint is there, its resume unlinked
                    warn(f"LedgerCallback: cannot write {MARKER} in {path} ({exc}); a run resumed from it is not linked to this one")

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is not None:
            self.run.finish(None)

    def _watch_exit(self) -> None:
        """The Trainer has no error hook: keep the exception that ends the process, and end the run with it."""
        previous = sys.excepthook

        def hook(exc_type, exc, tb):
            self._error = exc
            previous(exc_type, exc, tb)

        sys.excepthook = hook
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if self.run is not None and self.run.active:
            self.run.finish(self._error or RuntimeError("the process exited before the Trainer's on_train_end"))


def _saved_by(args, state) -> Optional[str]:
    """The run that saved the checkpoint the Trainer restored (training begins at ``state.global_step`` > 0): its
    id from the checkpoint's :data:`MARKER` (``args.resume_from_checkpoint``, else the output directory's
    ``checkpoint-<step>``); None when there is none or it is unreadable."""
    from trainledger.store.ids import validate_run_id

    candidates = [getattr(args, "resume_from_checkpoint", None),
                  os.path.join(args.output_dir or "", f"checkpoint-{state.global_step}")]
    for path in candidates:
        if not isinstance(path, str) or not path:
            continue
        try:
            with open(os.path.join(path, MARKER), encoding="utf-8") as fh:
                return validate_run_id(str(json.load(fh)["run_id"]), MARKER)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
