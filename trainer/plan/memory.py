"""Memory per GPU of a parallel plan: model states + activations + an allowance.

Parameters per rank
-------------------
The trainer splits each block's matrices over tp (Megatron-style: qkv and
MLP-in column-parallel, attention-out and MLP-out row-parallel) and keeps
norms, the token embedding, the position table and the output head whole on
every tp rank (no vocabulary parallelism). pp stages hold L/pp blocks each;
the embeddings sit on the first stage and the final norm and head on the
last (GPT's tied embedding is copied to the last stage when pp > 1).
:func:`stage_params` counts exactly that.

Model states (DeepSpeed's accounting)
-------------------------------------
P parameters on the rank, N = dp ranks sharing them, mixed precision
(16-bit weights and gradients, fp32 master weights, Adam momentum and
variance), as in DeepSpeed's ``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs`` (offload off):

    ZeRO-3   4·P_largest + 18·P/N    (16-bit params 2 + fp32 grads 4 + master 4 + Adam 8,
                                      all sharded; the largest layer gathered with its gradient)
    ZeRO-2   2·P + 18·P/N            (16-bit params whole; 16-bit grads 2 + fp32 grads 4
                                      + master 4 + Adam 8 sharded)
    ZeRO-1   2·P + 2·P + 16·P/N      (the ZeRO-2 arithmetic with the 16-bit gradients whole;
                                      DeepSpeed has no stage-1 estimator)
    ZeRO-0   20·P                    (ZeRO-1 with N = 1)

``int()`` is applied where DeepSpeed applies it, so the figures equal its
functions' to the byte. fp32 training (the CPU runs) has 4-byte weights and
gradients and no separate master copy at ZeRO-0: 16·P; ZeRO-1 8·P + 16·P/N;
ZeRO-2 4·P + 20·P/N; ZeRO-3 8·P_largest + 20·P/N.

Beside it, the ZeRO paper's figure (Rajbhandari et al. 2020, §5.1, Fig. 1;
K = 12): (2 + 2 + K)·P, 2P + 2P + KP/N, 2P + (2 + K)P/N, (2 + 2 + K)P/N — it
leaves out the fp32 gradient partition DeepSpeed keeps, so it is lower.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models", §4)
---------------------------------------------------------------------------
The paper's count for a GPT-3 block with dropout and eager attention is
s·b·h·(34 + 5·a·s/h) bytes (2-byte activations, 1-byte dropout masks), or
s·b·h·(10 + 24/t + 5·a·s/(h·t)) with tensor parallelism and s·b·h·(34/t +
5·a·s/(h·t)) with tensor + sequence parallelism (:func:`korthikanti_layer_bytes`).
:func:`layer_activation_bytes` keeps the same terms for the trainer's own
layers, each a tensor autograd saves (checked against the saved tensors of a
real forward in tests/trainer/test_plan_memory.py):

    GPT   replicated: LN₁ input, LN₁ output (qkv input), LN₂ input, LN₂ output     4·h
          per tp rank: q, k, v 3·h; attention output h; GELU input 4·h, output 4·h 12·h / t
    Llama replicated: per RMSNorm its input, normalised input and output          6·h
          per tp rank: fused q|k|v output (h + 2·KV·Q); q, k after RoPE (h + KV·Q);
                       attention output h; gate|up output 2·F; SiLU output F;
                       SiLU·up (down input) F                                     (3·h + 3·KV·Q + 4·F) / t

elements of s·b each, times the activation width (2 bytes bf16, 4 fp32), plus
small fp32 terms (norm statistics, the attention log-sum-exp, RoPE tables).
With flash/SDPA attention the a·s² score term is gone (only the log-sum-exp
is kept); eager attention adds the softmax output a·s²·b (and with dropout
its mask and output: the paper's 5·a·s²·b bytes). The trainer has no
sequence parallelism (``sequence_parallel`` models it for comparison). Full
recomputation keeps only each block's input, s·b·h elements per layer, plus
one block's activations while it is recomputed. Pipeline stages under 1F1B
hold min(pp − stage, m) micro-batches in flight (the first stage pp; m =
micro-batches per step). The last stage adds the output layer: the fp32
log-softmax output (4·s·b·V bytes, saved) and, transiently, the logits and
their fp32 gradient ((e + 4)·s·b·V).

Allowance
---------
On top: :data:`RESERVED_BYTES` = 1 GiB per GPU for the CUDA context, cuBLAS
and NCCL workspaces (not seen by ``torch.cuda.max_memory_allocated`` but
taken from the card), the ZeRO-1/2 contiguous gradient bucket
(min(reduce_bucket_size = 5·10⁸ elements, P) 16-bit elements, DeepSpeed's
default), and :data:`FRAGMENTATION` = 10% of states + activations for the
caching allocator's fragmentation. These are rules of thumb, stated so they
can be argued with; the fit test is total ≤ GPU memory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trainledger.trainer.shapes import ModelShape, block_params

GIB = 2**30
#: CUDA context + cuBLAS/NCCL workspaces per GPU (bytes), outside the caching allocator's count
RESERVED_BYTES = GIB
#: share of states + activations lost to allocator fragmentation
FRAGMENTATION = 0.10
#: DeepSpeed's default reduce_bucket_size (elements): the ZeRO-1/2 contiguous gradient bucket
REDUCE_BUCKET_ELEMENTS = 500_000_000
K_ADAM = 12  # the ZeRO paper's K: fp32 master weights + Adam momentum + variance
PRECISIONS = ("bf16", "fp16", "fp32")
RECOMPUTE = ("none", "full")


def element_bytes(precision: str) -> int:
    """Bytes of one weight, gradient or activation element: 2 (bf16/fp16) or 4 (fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return 4 if precision == "fp32" else 2


# --------------------------------------------------------------------------- parameters per rank


@dataclass(frozen=True)
class StageParams:
    """Parameters one rank of a pipeline stage holds, and its largest module's (DeepSpeed's "largest layer")."""

    total: int
    largest_layer: int


def _block_split(shape: ModelShape) -> tuple[int, int]:
    """(parameters split over tp, parameters every tp rank keeps whole) of one block."""
    d = shape.d_model
    replicated = 4 * d if shape.arch == "gpt" else 2 * d
    return block_params(shape) - replicated, replicated


def _block_largest(shape: ModelShape, tp: int) -> int:
    """The block's largest module on one tp rank: fused qkv, attention out, MLP in (fc or gate|up) or MLP out."""
    d, q = shape.d_model, shape.head_dim
    if shape.arch == "gpt":
        return max(3 * d * d, 4 * d * d) // tp
    return max((shape.n_heads + 2 * shape.n_kv_heads) * q * d, 2 * shape.ffn_dim * d) // tp


def stage_params(shape: ModelShape, tp: int = 1, pp: int = 1, stage: int = 0) -> StageParams:
    """Parameters on one rank of pipeline ``stage`` (0-based) with ``tp``-way tensor parallelism.

    (L/pp)·(block_split/tp + block_replicated) + first stage: V·d (+ T·d gpt)
    + last stage: final norm (2d gpt, d llama) + head (llama V·d; gpt V·d when pp > 1, tied otherwise).
    """
    d, V = shape.d_model, shape.vocab_size
    split, replicated = _block_split(shape)
    total = shape.n_layers // pp * (split // tp + replicated)
    largest = _block_largest(shape, tp)
    if stage == 0:
        total += V * d + (shape.seq_len * d if shape.arch == "gpt" else 0)
        largest = max(largest, V * d)
    if stage == pp - 1:
        total += 2 * d if shape.arch == "gpt" else d
        if shape.arch == "llama" or pp > 1:
            total += V * d
            largest = max(largest, V * d)
    return StageParams(total, largest)


# --------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model states on one GPU (DeepSpeed's accounting) and the ZeRO paper's figure beside them."""

    params: int
    grads: int
    optimizer: int
    zero_paper: float

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer


def model_states(params: int, dp: int, zero_stage: int, largest_layer: int = 0,
                 precision: str = "bf16") -> ModelStates:
    """Model-state bytes per GPU for ``params`` parameters on the rank, sharded over ``dp`` (module docstring).

    The split into params/grads/optimizer follows DeepSpeed's comments: 16-bit
    weights; gradients 16-bit + fp32 partition; optimizer = fp32 master + Adam
    momentum and variance. ZeRO-3's 4·P_largest (gathered weights and
    gradients of the largest layer) is booked under params.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage!r}")
    if dp < 1 or params < 0:
        raise ValueError(f"dp must be ≥ 1 and params ≥ 0, got dp {dp!r}, params {params!r}")
    w = element_bytes(precision)
    paper = zero_paper_bytes(params, dp, zero_stage)
    if zero_stage == 0:
        if w == 4:  # fp32 weights are the master copy and the gradients are fp32 already: 4 + 4 + Adam 8
            return ModelStates(params=4 * params, grads=4 * params, optimizer=8 * params, zero_paper=paper)
        return ModelStates(params=w * params, grads=(w + 4) * params, optimizer=12 * params, zero_paper=paper)
    n = dp
    optimizer = int(12 * params / n)  # fp32 master 4 + Adam momentum 4 + variance 4, sharded
    if zero_stage == 1:  # 16-bit weights and gradients whole; fp32 gradient partition 4
        sharded = int(16 * params / n)
        return ModelStates(params=w * params, grads=w * params + sharded - optimizer, optimizer=optimizer,
                           zero_paper=paper)
    sharded = int((w + 16) * params / n)  # DeepSpeed's 18 = 16-bit grads 2 + fp32 grads 4 + master 4 + Adam 8
    if zero_stage == 2:
        return ModelStates(params=w * params, grads=sharded - optimizer, optimizer=optimizer, zero_paper=paper)
    own = int(w * params / n)  # ZeRO-3: this rank's 16-bit weight shard (inside DeepSpeed's 18)
    return ModelStates(params=2 * w * largest_layer + own, grads=sharded - optimizer - own, optimizer=optimizer,
                       zero_paper=paper)


def zero_paper_bytes(params: int, dp: int, zero_stage: int, k: int = K_ADAM) -> float:
    """The ZeRO paper's model states per GPU (Fig. 1): (2+2+K)Ψ, 2Ψ+2Ψ+KΨ/N, 2Ψ+(2+K)Ψ/N, (2+2+K)Ψ/N."""
    psi = params
    return (float((2 + 2 + k) * psi), 4 * psi + k * psi / dp, 2 * psi + (2 + k) * psi / dp,
            (2 + 2 + k) * psi / dp)[zero_stage]


# --------------------------------------------------------------------------- activations


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sequence_parallel: bool = False,
                            flash: bool = False) -> float:
    """Korthikanti et al. (2022) activation bytes of one GPT-3 block (2-byte activations, dropout):

    s·b·h·(34 + 5·a·s/h) with t = 1; s·b·h·(10 + 24/t + 5·a·s/(h·t)) with tensor
    parallelism; s·b·h·(34/t + 5·a·s/(h·t)) with tensor + sequence parallelism.
    ``flash`` drops the 5·a·s/h score term (flash/SDPA attention keeps no s² matrix).
    """
    scores = 0.0 if flash else 5 * a * s / (h * t)
    per = 34 / t if sequence_parallel else 10 + 24 / t
    return s * b * h * (per + scores)


def layer_activation_bytes(shape: ModelShape, micro_batch: int, tp: int = 1, precision: str = "bf16", *,
                           flash: bool = True, dropout: bool = False, sequence_parallel: bool = False) -> float:
    """Activation bytes one block keeps for its backward on one tp rank (module docstring's table).

    With ``dropout`` and eager attention (``flash=False``) on a gpt shape and
    2-byte activations this is exactly :func:`korthikanti_layer_bytes`.
    """
    e = element_bytes(precision)
    s, b, h, a = shape.seq_len, micro_batch, shape.d_model, shape.n_heads
    sb = s * b
    if shape.arch == "gpt":
        replicated, sharded, norms = 4 * h, 12 * h, 2 * 2  # LayerNorm keeps mean and rstd
    else:
        kv = shape.n_kv_heads * shape.head_dim
        replicated, sharded, norms = 6 * h, 3 * h + 3 * kv + 4 * shape.ffn_dim, 2  # RMSNorm keeps rstd
    repl_bytes = sb * (e * replicated + (2 * h if dropout else 0) + 4 * norms)  # 1-byte dropout masks, fp32 stats
    if sequence_parallel:
        repl_bytes /= tp
    attn = sb * a * 4 / tp  # fp32 log-sum-exp of flash attention
    if not flash:
        attn = sb * a * s * (e + ((1 + e) if dropout else 0)) / tp  # softmax out (+ dropout mask and output)
    rope = 2 * s * shape.head_dim * e if shape.arch == "llama" else 0
    return repl_bytes + sb * e * sharded / tp + attn + rope


def recomputed_layer_bytes(shape: ModelShape, micro_batch: int, precision: str = "bf16") -> int:
    """Full recomputation keeps only the block's input: s·b·h elements (Korthikanti's 2·s·b·h bytes)."""
    return shape.seq_len * micro_batch * shape.d_model * element_bytes(precision)


def output_layer_bytes(shape: ModelShape, micro_batch: int, precision: str = "bf16") -> tuple[int, int]:
    """(saved, transient) bytes of the last stage's output layer for one micro-batch.

    saved: final norm (gpt 2, llama 3 elements of s·b·h; fp32 statistics) + the fp32 log-softmax
    output 4·s·b·V + the int64 targets 8·s·b;
    transient while the loss runs: the logits and their fp32 gradient (e + 4)·s·b·V.
    """
    e = element_bytes(precision)
    sb = shape.seq_len * micro_batch
    if shape.arch == "gpt":
        norm = 2 * sb * shape.d_model * e + 2 * 4 * sb
    else:
        norm = 3 * sb * shape.d_model * e + 4 * sb
    return norm + 4 * sb * shape.vocab_size + 8 * sb, (e + 4) * sb * shape.vocab_size


@dataclass(frozen=True)
class Activations:
    """Activation bytes on one GPU of a stage: blocks (all micro-batches in flight), and the input and output
    layers (token ids on the first stage; final norm, loss and logits on the last)."""

    layers: float
    output_layer: float
    in_flight: int

    @property
    def total(self) -> float:
        return self.layers + self.output_layer


def stage_activations(shape: ModelShape, micro_batch: int, tp: int, pp: int, stage: int, micro_batches: int,
                      recompute: str = "none", precision: str = "bf16", flash: bool = True) -> Activations:
    """Activations of pipeline ``stage`` under 1F1B: min(pp − stage, m) micro-batches of L/pp blocks in flight.

    recompute "full": each block keeps its input only, plus one block's full
    activations while it is recomputed. The last stage adds :func:`output_layer_bytes`.
    """
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    in_flight = min(pp - stage, micro_batches)
    layers = shape.n_layers // pp
    full = layer_activation_bytes(shape, micro_batch, tp, precision, flash=flash)
    if recompute == "full":
        blocks = layers * in_flight * recomputed_layer_bytes(shape, micro_batch, precision) + full
    else:
        blocks = layers * in_flight * full
    output = 0.0
    if stage == 0:
        output += 8 * shape.seq_len * micro_batch * in_flight  # the int64 token ids the embedding keeps
    if stage == pp - 1:
        saved, transient = output_layer_bytes(shape, micro_batch, precision)
        output += saved + transient
    return Activations(blocks, output, in_flight)


# --------------------------------------------------------------------------- per GPU


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU on the plan's fullest stage: states + activations + allowance = total."""

    stage: int
    params: int
    states: ModelStates
    activations: Activations
    allowance: float

    @property
    def total(self) -> float:
        return self.states.total + self.activations.total + self.allowance

    def as_gib(self) -> dict:
        g = float(GIB)
        return {"stage": self.stage, "params_on_gpu": self.params,
                "weights_gib": self.states.params / g, "gradients_gib": self.states.grads / g,
                "optimizer_gib": self.states.optimizer / g, "model_states_gib": self.states.total / g,
                "zero_paper_states_gib": self.states.zero_paper / g,
                "activations_gib": self.activations.total / g, "allowance_gib": self.allowance / g,
                "total_gib": self.total / g}


def allowance_bytes(states_and_activations: float, params: int, zero_stage: int, precision: str = "bf16",
                    reserved: float = RESERVED_BYTES) -> float:
    """Buffers and fragmentation: reserved + ZeRO-1/2 gradient bucket + 10% of states and activations."""
    bucket = min(REDUCE_BUCKET_ELEMENTS, params) * element_bytes(precision) if zero_stage in (1, 2) else 0
    return reserved + bucket + FRAGMENTATION * states_and_activations


def memory_per_gpu(shape: ModelShape, *, dp: int, tp: int, pp: int, zero_stage: int, micro_batch: int,
                   micro_batches: int, recompute: str = "none", precision: str = "bf16", flash: bool = True,
                   reserved: float = RESERVED_BYTES) -> MemoryEstimate:
    """Memory per GPU of the plan's fullest pipeline stage (the first or the last; the middle ones hold less)."""
    best = None
    for stage in sorted({0, pp - 1}):
        sp = stage_params(shape, tp, pp, stage)
        states = model_states(sp.total, dp, zero_stage, sp.largest_layer, precision)
        acts = stage_activations(shape, micro_batch, tp, pp, stage, micro_batches, recompute, precision, flash)
        extra = allowance_bytes(states.total + acts.total, sp.total, zero_stage, precision, reserved)
        est = MemoryEstimate(stage, sp.total, states, acts, extra)
        if best is None or est.total > best.total:
            best = est
    return best


def as_dict(obj) -> dict:
    """A dataclass of this module as a plain dict (JSON-friendly)."""
    return asdict(obj)
