"""A real tiny Lightning run (a Llama built from a config object: nothing downloaded), recorded by
``ledger.sources.integrations.lightning.LedgerCallback``; ``DEVICES=2`` trains with DDP on 2 CPU
processes started from plain ``python``. Used by tests/capture/test_frameworks.py.

    python tests/capture/lightning_train.py OUTPUT_DIR STEPS
"""

import os
import sys

import lightning as L
import torch
from tiny_tokens import BATCH, SEQ, VOCAB, Tokens  # this script's folder is on sys.path
from transformers import LlamaConfig, LlamaForCausalLM

from ledger.sources.integrations.lightning import LedgerCallback


class TinyLlama(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                                  max_position_embeddings=SEQ))

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    devices = int(os.environ.get("DEVICES", "1"))
    trainer = L.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto",
                        max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=out, callbacks=[LedgerCallback(project="lightning", name="lightning-tiny-llama")])
    trainer.fit(TinyLlama(), torch.utils.data.DataLoader(Tokens(), batch_size=BATCH))


if __name__ == "__main__":
    main()
