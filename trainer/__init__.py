"""The bundled DeepSpeed trainer: a GPT-style decoder trained with dp, zero1-3, pp, tp or 3d.

Modules, one concern each:

- ``shapes``     named model shapes, exact parameter count, PaLM FLOPs per token
- ``config``     the YAML config schema, validated at the edge
- ``parallel``   the dp × tp × pp plan, its validation, and the DeepSpeed JSON
- ``hardware``   peak TFLOPs per GPU for MFU
- ``metrics``    step-time statistics, MFU, ``TrainResult``
- ``tokenizer``  byte-level tokenizer
- ``data``       WebDataset shards: prepare, node-local cache, exactly-once sampling
- ``model``      the decoder; ``tensor_parallel`` its Megatron-style layers; ``pipeline`` its PipelineModule
- ``distributed`` launcher environment, process group, rank grid
- ``comm``       measured communication time
- ``engine``     the training loop (``Trainer``, callbacks)
- ``train``      entry point (``python -m trainledger.trainer.train``); ``cli`` the ledger CLI commands

``shapes``, ``config``, ``parallel``, ``hardware``, ``metrics`` and ``cli``
import without torch or deepspeed.
"""
