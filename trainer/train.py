"""Train the GPT with DeepSpeed — one entry point for every strategy (dp, zero1-3, pp, tp, 3d).

Single process (CPU, or one GPU)::

    python -m trainledger.trainer.train --config trainer/configs/dp.yaml

One node, N processes (torchrun; CPU ranks use gloo, GPU ranks NCCL — no code change)::

    torchrun --standalone --nproc-per-node 2 -m trainledger.trainer.train --config trainer/configs/zero2.yaml
    torchrun --standalone --nproc-per-node 4 -m trainledger.trainer.train --config trainer/configs/3d.yaml

Several nodes with torchrun (run on every node, node_rank 0..nnodes-1)::

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 8 --master-addr node0 --master-port 29500 \\
        -m trainledger.trainer.train --config trainer/configs/3d.yaml

Several nodes with the DeepSpeed launcher (from node0; ``hostfile`` lines ``node0 slots=8``)::

    deepspeed --hostfile hostfile --num_nodes 2 --num_gpus 8 --module trainledger.trainer.train \\
        --config trainer/configs/3d.yaml

A plain DeepSpeed JSON instead of (or on top of) the YAML::

    torchrun --standalone --nproc-per-node 2 -m trainledger.trainer.train --deepspeed_config ds.json

Options: ``--steps N`` overrides the config, ``--results-json PATH`` makes
rank 0 write the :class:`~trainledger.trainer.metrics.TrainResult`, ``--dry-run`` prints
the resolved plan and DeepSpeed JSON and exits, ``--local_rank`` is accepted
from launchers that pass it. RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT come from the launcher; without them the run is
a single local process. ``TRAINLEDGER_HOSTNAME`` overrides the hostname a rank
reports (how tests make two "nodes" on one machine look distinct);
``TRAINLEDGER_CACHE_DIR`` sets the node-local shard cache. The YAML schema is
in ``trainer/config.py`` and ``trainer/configs/README.md``.

Every invalid setting is reported before any process group starts, as one
line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Optional

from trainledger.trainer.config import ConfigError, TrainConfig, load_config
from trainledger.trainer.parallel import (
    ParallelPlan,
    PlanError,
    apply_deepspeed_json,
    deepspeed_config,
    describe_plan,
    load_deepspeed_json,
    resolve_plan,
)


def load_run_config(config: Optional[str | Path] = None, deepspeed_json: Optional[str | Path] = None,
                    steps: Optional[int] = None) -> TrainConfig:
    """The run's config from a YAML file and/or a plain DeepSpeed JSON (JSON keys win)."""
    if config is None and deepspeed_json is None:
        raise ConfigError("give --config CONFIG.yaml and/or --deepspeed_config ds.json")
    cfg = load_config(config) if config is not None else TrainConfig()
    if deepspeed_json is not None:
        cfg = apply_deepspeed_json(cfg, load_deepspeed_json(deepspeed_json), infer_strategy=config is None)
    if steps is not None:
        if steps < 1:
            raise ConfigError(f"--steps must be ≥ 1, got {steps}")
        cfg = replace(cfg, steps=steps)
    return cfg


def dry_run_report(cfg: TrainConfig, plan: ParallelPlan) -> dict:
    """What ``--dry-run`` prints: the plan, readable lines, and the DeepSpeed JSON."""
    return {"plan": plan.to_dict(), "summary": describe_plan(plan, cfg), "deepspeed": deepspeed_config(plan, cfg)}


def write_json_atomic(path: str | Path, payload: dict) -> None:
    """The run's results, whole or not at all (``trainledger.store.files.write_output``; a file already there is replaced,
    a link there too, never followed)."""
    from trainledger.store.files import write_output

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, (json.dumps(payload, indent=2) + "\n").encode("utf-8"), force=True, flag="--results-json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainledger.trainer.train",
        description="Train the bundled GPT with DeepSpeed (dp, zero1, zero2, zero3, pp, tp, 3d).",
        epilog="Launch commands for one and several nodes: see `python -c 'import trainledger.trainer.train; "
               "help(trainledger.trainer.train)'` or trainer/configs/README.md.",
    )
    parser.add_argument("--config", type=Path, help="trainer YAML (model, data, parallel, optimizer, steps)")
    parser.add_argument("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config", type=Path,
                        help="plain DeepSpeed JSON; its batch/ZeRO/optimizer keys win over the YAML")
    parser.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None,
                        help="set by some launchers; LOCAL_RANK in the environment wins")
    parser.add_argument("--steps", type=int, default=None, help="override the number of optimizer steps")
    parser.add_argument("--results-json", "--results_json", dest="results_json", type=Path, default=None,
                        help="rank 0 writes the TrainResult here as JSON")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and DeepSpeed JSON, then exit")
    from trainledger.trainer.tracking import add_tracking_args

    add_tracking_args(parser)
    return parser


def main(argv: Optional[Iterable[str]] = None, callbacks: Iterable[object] = ()) -> int:
    """Entry point; returns the process exit status."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    from trainledger.trainer.distributed import launch_env

    try:
        from trainledger.trainer.tracking import check_tracking_args

        check_tracking_args(args)  # a run id names files: refused before anything starts
        cfg = load_run_config(args.config, args.deepspeed_config, args.steps)
        if args.dry_run:
            world = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None
            report = dry_run_report(cfg, resolve_plan(cfg, world_size=world))
            print("\n".join(report["summary"]))
            print(json.dumps(report["deepspeed"], indent=2))
            return 0
        env = launch_env(args.local_rank)
        plan = resolve_plan(cfg, world_size=env.world_size, nodes=env.nodes)
    except (ConfigError, PlanError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import logging

    from deepspeed.utils import logger as ds_logger
    from trainledger.trainer.data import DataError
    from trainledger.trainer.engine import Trainer

    ds_logger.setLevel(logging.WARNING)
    # Noise from DeepSpeed internals on CPU: its ZeRO all-gathers use a deprecated torch name, and its
    # pipeline p2p (broadcast-based on gloo) trips autograd's fallback warning. The pipeline's
    # gradients are checked against data parallelism in tests/trainer/test_trainer_parallel_runs.py.
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.* is deprecated")
    warnings.filterwarnings("ignore", message=r"c10d::broadcast_: an autograd kernel was not registered")
    from trainledger.errors import LedgerInputError
    from trainledger.trainer.tracking import tracker_from_args

    try:
        tracker = tracker_from_args(args, cfg.to_dict())
    except LedgerInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if tracker is not None:
        callbacks = [*callbacks, tracker]
    try:
        result = Trainer(cfg, plan, callbacks=callbacks, local_rank=args.local_rank).run()
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if env.rank == 0 and args.results_json is not None:
        write_json_atomic(args.results_json, result.to_dict())
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


#: The trainer runs eagerly: it never calls ``torch.compile``. DeepSpeed's ZeRO code imports its Muon optimizer on
#: the first gradient reduction, and that module decorates its kernels with ``torch.compile`` at import, which loads
#: TorchInductor: ~1.0-1.4 CPU-s on the start of every ZeRO-1/2/3 rank (docs/PERFORMANCE.md). With TorchDynamo off,
#: ``torch.compile`` returns the function as it is. A value the user set (``TORCHDYNAMO_DISABLE=0``) is kept.
EAGER_ENV = ("TORCHDYNAMO_DISABLE", "1")


def eager_by_default(environ: dict) -> None:
    """Turn TorchDynamo off in a rank's environment unless its user set it (see :data:`EAGER_ENV`)."""
    environ.setdefault(*EAGER_ENV)


def run_and_exit() -> None:
    """Run :func:`main` (eagerly: :func:`eager_by_default`) and leave without interpreter teardown.

    torch keeps gloo/TCPStore native threads alive after
    ``destroy_process_group()`` (DeepSpeed holds its groups for the process
    lifetime); their destruction during interpreter shutdown can hit
    ``std::terminate`` and turn a finished run into exit status −6. Results
    are written and callbacks have run before this point, so the process
    flushes its streams and exits directly.
    """
    from trainledger.process import tune_gc

    tune_gc()
    eager_by_default(os.environ)
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # noqa: BLE001 - report any failure, then exit non-zero
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
