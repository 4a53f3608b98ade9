"""Named model shapes, exact parameter counts and FLOPs per token.

This module is the single source of the model-size arithmetic: the trainer
builds exactly the model counted here, the MFU figure divides by
``flops_per_token``, and the planner (``trainledger.trainer.plan``) and the ledger import
the same functions. It imports nothing beyond the standard library (the
ledger and the dashboard run without torch).

Two families (``ModelShape.arch``):

* ``gpt`` — a GPT-2 style decoder: pre-norm, learned positions, GELU MLP of
  width 4·d, multi-head attention, no linear biases, LayerNorm with weight and
  bias, token embedding tied to the output head. ``1b``/``7b``/``13b``/``70b``
  are LLaMA-sized dimensions with this block (so "7b" has 6.59 B parameters).
* ``llama`` — the Llama family: RMSNorm (weight only), rotary position
  embeddings (no position table), SwiGLU MLP of width ``ffn_dim``,
  grouped-query attention (``n_kv_heads`` key/value heads shared by
  ``n_heads / n_kv_heads`` query heads each), untied output head, no biases.
  ``llama2-7b``/``-13b``/``-70b`` and ``llama3-8b`` have the published
  dimensions and parameter counts (Touvron et al. 2023, Table 1 and the
  released configs; Meta Llama 3 model card).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

#: Byte-level vocabulary: 256 byte values + one end-of-document token.
BYTE_VOCAB_SIZE = 257
ARCHS = ("gpt", "llama")


def llama_ffn_dim(d_model: int, multiple_of: int = 256, ffn_dim_multiplier: float = 1.0) -> int:
    """SwiGLU width as in Meta's reference ``FeedForward``: ⌈(2/3 · 4d · m) / k⌉ · k.

    With k = 256 and m = 1 this gives 11,008 for d = 4,096 (Llama-2-7B) and
    13,824 for d = 5,120 (Llama-2-13B).
    """
    hidden = int(ffn_dim_multiplier * int(2 * 4 * d_model / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of the decoder.

    ``d_model`` must be divisible by ``n_heads``; the head dimension is
    ``Q = d_model // n_heads``. ``n_kv_heads`` (llama; None = ``n_heads``)
    must divide ``n_heads``. ``ffn_dim`` is the MLP width: always 4·d for
    ``gpt``; for ``llama`` None means :func:`llama_ffn_dim` of d.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    vocab_size: int
    arch: str = "gpt"
    n_kv_heads: Optional[int] = None
    ffn_dim: Optional[int] = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"model.arch must be one of {', '.join(ARCHS)}, got {self.arch!r}")
        for field in ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size"):
            _positive(field, getattr(self, field))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model {self.d_model} is not divisible by n_heads {self.n_heads}: "
                f"pick d_model as a multiple of n_heads"
            )
        if self.arch == "gpt":
            for field, want in (("n_kv_heads", self.n_heads), ("ffn_dim", 4 * self.d_model)):
                if getattr(self, field) not in (None, want):
                    raise ValueError(f"model.{field} is fixed to {want} for arch 'gpt': drop it or use arch 'llama'")
        kv = self.n_kv_heads if self.n_kv_heads is not None else self.n_heads
        ffn = self.ffn_dim if self.ffn_dim is not None else (
            4 * self.d_model if self.arch == "gpt" else llama_ffn_dim(self.d_model))
        _positive("n_kv_heads", kv)
        _positive("ffn_dim", ffn)
        if self.n_heads % kv:
            raise ValueError(
                f"model.n_kv_heads {kv} does not divide n_heads {self.n_heads}: each key/value head serves "
                f"an equal group of query heads; pick n_kv_heads from the divisors of {self.n_heads}"
            )
        for field in ("rope_theta", "norm_eps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise ValueError(f"model.{field} must be a positive number, got {value!r}")
        object.__setattr__(self, "n_kv_heads", kv)
        object.__setattr__(self, "ffn_dim", ffn)

    @property
    def head_dim(self) -> int:
        """Q, the width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def tied_embeddings(self) -> bool:
        """Whether the output head is the token embedding (gpt) or its own matrix (llama)."""
        return self.arch == "gpt"

    def to_dict(self) -> dict:
        return asdict(self)


def _positive(field: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"model.{field} must be a positive integer, got {value!r}")


def _llama(name: str, L: int, d: int, H: int, KV: int, F: int, T: int, V: int, theta: float = 10000.0) -> ModelShape:
    return ModelShape(name, n_layers=L, d_model=d, n_heads=H, seq_len=T, vocab_size=V, arch="llama",
                      n_kv_heads=KV, ffn_dim=F, rope_theta=theta)


SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in (
        # Trains in seconds on one CPU core; 4 layers so pp ∈ {1, 2, 4}, 4 heads so tp ∈ {1, 2, 4}.
        ModelShape("tiny", n_layers=4, d_model=64, n_heads=4, seq_len=128, vocab_size=BYTE_VOCAB_SIZE),
        ModelShape("small", n_layers=6, d_model=256, n_heads=8, seq_len=256, vocab_size=BYTE_VOCAB_SIZE),
        # nanoGPT's GPT-2 small dimensions (our block has no linear biases: 82,944 parameters fewer).
        ModelShape("gpt2-124m", n_layers=12, d_model=768, n_heads=12, seq_len=1024, vocab_size=50257),
        ModelShape("1b", n_layers=24, d_model=2048, n_heads=16, seq_len=2048, vocab_size=32000),
        ModelShape("7b", n_layers=32, d_model=4096, n_heads=32, seq_len=4096, vocab_size=32000),
        ModelShape("13b", n_layers=40, d_model=5120, n_heads=40, seq_len=4096, vocab_size=32000),
        ModelShape("70b", n_layers=80, d_model=8192, n_heads=64, seq_len=4096, vocab_size=32000),
        # Llama on CPU: 4 query heads sharing 2 key/value heads, so tp ∈ {1, 2} splits both; pp ∈ {1, 2, 4}.
        _llama("llama-tiny", L=4, d=64, H=4, KV=2, F=192, T=128, V=BYTE_VOCAB_SIZE),
        _llama("llama-small", L=8, d=256, H=8, KV=4, F=704, T=256, V=BYTE_VOCAB_SIZE),
        _llama("llama2-7b", L=32, d=4096, H=32, KV=32, F=11008, T=4096, V=32000),
        _llama("llama2-13b", L=40, d=5120, H=40, KV=40, F=13824, T=4096, V=32000),
        _llama("llama2-70b", L=80, d=8192, H=64, KV=8, F=28672, T=4096, V=32000),
        _llama("llama3-8b", L=32, d=4096, H=32, KV=8, F=14336, T=8192, V=128256, theta=500000.0),
    )
}


def get_shape(name: str) -> ModelShape:
    """The named shape, or ``ValueError`` listing the known names."""
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown model shape {name!r}: use one of {', '.join(SHAPES)}") from None


def block_params(shape: ModelShape) -> int:
    """Parameters of one transformer block.

    gpt:   12·d² + 4·d   qkv 3d², attention out d², MLP 4d² + 4d², two LayerNorms 2·2d
    llama: d·(H + 2·KV)·Q + H·Q·d + 3·d·F + 2·d
           q, k, v projections; attention out; SwiGLU gate, up, down; two RMSNorm weights
    """
    d = shape.d_model
    if shape.arch == "gpt":
        return 12 * d * d + 4 * d
    q = shape.head_dim
    attn = d * (shape.n_heads + 2 * shape.n_kv_heads) * q + shape.n_heads * q * d
    return attn + 3 * d * shape.ffn_dim + 2 * d


def param_count(shape: ModelShape) -> int:
    """Exact number of trainable parameters of the model the trainer builds.

    gpt:   N = V·d (token embedding, tied with the head, counted once) + T·d (positions)
               + L·block + 2·d (final LayerNorm)
    llama: N = V·d (token embedding) + L·block + d (final RMSNorm) + V·d (untied head)

    Llama-2-7B 6,738,415,616; 13B 13,015,864,320; 70B 68,976,648,192;
    Llama-3-8B 8,030,261,248 — the published counts.
    """
    d, L, V = shape.d_model, shape.n_layers, shape.vocab_size
    if shape.arch == "gpt":
        return V * d + shape.seq_len * d + L * block_params(shape) + 2 * d
    return V * d + L * block_params(shape) + d + V * d


def lookup_table_params(shape: ModelShape) -> int:
    """Parameters that are looked up, not multiplied: excluded from the 6N of :func:`flops_per_token`.

    gpt: the learned position table T·d (the token table is also the tied
    output head, a matmul, so it stays in N — as nanoGPT counts);
    llama: the token embedding V·d (the untied head is a separate matmul and stays).
    """
    if shape.arch == "gpt":
        return shape.seq_len * shape.d_model
    return shape.vocab_size * shape.d_model


def flops_per_token(shape: ModelShape) -> int:
    """Training FLOPs per token (forward + backward): the one FLOPs function of trainledger.

    flops/token = 6·N + 12·L·H·Q·T

    N = ``param_count − lookup_table_params``: the parameters that take part
    in a matrix multiply (embedding and position *tables* are lookups, not
    matmuls; an output head is a matmul and counts, tied or not). 6N is 2
    FLOPs per multiply-add × 3 for forward and backward (Kaplan et al. 2020,
    §2.1, who also leave embeddings out of N); 12·L·H·Q·T is the attention
    score and value matmuls over a context of T (PaLM, Chowdhery et al. 2022,
    Appendix B). This is nanoGPT's ``estimate_mfu`` arithmetic, whose N is
    ``get_num_params(non_embedding=True)`` = parameters − position table.
    L layers, H query heads, Q head dimension, T sequence length. Activation
    recomputation is not counted: MFU measures model FLOPs, not hardware FLOPs.
    """
    N = param_count(shape) - lookup_table_params(shape)
    L, H, Q, T = shape.n_layers, shape.n_heads, shape.head_dim, shape.seq_len
    return 6 * N + 12 * L * H * Q * T
