"""Pipeline parallelism: the GPT as a DeepSpeed ``PipelineModule``.

Layers in order: token embedding (tied), position embedding, L blocks, final
LayerNorm, output head (the same tied token embedding, applied transposed).
Stages are balanced by block count (``partition_method="type:Block"``; the
plan guarantees pp divides L), the embeddings go to the first stage and the
head to the last. DeepSpeed keeps a copy of the tied embedding on both and
all-reduces its gradient between them every step.
"""

from __future__ import annotations

from typing import Optional

from trainer.model import Block, FinalNorm, PositionEmbedding, TokenEmbedding, lm_loss
from trainer.shapes import ModelShape
from trainer.tensor_parallel import TPGroup


def _tied_logits(embedding: TokenEmbedding, x):
    return embedding.logits(x)


def build_pipeline_module(shape: ModelShape, seed: int, topology, tp: Optional[TPGroup],
                          activation_checkpointing: bool = False):
    """A ``deepspeed.pipe.PipelineModule`` over ``topology`` (a PipeModelDataParallelTopology)."""
    from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec

    layers = [
        TiedLayerSpec("tok", TokenEmbedding, shape, seed, tied_weight_attr="weight"),
        LayerSpec(PositionEmbedding, shape, seed),
        *[LayerSpec(Block, shape, i, seed, tp) for i in range(shape.n_layers)],
        LayerSpec(FinalNorm, shape),
        TiedLayerSpec("tok", TokenEmbedding, shape, seed, forward_fn=_tied_logits, tied_weight_attr="weight"),
    ]
    return PipelineModule(
        layers=layers,
        topology=topology,
        loss_fn=lm_loss,
        partition_method="type:Block",
        activation_checkpoint_interval=1 if activation_checkpointing else 0,
        checkpointable_layers=["Block"],
    )
