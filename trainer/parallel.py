"""The parallel plan: dp × tp × pp, ZeRO stage, batch arithmetic, and its validation.

Everything here runs before any process starts and imports no torch, so the
ledger's planner and ``trainledger train --dry-run`` use it on a laptop.

Identities the plan holds (each violation is a :class:`PlanError` whose
message is one line saying what to change):

* world size = dp × tp × pp = nodes × gpus_per_node
* global_batch = micro_batch × grad_accum × dp  (sequences per optimizer step)
* pp divides n_layers (otherwise stages hold unequal layer counts and GPUs idle)
* tp divides n_heads, n_kv_heads and ffn_dim (heads, grouped key/value heads and
  MLP units are split across tensor-parallel ranks)
* ZeRO-2/3 are not combined with pp > 1 (DeepSpeed's pipeline engine refuses them);
  the nearest supported plan is ``3d`` (ZeRO-1 + TP + PP)
* a hostfile, when given, lists ``nodes`` hosts with ``gpus_per_node`` slots each
* ``"auto"`` values in a DeepSpeed JSON are resolved from the plan and config,
  or refused when there is nothing to resolve them from

Strategies: ``dp`` (ZeRO-0), ``zero1``, ``zero2``, ``zero3`` are data parallel
only; ``pp`` is DeepSpeed's PipelineModule (ZeRO-0, or 1); ``tp`` is
Megatron-style tensor parallelism (ZeRO-0, or 1); ``3d`` is ZeRO-1 + TP + PP
as in Megatron-DeepSpeed. ``pp``/``tp``/``3d`` may also have dp > 1.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

from trainledger.trainer.config import STRATEGIES, ConfigError, ParallelConfig, TrainConfig, config_from_dict
from trainledger.trainer.shapes import ModelShape

#: ZeRO stage each strategy runs with unless ``parallel.zero_stage`` says otherwise.
STRATEGY_ZERO_STAGE = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3, "pp": 0, "tp": 0, "3d": 1}
DATA_PARALLEL_ONLY = ("dp", "zero1", "zero2", "zero3")


class PlanError(ValueError):
    """An invalid parallel plan; the message is one line saying what to change."""


def _divisors(n: int) -> str:
    """The divisors of ``n`` (trial division up to √n, so a huge n costs microseconds, not minutes)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    large = [n // d for d in reversed(small) if d * d != n]
    return ", ".join(str(d) for d in small + large)


@dataclass(frozen=True)
class ParallelPlan:
    """A resolved, validated plan. Construction checks the arithmetic identities."""

    strategy: str
    dp: int
    tp: int
    pp: int
    zero_stage: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    nodes: int
    gpus_per_node: int
    world_size: int

    def __post_init__(self) -> None:
        self._check_identities()

    def validate(self, shape: Optional[ModelShape] = None) -> "ParallelPlan":
        """Check the plan (and its fit to ``shape`` when given); raise :class:`PlanError`."""
        self._check_identities()
        return self.check_shape(shape) if shape is not None else self

    def _check_identities(self) -> None:
        """The plan's own checks (what construction runs): known strategy, positive integers, the identities."""
        if self.strategy not in STRATEGIES:
            raise PlanError(f"unknown strategy {self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        for name in ("dp", "tp", "pp", "micro_batch", "grad_accum", "global_batch", "nodes",
                     "gpus_per_node", "world_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanError(f"{name} must be a positive integer, got {value!r}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise PlanError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if self.pp > 1 and self.zero_stage >= 2:
            raise PlanError(_zero_with_pp_message(self.zero_stage, self.pp))
        if self.dp * self.tp * self.pp != self.world_size:
            raise PlanError(_world_message(self.dp, self.tp, self.pp, self.world_size))
        if self.nodes * self.gpus_per_node != self.world_size:
            raise PlanError(
                f"nodes {self.nodes} × gpus_per_node {self.gpus_per_node} = {self.nodes * self.gpus_per_node} "
                f"≠ world size {self.world_size}: launch {self.nodes * self.gpus_per_node} processes or "
                f"change parallel.nodes/gpus_per_node"
            )
        if self.micro_batch * self.grad_accum * self.dp != self.global_batch:
            raise PlanError(
                f"global_batch {self.global_batch} ≠ micro_batch {self.micro_batch} × grad_accum "
                f"{self.grad_accum} × dp {self.dp} = {self.micro_batch * self.grad_accum * self.dp}: "
                f"set global_batch to {self.micro_batch * self.grad_accum * self.dp} or change grad_accum"
            )

    def check_shape(self, shape: ModelShape) -> "ParallelPlan":
        """The plan's fit to ``shape`` (a constructed plan has passed its own checks: ``validate(shape)`` without
        repeating them); raise :class:`PlanError`."""
        if shape.n_layers % self.pp:
            raise PlanError(
                f"pp {self.pp} does not divide n_layers {shape.n_layers} (stages would hold unequal "
                f"layer counts and leave GPUs idle): set parallel.pp to one of {_divisors(shape.n_layers)}"
            )
        _check_tp_divides(self.tp, shape)
        return self

    def to_dict(self) -> dict:
        return asdict(self)


def _check_tp_divides(tp: int, shape: ModelShape) -> None:
    """tp must split query heads, key/value heads (grouped-query attention) and the MLP width evenly."""
    for what, n in (("n_heads", shape.n_heads), ("n_kv_heads", shape.n_kv_heads), ("ffn_dim", shape.ffn_dim)):
        if n % tp:
            common = math.gcd(shape.n_heads, shape.n_kv_heads, shape.ffn_dim)
            raise PlanError(
                f"tp {tp} does not divide {what} {n}"
                + (" (each tensor-parallel rank owns whole key/value heads)" if what == "n_kv_heads" else "")
                + f": set parallel.tp to one of {_divisors(common)}"
            )


def tokens_per_step(plan: ParallelPlan, shape: ModelShape) -> int:
    """Tokens per optimizer step = global_batch × seq_len."""
    return plan.global_batch * shape.seq_len


def _zero_with_pp_message(stage: int, pp: int) -> str:
    return (
        f"ZeRO-{stage} is incompatible with pipeline parallelism (pp {pp}): DeepSpeed's pipeline engine "
        f"supports ZeRO-0/1 only; use strategy '3d' (ZeRO-1 + TP + PP), or 'pp', or set pp: 1"
    )


def _world_message(dp: int, tp: int, pp: int, world: int) -> str:
    if world % (tp * pp) == 0:
        hint = f"set parallel.dp to {world // (tp * pp)} (= world size {world} ÷ (tp {tp} × pp {pp}))"
    else:
        hint = f"launch a multiple of tp {tp} × pp {pp} = {tp * pp} processes or change tp/pp"
    return f"dp {dp} × tp {tp} × pp {pp} = {dp * tp * pp} ≠ world size {world}: {hint}"


# --------------------------------------------------------------------------- hostfile


#: the largest hostfile read (100,000 hosts are ~1.5 MB); ``/dev/zero`` is refused, not read on
MAX_HOSTFILE_BYTES = 8 << 20
MAX_SLOTS = 65536


def _hostfile_lines(path: Path) -> list[str]:
    """The hostfile's lines, read with a size limit; not UTF-8 or a NUL: an error naming FILE:LINE
    (``trainledger.store.files.read_bounded``, the one reader of files users name)."""
    from trainledger.errors import LedgerInputError
    from trainledger.store.files import read_bounded

    try:
        return read_bounded(path, MAX_HOSTFILE_BYTES, "hostfile").splitlines()
    except LedgerInputError as exc:
        raise PlanError(str(exc)) from None


def parse_hostfile(path: str | Path) -> list[tuple[str, int]]:
    """Read a DeepSpeed hostfile: ``hostname slots=N`` per line, ``#`` comments (bounded, linear time)."""
    path = Path(path)
    hosts: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(_hostfile_lines(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("slots="):
            raise PlanError(f"hostfile {path} line {number}: expected 'hostname slots=N', got {line[:100]!r}")
        digits = parts[1][len("slots="):]
        if not digits.isdigit() or len(digits) > 6:
            raise PlanError(f"hostfile {path} line {number}: slots must be an integer, got {parts[1][:40]!r}")
        slots = int(digits)
        if not 1 <= slots <= MAX_SLOTS:
            raise PlanError(f"hostfile {path} line {number}: slots must be 1 to {MAX_SLOTS}")
        if parts[0] in seen:
            raise PlanError(f"hostfile {path} line {number}: host {parts[0][:100]!r} is listed twice "
                            f"(first on line {seen[parts[0]]})")
        seen[parts[0]] = number
        hosts.append((parts[0], slots))
    if not hosts:
        raise PlanError(f"hostfile {path} lists no hosts")
    return hosts


# --------------------------------------------------------------------------- DeepSpeed JSON in


def _get(d: Mapping, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, Mapping) or part not in d:
            return None
        d = d[part]
    return d


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower() == "auto"


def _ds_float(value: Any, path: str) -> float:
    """A number of a DeepSpeed JSON (a numeric string too, as DeepSpeed's own parsing allows); finite."""
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = float(value)
        except (OverflowError, ValueError):
            number = math.nan
        if math.isfinite(number):
            return number
    raise PlanError(f"DeepSpeed JSON {path} must be a finite number or \"auto\", got {value!r}"[:300])


def _ds_int(ds: Mapping, path: str) -> Optional[int]:
    value = _get(ds, path)
    if value is None or _is_auto(value):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PlanError(f"DeepSpeed JSON {path} must be a non-negative integer or \"auto\", got {value!r}")
    return value


def load_deepspeed_json(path: str | Path) -> dict:
    """Read a plain DeepSpeed JSON config file (bounded as a YAML config: ``read_bounded``, FILE:LINE errors)."""
    from trainledger.errors import LedgerInputError
    from trainledger.store.files import read_bounded
    from trainledger.trainer.config import MAX_CONFIG_BYTES

    path = Path(path)
    try:
        data = json.loads(read_bounded(path, MAX_CONFIG_BYTES, "DeepSpeed config"))
    except LedgerInputError as exc:
        raise PlanError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise PlanError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a DeepSpeed config must be a JSON object")
    return data


def apply_deepspeed_json(config: TrainConfig, ds: Mapping, infer_strategy: bool = False) -> TrainConfig:
    """Fold a plain DeepSpeed JSON into ``config``.

    Batch sizes, ZeRO stage, ``pipeline.stages``, optimizer params and
    ``gradient_clipping`` given in the JSON win over the YAML's. With
    ``infer_strategy`` (no YAML given) the strategy follows the JSON's ZeRO
    stage and pipeline stages; otherwise a disagreeing ZeRO stage is an error.
    The JSON itself is kept in ``config.deepspeed`` and merged over the
    generated DeepSpeed config by :func:`deepspeed_config`.
    """
    ds = copy.deepcopy(dict(ds))
    if _get(ds, "tensor_parallel.autotp_size") not in (None, 0, 1):
        raise PlanError(
            "DeepSpeed JSON tensor_parallel.autotp_size: trainledger uses its own Megatron-style TP; "
            "set parallel.tp in a YAML config (strategy 'tp' or '3d') and drop the key"
        )
    par = config.parallel
    updates = _parallel_updates(ds, par, infer_strategy)
    opt_updates = _optimizer_updates(ds)
    try:
        return replace(
            config,
            parallel=replace(par, **updates),
            optimizer=replace(config.optimizer, **opt_updates),
            deepspeed=ds,
        )
    except ConfigError as exc:
        raise PlanError(str(exc)) from None


def _parallel_updates(ds: Mapping, par: ParallelConfig, infer_strategy: bool) -> dict[str, Any]:
    """The ``parallel`` fields the JSON sets: pp, strategy or ZeRO stage, and batch sizes."""
    stage = _ds_int(ds, "zero_optimization.stage")
    pp = _ds_int(ds, "pipeline.stages")
    updates: dict[str, Any] = {}
    if pp is not None:
        updates["pp"] = pp
    if stage is not None and stage > 3:
        raise PlanError(f"DeepSpeed JSON zero_optimization.stage must be 0–3, got {stage}")
    if infer_strategy:
        pipelined = (pp or par.pp or 1) > 1
        if pipelined:
            if stage is not None and stage >= 2:
                raise PlanError(_zero_with_pp_message(stage, pp or par.pp))
            updates["strategy"] = "pp"
            if stage is not None:
                updates["zero_stage"] = stage
        elif stage is not None:
            updates["strategy"] = ("dp", "zero1", "zero2", "zero3")[stage]
    elif stage is not None:
        implied = par.zero_stage if par.zero_stage is not None else STRATEGY_ZERO_STAGE[par.strategy]
        if stage != implied:
            if par.strategy in DATA_PARALLEL_ONLY:
                raise PlanError(
                    f"DeepSpeed JSON zero_optimization.stage {stage} disagrees with strategy "
                    f"'{par.strategy}' (ZeRO-{implied}): use strategy "
                    f"'{('dp', 'zero1', 'zero2', 'zero3')[stage]}' or drop the key"
                )
            updates["zero_stage"] = stage
    for key, field in (("train_micro_batch_size_per_gpu", "micro_batch"),
                       ("gradient_accumulation_steps", "grad_accum"),
                       ("train_batch_size", "global_batch")):
        value = _ds_int(ds, key)
        if value is not None:
            updates[field] = value
    return updates


def _optimizer_updates(ds: Mapping) -> dict[str, Any]:
    """The ``optimizer`` fields the JSON sets: lr, eps, weight decay, betas and the gradient clip."""
    opt_updates: dict[str, Any] = {}
    for section in ("optimizer", "optimizer.params", "zero_optimization", "pipeline"):
        value = _get(ds, section)
        if value is not None and not isinstance(value, Mapping):
            raise PlanError(f"DeepSpeed JSON {section} must be an object, got {value!r}"[:300])
    params = _get(ds, "optimizer.params") or {}
    for key in ("lr", "eps", "weight_decay"):
        if key in params and not _is_auto(params[key]):
            opt_updates[key] = _ds_float(params[key], f"optimizer.params.{key}")
    if "betas" in params and not _is_auto(params["betas"]):
        betas = params["betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise PlanError(f"DeepSpeed JSON optimizer.params.betas must be a list of 2 numbers, got {betas!r}"[:300])
        opt_updates["betas"] = tuple(_ds_float(b, "optimizer.params.betas") for b in betas)
    clip = ds.get("gradient_clipping")
    if clip is not None and not _is_auto(clip):
        opt_updates["grad_clip"] = _ds_float(clip, "gradient_clipping")
    return opt_updates


# --------------------------------------------------------------------------- resolution


def resolve_plan(
    config: TrainConfig | Mapping,
    world_size: Optional[int] = None,
    nodes: Optional[int] = None,
    gpus_per_node: Optional[int] = None,
    hostfile: Optional[str | Path] = None,
) -> ParallelPlan:
    """Resolve the config's ``parallel`` section into a validated :class:`ParallelPlan`.

    ``world_size``/``nodes``/``gpus_per_node`` come from the launcher
    environment when running, or from the command line for a dry run; when
    absent they follow from the config. Missing dims are derived: dp fills
    world ÷ (tp × pp); for strategies ``tp``/``pp`` the unset tp/pp does.
    """
    config = _as_config(config)
    _check_launch_counts(world_size, nodes, gpus_per_node)
    if config.deepspeed:
        config = apply_deepspeed_json(config, config.deepspeed)
    par = config.parallel
    strategy = par.strategy

    # Strategy ↔ dims.
    _check_strategy_dims(strategy, par)
    zero_stage = _strategy_zero_stage(strategy, par)
    tp = par.tp if par.tp is not None else (None if strategy in ("tp", "3d") else 1)
    pp = par.pp if par.pp is not None else (None if strategy in ("pp", "3d") else 1)

    # Hostfile and node layout.
    nodes = nodes if nodes is not None else par.nodes
    gpus_per_node = gpus_per_node if gpus_per_node is not None else par.gpus_per_node
    hostfile = hostfile if hostfile is not None else par.hostfile
    if hostfile is not None:
        nodes, gpus_per_node = _hostfile_layout(hostfile, nodes, gpus_per_node)
    if world_size is None and nodes is not None and gpus_per_node is not None:
        world_size = nodes * gpus_per_node

    # Fill the one free dimension.
    dp, tp, pp, world_size = _fill_dims(strategy, par.dp, tp, pp, world_size)
    _check_dims(strategy, dp, tp, pp, world_size)
    nodes, gpus_per_node = _fill_node_layout(world_size, nodes, gpus_per_node)

    # Batch arithmetic: global_batch = micro_batch × grad_accum × dp.
    grad_accum = _grad_accum(par.micro_batch, par.grad_accum, par.global_batch, dp)
    plan = ParallelPlan(
        strategy=strategy, dp=dp, tp=tp, pp=pp, zero_stage=zero_stage, micro_batch=par.micro_batch,
        grad_accum=grad_accum, global_batch=par.micro_batch * grad_accum * dp, nodes=nodes,
        gpus_per_node=gpus_per_node, world_size=world_size,
    )
    return plan.validate(config.shape)


def _as_config(config: TrainConfig | Mapping) -> TrainConfig:
    """A :class:`TrainConfig` from a config or a plain mapping; a bad mapping is a :class:`PlanError`."""
    if isinstance(config, Mapping):
        try:
            return config_from_dict(config)
        except ConfigError as exc:
            raise PlanError(str(exc)) from None
    return config


def _check_launch_counts(world_size: Optional[int], nodes: Optional[int], gpus_per_node: Optional[int]) -> None:
    """Check the launcher's (or command line's) world size, nodes and GPUs per node, where given."""
    for name, value in (("world size", world_size), ("nodes", nodes), ("gpus per node", gpus_per_node)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise PlanError(f"{name} must be a positive integer, got {value!r}")


def _check_strategy_dims(strategy: str, par: ParallelConfig) -> None:
    """Refuse pp, tp or a ZeRO stage that a data-parallel-only strategy does not have."""
    if strategy not in DATA_PARALLEL_ONLY:
        return
    if par.pp not in (None, 1):
        stage = STRATEGY_ZERO_STAGE[strategy]
        if stage >= 2:
            raise PlanError(_zero_with_pp_message(stage, par.pp))
        raise PlanError(
            f"strategy '{strategy}' does not pipeline (pp {par.pp}): use strategy 'pp' or '3d', or set pp: 1"
        )
    if par.tp not in (None, 1):
        raise PlanError(
            f"strategy '{strategy}' is data parallel only (tp {par.tp}): use strategy 'tp' or '3d', or set tp: 1"
        )
    if par.zero_stage is not None and par.zero_stage != STRATEGY_ZERO_STAGE[strategy]:
        raise PlanError(
            f"strategy '{strategy}' means ZeRO-{STRATEGY_ZERO_STAGE[strategy]} but zero_stage is "
            f"{par.zero_stage}: drop zero_stage or use strategy "
            f"'{('dp', 'zero1', 'zero2', 'zero3')[par.zero_stage] if par.zero_stage in (0, 1, 2, 3) else 'dp'}'"
        )


def _strategy_zero_stage(strategy: str, par: ParallelConfig) -> int:
    """The ZeRO stage: ``parallel.zero_stage`` or the strategy's; pp/tp/3d allow 0 or 1 only."""
    zero_stage = par.zero_stage if par.zero_stage is not None else STRATEGY_ZERO_STAGE[strategy]
    if strategy in ("pp", "tp", "3d") and zero_stage not in (0, 1):
        if strategy == "tp":
            raise PlanError(f"strategy 'tp' supports zero_stage 0 or 1, got {zero_stage}: use 0 or 1")
        raise PlanError(_zero_with_pp_message(zero_stage, par.pp or 2))
    return zero_stage


def _hostfile_layout(hostfile: str | Path, nodes: Optional[int], gpus_per_node: Optional[int]) -> tuple[int, int]:
    """(nodes, gpus_per_node) from the hostfile, checked against the values given."""
    hosts = parse_hostfile(hostfile)
    slots = {s for _, s in hosts}
    if len(slots) > 1:
        listing = ", ".join(f"{h}: {s}" for h, s in hosts)
        raise PlanError(f"hostfile {hostfile}: slots differ between hosts ({listing}); give every node the same slots")
    (hf_slots,) = slots
    if nodes is not None and nodes != len(hosts):
        raise PlanError(
            f"hostfile {hostfile} lists {len(hosts)} nodes but nodes is {nodes}: "
            f"set parallel.nodes: {len(hosts)} or edit the hostfile"
        )
    if gpus_per_node is not None and gpus_per_node != hf_slots:
        raise PlanError(
            f"hostfile {hostfile} gives slots={hf_slots} per node but gpus_per_node is {gpus_per_node}: "
            f"set parallel.gpus_per_node: {hf_slots} or edit the hostfile's slots"
        )
    return len(hosts), hf_slots


def _fill_dims(strategy: str, dp: Optional[int], tp: Optional[int], pp: Optional[int],
               world_size: Optional[int]) -> tuple[int, int, int, int]:
    """(dp, tp, pp, world size) with the one free dimension filled from the world size, or the world size from them."""
    if world_size is None:
        for name, v in (("tp", tp), ("pp", pp)):
            if v is None:
                raise PlanError(
                    f"strategy '{strategy}' needs parallel.{name} (or a world size, e.g. --nproc-per-node, to derive it)"
                )
        dp = dp or 1
        return dp, tp, pp, dp * tp * pp
    free = [name for name, v in (("tp", tp), ("pp", pp)) if v is None]
    if strategy == "3d" and len(free) == 2:
        raise PlanError("strategy '3d' needs parallel.tp and parallel.pp (dp follows from the world size)")
    known = (tp or 1) * (pp or 1)
    if free:
        rest = world_size // ((dp or 1) * known) if world_size % ((dp or 1) * known) == 0 else None
        if rest is None or rest < 1:
            raise PlanError(_world_message(dp or 1, tp or 1, pp or 1, world_size))
        if free == ["tp"]:
            tp = rest
        else:
            pp = rest
        dp = dp or 1
    elif dp is None:
        if world_size % (tp * pp):
            raise PlanError(_world_message(1, tp, pp, world_size))
        dp = world_size // (tp * pp)
    return dp, tp, pp, world_size


def _check_dims(strategy: str, dp: int, tp: int, pp: int, world_size: int) -> None:
    """Check that tp/pp strategies split the model and that dp × tp × pp is the world size."""
    if strategy in ("tp", "3d") and tp < 2:
        raise PlanError(f"strategy '{strategy}' needs tp ≥ 2, got {tp}: set parallel.tp or use strategy 'dp'")
    if strategy in ("pp", "3d") and pp < 2:
        raise PlanError(f"strategy '{strategy}' needs pp ≥ 2, got {pp}: set parallel.pp or use strategy 'dp'")
    if dp * tp * pp != world_size:
        raise PlanError(_world_message(dp, tp, pp, world_size))


def _fill_node_layout(world_size: int, nodes: Optional[int], gpus_per_node: Optional[int]) -> tuple[int, int]:
    """(nodes, gpus_per_node), the missing one from the world size (one node when neither is given)."""
    if nodes is None and gpus_per_node is None:
        return 1, world_size
    if gpus_per_node is None:
        if world_size % nodes:
            raise PlanError(f"world size {world_size} is not divisible by nodes {nodes}: every node needs the same GPU count")
        return nodes, world_size // nodes
    if nodes is None:
        if world_size % gpus_per_node:
            raise PlanError(
                f"world size {world_size} is not divisible by gpus_per_node {gpus_per_node}: "
                f"launch a multiple of {gpus_per_node} processes"
            )
        return world_size // gpus_per_node, gpus_per_node
    return nodes, gpus_per_node


def _grad_accum(micro: int, grad_accum: Optional[int], global_batch: Optional[int], dp: int) -> int:
    """Gradient accumulation steps, from global_batch = micro_batch × grad_accum × dp when it is given."""
    per_step = micro * dp
    if global_batch is None:
        return grad_accum if grad_accum is not None else 1
    if global_batch % per_step:
        multiples = f"{per_step} or {2 * per_step}"
        raise PlanError(
            f"global_batch {global_batch} is not a multiple of micro_batch {micro} × dp {dp} = {per_step}: "
            f"set global_batch to {multiples} (grad_accum = global_batch ÷ {per_step})"
        )
    derived = global_batch // per_step
    if grad_accum is not None and grad_accum != derived:
        raise PlanError(
            f"grad_accum {grad_accum} disagrees with global_batch {global_batch} ÷ (micro_batch {micro} "
            f"× dp {dp}) = {derived}: drop grad_accum or set it to {derived}"
        )
    return derived



# --------------------------------------------------------------------------- DeepSpeed JSON out


def resolve_precision(config: TrainConfig) -> str:
    """``auto`` → bf16 on a CUDA machine, fp32 elsewhere (torch imported only if installed)."""
    if config.precision != "auto":
        return config.precision
    from trainledger.trainer.hardware import cuda_available

    return "bf16" if cuda_available() else "fp32"


def trainer_clips_gradients(plan: ParallelPlan, precision: str) -> bool:
    """Whether the trainer, not DeepSpeed, applies the gradient-norm clip.

    DeepSpeed's fp32 ZeRO-0 path (``runtime.utils.clip_grad_norm_``) counts
    replicated parameters only on model-parallel rank 0 of the pipe × tensor
    group and counts tied pipeline weights twice, so its norm is wrong when
    pp > 1. The trainer computes the norm itself in that case.
    """
    return plan.zero_stage == 0 and plan.pp > 1 and precision == "fp32"


def deepspeed_config(plan: ParallelPlan, config: TrainConfig | Mapping) -> dict:
    """The DeepSpeed JSON for ``plan``: generated keys, then ``config.deepspeed`` merged over.

    ``"auto"`` values are resolved: batch keys from the plan; optimizer
    params and ``gradient_clipping`` from the optimizer section; ZeRO bucket
    sizes from d_model (reduce_bucket_size = d², stage3_prefetch_bucket_size
    = 0.9·d², stage3_param_persistence_threshold = 10·d, as Hugging Face
    does); ``fp16/bf16.enabled`` from precision; scheduler step counts from
    ``steps``/``warmup_steps``. Any other ``"auto"`` raises :class:`PlanError`.
    """
    if isinstance(config, Mapping):
        config = config_from_dict(config)
    if config.deepspeed:
        config = apply_deepspeed_json(config, config.deepspeed)
    precision = resolve_precision(config)
    clip = 0.0 if trainer_clips_gradients(plan, precision) else config.optimizer.grad_clip
    generated = _generated_deepspeed_config(plan, config, precision, clip)
    user = copy.deepcopy(config.deepspeed or {})
    user = _resolve_auto(user, "", _auto_values(plan, config, precision, clip))
    user.pop("pipeline", None)  # pipeline.stages became plan.pp; PipelineModule takes the rest as arguments
    if "gradient_clipping" in user and trainer_clips_gradients(plan, precision):
        user["gradient_clipping"] = 0.0
    merged = _deep_merge(generated, user)
    _check_merged_config(merged, plan)
    return merged


def _generated_deepspeed_config(plan: ParallelPlan, config: TrainConfig, precision: str, clip: float) -> dict:
    """The DeepSpeed JSON trainledger writes itself: batch sizes, clip, AdamW, ZeRO stage and precision."""
    opt = config.optimizer
    zero: dict[str, Any] = {"stage": plan.zero_stage}
    if plan.zero_stage >= 2:
        # Communication overlap needs CUDA streams; on CPU it only adds copies.
        zero.update({"overlap_comm": precision != "fp32", "contiguous_gradients": True})
    return {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": clip,
        "steps_per_print": 10**9,  # the trainer logs; keep DeepSpeed's own step log quiet
        "wall_clock_breakdown": False,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": opt.lr,
                "betas": list(opt.betas),
                "eps": opt.eps,
                "weight_decay": opt.weight_decay,
                # torch.optim.AdamW: no JIT-built fused kernel, same code on CPU and GPU.
                "torch_adam": True,
                "adam_w_mode": True,
            },
        },
        "zero_optimization": zero,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": precision == "fp16"},
    }


def _auto_values(plan: ParallelPlan, config: TrainConfig, precision: str, clip: float) -> dict[str, Any]:
    """What each ``"auto"`` key of a DeepSpeed JSON resolves to, by dotted path."""
    opt = config.optimizer
    d = config.shape.d_model
    return {
        "train_batch_size": plan.global_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": clip,
        "optimizer.params.lr": opt.lr,
        "optimizer.params.betas": list(opt.betas),
        "optimizer.params.eps": opt.eps,
        "optimizer.params.weight_decay": opt.weight_decay,
        "zero_optimization.reduce_bucket_size": d * d,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * d * d),
        "zero_optimization.stage3_param_persistence_threshold": 10 * d,
        "fp16.enabled": precision == "fp16",
        "bf16.enabled": precision == "bf16",
        "scheduler.params.total_num_steps": config.steps,
        "scheduler.params.warmup_num_steps": opt.warmup_steps,
        "scheduler.params.warmup_max_lr": opt.lr,
        "scheduler.params.warmup_min_lr": 0.0,
    }


def _resolve_auto(node: Any, prefix: str, values: Mapping[str, Any]) -> Any:
    """``node`` with every ``"auto"`` replaced from ``values`` by its dotted path; an unknown one raises."""
    if isinstance(node, Mapping):
        return {k: _resolve_auto(v, f"{prefix}.{k}" if prefix else k, values) for k, v in node.items()}
    if _is_auto(node):
        if prefix not in values:
            raise PlanError(
                f"DeepSpeed JSON key '{prefix}' is \"auto\", which trainledger cannot resolve: set a value"
            )
        return values[prefix]
    return node


def _check_merged_config(merged: Mapping, plan: ParallelPlan) -> None:
    """Check that the merged DeepSpeed JSON keeps the plan's batch sizes and ZeRO stage."""
    for key, expected in (("train_batch_size", plan.global_batch),
                          ("train_micro_batch_size_per_gpu", plan.micro_batch),
                          ("gradient_accumulation_steps", plan.grad_accum)):
        if merged[key] != expected:
            raise PlanError(f"DeepSpeed JSON {key} {merged[key]} disagrees with the plan's {expected}: drop it or set {expected}")
    if merged["zero_optimization"].get("stage") != plan.zero_stage:
        raise PlanError(
            f"DeepSpeed JSON zero_optimization.stage {merged['zero_optimization'].get('stage')} disagrees with "
            f"the plan's ZeRO-{plan.zero_stage}: drop it or use strategy matching stage"
        )


def _deep_merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def describe_plan(plan: ParallelPlan, config: TrainConfig) -> list[str]:
    """Human-readable lines for ``--dry-run``: plan, model, batch and FLOPs."""
    from trainledger.trainer.shapes import flops_per_token, param_count

    shape = config.shape
    precision = resolve_precision(config)
    clip = config.optimizer.grad_clip
    clip_note = " (applied by the trainer: see trainledger.trainer.parallel.trainer_clips_gradients)" if (
        clip and trainer_clips_gradients(plan, precision)) else ""
    return [
        f"strategy        {plan.strategy} (ZeRO-{plan.zero_stage})",
        f"world size      {plan.world_size} = dp {plan.dp} × tp {plan.tp} × pp {plan.pp}"
        f" = nodes {plan.nodes} × gpus_per_node {plan.gpus_per_node}",
        f"batch           global {plan.global_batch} = micro {plan.micro_batch} × grad_accum {plan.grad_accum}"
        f" × dp {plan.dp} sequences; {plan.global_batch * shape.seq_len} tokens/step",
        f"model           {shape.name} ({shape.arch}): L={shape.n_layers} d={shape.d_model} H={shape.n_heads} "
        f"KV={shape.n_kv_heads} F={shape.ffn_dim} T={shape.seq_len} V={shape.vocab_size}; "
        f"{param_count(shape):,} params; {flops_per_token(shape):,} FLOPs/token",
        f"per stage       {shape.n_layers // plan.pp} layers; {shape.n_heads // plan.tp} query and "
        f"{shape.n_kv_heads // plan.tp} key/value heads per TP rank",
        _memory_line(plan, config, precision),
        f"steps           {config.steps}; lr {config.optimizer.lr:g}; precision {precision}; grad_clip {clip:g}{clip_note}",
    ]


def _memory_line(plan: ParallelPlan, config: TrainConfig, precision: str) -> str:
    """The planner's predicted memory per GPU of this plan (docs/PLANNER.md)."""
    from trainledger.trainer.plan.memory import GIB, memory_per_gpu

    mem = memory_per_gpu(config.shape, dp=plan.dp, tp=plan.tp, pp=plan.pp, zero_stage=plan.zero_stage,
                         micro_batch=plan.micro_batch, micro_batches=plan.grad_accum,
                         recompute="full" if config.model.activation_checkpointing else "none",
                         precision=precision if precision != "auto" else "bf16")
    return (f"memory/GPU      predicted {mem.total / GIB:,.2f} GiB = model states {mem.states.total / GIB:,.2f} "
            f"+ activations {mem.activations.total / GIB:,.2f} + allowance {mem.allowance / GIB:,.2f} "
            f"({precision}, fullest stage {mem.stage})")

