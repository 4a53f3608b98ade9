"""Typer commands for the ledger CLI: ``trainledger data prepare`` and ``trainledger train``.

Registered by ``ledger/cli.py``::

    app.add_typer(data_app, name="data")
    app.command("train")(train_command)

Importing this module needs no torch; training itself runs in a child
process (``python -m trainledger.trainer.train``, or torchrun for several ranks) started
with an argument list. Bad input prints one line to stderr and exits 2.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer
from trainledger.trainer.config import ConfigError
from trainledger.trainer.parallel import PlanError, resolve_plan

data_app = typer.Typer(
    help="Prepare training data: text files → WebDataset token shards (byte-level tokenizer, no downloads).",
    no_args_is_help=True,
)


def _fail(message: str) -> None:
    typer.echo(f"error: {' '.join(message.splitlines())}", err=True)  # one line, even for a path with a newline
    raise typer.Exit(2)


@data_app.command("prepare")
def prepare(
    src: Annotated[List[Path], typer.Argument(help="Text files, or directories searched for *.txt.", show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Output directory for shard-NNNNNN.tar + index.json; must be empty or absent.", show_default=False)],
    shard_size: Annotated[int, typer.Option("--shard-size", help="Samples per shard (a sample is seq_len + 1 tokens, 2 bytes each).")] = 256,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Context length; must equal the model's seq_len (tiny: 128).")] = 128,
    json_out: Annotated[bool, typer.Option("--json", help="Print the shard index as JSON.")] = False,
) -> None:
    """Tokenize text files byte-level into WebDataset tar shards for `trainledger train`."""
    from trainledger.trainer.data import DataError, prepare_shards

    try:
        index = prepare_shards(src, out, seq_len=seq_len, shard_size=shard_size)
    except DataError as exc:
        _fail(str(exc))
    if json_out:
        typer.echo(json.dumps(index, indent=2))
    else:
        typer.echo(
            f"wrote {index['samples']} samples of {seq_len} + 1 tokens ({index['tokens']} tokens from "
            f"{len(index['sources'])} files) into {len(index['shards'])} shards in {out}"
        )


def train_command(
    config: Annotated[Path, typer.Argument(help="Trainer YAML config (see trainer/configs/README.md).", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the resolved plan and the DeepSpeed JSON; start nothing.")] = False,
    nproc_per_node: Annotated[Optional[int], typer.Option("--nproc-per-node", help="Processes per node (GPUs per node); default: what the config's dp × tp × pp needs.")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Override the config's optimizer steps.")] = None,
    deepspeed_config: Annotated[Optional[Path], typer.Option("--deepspeed-config", help="Plain DeepSpeed JSON merged over the config (its keys win).")] = None,
    results_json: Annotated[Optional[Path], typer.Option("--results-json", help="Write the run's results (steps, tokens/s, MFU, losses, …) here.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="With --dry-run: print plan and DeepSpeed JSON as one JSON object.")] = False,
    track: Annotated[bool, typer.Option("--track/--no-track", help="Record the run in the ledger (default), or train untracked.")] = True,
    node_type: Annotated[Optional[str], typer.Option("--node-type", help="Node type the tracked run is costed as (default: $TRAINLEDGER_NODE_TYPE; none: recorded, not costed).")] = None,
    project: Annotated[Optional[str], typer.Option("--project", help="Project of the tracked run.")] = None,
    db: Annotated[Optional[str], typer.Option("--db", help="Ledger URL for the tracked run (default: $TRAINLEDGER_DB_URL, else the embedded SQLite file).", show_default=False)] = None,
) -> None:
    """Train the bundled GPT with DeepSpeed on this machine (strategies dp, zero1-3, pp, tp, 3d).

    The run is tracked in the ledger unless --no-track (use `trainledger launch`
    for detached runs, other launchers and cancelling). Several ranks are started with torchrun; for several nodes run
    `python -m trainledger.trainer.train` under torchrun or the DeepSpeed launcher on each
    node (commands in `python -m trainledger.trainer.train --help`).
    """
    from trainledger.trainer.train import dry_run_report, load_run_config

    if nproc_per_node is not None and nproc_per_node < 1:
        _fail(f"--nproc-per-node must be ≥ 1, got {nproc_per_node}")
    try:
        cfg = load_run_config(config, deepspeed_config, steps)
        # --nproc-per-node is per node; a config without nodes/hostfile describes this one machine.
        single_node = cfg.parallel.nodes is None and cfg.parallel.hostfile is None
        plan = resolve_plan(cfg, nodes=1 if (nproc_per_node and single_node) else None,
                            gpus_per_node=nproc_per_node)
        report = dry_run_report(cfg, plan)
    except (ConfigError, PlanError) as exc:
        _fail(str(exc))
    if dry_run:
        if json_out:
            typer.echo(json.dumps({"plan": report["plan"], "deepspeed": report["deepspeed"]}, indent=2))
        else:
            typer.echo("\n".join(report["summary"]))
            typer.echo(json.dumps(report["deepspeed"], indent=2))
        return
    if plan.nodes > 1:
        _fail(f"the plan spans {plan.nodes} nodes: start `python -m trainledger.trainer.train` on each node with torchrun "
              f"or the DeepSpeed launcher (see its --help)")
    missing = [m for m in ("torch", "deepspeed", "webdataset") if importlib.util.find_spec(m) is None]
    if missing:
        _fail(f"training needs {', '.join(missing)}: pip install 'trainledger[train]'")
    args = ["--config", str(config)]
    if deepspeed_config is not None:
        args += ["--deepspeed_config", str(deepspeed_config)]
    if steps is not None:
        args += ["--steps", str(steps)]
    if results_json is not None:
        args += ["--results-json", str(results_json)]
    env = dict(os.environ)
    if track:
        from trainledger.store.db import resolve_url
        from trainledger.store.defaults import default_node_type

        node_type = node_type or default_node_type()
        args += ["--track", *(["--node-type", node_type] if node_type else []), "--launcher", "local"]
        if project:
            args += ["--project", project]
        env["TRAINLEDGER_DB_URL"] = resolve_url(db)  # via the environment: never in argv
    if plan.world_size == 1:
        cmd = [sys.executable, "-m", "trainledger.trainer.train", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", str(plan.world_size), "-m", "trainledger.trainer.train", *args]
    rc = subprocess.call(cmd, env=env)
    if rc:
        raise typer.Exit(rc)
