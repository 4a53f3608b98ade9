"""Pipeline parallelism: the decoder as a DeepSpeed ``PipelineModule``.

GPT layers in order: token embedding (tied), position embedding, L blocks,
final LayerNorm, output head (the same tied token embedding, applied
transposed). DeepSpeed keeps a copy of the tied embedding on the first and
the last stage and all-reduces its gradient between them every step.

Llama layers in order: token embedding, L blocks, final RMSNorm, the untied
output head (nothing is tied across stages).

Stages are balanced by block count (``partition_method="type:<Block class>"``;
the plan guarantees pp divides L), the embeddings go to the first stage and
the head to the last.
"""

from __future__ import annotations

from typing import Optional

from trainledger.trainer.model import (
    Block,
    FinalNorm,
    LlamaBlock,
    LlamaFinalNorm,
    OutputHead,
    PositionEmbedding,
    TokenEmbedding,
    lm_loss,
)
from trainledger.trainer.shapes import ModelShape
from trainledger.trainer.tensor_parallel import TPGroup


def _tied_logits(embedding: TokenEmbedding, x):
    return embedding.logits(x)


def _layer_specs(shape: ModelShape, seed: int, tp: Optional[TPGroup]) -> tuple[list, type]:
    """The pipeline's layer specs in order, and the block class stages are balanced by."""
    from deepspeed.pipe import LayerSpec, TiedLayerSpec

    if shape.arch == "llama":
        return [
            LayerSpec(TokenEmbedding, shape, seed),
            *[LayerSpec(LlamaBlock, shape, i, seed, tp) for i in range(shape.n_layers)],
            LayerSpec(LlamaFinalNorm, shape),
            LayerSpec(OutputHead, shape, seed),
        ], LlamaBlock
    return [
        TiedLayerSpec("tok", TokenEmbedding, shape, seed, tied_weight_attr="weight"),
        LayerSpec(PositionEmbedding, shape, seed),
        *[LayerSpec(Block, shape, i, seed, tp) for i in range(shape.n_layers)],
        LayerSpec(FinalNorm, shape),
        TiedLayerSpec("tok", TokenEmbedding, shape, seed, forward_fn=_tied_logits, tied_weight_attr="weight"),
    ], Block


def build_pipeline_module(shape: ModelShape, seed: int, topology, tp: Optional[TPGroup],
                          activation_checkpointing: bool = False):
    """A ``deepspeed.pipe.PipelineModule`` over ``topology`` (a PipeModelDataParallelTopology)."""
    from deepspeed.pipe import PipelineModule

    layers, block = _layer_specs(shape, seed, tp)
    return PipelineModule(
        layers=layers,
        topology=topology,
        loss_fn=lm_loss,
        partition_method=f"type:^{block.__name__}$",
        activation_checkpoint_interval=1 if activation_checkpointing else 0,
        checkpointable_layers=[block.__name__],
    )
