"""The trainer's YAML config: typed sections, validated at the edge.

Schema (every key optional; defaults shown)::

    model:
      shape: tiny              # a name from trainledger.trainer.shapes.SHAPES ...
      n_layers: null           # ... or explicit dims, which override the named shape
      d_model: null
      n_heads: null
      seq_len: null
      vocab_size: null
      n_kv_heads: null         # llama shapes: key/value heads (grouped-query attention)
      ffn_dim: null            # llama shapes: SwiGLU width (null with d_model changed: Meta's formula)
      activation_checkpointing: false
    data:
      corpus: null             # text files or a directory of *.txt; null and no shards = shipped corpus
      shards: null             # a directory written by `trainledger data prepare` (has index.json)
      cache_dir: null          # node-local cache; else $TRAINLEDGER_CACHE_DIR, else ~/.cache/trainledger
      seq_len: null            # must equal model seq_len when given
      shard_size: 256          # samples per shard when the corpus is prepared on the fly
    parallel:
      strategy: dp             # dp | zero1 | zero2 | zero3 | pp | tp | 3d
      dp: null                 # null: world size ÷ (tp × pp)
      tp: null                 # null: 1 (strategies tp/3d: world size ÷ (dp × pp))
      pp: null                 # null: 1 (strategies pp/3d: world size ÷ (dp × tp))
      zero_stage: null         # null: the strategy's stage (pp/tp/3d accept 0 or 1)
      micro_batch: 4           # sequences per rank per micro-step
      grad_accum: null         # give grad_accum or global_batch (or neither: grad_accum 1)
      global_batch: null       # sequences per optimizer step = micro_batch × grad_accum × dp
      nodes: null
      gpus_per_node: null
      hostfile: null           # DeepSpeed hostfile ("host slots=N" lines), checked against the plan
    optimizer:
      lr: 0.001                # peak learning rate (AdamW)
      weight_decay: 0.1        # not applied to LayerNorm weights/biases
      betas: [0.9, 0.95]
      eps: 1.0e-8
      warmup_steps: 10         # linear warm-up, then cosine decay to min_lr_ratio × lr
      min_lr_ratio: 0.1
      grad_clip: 1.0           # global gradient-norm clip; 0 disables
    steps: 100                 # optimizer steps
    seed: 1234
    log_every: 10              # rank 0 prints a line every N steps
    precision: auto            # auto (bf16 on CUDA, fp32 on CPU) | fp32 | bf16 | fp16
    peak_tflops: null          # per-device dense peak for MFU; null: looked up by GPU name
    comm_timing: true          # time DeepSpeed communication calls for the comm share
    checkpoint:
      dir: null                # save DeepSpeed checkpoints here (tags step<N>); recorded in the ledger
      every: 0                 # every N optimizer steps; 0 = never
    deepspeed: null            # extra DeepSpeed JSON keys merged over the generated config

Unknown keys and wrong types raise :class:`ConfigError` with one line naming
the key. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

from trainledger.trainer.shapes import ModelShape, get_shape

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "pp", "tp", "3d")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: the largest whole number a config may hold (a 32-bit INTEGER column in the ledger)
MAX_INT = 2**31 - 1


#: model dims a config may set over the named shape
SHAPE_KEYS = ("n_layers", "d_model", "n_heads", "seq_len", "vocab_size", "n_kv_heads", "ffn_dim")


class ConfigError(ValueError):
    """A config problem; the message is one line naming the key to change."""


@dataclass(frozen=True)
class ModelConfig:
    shape: str = "tiny"
    n_layers: Optional[int] = None
    d_model: Optional[int] = None
    n_heads: Optional[int] = None
    seq_len: Optional[int] = None
    vocab_size: Optional[int] = None
    n_kv_heads: Optional[int] = None
    ffn_dim: Optional[int] = None
    activation_checkpointing: bool = False

    def resolve(self) -> ModelShape:
        """The named shape with explicit dims applied over it.

        A new ``d_model`` recomputes the MLP width (4·d, or Meta's SwiGLU
        formula) unless ``ffn_dim`` is given; a new ``n_heads`` on a gpt shape
        keeps multi-head attention.
        """
        try:
            base = get_shape(self.shape)
            overrides = {k: getattr(self, k) for k in SHAPE_KEYS if getattr(self, k) is not None}
            if not overrides:
                return base
            if "d_model" in overrides and "ffn_dim" not in overrides:
                overrides["ffn_dim"] = None
            if base.arch == "gpt" and "n_heads" in overrides and "n_kv_heads" not in overrides:
                overrides["n_kv_heads"] = None
            return replace(base, name=f"{base.name}+custom", **overrides)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class DataConfig:
    corpus: Optional[str] = None
    shards: Optional[str] = None
    cache_dir: Optional[str] = None
    seq_len: Optional[int] = None
    shard_size: int = 256


@dataclass(frozen=True)
class ParallelConfig:
    strategy: str = "dp"
    dp: Optional[int] = None
    tp: Optional[int] = None
    pp: Optional[int] = None
    zero_stage: Optional[int] = None
    micro_batch: int = 4
    grad_accum: Optional[int] = None
    global_batch: Optional[int] = None
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    hostfile: Optional[str] = None


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 10
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclass(frozen=True)
class CheckpointConfig:
    dir: Optional[str] = None
    every: int = 0


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    steps: int = 100
    seed: int = 1234
    log_every: int = 10
    precision: str = "auto"
    peak_tflops: Optional[float] = None
    comm_timing: bool = True
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    deepspeed: Optional[dict] = None

    def __post_init__(self) -> None:
        if self.parallel.strategy not in STRATEGIES:
            raise ConfigError(
                f"unknown parallel.strategy {self.parallel.strategy!r}: use one of {', '.join(STRATEGIES)}"
            )
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}: use one of {', '.join(PRECISIONS)}")
        par, opt = self.parallel, self.optimizer
        for key, value, low, high in (
            ("steps", self.steps, 1, MAX_INT),
            ("seed", self.seed, 0, 2**32 - 1),
            ("log_every", self.log_every, 1, MAX_INT),
            ("parallel.micro_batch", par.micro_batch, 1, MAX_INT),
            ("parallel.dp", par.dp, 1, MAX_INT),
            ("parallel.tp", par.tp, 1, MAX_INT),
            ("parallel.pp", par.pp, 1, MAX_INT),
            ("parallel.zero_stage", par.zero_stage, 0, 3),
            ("parallel.grad_accum", par.grad_accum, 1, MAX_INT),
            ("parallel.global_batch", par.global_batch, 1, MAX_INT),
            ("parallel.nodes", par.nodes, 1, MAX_INT),
            ("parallel.gpus_per_node", par.gpus_per_node, 1, MAX_INT),
            ("data.seq_len", self.data.seq_len, 1, MAX_INT),
            ("data.shard_size", self.data.shard_size, 1, MAX_INT),
            ("checkpoint.every", self.checkpoint.every, 0, MAX_INT),
            ("optimizer.warmup_steps", opt.warmup_steps, 0, MAX_INT),
            *((f"model.{k}", getattr(self.model, k), 1, MAX_INT)
              for k in SHAPE_KEYS),
        ):
            if value is not None and not low <= value <= high:
                raise ConfigError(f"{key} must be {low} to {high}, got {value}" if value > high
                                  else f"{key} must be ≥ {low}, got {value}")
        floats = [("optimizer.lr", opt.lr), ("optimizer.weight_decay", opt.weight_decay), ("optimizer.eps", opt.eps),
                  ("optimizer.betas", opt.betas[0]), ("optimizer.betas", opt.betas[1]),
                  ("optimizer.min_lr_ratio", opt.min_lr_ratio), ("optimizer.grad_clip", opt.grad_clip),
                  ("peak_tflops", self.peak_tflops)]
        for key, value in floats:
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
        if opt.lr <= 0:
            raise ConfigError(f"optimizer.lr must be > 0, got {opt.lr}")
        if opt.weight_decay < 0:
            raise ConfigError(f"optimizer.weight_decay must be ≥ 0, got {opt.weight_decay}")
        if opt.eps <= 0:
            raise ConfigError(f"optimizer.eps must be > 0, got {opt.eps}")
        if not all(0 <= b < 1 for b in opt.betas):
            raise ConfigError(f"optimizer.betas must be two numbers in [0, 1) such as [0.9, 0.95], got {list(opt.betas)}")
        if not 0 <= opt.min_lr_ratio <= 1:
            raise ConfigError(f"optimizer.min_lr_ratio must be between 0 and 1, got {opt.min_lr_ratio}")
        if opt.grad_clip < 0:
            raise ConfigError(f"optimizer.grad_clip must be ≥ 0 (0 disables), got {opt.grad_clip}")
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            raise ConfigError(f"peak_tflops must be > 0 (TFLOPS per device), got {self.peak_tflops}")
        shape = self.shape  # raises ConfigError on bad dims
        if self.data.seq_len is not None and self.data.seq_len != shape.seq_len:
            raise ConfigError(
                f"data.seq_len {self.data.seq_len} differs from the model's seq_len {shape.seq_len}: "
                f"set model.seq_len: {self.data.seq_len} or drop data.seq_len"
            )
        if self.data.corpus and self.data.shards:
            raise ConfigError("data.corpus and data.shards are both set: keep one")
        if self.checkpoint.every and not self.checkpoint.dir:
            raise ConfigError(f"checkpoint.every is {self.checkpoint.every} but checkpoint.dir is not set: "
                              "give a directory to save checkpoints in")

    @property
    def shape(self) -> ModelShape:
        return self.model.resolve()

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["optimizer"]["betas"] = list(self.optimizer.betas)
        return out


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "parallel": ParallelConfig, "optimizer": OptimizerConfig,
             "checkpoint": CheckpointConfig}


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error names the value, it does not echo a whole file."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check/convert one YAML value against a dataclass type hint."""
    origin = typing.get_origin(hint)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _coerce(value, inner, key)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be true or false, got {_short(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key} must be an integer, got {_short(value)}")
    if hint is float:
        # YAML 1.1 reads "1e-3" (no dot) as a string; accept it.
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an integer too large for a float
                pass
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None and math.isfinite(number):
            return number
        raise ConfigError(f"{key} must be a finite number, got {_short(value)}")
    if hint is str:
        if isinstance(value, (str, Path)):
            return str(value)
        raise ConfigError(f"{key} must be a string, got {_short(value)}")
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key} must be a list of {len(args)} numbers, got {_short(value)}")
        return tuple(_coerce(v, a, key) for v, a in zip(value, args))
    if hint is dict:
        if isinstance(value, Mapping):
            return dict(value)
        raise ConfigError(f"{key} must be a mapping, got {_short(value)}")
    raise TypeError(f"unsupported config type {hint!r} for {key}")  # a bug in this module


def _build(cls: type, raw: Any, where: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where or 'the config'} must be a mapping, got {_short(raw)}")
    hints = typing.get_type_hints(cls)
    allowed = [f.name for f in fields(cls)]
    kwargs = {}
    for key, value in raw.items():
        name = f"{where}.{key}" if where else str(key)
        if key not in allowed:
            raise ConfigError(f"unknown config key {name!r} (allowed: {', '.join(allowed)})")
        if where == "" and key in _SECTIONS:
            kwargs[key] = _build(_SECTIONS[key], value, key)
        else:
            kwargs[key] = _coerce(value, hints[key], name)
    return cls(**kwargs)


def config_from_dict(raw: Mapping | None) -> TrainConfig:
    """Build a :class:`TrainConfig` from a parsed YAML mapping (``ConfigError`` on bad input)."""
    return _build(TrainConfig, raw, "")


#: a config larger than this is refused before it is parsed
MAX_CONFIG_BYTES = 1 << 20
ALIAS_PROBLEM = "aliases (*name) and merge keys (<<) are not allowed in configs; write the values out"


@functools.lru_cache(maxsize=1)
def _no_alias_loader():
    """PyYAML's SafeLoader, except that an alias (``*name``, also behind a ``<<`` merge key) is an error.

    Aliases are what an alias bomb (a few hundred bytes that expand to gigabytes
    once the structure is walked or serialized) is made of; a config never needs
    them. Anchors alone (``&name``) are harmless and still parse.
    """
    import yaml

    class NoAliasSafeLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, ALIAS_PROBLEM, event.start_mark)
            return super().compose_node(parent, index)

    return NoAliasSafeLoader


def load_yaml(text: str, where: str | Path) -> Any:
    """Parse config YAML safely: no tags beyond plain data, no aliases, at most MAX_CONFIG_BYTES (ConfigError, one line).

    Every config the product reads goes through here: ``trainledger train``,
    ``launch`` and ``sweep``, and the dashboard's Launch page.
    """
    import yaml

    if len(text.encode("utf-8", errors="replace")) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CONFIG_BYTES // 1024} KiB; a training config is a few lines")
    try:
        return yaml.load(text, Loader=_no_alias_loader())  # noqa: S506  (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{where}{line}: not valid YAML ({problem})") from None
    except RecursionError:
        raise ConfigError(f"{where}: not valid YAML (nested too deeply)") from None


def read_config_text(path: str | Path) -> str:
    """A config file's text, read with a size limit (``/dev/zero`` is refused, not read on); unreadable, larger
    than :data:`MAX_CONFIG_BYTES`, a NUL byte or not UTF-8: one ConfigError line naming FILE (and :LINE)."""
    from trainledger.errors import LedgerInputError
    from trainledger.store.files import read_bounded

    try:
        return read_bounded(path, MAX_CONFIG_BYTES, "config")
    except LedgerInputError as exc:
        raise ConfigError(str(exc)) from None


def load_config(path: str | Path) -> TrainConfig:
    """Read and validate a YAML config file (read by :func:`read_config_text`, parsed by :func:`load_yaml`)."""
    path = Path(path)
    return config_from_dict(load_yaml(read_config_text(path), path))
