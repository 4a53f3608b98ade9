"""``trainledger run [OPTIONS] -- COMMAND [ARGS...]``: record any training command in the ledger."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from ledger.cli.common import DbOpt, _click_errors, command
from ledger.errors import LedgerInputError

COMMAND_KEY = "trainledger.command"
USAGE = "trainledger run [OPTIONS] -- COMMAND [ARGS...]"


class DashDashCommand(TyperCommand):
    """Everything after the first ``--`` is the wrapped command, passed on untouched (never parsed as options)."""

    def collect_usage_pieces(self, ctx):
        return [*super().collect_usage_pieces(ctx), "-- COMMAND [ARGS]..."]

    def parse_args(self, ctx, args):
        if "--" not in args:
            if any(a in ("--help", "-h") for a in args):
                return super().parse_args(ctx, args)
            raise _click_errors.UsageError(f"missing `--` before the command: {USAGE}", ctx)
        i = args.index("--")
        ctx.meta[COMMAND_KEY] = list(args[i + 1:])
        return super().parse_args(ctx, list(args[:i]))


def _tags(values: Optional[list[str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key.strip():
            raise LedgerInputError(f"--tag: expected KEY=VALUE, got {v!r}")
        if len(key) > 100 or len(val) > 500:
            raise LedgerInputError(f"--tag: {key[:20]!r}… is too long (key ≤ 100, value ≤ 500 characters)")
        out[key.strip()] = val
    return out


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        raise LedgerInputError(f"${name}: expected a number of seconds, got {os.environ[name]!r}") from None


@command
def run_command(
    ctx: typer.Context,
    project: Annotated[Optional[str], typer.Option(help="Project the run is allocated to.")] = None,
    user: Annotated[Optional[str], typer.Option(help="Default: $USER.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (default: the script or module the command runs).")] = None,
    node_type: Annotated[str, typer.Option(help="Node type the run is costed as (`trainledger pricing list`).")] = "rtx4090-8x",
    offer: Annotated[Optional[str], typer.Option(help="Offer the node-hours are paid under (default: the node type's).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="KEY=VALUE recorded with the run (repeatable).")] = None,
    run_id: Annotated[Optional[str], typer.Option(help="Run id shared by every node's wrapper (default: from Slurm, the torchrun rendezvous id, or new).")] = None,
    resume_of: Annotated[Optional[str], typer.Option(help="Run this one restarts from a checkpoint of (a resume chain).")] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes of the run (default: detected).", min=1, max=100000)] = None,
    node_rank: Annotated[Optional[int], typer.Option(help="This node's rank, 0 owns the run (default: detected).", min=0, max=99999)] = None,
    gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs per node to record (default: the job's GPUs; on CPU its processes per node).", min=1, max=1024)] = None,
    node_name: Annotated[Optional[str], typer.Option(help="This node's name (default: $SLURMD_NODENAME, else the host name).")] = None,
    cluster: Annotated[Optional[str], typer.Option(help="Slurm cluster name for the run id slurm-CLUSTER-JOBID: the --cluster that `slurm sync` is given (default: none, slurm-JOBID).")] = None,
    grace: Annotated[float, typer.Option(help="Seconds between forwarding SIGTERM/SIGINT and SIGKILL.", min=0, max=86400)] = 30.0,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve this node's Prometheus metrics on PORT (0 picks a free one).", min=0, max=65535)] = None,
    metrics_addr: Annotated[str, typer.Option(help="Address of the metrics endpoint.")] = "127.0.0.1",
    journal_dir: Annotated[Optional[Path], typer.Option(help="Run journal directory (default: $TRAINLEDGER_JOURNAL_DIR or the user data dir).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing of our own (the command's output is unchanged).")] = False,
    db: DbOpt = None,
) -> None:
    """Run COMMAND and record it in the ledger: nodes, duration, status, utilization, cost.

    COMMAND is an argument list after `--` (torchrun, deepspeed, accelerate launch,
    python, srun, ...), never a shell string. Its output passes through and its exit
    status is ours. On several nodes run one wrapper per node with the same run id
    (under Slurm: `srun --ntasks-per-node=1 trainledger run -- torchrun ...`).
    SIGINT/SIGTERM cancel the run (forwarded to the command, SIGKILL after --grace).
    """
    from ledger.sources.journal import default_journal_dir
    from ledger.sources.sampling import nvml_gpu_count
    from ledger.sources.topology import Flags, resolve
    from ledger.sources.wrapper import WrapRequest, check_ledger, find_command, run_passive, run_wrapped
    from ledger.store.db import resolve_url
    from ledger.store.ids import validate_run_id

    argv = ctx.meta.get(COMMAND_KEY) or []
    if not argv:
        raise LedgerInputError(f"COMMAND: nothing after `--`; {USAGE}")
    tags = _tags(tag)
    if resume_of is not None:
        validate_run_id(resume_of, "--resume-of")
    flags = Flags(run_id=run_id, nodes=nodes, node_rank=node_rank, gpus_per_node=gpus_per_node, node_name=node_name,
                  cluster=cluster, resume_of=resume_of)
    topology = resolve(flags, os.environ, argv, nvml_gpus=nvml_gpu_count(os.environ))
    if topology.passive:
        run_passive(argv, topology.passive, quiet)
    try:
        find_command(argv, dict(os.environ))
    except LedgerInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(127) from None
    req = WrapRequest(command=argv, topology=topology, db_url=resolve_url(db),
                      journal_dir=Path(journal_dir) if journal_dir else default_journal_dir(), node_type=node_type,
                      offer=offer, project=project, user=user or os.environ.get("USER") or None, name=name, tags=tags,
                      grace_s=grace, metrics_port=metrics_port, metrics_addr=metrics_addr,
                      flush_s=_env_float("TRAINLEDGER_FLUSH_S", 2.0), heartbeat_s=_env_float("TRAINLEDGER_HEARTBEAT_S", 5.0),
                      ledger_wait_s=_env_float("TRAINLEDGER_LEDGER_WAIT_S", 30.0),
                      util_interval_s=_env_float("TRAINLEDGER_UTIL_INTERVAL_S", 1.0), quiet=quiet)
    warning = check_ledger(req)
    if warning and not quiet:
        typer.echo(f"[trainledger] warning: {warning}", err=True)
    raise typer.Exit(run_wrapped(req))


def register(root: typer.Typer) -> None:
    root.command("run", cls=DashDashCommand, no_args_is_help=True)(run_command)
