"""Named model shapes, exact parameter counts and FLOPs per token.

This module is the single source of the model-size arithmetic: the trainer
builds exactly the model counted here, the MFU figure divides by
``flops_per_token``, and the ledger's planner imports the same functions.
It imports nothing beyond the standard library (the ledger and the dashboard
run without torch).

The model is a GPT-2 style decoder (pre-norm, learned positions, GELU MLP
of width 4·d, no linear biases, LayerNorm with weight and bias, token
embedding tied to the output head). The big shapes use LLaMA-sized
dimensions (layers, width, heads) with that block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: Byte-level vocabulary: 256 byte values + one end-of-document token.
BYTE_VOCAB_SIZE = 257


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of the decoder.

    ``d_model`` must be divisible by ``n_heads``; the head dimension is
    ``Q = d_model // n_heads``.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    vocab_size: int

    def __post_init__(self) -> None:
        for field in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{field} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model {self.d_model} is not divisible by n_heads {self.n_heads}: "
                f"pick d_model as a multiple of n_heads"
            )

    @property
    def head_dim(self) -> int:
        """Q, the width of one attention head."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in (
        # Trains in seconds on one CPU core; 4 layers so pp ∈ {1, 2, 4}, 4 heads so tp ∈ {1, 2, 4}.
        ModelShape("tiny", n_layers=4, d_model=64, n_heads=4, seq_len=128, vocab_size=BYTE_VOCAB_SIZE),
        ModelShape("small", n_layers=6, d_model=256, n_heads=8, seq_len=256, vocab_size=BYTE_VOCAB_SIZE),
        ModelShape("1b", n_layers=24, d_model=2048, n_heads=16, seq_len=2048, vocab_size=32000),
        ModelShape("7b", n_layers=32, d_model=4096, n_heads=32, seq_len=4096, vocab_size=32000),
        ModelShape("13b", n_layers=40, d_model=5120, n_heads=40, seq_len=4096, vocab_size=32000),
        ModelShape("70b", n_layers=80, d_model=8192, n_heads=64, seq_len=4096, vocab_size=32000),
    )
}


def get_shape(name: str) -> ModelShape:
    """The named shape, or ``ValueError`` listing the known names."""
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown model shape {name!r}: use one of {', '.join(SHAPES)}") from None


def param_count(shape: ModelShape) -> int:
    """Exact number of trainable parameters of the model the trainer builds.

    N = V·d            token embedding (tied with the output head, counted once)
      + T·d            learned position embedding
      + L·(12·d² + 4·d) per block: qkv 3d², attention out d², MLP 4d² + 4d²,
                        two LayerNorms 2·2d
      + 2·d            final LayerNorm
    """
    d, L = shape.d_model, shape.n_layers
    per_block = 12 * d * d + 4 * d
    return shape.vocab_size * d + shape.seq_len * d + L * per_block + 2 * d


def flops_per_token(shape: ModelShape) -> int:
    """Training FLOPs per token (forward + backward), PaLM appendix B.

    flops/token = 6·N + 12·L·H·Q·T

    with N the total parameter count (``param_count``; as in nanoGPT's
    ``estimate_mfu``, embeddings included), L layers, H heads, Q head
    dimension and T the sequence length. 6N covers the matmuls with weights
    (2 FLOPs per multiply-add, ×3 for forward and backward); 12·L·H·Q·T the
    attention score and value matmuls. Activation recomputation is not
    counted: MFU measures model FLOPs, not hardware FLOPs.
    """
    N = param_count(shape)
    L, H, Q, T = shape.n_layers, shape.n_heads, shape.head_dim, shape.seq_len
    return 6 * N + 12 * L * H * Q * T
