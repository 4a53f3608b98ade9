"""``trainledger``: the command line (SPEC §9).

Every command takes ``--db URL`` (else ``$TRAINLEDGER_DB_URL``, else the
embedded SQLite ledger in the user's data directory), prints figures as a
table or, with ``--json``, as the same dict in JSON. Exit status: 0 on
success, 2 with a one-line reason on bad input, 1 when the ledger cannot be
reached.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from typer.core import TyperGroup

try:  # typer vendors click (typer._click) in recent versions
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer on plain click
    from click import exceptions as _click_errors

from ledger.errors import LedgerInputError


class _OneLineUsageErrors(TyperGroup):
    """Click's usage errors (bad option value, missing argument, unknown option) as one line + exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_errors.NoArgsIsHelpError as exc:
            exc.show()  # a bare group: its help, as before
            sys.exit(exc.exit_code)
        except _click_errors.ClickException as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
            typer.echo(f"error: {' '.join(exc.format_message().split())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(help="trainledger: cost and resource accounting for distributed LLM training. Every command has --help.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False, cls=_OneLineUsageErrors)
db_app = typer.Typer(help="Ledger database: upgrade the schema, back up and restore.", no_args_is_help=True)
runs_app = typer.Typer(help="List, inspect and reap runs.", no_args_is_help=True)
cost_app = typer.Typer(help="Rent vs own comparisons.", no_args_is_help=True)
report_app = typer.Typer(help="Reports and the monthly export.", no_args_is_help=True)
pricing_app = typer.Typer(help="Hardware catalog and offers (prices).", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(runs_app, name="runs")
app.add_typer(cost_app, name="cost")
app.add_typer(report_app, name="report")
app.add_typer(pricing_app, name="pricing")

DbOpt = Annotated[Optional[str], typer.Option("--db", help="Ledger URL (sqlite:///PATH or postgresql+psycopg://USER@HOST/DB). Default: $TRAINLEDGER_DB_URL, else the embedded SQLite file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def command(fn: Callable) -> Callable:
    """Turn user errors into one line + exit 2, and an unreachable ledger into one line + exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from sqlalchemy.exc import DatabaseError, DataError, OperationalError

        from ledger.db import LedgerURLError, redact_url, resolve_url

        try:
            _check_arguments(kwargs)
            return fn(*args, **kwargs)
        except (LedgerInputError, LedgerURLError) as exc:
            fail(str(exc).splitlines()[0])
        except DataError as exc:  # a value the database refuses; the session rolled back, nothing was written
            reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
            fail(f"the ledger refused a value: {reason}")
        except DatabaseError as exc:  # unreachable, or not a ledger at all (e.g. "file is not a database")
            if not isinstance(exc, OperationalError) and type(exc) is not DatabaseError:
                raise
            url = redact_url(resolve_url(kwargs.get("db")))
            reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
            fail(f"cannot use the ledger at {url}: {reason}", code=1)

    return wrapper


MONTH_YEARS = (1970, 9998)


def _check_arguments(kwargs: dict[str, Any]) -> None:
    """Refuse what no command can use before any work: NUL characters, months outside MONTH_YEARS."""
    for name, value in kwargs.items():
        if isinstance(value, (str, Path)) and "\0" in str(value):
            raise LedgerInputError(f"{name}: contains a NUL character")
    for name in ("month", "end_month", "date_"):
        value = kwargs.get(name)
        if isinstance(value, str) and value:
            from ledger.accounting import parse_month

            flag = f"--{name.strip('_').replace('_', '-')}"
            if name == "date_":
                if not re.fullmatch(r"\d{4}-\d\d-\d\d", value):
                    continue  # today, yesterday, or an error of the command's own
                year = int(value[:4])
            else:
                year, _ = parse_month(value)
            if not MONTH_YEARS[0] <= year <= MONTH_YEARS[1]:
                raise LedgerInputError(f"{flag}: the year must be {MONTH_YEARS[0]} to {MONTH_YEARS[1]}, got {value!r}")


def _session(db: Optional[str]):
    from ledger.db import get_engine, session_scope

    return session_scope(get_engine(db))


def _sync_quietly(db: Optional[str]) -> None:
    """Replay local run journals written while the ledger was unreachable (best effort)."""
    from sqlalchemy.exc import OperationalError

    from ledger.db import get_engine
    from ledger.journal import sync_all

    engine = get_engine(db)  # an unreachable ledger is the command's error, not a warning
    try:
        applied = sync_all(engine)
    except OperationalError:
        raise
    except Exception as exc:  # a broken journal must not block reading the ledger
        typer.echo(f"warning: journal replay failed ({type(exc).__name__}); run `trainledger sync`", err=True)
        return
    if applied:
        typer.echo(f"replayed {sum(applied.values())} journal events of {len(applied)} runs", err=True)


def emit(data: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    from ledger.present import jsonable

    if as_json:
        typer.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))
    else:
        typer.echo(text(data))


# --- db ------------------------------------------------------------------------

@db_app.command("upgrade")
@command
def db_upgrade(db: DbOpt = None, revision: Annotated[str, typer.Option(help="Target revision.")] = "head") -> None:
    """Apply pending schema migrations (the CLI also does this on first use)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    from ledger.db import alembic_config, current_revision, make_engine, redact_url, resolve_url, upgrade_schema

    known = [r.revision for r in ScriptDirectory.from_config(alembic_config(None)).walk_revisions()]
    if revision != "head" and revision not in known:
        raise LedgerInputError(f"--revision: expected head or one of {', '.join(sorted(known))}, got {revision!r}")
    engine = make_engine(db, upgrade=False)
    try:
        upgrade_schema(engine, revision)
    except CommandError as exc:
        raise LedgerInputError(f"--revision: {' '.join(str(exc).split())}") from None
    rev = current_revision(engine)  # never older than it was: upgrade does not downgrade
    typer.echo(f"ledger {redact_url(resolve_url(db))} at revision {rev}")


@db_app.command("backup")
@command
def db_backup(out: Annotated[Path, typer.Option("--out", "-o", help="Backup file to write.")], db: DbOpt = None) -> None:
    """Back up the ledger (SQLite online backup API; pg_dump custom format for PostgreSQL)."""
    from ledger.backup import backup

    path = backup(db, out)
    typer.echo(f"backup written to {path}")


@db_app.command("restore")
@command
def db_restore(file: Annotated[Path, typer.Argument(help="A file written by `trainledger db backup`.")],
               db: DbOpt = None,
               force: Annotated[bool, typer.Option("--force", help="Replace a ledger that already has runs.")] = False) -> None:
    """Restore the ledger from a backup (refuses to overwrite runs without --force)."""
    from ledger.backup import restore

    restore(db, file, force=force)
    typer.echo(f"restored from {file}")


@db_app.command("rollup")
@command
def db_rollup(db: DbOpt = None,
              rebuild: Annotated[bool, typer.Option("--rebuild", help="Rebuild the monthly rollup from the run rows.")] = False) -> None:
    """Check the pre-aggregated monthly rollup against the run rows (exit 1 on a difference); --rebuild it."""
    from sqlmodel import Session

    from ledger import rollup
    from ledger.db import get_engine

    with Session(get_engine(db)) as s:
        if rebuild:
            def progress(done: int, total: int) -> None:
                typer.echo(f"rollup: {done:,}/{total:,} runs", err=True)
            n = rollup.rebuild(s, progress=progress)
            s.commit()
            typer.echo(f"rollup rebuilt from {n:,} runs")
            return
        problems = rollup.check(s)
    for p in problems[:20]:
        typer.echo(p, err=True)
    if problems:
        typer.echo(f"rollup: {len(problems)} difference(s) from the run rows; fix with `trainledger db rollup --rebuild`", err=True)
        raise typer.Exit(1)
    typer.echo("rollup consistent with the run rows")


# --- demo ----------------------------------------------------------------------

@app.command("demo")
@command
def demo(db: DbOpt = None,
         end_month: Annotated[Optional[str], typer.Option(help="Last month of the history (YYYY-MM); default this month. A month before this one gets no sweep.")] = None,
         no_sweep: Annotated[bool, typer.Option("--no-sweep", help="Only the history: start no background strategy sweep.")] = False,
         as_json: JsonOpt = False) -> None:
    """Fill an empty ledger with six months of clearly labelled demo history (seed scenario), then start a
    small real strategy sweep (dp, zero2, pp, tp, 3d; a few steps each) on this machine in the background."""
    from ledger.accounting import parse_month
    from ledger.db import resolve_url
    from ledger.demo import generate_demo, start_demo_sweep, sweep_unavailable

    if end_month:
        parse_month(end_month)
    with _session(db) as s:
        result = generate_demo(s, end_month=end_month)
    sweep = None
    if result.get("already_present"):
        emit(result, as_json, lambda r: f"demo ledger already present ({r['runs']} runs); nothing added")
        return
    if not no_sweep:
        why = sweep_unavailable(end_month)
        sweep = {"started": False, "reason": why} if why else {"started": True, **start_demo_sweep(resolve_url(db))}
    result = {**result, "sweep": sweep}

    def text(r):
        out = f"demo ledger: {r['runs']} runs over {r['months']} months on the 8-node RTX 4090 cluster (run ids demo-*)"
        sw = r["sweep"]
        if sw and sw["started"]:
            out += (f"\nstrategy sweep {sw['sweep_id']} ({', '.join(sw['strategies'])}; {sw['steps']} steps each) "
                    f"running in the background (pid {sw['pid']}, log {sw['log']}): see the dashboard's Strategies page, "
                    f"or `trainledger report weekly --sweep {sw['sweep_id']}` when it is done")
        elif sw:
            out += f"\nno strategy sweep: {sw['reason']}"
        return out

    emit(result, as_json, text)


# --- import --------------------------------------------------------------------

@app.command("import")
@command
def import_(file: Annotated[Path, typer.Argument(help="Our runs CSV, or Slurm `sacct --parsable2` output.")],
            node_type: Annotated[Optional[str], typer.Option(help="Node type for rows without one (required for sacct).")] = None,
            offer: Annotated[Optional[str], typer.Option(help="Offer the runs were paid under (default: the fleet, else elastic rent).")] = None,
            tz: Annotated[Optional[str], typer.Option("--tz", help="Time zone of times without an offset (default: the ledger's display time zone).")] = None,
            fmt: Annotated[str, typer.Option("--format", help="auto | csv | sacct")] = "auto",
            cluster: Annotated[str, typer.Option(help="Slurm cluster name, to keep job ids of several clusters apart.")] = "",
            db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Import finished runs; one bad row rejects the whole file and nothing is written."""
    from ledger.importer import import_runs
    from ledger.settings import display_timezone, parse_timezone

    if fmt not in ("auto", "csv", "sacct"):
        raise LedgerInputError(f"--format: expected auto, csv or sacct, got {fmt!r}")
    with _session(db) as s:
        zone = parse_timezone(tz) if tz else display_timezone(s)
        res = import_runs(s, file, node_type=node_type, offer=offer, tz=zone, fmt=fmt, cluster=cluster)
    out = {"format": res.format, "imported": res.imported, "already_present": res.already_present, "skipped": res.skipped}

    def text(o):
        extra = "".join(f", skipped {n} {why}" for why, n in o["skipped"].items())
        return f"imported {o['imported']} runs ({o['format']}), {o['already_present']} already in the ledger{extra}"

    emit(out, as_json, text)


# --- runs ----------------------------------------------------------------------

RUN_COLUMNS = ["id", "name", "project", "status", "strategy", "node_type", "nodes", "started_at", "node_hours", "tokens", "gpu_util_mean", "mfu"]


@runs_app.command("list")
@command
def runs_list(month: Annotated[Optional[str], typer.Option(help="Runs overlapping this month (YYYY-MM).")] = None,
              project: Annotated[Optional[str], typer.Option()] = None,
              user: Annotated[Optional[str], typer.Option()] = None,
              status: Annotated[Optional[str], typer.Option(help="queued|running|succeeded|failed|cancelled|crashed")] = None,
              strategy: Annotated[Optional[str], typer.Option()] = None,
              sweep: Annotated[Optional[str], typer.Option(help="Sweep id.")] = None,
              limit: Annotated[int, typer.Option(min=1, max=100000, help="Show at most this many runs (the newest).")] = 50,
              offset: Annotated[int, typer.Option(min=0, help="Skip this many of the newest runs first (paging).")] = 0,
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Runs, newest first (stale running runs are marked crashed first).

    Shows the newest --limit runs (default 50) after --offset; when more runs
    match, a last line on stderr says how many (the JSON output is the page only).
    """
    from ledger.accounting import parse_month
    from ledger.present import table
    from ledger.runs import count_runs, list_runs

    if month:
        parse_month(month)
    _sync_quietly(db)
    filters = dict(month=month, project=project, user=user, status=status, strategy=strategy, sweep=sweep)
    with _session(db) as s:
        rows = list_runs(s, **filters, limit=limit, offset=offset)
        total = count_runs(s, **filters) if len(rows) == limit or offset else offset + len(rows)
    emit(rows, as_json, lambda r: table(r, RUN_COLUMNS))
    more = total - offset - len(rows)
    if more > 0 and not as_json:
        typer.echo(f"… {more:,} more of {total:,} matching runs (newest first: rows {offset + 1:,}-{offset + len(rows):,} "
                   f"shown); see --limit and --offset", err=True)


@runs_app.command("show")
@command
def runs_show(run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix of 6+ characters).")],
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """One run: its figures, its nodes, its cost per month and under every offer."""
    from ledger.present import key_values, table
    from ledger.runs import show_run

    with _session(db) as s:
        data = show_run(s, run_id)

    def text(d):
        parts = [key_values({k: v for k, v in d.items() if k not in ("config",)})]
        if d["nodes_detail"]:
            parts += ["", "nodes:", table(d["nodes_detail"], ["hostname", "node_rank", "gpu_util_mean", "gpu_util_p95", "util_source", "energy_kwh", "straggler"])]
        parts += ["", "cost by month (actual):", table(d["cost_by_month"])]
        parts += ["", "cost under every offer:", table(d["cost_under_offers"])]
        return "\n".join(parts)

    emit(data, as_json, text)


@runs_app.command("reap")
@command
def runs_reap(stale_after: Annotated[int, typer.Option(help="Seconds without a heartbeat before a running run is crashed.", min=1, max=10**9)] = 60,
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Mark running runs whose heartbeat stopped as crashed (ended at the last heartbeat)."""
    from datetime import timedelta

    from ledger.runs import reap_stale

    with _session(db) as s:
        n = reap_stale(s, timedelta(seconds=stale_after))
    emit({"reaped": n}, as_json, lambda d: f"marked {d['reaped']} runs crashed")


# --- cost ----------------------------------------------------------------------

def _decimal(value: str, flag: str) -> Decimal:
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise LedgerInputError(f"{flag}: expected a number, got {value!r}") from None
    if not number.is_finite():
        raise LedgerInputError(f"{flag}: expected a finite number, got {value!r}")
    return number


@cost_app.command("compare")
@command
def cost_compare(node_type: Annotated[Optional[str], typer.Option(help="Compare one node-month of this node type.")] = None,
                 utilization: Annotated[str, typer.Option(help="Time utilization 0..1 for --node-type.")] = "1",
                 month: Annotated[Optional[str], typer.Option(help="Compare the ledger's real usage of this month (YYYY-MM).")] = None,
                 own: Annotated[Optional[str], typer.Option(help="Own offer (default: the node type's).")] = None,
                 rent: Annotated[Optional[str], typer.Option(help="Elastic rent offer (default: the node type's).")] = None,
                 reserved: Annotated[Optional[str], typer.Option(help="Reserved rent offer, with --month.")] = None,
                 db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Own vs rent: per node-month at a utilization (--node-type), or for a month of real usage (--month)."""
    from ledger.compare import compare_month, compare_node_type
    from ledger.present import key_values, table

    if bool(node_type) == bool(month):
        raise LedgerInputError("cost compare: pass exactly one of --node-type NAME or --month YYYY-MM")
    with _session(db) as s:
        if node_type:
            data = compare_node_type(s, node_type, _decimal(utilization, "--utilization"), own=own, rent=rent)
        else:
            data = compare_month(s, month, own=own, rent=rent, reserved=reserved)

    def text(d):
        if "node_types" not in d:
            lines = [key_values(d)]
            if d["renting_always_cheaper"]:
                lines.append(f"\nRenting ({d['rent_offer']}) is cheaper at every utilization: owning costs more even at full use.")
            else:
                lines.append(f"\nOwning ({d['own_offer']}) wins above a time utilization of {float(d['break_even_utilization']):.1%}.")
            return "\n".join(lines)
        cols = ["node_type", "node_hours", "peak_nodes", "own_nodes", "actual_cost", "own_cost", "elastic_cost", "reserved_cost", "cheapest"]
        return f"{d['month']} ({d['timezone']}, {d['currency']})\n" + table(d["node_types"], cols) + "\n\ntotal:\n" + key_values(d["total"])

    emit(data, as_json, text)


# --- report --------------------------------------------------------------------

@report_app.command("monthly")
@command
def report_monthly(month: Annotated[str, typer.Option(help="YYYY-MM (calendar month in the display time zone).")],
                   fmt: Annotated[str, typer.Option("--format", help="csv | xlsx | json")] = "csv",
                   output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout for csv/json).")] = None,
                   own: Annotated[Optional[str], typer.Option(help="Own offer for the comparison.")] = None,
                   rent: Annotated[Optional[str], typer.Option(help="Elastic rent offer for the comparison.")] = None,
                   db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The monthly export: summary (own vs rent, savings, ROI, idle, waste), per project, per run."""
    from ledger.accounting import monthly_report
    from ledger.export import presented_report, render
    from ledger.present import key_values

    if fmt not in ("csv", "xlsx", "json"):
        raise LedgerInputError(f"--format: expected csv, xlsx or json, got {fmt!r}")
    if fmt == "xlsx" and output is None:
        raise LedgerInputError("--output: xlsx needs a file, e.g. -o report.xlsx")
    with _session(db) as s:
        p = presented_report(monthly_report(s, month, own=own, rent=rent))
    data = render(p, fmt)
    if output is None:
        sys.stdout.write(data.decode("utf-8"))
        return
    if output.is_dir():
        raise LedgerInputError(f"--output: {output} is a directory; give a file name")
    tmp = output.with_name(output.name + ".part")
    try:
        tmp.write_bytes(data)
        tmp.replace(output)  # never leave a half-written export
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LedgerInputError(f"--output: cannot write {output}: {exc.strerror or exc}") from None
    emit(p["summary"], as_json, lambda d: key_values(d) + f"\n\nwrote {output} ({fmt}, {len(p['runs'])} run lines)")


@report_app.command("weekly")
@command
def report_weekly(sweep: Annotated[Optional[str], typer.Option(help="Sweep id (default: the latest sweep).")] = None,
                  days: Annotated[Optional[int], typer.Option(help="Instead of a sweep: runs of the last N days.", min=1, max=36500)] = None,
                  db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Strategy comparison: time per epoch, memory per GPU, comm share, GPU-Util, MFU, cost per 1M tokens."""
    from ledger.present import table
    from ledger.strategies import strategy_comparison

    with _session(db) as s:
        data = strategy_comparison(s, sweep_id=sweep, days=days)

    def text(d):
        if not d["rows"] and not d["not_measured"]:
            return f"{d['scope']}: nothing to compare; run `trainledger sweep CONFIG --strategies dp,zero2,...` first"
        offers = sorted({o for r in d["rows"] for o in r["cost_per_1m_tokens"]})
        flat = []
        for r in d["rows"]:
            row = {"": "*" if r["cheapest"] else "", "strategy": r["strategy"], "run_id": r["run_id"],
                   "tokens_per_s": r["tokens_per_s"], "time_per_epoch_hours": r["time_per_epoch_hours"],
                   "peak_mem_per_gpu_GiB": r["peak_mem_per_gpu_bytes"] / 2**30 if r["peak_mem_per_gpu_bytes"] else None,
                   "comm_share": r["comm_share"],
                   "gpu_util_mean": r["gpu_util_mean"], "util_source": r["util_source"], "mfu": r["mfu"],
                   "measured_gpu_util_mean": r.get("measured_gpu_util_mean"),
                   "measured_energy_kwh": r.get("measured_energy_kwh")}
            for o in offers:
                row[f"cost_per_1m_{o}"] = r["cost_per_1m_tokens"].get(o)
            flat.append(row)
        out = f"{d['scope']} (* cheapest; GPU-Util source 'cpu' = process CPU share on a CPU-only run)\n" + table(flat)
        if d["not_measured"]:
            out += "\n\nnot measured: " + ", ".join(f"{x['strategy']} ({x['status']})" for x in d["not_measured"])
        return out

    emit(data, as_json, text)


# --- tracked runs ------------------------------------------------------------------

ConfigArg = Annotated[Path, typer.Argument(help="Trainer YAML from trainer/configs (e.g. trainer/configs/zero2.yaml) or from a directory listed in $TRAINLEDGER_CONFIG_DIRS.")]


@app.command("launch")
@command
def launch(config: ConfigArg,
           nodes: Annotated[int, typer.Option(help="Nodes.")] = 1,
           gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs (processes) per node; default: the visible GPUs, on CPU enough for tp × pp (≥ 2).")] = None,
           hostfile: Annotated[Optional[Path], typer.Option(help="DeepSpeed hostfile (hostname slots=N).")] = None,
           launcher: Annotated[str, typer.Option(help="torchrun | deepspeed | slurm")] = "torchrun",
           node_type: Annotated[str, typer.Option(help="Node type the run is costed as.")] = "rtx4090-8x",
           offer: Annotated[Optional[str], typer.Option(help="Offer the node-hours are paid under.")] = None,
           project: Annotated[Optional[str], typer.Option()] = None,
           user: Annotated[Optional[str], typer.Option(help="Default: $USER.")] = None,
           name: Annotated[Optional[str], typer.Option(help="Run name.")] = None,
           steps: Annotated[Optional[int], typer.Option(help="Override the config's steps.")] = None,
           metrics_port: Annotated[Optional[int], typer.Option(help="Serve Prometheus metrics from port+local_rank (default off; 0 picks a free port).", min=0, max=65535)] = None,
           detach: Annotated[bool, typer.Option("--detach", help="Return at once; the run goes on in the background.")] = False,
           db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Validate the plan, register the run, start it as a tracked run and return its id."""
    from ledger.db import get_engine, resolve_url, session_scope
    from ledger.launch import LaunchRequest, check_config_allowed, prepare, record_process, start, wait_attached

    check_config_allowed(config)

    url = resolve_url(db)
    req = LaunchRequest(config=config, nodes=nodes, gpus_per_node=gpus_per_node, hostfile=hostfile, launcher=launcher,
                        node_type=node_type, offer=offer, project=project, user=user, name=name, steps=steps,
                        metrics_port=metrics_port)
    with session_scope(get_engine(url)) as s:
        prep = prepare(s, req, url)
    if launcher == "slurm":
        import shutil
        import subprocess

        if shutil.which("sbatch"):
            out = subprocess.run(prep.command, env=prep.env, capture_output=True, text=True)
            if out.returncode != 0:
                raise LedgerInputError(f"sbatch: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            emit({"run_id": prep.run_id, "script": str(prep.script), "submitted": True, "sbatch": out.stdout.strip()},
                 as_json, lambda d: f"{d['run_id']}\nsubmitted {d['script']}: {d['sbatch']}")
        else:
            emit({"run_id": prep.run_id, "script": str(prep.script), "submitted": False}, as_json,
                 lambda d: f"{d['run_id']}\nsbatch not found here; submit {d['script']} on the cluster")
        return
    proc = start(prep, url, detach)
    with session_scope(get_engine(url)) as s:
        record_process(s, prep.run_id, proc.pid)
    if detach:
        emit({"run_id": prep.run_id, "pid": proc.pid, "log": str(prep.log_path)}, as_json,
             lambda d: f"{d['run_id']}\nrunning in the background (pid {d['pid']}); log: {d['log']}")
        return
    if not as_json:
        typer.echo(f"{prep.run_id}  (log: {prep.log_path})", err=True)
    code = wait_attached(proc)
    with _session(db) as s:
        from ledger.models import Run

        run = s.get(Run, prep.run_id)
        status = run.status.value
    emit({"run_id": prep.run_id, "status": status, "exit_code": code, "log": str(prep.log_path)}, as_json,
         lambda d: f"{d['run_id']} {d['status']} (exit {d['exit_code']})")
    if code != 0:
        raise typer.Exit(1)


@runs_app.command("cancel")
@command
def runs_cancel(run_id: Annotated[str, typer.Argument(help="Run id.")],
                grace: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 30.0,
                db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Stop a launched run and its whole process group (it ends as cancelled)."""
    from ledger.launch import cancel

    with _session(db) as s:
        data = cancel(s, run_id, grace)
    emit(data, as_json, lambda d: f"{d['run_id']} {d['status']}")


@app.command("sync")
@command
def sync(journal_dir: Annotated[Optional[Path], typer.Option(help="Journal directory (default: $TRAINLEDGER_JOURNAL_DIR or the user data dir).")] = None,
         db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Replay run journals into the ledger (idempotent: nothing lost, nothing doubled)."""
    from ledger.db import get_engine
    from ledger.journal import sync_all

    applied = sync_all(get_engine(db), journal_dir)
    emit({"applied": applied}, as_json,
         lambda d: "\n".join(f"{k}: {v} events" for k, v in d["applied"].items()) or "nothing to replay")


@app.command("sweep")
@command
def sweep(config: ConfigArg,
          strategies: Annotated[str, typer.Option(help="Comma list of dp,zero1,zero2,zero3,pp,tp,3d.")] = "dp,zero1,zero2,zero3,pp,tp,3d",
          steps: Annotated[int, typer.Option(help="Steps per strategy.", min=1)] = 20,
          nodes: Annotated[int, typer.Option(help="Nodes per run.", min=1)] = 1,
          gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs (processes) per node (3d uses at least 4).")] = None,
          hostfile: Annotated[Optional[Path], typer.Option()] = None,
          launcher: Annotated[str, typer.Option(help="torchrun | deepspeed")] = "torchrun",
          node_type: Annotated[str, typer.Option()] = "rtx4090-8x",
          project: Annotated[Optional[str], typer.Option()] = None,
          db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Run each strategy for N steps as tracked runs sharing a sweep id (pre-scaling trial).

    Ctrl-C / SIGTERM cancels the running strategy and stops the sweep (exit 130).
    """
    from ledger.db import resolve_url
    from ledger.strategies import strategy_comparison
    from ledger.launch import check_config_allowed
    from ledger.sweep import SweepRequest, parse_strategies, run_sweep

    check_config_allowed(config)

    req = SweepRequest(config=config, strategies=parse_strategies(strategies), steps=steps, nodes=nodes,
                       gpus_per_node=gpus_per_node, hostfile=hostfile, launcher=launcher, node_type=node_type,
                       project=project)
    outcome = run_sweep(resolve_url(db), req,
                        on_start=lambda i, n, strat, run_id: typer.echo(f"[{i}/{n}] {strat}: run {run_id}", err=True))
    with _session(db) as s:
        table_data = strategy_comparison(s, sweep_id=outcome.sweep_id)
    emit({"sweep_id": outcome.sweep_id, "runs": outcome.runs, "comparison": table_data}, as_json,
         lambda d: f"sweep {d['sweep_id']}: " + ", ".join(f"{r['strategy']}={'ok' if r['exit_code'] == 0 else 'exit ' + str(r['exit_code'])}" for r in d["runs"])
         + f"\nsee `trainledger report weekly --sweep {d['sweep_id']}`")
    if outcome.stopped_by:
        typer.echo(f"sweep stopped by {outcome.stopped_by} after {len(outcome.runs)} of {len(req.strategies)} strategies", err=True)
        raise typer.Exit(130)


# --- pricing -------------------------------------------------------------------

@pricing_app.command("list")
@command
def pricing_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Node types and offers in the ledger."""
    from ledger.pricing_views import list_pricing
    from ledger.present import table

    with _session(db) as s:
        data = list_pricing(s)
    emit(data, as_json, lambda d: "node types:\n" + table(d["node_types"], ["name", "gpu_model", "gpus_per_node", "gpu_memory_gb", "peak_bf16_tflops", "network", "source"])
         + "\n\noffers:\n" + table(d["offers"], ["name", "node_type", "kind", "currency", "hourly_rate", "full_month_cost", "source"]))


@pricing_app.command("show")
@command
def pricing_show(name: Annotated[str, typer.Argument(help="Offer or node type name.")], db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """One offer or node type with every field and its derived rates."""
    from ledger.present import key_values
    from ledger.pricing_views import show_pricing

    with _session(db) as s:
        data = show_pricing(s, name)
    emit(data, as_json, key_values)


@pricing_app.command("import")
@command
def pricing_import(file: Annotated[Path, typer.Argument(help="TOML with [[node_type]] and/or [[offer]] tables (keys as in data/pricing.toml).")],
                   db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add or replace node types and offers; validated first, nothing written on error."""
    from ledger.presets import import_pricing_file

    with _session(db) as s:
        counts = import_pricing_file(s, file)
    emit(counts, as_json, lambda c: f"imported {c['node_types']} node types and {c['offers']} offers from {file}")


# --- settings ------------------------------------------------------------------

@app.command("settings")
@command
def settings(key: Annotated[Optional[str], typer.Argument(help="timezone | currency")] = None,
             value: Annotated[Optional[str], typer.Argument(help="New value.")] = None,
             db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show or change ledger settings (display time zone, currency)."""
    from ledger.present import key_values
    from ledger.settings import DEFAULTS, get_setting, set_setting

    with _session(db) as s:
        if key is not None and key not in DEFAULTS:
            raise LedgerInputError(f"KEY: unknown setting {key!r}; use one of {', '.join(DEFAULTS)}")
        if value is not None:
            set_setting(s, key, value)
        data = {k: get_setting(s, k) for k in ([key] if key else DEFAULTS)}
    emit(data, as_json, key_values)


def _register_parts() -> None:
    """Commands that live with their part: ``train``/``data prepare`` in trainer/,
    ``dashboard`` in app/ (both importable without torch)."""
    from trainer.cli import data_app, train_command

    app.add_typer(data_app, name="data")
    app.command("train")(train_command)
    try:
        from app.cli import dashboard_command
    except ModuleNotFoundError as exc:  # the dashboard module is optional until it lands
        if exc.name != "app.cli":
            raise
    else:
        app.command("dashboard")(dashboard_command)
    # `collect` and `report daily` (Prometheus metrics) register themselves on import
    try:
        import ledger.cli_metrics  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "ledger.cli_metrics":
            raise


_register_parts()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
