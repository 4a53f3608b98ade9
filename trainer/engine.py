"""The training loop: a :class:`Trainer` class with callbacks, returning a :class:`TrainResult`.

The loop only calls the other modules: the plan (``parallel``), the grid and
process groups (``distributed``), data (``data``), the model (``model`` or
``pipeline``), DeepSpeed's engine, and the communication timer (``comm``).

Hooks: pass objects with any of ``on_start(info)``, ``on_step(step,
metrics)``, ``on_end(result)``, ``on_error(exc)`` (see :class:`Callback`).
They are called on every rank (``info["rank"]`` says which); ``on_step``
gets plain Python numbers that the loop computes anyway, so a hook adds no
device synchronisation. An exception in the loop reaches ``on_error`` and
is re-raised.

Per step, with G = global batch (sequences) and T = seq_len:
  loss        mean next-token cross-entropy over the step's G·T targets
              (averaged over micro-batches and data-parallel ranks)
  step time   wall clock from the step's first micro-batch to its loss on the host
  data wait   the part of it blocked on the next batch (``TimedBatches``)
  busy        the step less its time in communication calls: a rank the others wait for is busy longer
  tokens      G·T per step

Test-only knobs: ``TRAINLEDGER_TEST_DATA_DELAY_S`` (every batch that much slower, ``trainledger.trainer.data``) and
``TRAINLEDGER_TEST_SLOW_RANK=RANK:SECONDS`` (that rank sleeps SECONDS inside each step: a straggler).
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from trainledger.trainer.config import TrainConfig
from trainledger.trainer.metrics import TrainResult, percentile
from trainledger.trainer.parallel import (
    ParallelPlan,
    deepspeed_config,
    resolve_plan,
    resolve_precision,
    trainer_clips_gradients,
)
from trainledger.trainer.shapes import flops_per_token, param_count

#: a callback with ``on_rank_steps`` gets every rank's step figures this often (one all-gather per N steps)
RANK_STEPS_EVERY = 10
SLOW_RANK_ENV = "TRAINLEDGER_TEST_SLOW_RANK"


def slow_rank(value: Optional[str], rank: int) -> float:
    """Seconds this rank sleeps in each step under ``TRAINLEDGER_TEST_SLOW_RANK=RANK:SECONDS`` (0 when unset or
    another rank); a malformed value is an error naming the variable."""
    if not value:
        return 0.0
    from trainledger.trainer.data import knob_seconds

    who, sep, secs = value.partition(":")
    if not sep or not who.strip().isdigit():
        raise ValueError(f"{SLOW_RANK_ENV}: expected RANK:SECONDS, got {value!r}")
    return knob_seconds(SLOW_RANK_ENV, secs) if int(who) == rank else 0.0


if TYPE_CHECKING:
    from trainledger.trainer.comm import CommTimer
    from trainledger.trainer.data import SampleStream
    from trainledger.trainer.distributed import Grid, LaunchEnv


class Callback:
    """Base class for training hooks; override what you need."""

    def on_start(self, info: dict) -> None:
        """Once, after setup, before the first step. ``info``: rank, plan, shape, hostnames, …"""

    def on_step(self, step: int, metrics: dict) -> None:
        """After each optimizer step (0-based). ``metrics``: loss, lr, step_time_s, comm_time_s, tokens."""

    def on_checkpoint(self, step: int, path: str) -> None:
        """After a checkpoint of the first ``step`` steps was saved under ``path`` (``checkpoint.every``)."""

    def on_rank_steps(self, first_step: int, figures: list) -> None:
        """Every rank's figures of the steps since the last call (a callback that has this hook makes the loop
        gather them every :data:`RANK_STEPS_EVERY` steps, before a checkpoint and after the last step):
        ``figures[i][r] = (data_wait_s, busy_s)`` of step ``first_step + i`` on rank ``r``; ``busy_s`` (the step
        less its time in communication calls, None without ``comm_timing``) is what the others waited for."""

    def on_end(self, result: TrainResult) -> None:
        """Once, after the last step."""

    def on_error(self, exc: BaseException) -> None:
        """When the run fails; the exception is re-raised afterwards."""


def lr_factor(step: int, total_steps: int, warmup_steps: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier for optimizer step ``step`` (0-based).

    warm-up (step < W):  (step + 1) / W
    cosine  (step ≥ W):  r + (1 − r) · ½ · (1 + cos(π · (step − W) / max(1, S − W)))

    with W warm-up steps, S total steps, r = min_lr_ratio.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _gradient_clip_hook(mpu, tp_rank: int, max_norm: float):
    """An optimizer pre-step hook clipping the global gradient norm across pipeline and tensor ranks.

    ‖g‖² = Σ over the pipe × tensor group of each rank's Σ‖gᵢ‖², counting
    tensor-parallel shards on every rank, replicated parameters on tp rank 0
    only, and a tied pipeline weight on its first stage only.
    """
    import torch
    from deepspeed import comm as dist

    def hook(optimizer, args, kwargs):
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        counted = [
            p.grad for group in optimizer.param_groups for p in group["params"]
            if p.grad is not None and not getattr(p, "ds_pipe_replicated", False)
            and (tp_rank == 0 or getattr(p, "tensor_model_parallel", False))
        ]
        device = grads[0].device if grads else "cpu"
        sq = torch.zeros((), dtype=torch.float32, device=device)
        for g in counted:
            sq += g.detach().float().pow(2).sum()
        dist.all_reduce(sq, group=mpu.get_model_parallel_group())
        coef = max_norm / (float(sq.sqrt()) + 1e-6)
        if coef < 1.0:
            for g in grads:
                g.mul_(coef)

    return hook


class Trainer:
    """Trains the decoder (GPT or Llama) with one DeepSpeed strategy for ``config.steps`` steps.

    ``plan`` defaults to ``resolve_plan(config)`` against the launcher's world
    size. Call :meth:`run` once on every rank.
    """

    def __init__(self, config: TrainConfig, plan: Optional[ParallelPlan] = None,
                 callbacks: Iterable[Any] = (), local_rank: Optional[int] = None):
        self.config = config
        self.plan = plan
        self.callbacks = list(callbacks)
        self.local_rank_arg = local_rank
        self.rank = 0

    def _emit(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            fn = getattr(cb, hook, None)
            if fn is not None:
                fn(*args)

    def _log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[trainer] {msg}", flush=True)

    def run(self) -> TrainResult:
        self._engine = self._timer = None
        try:
            result = self._run()
            self._emit("on_end", result)
            return result
        except BaseException as exc:
            self._emit("on_error", exc)
            raise
        finally:
            if self._timer is not None:
                self._timer.uninstall()
            if self._engine is not None and hasattr(self._engine, "destroy"):
                self._engine.destroy()
            self._engine = self._timer = None

    # The steps run in this order on every rank. Those whose docstring starts "Collective:" make calls
    # that every rank must reach in the same order; keeping them in one sequence here keeps that order
    # plain to read.
    def _run(self) -> TrainResult:
        """Set up, train for ``config.steps`` steps, and gather the result."""
        from trainledger.trainer.comm import CommTimer
        from trainledger.trainer.distributed import launch_env

        config = self.config
        shape = config.shape
        env = launch_env(self.local_rank_arg)
        self.rank = env.rank
        plan = self._resolve_plan(env)
        wall_start = time.perf_counter()
        device, grid, hostnames = self._init_process_groups(env, plan)
        shard_dir = self._stage_data(env)
        stream = self._open_stream(shard_dir, plan, grid)
        model = self._build_model(plan, grid)
        engine, ds_config, precision = self._build_engine(model, plan, grid)
        timer = CommTimer(synchronize_cuda=device.startswith("cuda")).install() if config.comm_timing else None
        self._timer = timer

        tokens_per_step = plan.global_batch * shape.seq_len
        info = self._start_info(env, plan, device, hostnames, ds_config, precision, stream, shard_dir)
        self._emit("on_start", info)
        self._log(f"{plan.strategy}: dp {plan.dp} × tp {plan.tp} × pp {plan.pp} on {info['nodes']} node(s), "
                  f"{shape.name} {param_count(shape):,} params, {tokens_per_step} tokens/step, {precision} on {device}")

        losses, step_times, comm_seconds = self._train_loop(engine, stream, plan, grid, device, timer)
        rank_stats, memory_kind = self._gather_rank_stats(env, device, comm_seconds, step_times)
        result = self._result(
            env=env, plan=plan, hostnames=hostnames, backend=info["backend"], device=device, precision=precision,
            stream=stream, timer=timer, losses=losses, step_times=step_times, rank_stats=rank_stats,
            memory_kind=memory_kind, wall_start=wall_start,
        )
        self._log(f"done: {result.steps} steps, loss {losses[0]:.4f} → {losses[-1]:.4f}, "
                  f"median step {result.step_time_median_s * 1000:.0f} ms, {result.tokens_per_s:,.0f} tok/s, "
                  f"comm share {result.comm_share if result.comm_share is not None else 'n/a'}, "
                  f"MFU {result.mfu if result.mfu is not None else 'n/a (CPU or unknown GPU)'}")
        return result

    def _resolve_plan(self, env: LaunchEnv) -> ParallelPlan:
        """The given plan, or one resolved against the launcher; checked against the shape and world size."""
        plan = self.plan or resolve_plan(self.config, world_size=env.world_size, nodes=env.nodes)
        plan.validate(self.config.shape)
        if plan.world_size != env.world_size:
            raise ValueError(f"the plan needs world size {plan.world_size} but {env.world_size} processes were launched")
        return plan

    def _init_process_groups(self, env: LaunchEnv, plan: ParallelPlan) -> tuple[str, Grid, list[str]]:
        """Collective: start the process group, build the rank grid, and gather every rank's hostname."""
        import torch
        from deepspeed import comm as dist
        from trainledger.trainer.distributed import build_grid, hostname, init_distributed

        device = init_distributed(env)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(device)
        grid = build_grid(plan)
        hostnames: list[str] = [None] * env.world_size  # type: ignore[list-item]
        dist.all_gather_object(hostnames, hostname())
        return device, grid, hostnames

    def _local_shards(self, cache_dir: str | Path) -> Path:
        """The node-local shard directory: ``data.shards`` staged to the cache, or the corpus prepared in it."""
        from trainledger.trainer import data as data_mod

        config = self.config
        if config.data.shards:
            return data_mod.stage_to_cache(config.data.shards, cache_dir)
        corpus = config.data.corpus or data_mod.shipped_corpus_dir()
        return data_mod.prepare_corpus_cached([corpus], cache_dir, config.shape.seq_len, config.data.shard_size)

    def _stage_data(self, env: LaunchEnv) -> Path:
        """Collective: one process per node prepares or copies the shards to the node-local cache; the rest wait."""
        from deepspeed import comm as dist
        from trainledger.trainer import data as data_mod

        cache_dir = self.config.data.cache_dir or data_mod.default_cache_dir()
        problem = None
        if env.local_rank == 0:
            try:
                self._local_shards(cache_dir)
            except data_mod.DataError as exc:
                problem = str(exc)
        problems = [None] * env.world_size
        dist.all_gather_object(problems, problem)  # doubles as the barrier; every rank learns of a failure
        if any(problems):
            raise data_mod.DataError(next(p for p in problems if p))
        return self._local_shards(cache_dir)  # already there: returns the node-local path

    def _open_stream(self, shard_dir: Path, plan: ParallelPlan, grid: Grid) -> SampleStream:
        """This data-parallel rank's sample stream; the shards' seq_len must be the model's."""
        from trainledger.trainer import data as data_mod

        config = self.config
        shape = config.shape
        stream = data_mod.SampleStream(shard_dir, dp_rank=grid.dp_rank, dp_size=plan.dp,
                                       micro_batch=plan.micro_batch, grad_accum=plan.grad_accum, seed=config.seed)
        if stream.seq_len != shape.seq_len:
            raise data_mod.DataError(
                f"shards in {config.data.shards} were prepared with seq_len {stream.seq_len} but the model uses "
                f"{shape.seq_len}: re-run `trainledger data prepare --seq-len {shape.seq_len}` or set model.seq_len"
            )
        return stream

    def _build_model(self, plan: ParallelPlan, grid: Grid):
        """The decoder (GPT or Llama), as a pipeline module when pp > 1, with tensor-parallel layers when tp > 1."""
        config = self.config
        tp = grid.tp if plan.tp > 1 else None
        if plan.pp > 1:
            from trainledger.trainer.pipeline import build_pipeline_module

            return build_pipeline_module(config.shape, config.seed, grid.topology, tp,
                                         config.model.activation_checkpointing)
        from trainledger.trainer.model import build_model

        return build_model(config.shape, seed=config.seed, tp=tp,
                           activation_checkpointing=config.model.activation_checkpointing)

    def _build_engine(self, model, plan: ParallelPlan, grid: Grid) -> tuple[Any, dict, str]:
        """Collective: DeepSpeed's engine around ``model``, with AdamW, the LR schedule and the gradient clip."""
        import deepspeed
        import torch
        from trainledger.trainer.model import optimizer_groups

        config = self.config
        ds_config = deepspeed_config(plan, config)
        precision = resolve_precision(config)
        opt = config.optimizer
        scheduler = None
        if "scheduler" not in ds_config:
            def scheduler(optimizer):
                return torch.optim.lr_scheduler.LambdaLR(
                    optimizer, lambda s: lr_factor(s, config.steps, opt.warmup_steps, opt.min_lr_ratio))
        engine, _, _, _ = deepspeed.initialize(
            model=model,
            model_parameters=optimizer_groups(model, opt.weight_decay),
            config=ds_config,
            mpu=None if plan.pp > 1 else grid.mpu,
            lr_scheduler=scheduler,
        )
        self._engine = engine
        if opt.grad_clip > 0 and trainer_clips_gradients(plan, precision):
            engine.basic_optimizer.register_step_pre_hook(_gradient_clip_hook(grid.mpu, grid.tp.rank, opt.grad_clip))
        return engine, ds_config, precision

    def _start_info(self, env: LaunchEnv, plan: ParallelPlan, device: str, hostnames: list[str], ds_config: dict,
                    precision: str, stream: SampleStream, shard_dir: Path) -> dict:
        """What ``on_start`` hooks get: ranks, hosts, plan, shape, DeepSpeed config, device and data."""
        import torch

        config = self.config
        shape = config.shape
        return {
            "rank": env.rank, "local_rank": env.local_rank, "world_size": env.world_size,
            "hostname": hostnames[env.rank], "hostnames": hostnames, "nodes": len(set(hostnames)),
            "plan": plan.to_dict(), "shape": shape.to_dict(), "params": param_count(shape),
            "flops_per_token": flops_per_token(shape), "deepspeed_config": ds_config,
            "device": device, "backend": torch.distributed.get_backend(),
            "precision": precision, "steps": config.steps, "tokens_per_step": plan.global_batch * shape.seq_len,
            "samples_per_epoch": stream.samples_per_epoch, "shard_dir": str(shard_dir),
        }

    def _train_loop(self, engine, stream: SampleStream, plan: ParallelPlan, grid: Grid, device: str,
                    timer: Optional[CommTimer]) -> tuple[list[float], list[float], float]:
        """Collective: run ``config.steps`` optimizer steps; return losses, step times and communication seconds."""
        import os

        from trainledger.trainer.data import TimedBatches

        config = self.config
        tokens_per_step = plan.global_batch * config.shape.seq_len
        batches = TimedBatches(stream.micro_batches(device))
        sleep_s = slow_rank(os.environ.get(SLOW_RANK_ENV), self.rank)
        dp_group = grid.mpu.get_data_parallel_group()
        losses: list[float] = []
        step_times: list[float] = []
        comm_seconds = 0.0
        # the same callbacks on every rank, so every rank gathers or none does
        gather = any(getattr(type(cb), "on_rank_steps", Callback.on_rank_steps) is not Callback.on_rank_steps
                     for cb in self.callbacks)
        pending: list[tuple] = []
        engine.train()
        for step in range(config.steps):
            lr = float(engine.get_lr()[0])
            comm_before = timer.seconds if timer else 0.0
            waited_before = batches.waited
            start = time.perf_counter()
            if sleep_s:
                time.sleep(sleep_s)
            loss = self._train_step(engine, batches, plan, dp_group)
            loss_value = float(loss)  # the one host sync per step
            elapsed = time.perf_counter() - start
            comm = (timer.seconds - comm_before) if timer else 0.0
            comm_seconds += comm
            losses.append(loss_value)
            step_times.append(elapsed)
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"loss became {loss_value} at step {step}: lower optimizer.lr or check the data")
            data_wait = batches.waited - waited_before
            metrics = {"loss": loss_value, "lr": lr, "step_time_s": elapsed, "data_wait_s": data_wait,
                       "comm_time_s": comm if timer else None, "tokens": (step + 1) * tokens_per_step}
            self._emit("on_step", step, metrics)
            if gather:
                pending.append((data_wait, max(0.0, elapsed - comm) if timer else None))
                self._maybe_gather_rank_steps(step, pending)
            self._maybe_checkpoint(engine, step + 1)
            if step % config.log_every == 0 or step == config.steps - 1:
                self._log(f"step {step + 1}/{config.steps} loss {loss_value:.4f} lr {lr:.2e} "
                          f"{elapsed * 1000:.0f} ms {tokens_per_step / elapsed:,.0f} tok/s")
        return losses, step_times, comm_seconds

    def _maybe_gather_rank_steps(self, step: int, pending: list[tuple]) -> None:
        """Collective: every :data:`RANK_STEPS_EVERY` steps, before a checkpoint and after the last step, all-gather
        every rank's (data wait, busy) of the steps since the last gather and hand them to ``on_rank_steps``."""
        from deepspeed import comm as dist

        ckpt, done = self.config.checkpoint, step + 1
        due = (done % RANK_STEPS_EVERY == 0 or done == self.config.steps
               or bool(ckpt.every and ckpt.dir and done % ckpt.every == 0))
        if not due or not pending:
            return
        ranks: list = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, list(pending))
        first = done - len(pending)
        pending.clear()
        self._emit("on_rank_steps", first, [list(per_step) for per_step in zip(*ranks)])

    def _maybe_checkpoint(self, engine, done: int) -> None:
        """Collective: every ``checkpoint.every`` steps, save the engine under ``checkpoint.dir/step<N>``
        (DeepSpeed's own format, every rank its shard) and tell the callbacks."""
        ckpt = self.config.checkpoint
        if not ckpt.every or not ckpt.dir or done % ckpt.every:
            return
        tag = f"step{done}"
        engine.save_checkpoint(ckpt.dir, tag=tag)
        self._log(f"checkpoint {ckpt.dir}/{tag}")
        self._emit("on_checkpoint", done, str(Path(ckpt.dir) / tag))

    def _train_step(self, engine, batches, plan: ParallelPlan, dp_group):
        """Collective: one optimizer step; the loss (on device) averaged over micro-batches and data-parallel ranks."""
        from deepspeed import comm as dist

        if plan.pp > 1:
            return engine.train_batch(data_iter=batches)
        total = None
        for _ in range(plan.grad_accum):
            x, y = next(batches)
            micro_loss = engine(x, y)
            engine.backward(micro_loss)
            engine.step()
            total = micro_loss.detach() if total is None else total + micro_loss.detach()
        loss = (total / plan.grad_accum).float()
        if plan.dp > 1:
            dist.all_reduce(loss, group=dp_group)
            loss = loss / plan.dp
        return loss

    def _gather_rank_stats(self, env: LaunchEnv, device: str, comm_seconds: float,
                           step_times: list[float]) -> tuple[list[tuple], str]:
        """Collective: every rank's (peak memory, communication seconds, step seconds), and the memory kind."""
        import torch
        from deepspeed import comm as dist

        if device.startswith("cuda"):
            peak = int(torch.cuda.max_memory_allocated(device))
            memory_kind = "cuda_max_allocated"
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
            memory_kind = "cpu_max_rss"
        rank_stats = [None] * env.world_size
        dist.all_gather_object(rank_stats, (peak, comm_seconds, sum(step_times)))
        return rank_stats, memory_kind

    def _result(self, *, env: LaunchEnv, plan: ParallelPlan, hostnames: list[str], backend: str, device: str,
                precision: str, stream: SampleStream, timer: Optional[CommTimer], losses: list[float],
                step_times: list[float], rank_stats: list[tuple], memory_kind: str, wall_start: float) -> TrainResult:
        """The run's :class:`TrainResult`: throughput, MFU, memory and communication share across ranks."""
        from trainledger.money.rates.costs import mfu
        from trainledger.trainer.hardware import device_name, resolve_peak_tflops

        config = self.config
        shape = config.shape
        tokens_per_step = plan.global_batch * shape.seq_len
        median = percentile(step_times, 50)
        tokens_per_s = tokens_per_step / median
        peak_tflops = resolve_peak_tflops(config.peak_tflops)
        comm_share = (
            sum(c / s for _, c, s in rank_stats) / len(rank_stats) if timer else None
        )
        consumed = config.steps * plan.global_batch
        return TrainResult(
            strategy=plan.strategy, plan=plan.to_dict(), shape=shape.to_dict(), params=param_count(shape),
            flops_per_token=flops_per_token(shape), world_size=env.world_size, nodes=len(set(hostnames)),
            hostnames=hostnames, backend=backend, device=device, precision=precision,
            steps=config.steps, tokens=config.steps * tokens_per_step, tokens_per_step=tokens_per_step,
            step_time_median_s=median, step_time_p95_s=percentile(step_times, 95), tokens_per_s=tokens_per_s,
            mfu=mfu(tokens_per_s, flops_per_token(shape), peak_tflops, env.world_size,
                    hardware=device_name() if device.startswith("cuda") else None), peak_tflops=peak_tflops,
            peak_memory_bytes=[int(p) for p, _, _ in rank_stats], memory_kind=memory_kind,
            comm_time_s=(sum(c for _, c, _ in rank_stats) / len(rank_stats)) if timer else None,
            comm_share=comm_share, losses=losses, final_loss=losses[-1],
            wall_time_s=time.perf_counter() - wall_start, samples_per_epoch=stream.samples_per_epoch,
            epochs=consumed / stream.samples_per_epoch, step_times_s=step_times,
        )
