"""``trainledger runs``, ``launch``, ``sweep`` and ``sync``: the run lifecycle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli import progress
from trainledger.cli.common import (
    DbOpt,
    JsonOpt,
    NowOpt,
    clock,
    command,
    emit,
    group,
    session,
    sync_quietly,
)

app = group("List, inspect, reap and cancel runs.")

RUN_COLUMNS = ["id", "name", "project", "status", "strategy", "node_type", "nodes", "started_at", "node_hours", "tokens", "gpu_util_mean", "mfu"]


@app.command("list")
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
    from trainledger.money.rates.months import parse_month
    from trainledger.reports.present import table
    from trainledger.runs.registry import count_runs, list_runs

    if month:
        parse_month(month)
    sync_quietly(db)
    filters = dict(month=month, project=project, user=user, status=status, strategy=strategy, sweep=sweep)
    with session(db) as s:
        rows = list_runs(s, **filters, limit=limit, offset=offset)
        total = count_runs(s, **filters) if len(rows) == limit or offset else offset + len(rows)
    emit(rows, as_json, lambda r: table([_with_not_costed(x) for x in r], RUN_COLUMNS))
    more = total - offset - len(rows)
    if more > 0 and not as_json:
        typer.echo(f"… {more:,} more of {total:,} matching runs (newest first: rows {offset + 1:,}-{offset + len(rows):,} "
                   f"shown); see --limit and --offset", err=True)


def _with_not_costed(row: dict) -> dict:
    """A runs-list row for the table: a run no offer can cost says so in its node type cell."""
    if not row.get("not_costed"):
        return row
    return {**row, "node_type": f"{row['node_type'] or '—'} (not costed: {row['not_costed']})"}


CurrencyOpt = Annotated[Optional[str], typer.Option("--currency", help="Present money in this ISO 4217 currency (see `trainledger fx`); default: the Settings currency once set, else the offers' own.")]


@app.command("show")
@command
def runs_show(run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix of 6+ characters).")],
              currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """One run: its figures, its nodes, its cost (final, or provisional while a month of it drawn from a fleet
    has not closed), lost work, energy and CO2e per month, its cost under every offer, and its resume chain."""
    from trainledger.reports.present import fmt_cell, key_values, table
    from trainledger.runs.predictions import planned_vs_measured_of, text_lines
    from trainledger.runs.registry import show_run

    with session(db) as s:
        data = show_run(s, run_id, currency, clock(now))
        data["planned_vs_measured"] = planned_vs_measured_of(s, data["id"])

    def text(d):
        parts = [key_values({k: v for k, v in d.items() if k not in ("config", "planned_vs_measured")})]
        parts += [""] + text_lines(d["planned_vs_measured"])
        if d["co2e_kg"] is not None:
            parts += ["", f"CO2e {d['co2e_kg']:,.3f} kg from {d['energy_kwh']:,.3f} kWh ({d['co2e_basis']} energy"
                      + (", assumed default grid intensity" if d["carbon_intensity_assumed"] else "") + ")"]
        if d["nodes_detail"]:
            parts += ["", "nodes:", table(d["nodes_detail"], ["hostname", "node_rank", "status", "processes", "gpu_util_mean",
                                                              "gpu_util_p95", "util_source", "energy_kwh", "straggler"])]
        parts += ["", "cost, lost work, energy and CO2e by month (actual, at the prices in force then):", table(d["cost_by_month"])]
        parts += ["", "cost under every offer (list prices):", table(d["cost_under_offers"])]
        if d["resume_chain"]:
            c = d["resume_chain"]
            parts += ["", f"resume chain ({len(c['runs'])} runs, one job): {fmt_cell('cost', c['cost'])} cost, "
                          f"{fmt_cell('lost_work_cost', c['lost_work_cost'])} lost work, "
                          f"{fmt_cell('node_hours', c['node_hours'])} node-hours",
                      table(c["runs"], ["id", "status", "resume_of", "started_at", "ended_at", "last_checkpoint_step",
                                        "node_hours", "cost", "lost_work_cost"])]
        return "\n".join(parts)

    emit(data, as_json, text)


@app.command("compare")
@command
def runs_compare(run_ids: Annotated[list[str], typer.Argument(help="2 to 8 run ids (or unique prefixes of 6+ characters).")],
                 currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Runs side by side: their config (the keys that differ marked *), their figures as `runs show` gives them,
    and with --json their loss, step time, tokens/s, utilization and cumulative cost over hours since each started
    (the dashboard's Compare page: /compare?runs=A,B)."""
    from trainledger.reports.present import fmt_cell, table
    from trainledger.runs.compare import CONFIG_KEYS, FIGURE_KEYS, compare_runs

    with session(db) as s:
        data = compare_runs(s, run_ids, currency=currency, now=clock(now))

    def text(d):
        ids = [r["id"] for r in d["runs"]]
        config = [{"config": ("* " if k in d["differs"] else "  ") + k, **{i: r["config"][k] for i, r in zip(ids, d["runs"])}}
                  for k in CONFIG_KEYS]
        figures = [{"figure": k, **{i: r["figures"][k] for i, r in zip(ids, d["runs"])}} for k in FIGURE_KEYS]
        for row in figures:  # a figure's cells keep the figure's own format (money in cents, ratios, hours)
            for i in ids:
                row[i] = fmt_cell(row["figure"], row[i])
        return "\n".join([table(config, ["config", *ids]), "", table(figures, ["figure", *ids]),
                          f"\n* differs between the runs; money in {d['currency'] or 'each run currency'}; "
                          "--json adds the series (hours since each run started)"])

    emit(data, as_json, text)


@app.command("util")
@command
def runs_util(run_id: Annotated[Optional[str], typer.Argument(help="Run id (or a unique prefix of 6+ characters); or --node-type and --month.")] = None,
              node_type: Annotated[Optional[str], typer.Option(help="A node type's nodes (a fleet's): every run of it with samples in --month.")] = None,
              month: Annotated[Optional[str], typer.Option(help="YYYY-MM (display time zone), with --node-type.")] = None,
              db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Per-node utilization hour by hour from the recorded samples (GPU-Util: NVML/DCGM busy share; CPU runs: the
    process tree's CPU): each node's mean in each hour of the display time zone, and how many samples it has."""
    from trainledger.errors import LedgerInputError
    from trainledger.money.rates.months import check_month
    from trainledger.reports.present import table
    from trainledger.runs.utilization import fleet_utilization, run_utilization

    if (run_id is None) == (node_type is None):
        raise LedgerInputError("RUN_ID: give a run id, or --node-type with --month (a fleet's nodes), not both")
    if node_type is not None and month is None:
        raise LedgerInputError("--month: required with --node-type (YYYY-MM)")
    with session(db) as s:
        data = (run_utilization(s, run_id) if run_id is not None
                else fleet_utilization(s, node_type, check_month(month), clock(now)))

    def text(d):
        if not d["points"]:
            return "no utilization samples" + (f" for run {d['run_id']}" if "run_id" in d else
                                                f" for {d['node_type']} in {d['month']}")
        from zoneinfo import ZoneInfo

        tz = ZoneInfo(d["timezone"])
        rows = [{**p, "hour": p["hour"].astimezone(tz)} for p in d["points"]]
        return table(rows, ["hour", "node", "metric", "util_mean", "samples"]) + f"\nhours in {d['timezone']}"

    emit(data, as_json, text)


@app.command("card")
@command
def runs_card(run_id: Annotated[str, typer.Argument(help="Run id (or a unique prefix of 6+ characters).")],
              training_type: Annotated[str, typer.Option(help="pre-training | fine-tuning (the model card's training_type).")] = "pre-training",
              currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """A Hugging Face model-card metadata block for the run: co2_eq_emissions (grams) plus GPU-hours and cost."""
    import yaml
    from trainledger.runs.registry import model_card

    with session(db) as s:
        data = model_card(s, run_id, training_type, currency)
    emit(data, as_json, lambda d: "---\n" + yaml.safe_dump(d, sort_keys=False, allow_unicode=True, width=10_000) + "---")


@app.command("reap")
@command
def runs_reap(stale_after: Annotated[int, typer.Option(help="Seconds without a heartbeat before a running run is crashed.", min=1, max=10**9)] = 60,
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Mark running runs whose heartbeat stopped as crashed (ended at the last heartbeat)."""
    from datetime import timedelta

    from trainledger.runs.registry import reap_stale

    with session(db) as s:
        n = reap_stale(s, timedelta(seconds=stale_after))
    emit({"reaped": n}, as_json, lambda d: f"marked {d['reaped']} runs crashed")


ConfigArg = Annotated[Path, typer.Argument(help="Trainer YAML from trainer/configs (e.g. trainer/configs/zero2.yaml) or from a directory listed in $TRAINLEDGER_CONFIG_DIRS.")]


@command
def launch(config: ConfigArg,
           nodes: Annotated[int, typer.Option(help="Nodes.")] = 1,
           gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs (processes) per node; default: the visible GPUs, on CPU enough for tp × pp (≥ 2).")] = None,
           hostfile: Annotated[Optional[Path], typer.Option(help="DeepSpeed hostfile (hostname slots=N).")] = None,
           launcher: Annotated[str, typer.Option(help="torchrun | deepspeed | slurm")] = "torchrun",
           node_type: Annotated[Optional[str], typer.Option(help="Node type the run is costed as (default: $TRAINLEDGER_NODE_TYPE; none: the run is recorded but not costed).")] = None,
           offer: Annotated[Optional[str], typer.Option(help="Offer the node-hours are paid under.")] = None,
           project: Annotated[Optional[str], typer.Option()] = None,
           user: Annotated[Optional[str], typer.Option(help="Default: $USER.")] = None,
           name: Annotated[Optional[str], typer.Option(help="Run name.")] = None,
           steps: Annotated[Optional[int], typer.Option(help="Override the config's steps.")] = None,
           metrics_port: Annotated[Optional[int], typer.Option(help="Serve Prometheus metrics from port+local_rank (default off; 0 picks a free port).", min=0, max=65535)] = None,
           detach: Annotated[bool, typer.Option("--detach", help="Return at once; the run goes on in the background.")] = False,
           node_rank: Annotated[Optional[int], typer.Option(help="torchrun, --nodes > 1: this node's rank, 0 on the master (default: this host's line in --hostfile).", min=0, max=99999)] = None,
           master_addr: Annotated[Optional[str], typer.Option(help="torchrun, --nodes > 1: address of node 0, which holds the rendezvous (default: the first host of --hostfile).")] = None,
           master_port: Annotated[Optional[int], typer.Option(help="torchrun, --nodes > 1: rendezvous port on node 0.", min=1, max=65535)] = None,
           run_id: Annotated[Optional[str], typer.Option(help="Run id (default: new); torchrun, --nodes > 1: the same id on every node.")] = None,
           db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Validate the plan, register the run, start it as a tracked run and return its id.

    Several nodes without ssh: run the same `trainledger launch CONFIG --nodes N --hostfile F --run-id ID`
    on every node (torchrun's static rendezvous on the hostfile's first host; docs/CAPTURE.md)."""
    from trainledger.runs.launch import (
        LaunchRequest,
        check_config_allowed,
        prepare,
        record_process,
        start,
        wait_attached,
    )
    from trainledger.store.db import get_engine, resolve_url, session_scope
    from trainledger.store.envsettings import check_settings

    check_settings()  # the ranks read them: a bad one is one line and exit 2 before anything starts
    check_config_allowed(config)

    url = resolve_url(db)
    req = LaunchRequest(config=config, nodes=nodes, gpus_per_node=gpus_per_node, hostfile=hostfile, launcher=launcher,
                        node_type=node_type, offer=offer, project=project, user=user, name=name, steps=steps,
                        metrics_port=metrics_port, node_rank=node_rank, master_addr=master_addr,
                        master_port=master_port, run_id=run_id)
    with session_scope(get_engine(url)) as s:
        prep = prepare(s, req, url)
    if launcher == "slurm":
        import shutil

        from trainledger.runs.launch import submit

        sbatch = shutil.which("sbatch")
        if sbatch:
            with session_scope(get_engine(url)) as s:
                job = submit(s, prep, sbatch)
            emit({"run_id": prep.run_id, "script": str(prep.script), "submitted": True, "job_id": job["job_id"],
                  "cluster": job["cluster"]}, as_json,
                 lambda d: f"{d['run_id']}\nsubmitted {d['script']} as Slurm job {d['job_id']}; "
                           "`trainledger slurm sync` records its allocation")
        else:
            emit({"run_id": prep.run_id, "script": str(prep.script), "submitted": False}, as_json,
                 lambda d: f"{d['run_id']}\nsbatch not found here; submit {d['script']} on the cluster")
        return
    proc = start(prep, url, detach)
    if not req.node_rank:  # node 1.. of a multi-node launch: node 0's launch holds the run's processes
        with session_scope(get_engine(url)) as s:
            record_process(s, prep.run_id, proc.pid)
    if detach:
        emit({"run_id": prep.run_id, "pid": proc.pid, "log": str(prep.log_path)}, as_json,
             lambda d: f"{d['run_id']}\nrunning in the background (pid {d['pid']}); log: {d['log']}")
        return
    if not as_json:
        typer.echo(f"{prep.run_id}  (log: {prep.log_path})", err=True)
    code = wait_attached(proc)
    with session(db) as s:
        from trainledger.store.models import Run

        run = s.get(Run, prep.run_id)
        status = run.status.value if run is not None else "unknown"
    emit({"run_id": prep.run_id, "status": status, "exit_code": code, "log": str(prep.log_path)}, as_json,
         lambda d: f"{d['run_id']} {d['status']} (exit {d['exit_code']})")
    if code != 0:
        raise typer.Exit(1)


@app.command("cancel")
@command
def runs_cancel(run_id: Annotated[str, typer.Argument(help="Run id.")],
                grace: Annotated[float, typer.Option(help="Seconds to wait after SIGTERM before SIGKILL.")] = 30.0,
                db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Stop a launched run and its whole process group (it ends as cancelled)."""
    from trainledger.runs.launch import cancel

    with session(db) as s:
        data = cancel(s, run_id, grace)
    emit(data, as_json, lambda d: f"{d['run_id']} {d['status']}")


@command
def sync(journal_dir: Annotated[Optional[Path], typer.Option(help="Journal directory (default: $TRAINLEDGER_JOURNAL_DIR or the user data dir).")] = None,
         show_quarantine: Annotated[bool, typer.Option("--show-quarantine", help="List the quarantined events (events the ledger refused, with the reason) instead of replaying.")] = False,
         retry_quarantine: Annotated[bool, typer.Option("--retry-quarantine", help="Apply the quarantined events again (after fixing their cause); those that still fail stay.")] = False,
         db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Replay run journals into the ledger (idempotent: nothing lost, nothing doubled).

    An event the ledger refuses is quarantined with its reason beside its journal and never stops the
    others (docs/CAPTURE.md)."""
    from trainledger.sources.record.journal import default_journal_dir
    from trainledger.sources.record.replay import quarantined, replay_all
    from trainledger.sources.record.replay import retry_quarantine as retry
    from trainledger.store.db import get_engine

    directory = Path(journal_dir) if journal_dir else default_journal_dir()
    if show_quarantine:
        rows = quarantined(directory)
        emit({"quarantined": rows}, as_json, lambda d: "\n".join(
            f"{r['journal']} seq {r['seq'] if r['seq'] is not None else '-'} ({r['type'] or 'corrupt line'}): {r['reason']}"
            for r in d["quarantined"]) or "nothing quarantined")
        return
    engine = get_engine(db)
    if retry_quarantine:
        emit(retry(engine, directory), as_json,
             lambda d: f"{d['applied']} quarantined events applied; {d['still_quarantined']} still quarantined")
        return
    applied = replay_all(engine, directory)
    left = len(quarantined(directory))
    emit({"applied": applied, "quarantined": left}, as_json,
         lambda d: ("\n".join(f"{k}: {v} events" for k, v in d["applied"].items()) or "nothing to replay")
         + (f"\n{left} quarantined event{'s' if left != 1 else ''}: see `trainledger sync --show-quarantine`"
            if left else ""))


@command
def sweep(config: ConfigArg,
          strategies: Annotated[str, typer.Option(help="Comma list of dp,zero1,zero2,zero3,pp,tp,3d.")] = "dp,zero1,zero2,zero3,pp,tp,3d",
          steps: Annotated[int, typer.Option(help="Steps per strategy.", min=1)] = 20,
          nodes: Annotated[int, typer.Option(help="Nodes per run.", min=1)] = 1,
          gpus_per_node: Annotated[Optional[int], typer.Option(help="GPUs (processes) per node (3d uses at least 4).")] = None,
          hostfile: Annotated[Optional[Path], typer.Option()] = None,
          launcher: Annotated[str, typer.Option(help="torchrun | deepspeed")] = "torchrun",
          node_type: Annotated[Optional[str], typer.Option(help="Node type the runs are costed as (default: $TRAINLEDGER_NODE_TYPE; none: recorded, not costed).")] = None,
          project: Annotated[Optional[str], typer.Option()] = None,
          db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Run each strategy for N steps as tracked runs sharing a sweep id (pre-scaling trial).

    Ctrl-C / SIGTERM cancels the running strategy and stops the sweep (exit 130).
    """
    from trainledger.reports.weekly import strategy_comparison
    from trainledger.runs.launch import check_config_allowed
    from trainledger.runs.sweep import SweepRequest, parse_strategies, run_sweep
    from trainledger.store.db import resolve_url
    from trainledger.store.envsettings import check_settings

    check_settings()  # the ranks read them: a bad one is one line and exit 2 before anything starts
    check_config_allowed(config)

    req = SweepRequest(config=config, strategies=parse_strategies(strategies), steps=steps, nodes=nodes,
                       gpus_per_node=gpus_per_node, hostfile=hostfile, launcher=launcher, node_type=node_type,
                       project=project)
    # the runs write to this terminal too: the bar is redrawn only as a strategy starts or ends (live=False)
    with progress.bar("sweep", total=len(req.strategies), unit="strategies", live=False) as bar:
        outcome = run_sweep(resolve_url(db), req,
                            on_start=lambda i, n, strat, run_id: typer.echo(f"[{i}/{n}] {strat}: run {run_id}", err=True),
                            progress=bar if bar.drawn else None)
    with session(db) as s:
        table_data = strategy_comparison(s, sweep_id=outcome.sweep_id)
    emit({"sweep_id": outcome.sweep_id, "runs": outcome.runs, "comparison": table_data,
          "calibration": outcome.calibration}, as_json,
         lambda d: f"sweep {d['sweep_id']}: " + ", ".join(f"{r['strategy']}={'ok' if r['exit_code'] == 0 else 'exit ' + str(r['exit_code'])}" for r in d["runs"])
         + f"\nsee `trainledger report weekly --sweep {d['sweep_id']}`" + calibration_line(d["calibration"]))
    if outcome.stopped_by:
        typer.echo(f"sweep stopped by {outcome.stopped_by} after {len(outcome.runs)} of {len(req.strategies)} strategies", err=True)
        raise typer.Exit(130)


def calibration_line(c: Optional[dict]) -> str:
    """The sweep's calibration in one line (``trainledger plan calibrate`` for the factors)."""
    if not c:
        return ""
    if not c["calibrations"]:
        return f"\nnot calibrated: {c['reason']}"
    return "".join(f"\nplanner {x['label']} for {x['node_type']} ({x['device']}): see `trainledger plan calibrate "
                   f"--help`" for x in c["calibrations"])


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="runs")
    root.command("launch")(launch)
    root.command("sync")(sync)
    root.command("sweep")(sweep)
