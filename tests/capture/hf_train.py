"""A real tiny Hugging Face Trainer run (GPT-2 built from a config object: nothing downloaded), recorded
by ``trainledger.integrations.hf.LedgerCallback``. Used by tests/capture/test_frameworks.py, alone
and under ``torchrun --nproc-per-node 2``.

    python tests/capture/hf_train.py OUTPUT_DIR STEPS [SAVE_STEPS] [FAIL_AT_STEP]

``TL_EVAL_STEPS=N`` evaluates every N steps; ``TL_STAMPS=FILE`` writes the hooks' own times (JSON lines) there,
from a callback that runs right after the ledger's; ``TL_RESUME=FILE`` resumes from the output directory's last
checkpoint and writes the wall time before ``train()`` and at ``on_train_begin`` (before the ledger's callback)
to FILE.
"""

import json
import os
import sys
import time

import torch
from tiny_tokens import BATCH, SEQ, VOCAB, StampFile, Tokens  # this script's folder is on sys.path
from trainledger.integrations.hf import LedgerCallback
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class FailAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise RuntimeError(f"injected failure at step {self.step}")


class Stamps(TrainerCallback):
    """The times the ledger's callback read at each hook (it runs just before): what the phases must match."""

    def __init__(self, path, ledger_callback):
        self.out = StampFile(path, ledger_callback)

    def _stamp(self, hook):
        self.out.stamp(hook)

    def on_step_end(self, args, state, control, **kwargs):
        self._stamp("step_end")

    def on_evaluate(self, args, state, control, **kwargs):
        self._stamp("evaluate")

    def on_save(self, args, state, control, **kwargs):
        self._stamp("save")


class Restored(TrainerCallback):
    """Runs before the ledger's callback: the wall time at ``on_train_begin``, once the Trainer has restored."""

    def __init__(self, path):
        self.path = path

    def on_train_begin(self, args, state, control, **kwargs):
        _wall_stamp(self.path, "restored", state.global_step)


def _wall_stamp(path, hook, step=None):
    with open(path, "a") as fh:
        fh.write(json.dumps([hook, time.time(), step]) + "\n")


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    save = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    fail = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=SEQ))
    args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=BATCH, use_cpu=True,
                             report_to=[], logging_steps=1, save_strategy="steps" if save else "no",
                             save_steps=save or 500, include_num_input_tokens_seen="all", disable_tqdm=True,
                             dataloader_num_workers=0, learning_rate=1e-3,
                             **({"eval_strategy": "steps", "eval_steps": int(os.environ["TL_EVAL_STEPS"]),
                                 "per_device_eval_batch_size": BATCH} if os.environ.get("TL_EVAL_STEPS") else {}))
    callbacks = [LedgerCallback(project=os.environ.get("TL_PROJECT", "hf"), name="hf-tiny-gpt2")]
    resume = os.environ.get("TL_RESUME")
    if os.environ.get("TL_STAMPS"):
        callbacks.append(Stamps(os.environ["TL_STAMPS"], callbacks[0]))
    if fail:
        callbacks.append(FailAt(fail))
    if resume:
        callbacks.insert(0, Restored(resume))
    evals = Tokens(labels=True) if os.environ.get("TL_EVAL_STEPS") else None
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(labels=True), eval_dataset=evals,
                      callbacks=callbacks)
    if resume:
        _wall_stamp(resume, "train_call")
    trainer.train(resume_from_checkpoint=True if resume else None)


if __name__ == "__main__":
    main()
    # as trainer/train.py does: gloo's native threads can hit std::terminate in interpreter teardown
    # (exit -6) after a finished run; the callback has already ended the run
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
