"""The planning model: memory, FLOPs-based time and communication of a parallel plan, without torch.

* :mod:`trainledger.trainer.plan.memory` — bytes per GPU: model states (DeepSpeed's own
  estimator arithmetic, the ZeRO paper's figure beside it), activations
  (Korthikanti et al. 2022, as the trainer's layers store them) and an
  allowance for buffers and fragmentation.
* :mod:`trainledger.trainer.plan.timing` — step time: compute from FLOPs ÷ (peak ×
  efficiency), alpha-beta collectives per strategy, the pipeline bubble.
* :mod:`trainledger.trainer.plan.search` — every candidate plan (strategy × tp × pp ×
  micro-batch × recompute) for a model on a cluster: kept when it passes the
  trainer's plan validation and fits in memory, else discarded with the reason.

FLOPs per token are ``trainledger.trainer.shapes.flops_per_token`` (one function for the
trainer, the ledger and the planner). Pricing and ranking with the ledger's
offers live in ``trainledger.runs.plan``. Everything here is stdlib-only.
"""
