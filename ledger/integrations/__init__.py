"""Callbacks for the frameworks people train with; each is an optional extra.

* :mod:`.hf`: ``LedgerCallback`` for ``transformers.Trainer`` (``pip install 'trainledger[hf]'``);
* :mod:`.lightning`: ``LedgerCallback`` for ``lightning.pytorch.Trainer``
  (``pip install 'trainledger[lightning]'``).

Both record through :mod:`trainledger.sources.capture.track`: under ``trainledger run`` they
attach to the wrapper's run; on their own they open one. Importing this package
imports neither framework.
"""
