"""``trainledger run [OPTIONS] -- COMMAND [ARGS...]``: record any training command in the ledger."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, _click_errors, command
from trainledger.errors import LedgerInputError
from typer.core import TyperCommand

COMMAND_KEY = "trainledger.command"
USAGE = "trainledger run [OPTIONS] -- COMMAND [ARGS...]"


class DashDashCommand(TyperCommand):
    """Everything after the first ``--`` is the wrapped command, passed on untouched (never parsed as options)."""

    def collect_usage_pieces(self, ctx):
        return [*super().collect_usage_pieces(ctx), "-- COMMAND [ARGS]..."]

    def parse_args(self, ctx, args):
        if not args and not ctx.resilient_parsing:  # `trainledger run` alone: the help
            typer.echo(ctx.get_help())
            ctx.exit(0)
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


@command(job=True)
def run_command(
    ctx: typer.Context,
    project: Annotated[Optional[str], typer.Option(help="Project the run is allocated to.")] = None,
    user: Annotated[Optional[str], typer.Option(help="Default: $USER.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (default: the script or module the command runs).")] = None,
    node_type: Annotated[Optional[str], typer.Option(help="Node type the run is costed as (`trainledger pricing list`). Default: $TRAINLEDGER_NODE_TYPE; none: the run is recorded but not costed.")] = None,
    offer: Annotated[Optional[str], typer.Option(help="Offer the node-hours are paid under (default: the node type's).")] = None,
    tag: Annotated[Optional[list[str]], typer.Option("--tag", help="KEY=VALUE recorded with the run (repeatable).")] = None,
    run_id: Annotated[Optional[str], typer.Option(help="Run id shared by every node's wrapper (default: from Slurm, the torchrun rendezvous id, or new).")] = None,
    resume_of: Annotated[Optional[str], typer.Option(help="Run this one restarts from a checkpoint of (a resume chain).")] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes of the run (default: detected).", min=1, max=100000)] = None,
    node_rank: Annotated[Optional[int], typer.Option(help="This node's rank, 0 owns the run (default: detected).", min=0, max=99999)] = None,
    gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs per node to record (default: the job's GPUs; on CPU its processes per node).", min=1, max=1024)] = None,
    node_name: Annotated[Optional[str], typer.Option(help="This node's name (default: $SLURMD_NODENAME, else the host name).")] = None,
    cluster: Annotated[Optional[str], typer.Option(help="Slurm cluster name for the run id slurm-CLUSTER-JOBID: the --cluster that `slurm sync` is given (default: none, slurm-JOBID).")] = None,
    exclusive: Annotated[bool, typer.Option("--exclusive", help="The run holds its nodes whole (pays the whole node, whatever GPUs it uses); default: its share, the GPUs it owns (CUDA_VISIBLE_DEVICES / SLURM_GPUS_ON_NODE) ÷ the node type's.")] = False,
    mig_profile: Annotated[Optional[str], typer.Option(help="MIG profile of the MIG devices in CUDA_VISIBLE_DEVICES (e.g. 1g.10gb): the run pays its slices (default: $TRAINLEDGER_MIG_PROFILE).")] = None,
    grace: Annotated[float, typer.Option(help="Seconds between forwarding SIGTERM/SIGINT and SIGKILL.", min=0, max=86400)] = 30.0,
    metrics_port: Annotated[Optional[int], typer.Option(help="Serve this node's Prometheus metrics on PORT (0 picks a free one).", min=0, max=65535)] = None,
    metrics_addr: Annotated[str, typer.Option(help="Address of the metrics endpoint.")] = "127.0.0.1",
    journal_dir: Annotated[Optional[Path], typer.Option(help="Run journal directory (default: $TRAINLEDGER_JOURNAL_DIR or the user data dir).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing of our own (the command's output is unchanged).")] = False,
    require_ledger: Annotated[bool, typer.Option("--require-ledger", help="Start the command only once its run is registered in the ledger; else exit 75 without starting it (default: the command always runs, recorded or not).")] = False,
    db: DbOpt = None,
) -> None:
    """Run COMMAND and record it in the ledger: nodes, duration, status, utilization, cost.

    COMMAND is an argument list after `--` (torchrun, deepspeed, accelerate launch,
    python, srun, ...), never a shell string. Its output passes through and its exit
    status is ours. On several nodes run one wrapper per node with the same run id
    (under Slurm: `srun --ntasks-per-node=1 trainledger run -- torchrun ...`).
    SIGINT/SIGTERM cancel the run (forwarded to the command, SIGKILL after --grace);
    every other signal (USR1, USR2, HUP, QUIT, WINCH, CONT, ...) is forwarded. When the
    run cannot be recorded (a full or read-only journal disk, a locked or unreachable
    ledger, a closed stderr), it says so once and runs the command anyway.
    """
    argv = ctx.meta.get(COMMAND_KEY) or []
    if not argv:
        raise LedgerInputError(f"COMMAND: nothing after `--`; {USAGE}")
    safe_stdio()
    from trainledger.errors import LedgerURLError
    from trainledger.store import config

    config.never_refuse()  # a broken config file is said once and ignored: the job runs

    try:
        req = _request(argv, locals())
    except (LedgerInputError, LedgerURLError, typer.Exit):
        raise
    except Exception as exc:  # the last resort: a bug of ours never keeps the command from running
        from trainledger.sources.capture.wrapper import run_bare

        if require_ledger:
            raise LedgerInputError(f"--require-ledger: cannot prepare the run ({type(exc).__name__}: {exc})") from None
        run_bare(argv, f"internal error ({type(exc).__name__}: {str(exc)[:200]}); the command runs unrecorded")
    _exit(_wrap(req))


def _request(argv: list[str], o: dict):
    """The :class:`WrapRequest` of the command line (``o``: the command's options), or one-line errors."""
    from trainledger.sources.capture.wrapper import WrapRequest, find_command, run_passive
    from trainledger.sources.record.journal_file import default_journal_dir
    from trainledger.sources.telemetry.sampling import nvml_gpu_count
    from trainledger.sources.telemetry.topology import Flags, resolve, slurm_part
    from trainledger.store.defaults import default_node_type
    from trainledger.store.envsettings import FLUSH_S, HEARTBEAT_S, LEDGER_WAIT_S, UTIL_INTERVAL_S, env_setting
    from trainledger.store.ids import validate_run_id

    tags = _tags(o["tag"])
    if o["resume_of"] is not None:
        validate_run_id(o["resume_of"], "--resume-of")
    flags = Flags(run_id=o["run_id"], nodes=o["nodes"], node_rank=o["node_rank"], gpus_per_node=o["gpus_per_node"],
                  node_name=o["node_name"], cluster=o["cluster"], resume_of=o["resume_of"], exclusive=o["exclusive"],
                  mig_profile=o["mig_profile"])
    topology = resolve(flags, os.environ, argv, nvml_gpus=nvml_gpu_count(os.environ))
    if topology.passive:
        run_passive(argv, topology.passive, o["quiet"])
    try:
        find_command(argv, dict(os.environ))
    except LedgerInputError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(127) from None
    journal_dir = Path(o["journal_dir"]) if o["journal_dir"] else default_journal_dir()
    slurm_part(topology, journal_dir)
    return WrapRequest(
        command=argv, topology=topology, db_url=_ledger_url(o["db"]), journal_dir=journal_dir,
        node_type=o["node_type"] or default_node_type(), offer=o["offer"], project=o["project"], user=o["user"] or os.environ.get("USER") or None,
        name=o["name"], tags=tags, grace_s=o["grace"], metrics_port=o["metrics_port"], metrics_addr=o["metrics_addr"],
        flush_s=env_setting(FLUSH_S), heartbeat_s=env_setting(HEARTBEAT_S), ledger_wait_s=env_setting(LEDGER_WAIT_S),
        util_interval_s=env_setting(UTIL_INTERVAL_S), quiet=o["quiet"],
        require_ledger=o["require_ledger"])


def _ledger_url(db: Optional[str]) -> str:
    """The ledger URL (with its driver), read without SQLAlchemy; a malformed one never refuses the job (issue 37):
    the wrapper's check of the ledger says why, once, and the run's events wait in the journal for `trainledger
    sync --db URL`."""
    from trainledger.store.config import configured_url, with_driver

    return with_driver(db or configured_url()[0])


def _wrap(req) -> int:
    from trainledger.sources.capture.wrapper import EXIT_NOT_RECORDED, RecordingImpossible, run_wrapped

    try:
        return run_wrapped(req)
    except RecordingImpossible as exc:
        typer.echo(f"error: {exc}; the command was not started (--require-ledger)", err=True)
        return EXIT_NOT_RECORDED


class _SafeRaw(io.RawIOBase):
    """fd 2 that never raises: a closed or broken stderr must not stop the wrapper (or its writer thread)."""

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 2

    def write(self, data) -> int:
        try:
            return os.write(2, data)
        except OSError:
            return len(data)


def safe_stdio() -> None:
    """Closed descriptors 0-2 are opened on /dev/null (else our own pipes and files would take them and the
    command's output would go there), and ``sys.stderr`` never raises."""
    import sys

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(_SafeRaw()), encoding="utf-8", errors="backslashreplace",
                                  line_buffering=True, write_through=True)


def _exit(code: int) -> None:
    """Exit with the command's status, whatever our stdout/stderr are (a broken pipe must not make it 120)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def register(root: typer.Typer) -> None:
    root.command("run", cls=DashDashCommand)(run_command)
