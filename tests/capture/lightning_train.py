"""A real tiny Lightning run (a Llama built from a config object: nothing downloaded), recorded by
``trainledger.integrations.lightning.LedgerCallback``; ``DEVICES=2`` trains with DDP on 2 CPU
processes started from plain ``python``. Used by tests/capture/test_frameworks.py.

    python tests/capture/lightning_train.py OUTPUT_DIR STEPS

``TL_VAL_STEPS=N`` validates and saves a checkpoint every N steps; ``TL_RESUME=CKPT`` resumes from a checkpoint; ``TL_STAMPS=FILE`` writes the hooks' own
times (JSON lines) there, from a callback that runs right after the ledger's.
"""

import os
import sys

import lightning as L
import torch
from tiny_tokens import BATCH, SEQ, VOCAB, StampFile, Tokens  # this script's folder is on sys.path
from trainledger.integrations.lightning import LedgerCallback
from transformers import LlamaConfig, LlamaForCausalLM


class TinyLlama(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                                  max_position_embeddings=SEQ))

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

    def validation_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Stamps(L.Callback):
    """The times the ledger's callback read at each hook (it runs just before): what the phases must match."""

    def __init__(self, path, ledger_callback):
        self.out = StampFile(path, ledger_callback)

    def _stamp(self, hook):
        self.out.stamp(hook)

    def on_validation_start(self, trainer, pl_module):
        self._stamp("validation_start")

    def on_validation_end(self, trainer, pl_module):
        self._stamp("validation_end")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._stamp("save_checkpoint")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._stamp("train_batch_start")

    def on_train_end(self, trainer, pl_module):
        self._stamp("train_end")

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        self._stamp("load_checkpoint")

    def on_train_start(self, trainer, pl_module):
        self._stamp("train_start")


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    devices = int(os.environ.get("DEVICES", "1"))
    val = int(os.environ.get("TL_VAL_STEPS", "0"))
    callbacks = [LedgerCallback(project="lightning", name="lightning-tiny-llama")]
    if val:
        callbacks.append(L.pytorch.callbacks.ModelCheckpoint(dirpath=out, every_n_train_steps=val, save_top_k=-1))
    if os.environ.get("TL_STAMPS"):
        callbacks.append(Stamps(os.environ["TL_STAMPS"], callbacks[0]))
    trainer = L.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                        max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=out, callbacks=callbacks, num_sanity_val_steps=0,
                        **({"val_check_interval": val, "limit_val_batches": 2} if val else {}))
    loader = torch.utils.data.DataLoader(Tokens(), batch_size=BATCH)
    trainer.fit(TinyLlama(), loader, loader if val else None, ckpt_path=os.environ.get("TL_RESUME") or None)


if __name__ == "__main__":
    main()
