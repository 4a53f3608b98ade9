"""The token data set of the tiny framework runs (hf_train.py, lightning_train.py): random ids, seeded per item."""

import json

import torch

SEQ, VOCAB, BATCH = 32, 128, 4


class Tokens(torch.utils.data.Dataset):
    """512 sequences of ``SEQ`` random token ids; with ``labels`` the items carry them as labels too (HF)."""

    def __init__(self, labels: bool = False):
        self.labels = labels

    def __len__(self):
        return 512

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()} if self.labels else {"input_ids": ids}


class StampFile:
    """Lines ``[hook, time]`` with the time the ledger's callback read at that hook (``ledger_callback.mark``; the
    stamping callback runs right after it): the times the goodput phases must match."""

    def __init__(self, path, ledger_callback):
        self.fh = open(path, "a")
        self.ledger = ledger_callback

    def stamp(self, hook):
        self.fh.write(json.dumps([hook, self.ledger.mark]) + "\n")
        self.fh.flush()
