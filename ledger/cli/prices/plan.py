"""``trainledger plan``: the cheapest parallel plan that fits, priced with the ledger's offers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, decimal_option, emit, group, session

app = group("Plan a training run: which cluster, strategy and offer trains a model on T tokens most cheaply.")

PLAN_COLUMNS = ["rank", "offer", "nodes", "plan", "memory", "step", "tokens_per_s", "days", "cost",
                "cost_per_1m_tokens", "bottleneck", "calibration"]
CALIBRATION_COLUMNS = ["id", "node_type", "device", "n_runs", "sweep_id", "compute", "intra_comm", "inter_comm",
                       "bubble", "memory", "memory_fixed", "step_range", "memory_range"]
TRIAL_COLUMNS = ["name", "from_plan", "nodes", "gpus_per_node", "n_layers", "predicted_step_time_s",
                 "predicted_memory_gib", "status", "measured_step_time_s", "measured_memory_gib"]


def _text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import table

    m = d["model"]
    c = d["counts"]
    lines = [f"{m['name']} ({m['params']:,} parameters), {d['tokens']:,.0f} tokens, "
             f"{d['tokens_per_step']:,} tokens per step (global batch {d['global_batch']}); ranked by {d['rank_by']}.",
             "PREDICTED by the planning model (docs/PLANNER.md), not measured.", ""]
    rows = [dict(p, plan=f"{p['plan']} ({p['node_type']})", memory=_ranged(p["total_gib"], p["memory_range_gib"], "GiB"),
                 step=_ranged(p["step_time_s"], p["step_time_range_s"], "s")) for p in d["plans"]]
    lines.append(table(rows, PLAN_COLUMNS) if rows else "No plan fits: see the reasons below.")
    discarded = ", ".join(f"{n:,} {k}" for k, n in c["discarded"].items()) or "none"
    lines += ["", f"{c['candidates']:,} candidate plans ({c['plans_evaluated']:,} layouts × offers): "
                  f"{c['kept']:,} kept; discarded: {discarded}."]
    for k in c["discarded"]:
        ex = next(e for e in d["discarded"] if e["kind"] == k)
        lines.append(f"  e.g. {ex['plan']} on {ex['nodes']} × {ex['node_type']}: {ex['reason']}")
    for h in d["hardware"]:
        lines.append(f"{h['node_type']}: efficiency {h['efficiency']:.0%} ({h['efficiency_source']}); links {h['links']}.")
    if d.get("trial"):
        t = d["trial"]
        lines += ["", f"pre-scale trial on {t['nodes']} node(s), {t['steps']} steps per run"
                      + (f" — sweep {t['sweep_id']}" if t.get("sweep_id") else "") + ":",
                  table(t["runs"], TRIAL_COLUMNS)]
        lines += [f"  skipped {s['plan']} ({s['nodes']} nodes): {s['reason']}" for s in t["skipped"]]
        if t.get("configs_dir") and not t.get("ran"):
            lines.append(f"configs in {t['configs_dir']}; run them with --trial --run")
    return "\n".join(lines)


def _ranged(value: float, span: Optional[list[float]], unit: str) -> str:
    """``1.23 s [1.10–1.40]``: a prediction with the calibration's range (none when uncalibrated)."""
    text = f"{value:,.3g} {unit}"
    return text + (f" [{span[0]:,.3g}–{span[1]:,.3g}]" if span else "")


def _pct_span(span: Optional[list[float]]) -> str:
    return f"{span[0]:+.0%}..{span[1]:+.0%}" if span else "-"


def _calibration_text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import table

    rows = [{**c, **{k: f"{v:.3g}" + ("" if c["fitted"].get(k) else " (not fitted)") for k, v in c["factors"].items()},
             "step_range": _pct_span(c["step_range"]), "memory_range": _pct_span(c["memory_range"])}
            for c in d["calibrations"]]
    return ("Factors of the planning model fitted to measured runs (1 = the model as written; ranges: measured ÷ "
            "fitted − 1 over the runs used).\n" + table(rows, CALIBRATION_COLUMNS))


@app.command("calibrate")
@command
def calibrate(
    node_type: Annotated[Optional[str], typer.Option("--node-type", help="Calibrate only this node type (default: every node type with measured runs).")] = None,
    from_sweep: Annotated[Optional[str], typer.Option("--from-sweep", help="Fit only the runs of this sweep.")] = None,
    db: DbOpt = None, as_json: JsonOpt = False,
) -> None:
    """Fit the planning model's factors (compute, intra-/inter-node communication, pipeline bubble, memory)
    to the ledger's succeeded runs with a known plan, per node type, by least squares; store each calibration
    with the runs used and their residuals. `plan recommend` then uses the newest one (docs/PLANNER.md)."""
    from trainledger.runs.calibrate import calibrate as fit_and_store

    with session(db) as s:
        data = {"calibrations": fit_and_store(s, node_type=node_type, sweep_id=from_sweep)}
    emit(data, as_json, _calibration_text)


@app.command("recommend")
@command
def recommend(
    model: Annotated[str, typer.Option(help="Model shape (trainer/shapes.py), e.g. llama2-70b, llama3-8b, 7b.")],
    tokens: Annotated[str, typer.Option(help="Tokens to train on: 2e12, 300B, 2T.")],
    node_type: Annotated[Optional[str], typer.Option("--node-type", help="Comma list of node types (default: every one with an offer).")] = None,
    offers: Annotated[Optional[str], typer.Option(help="Comma list of offers (default: all, one currency).")] = None,
    nodes: Annotated[str, typer.Option(help="Node counts: 8, 1..64 or 2,4,8.")] = "1..64",
    deadline: Annotated[Optional[str], typer.Option(help="Longest acceptable training time: 30d, 36h, 2w.")] = None,
    budget: Annotated[Optional[str], typer.Option(help="Most the run may cost, in the offers' currency.")] = None,
    batch_tokens: Annotated[int, typer.Option(help="Tokens per optimizer step (global batch × seq len).", min=1)] = 4 * 2**20,
    micro_batches: Annotated[str, typer.Option(help="Micro-batch sizes to try (comma list).")] = "1,2,4,8",
    strategies: Annotated[str, typer.Option(help="Strategies to try: dp,zero1,zero2,zero3,pp,tp,3d.")] = "dp,zero1,zero2,zero3,pp,tp,3d",
    recompute: Annotated[str, typer.Option(help="Activation recomputation to try: none,full.")] = "none,full",
    rank_by: Annotated[str, typer.Option(help="cost (total, then time) or time (then cost).")] = "cost",
    top: Annotated[int, typer.Option(help="How many plans to list.", min=1, max=1000)] = 10,
    trial: Annotated[bool, typer.Option(help="Turn the best plans into a pre-scale trial sweep (configs written).")] = False,
    trial_nodes: Annotated[int, typer.Option(help="Nodes of the trial cluster.", min=1, max=4096)] = 2,
    trial_count: Annotated[int, typer.Option(help="How many of the best plans to trial.", min=1, max=20)] = 3,
    trial_steps: Annotated[int, typer.Option(help="Steps per trial run.", min=1)] = 10,
    run: Annotated[bool, typer.Option(help="With --trial: run the trial now as a tracked sweep.")] = False,
    hostfile: Annotated[Optional[Path], typer.Option(help="With --run on 2+ nodes: DeepSpeed hostfile.")] = None,
    launcher: Annotated[str, typer.Option(help="With --run: torchrun (one node) or deepspeed.")] = "torchrun",
    project: Annotated[Optional[str], typer.Option(help="With --run: the project the trial runs are booked to.")] = None,
    currency: Annotated[Optional[str], typer.Option("--currency", help="Present costs in this ISO 4217 currency (list prices at today's exchange rate, see `trainledger fx`); default: the Settings currency once set.")] = None,
    db: DbOpt = None, as_json: JsonOpt = False,
) -> None:
    """Rank every plan (offer × nodes × strategy × tp/pp × micro-batch × recompute) that fits in GPU memory
    and passes the trainer's plan validation, by total cost.

    Costs: rent_elastic = nodes × billed hours × hourly rate; rent_reserved = nodes × whole months
    (⌈hours ÷ 730⌉: a reserved node is paid for the whole month, used or not, as in the monthly
    report) × monthly price; own = node-hours × full-use rate. Every figure is PREDICTED
    (docs/PLANNER.md). --trial --run trains the trial as one tracked sweep.
    """
    from trainledger.errors import LedgerInputError
    from trainledger.runs import plan as planner
    from trainledger.trainer.plan.memory import RECOMPUTE

    if run and not trial:
        raise LedgerInputError("--run: runs the trial; add --trial")
    req = planner.RecommendRequest(
        model=model, tokens=planner.parse_tokens(tokens),
        node_types=[n.strip() for n in node_type.split(",") if n.strip()] if node_type else None,
        offers=[o.strip() for o in offers.split(",") if o.strip()] if offers else None,
        nodes=planner.parse_nodes(nodes),
        deadline_days=planner.parse_duration_days(deadline) if deadline else None,
        budget=decimal_option(budget, "--budget") if budget is not None else None,
        batch_tokens=batch_tokens, micro_batches=planner.parse_ints(micro_batches, "--micro-batches", 1, 4096),
        strategies=planner.parse_choices(strategies, planner.STRATEGIES, "--strategies"),
        recompute=planner.parse_choices(recompute, RECOMPUTE, "--recompute"), rank_by=rank_by, top=top,
        currency=currency)
    with session(db) as s:
        data = planner.recommend(s, req)
        if trial:
            data["trial"] = planner.trial_plan(s, data, nodes=trial_nodes, count=trial_count, steps=trial_steps)
    if trial:
        _write_and_run_trial(data["trial"], run, db, hostfile, launcher, project)
    emit(data, as_json, _text)


def _write_and_run_trial(trial: dict[str, Any], run: bool, db: Optional[str], hostfile: Optional[Path],
                         launcher: str, project: Optional[str]) -> None:
    """Write the trial configs; with ``run``, run them as one tracked sweep and attach its comparison."""
    from trainledger.errors import LedgerInputError
    from trainledger.runs.plan import attach_measured, write_trial
    from trainledger.runs.sweep import SweepRequest, config_dir, new_sweep_id, run_sweep
    from trainledger.store.db import resolve_url

    sweep_id = new_sweep_id()
    paths = write_trial(trial, sweep_id)
    trial["configs_dir"] = str(config_dir() / sweep_id)
    trial["ran"] = False
    if not run:
        return
    if not paths:
        raise LedgerInputError("--run: no plan could be shrunk to the trial cluster (see the skipped reasons)")
    first = trial["runs"][0]
    req = SweepRequest(config=paths[first["name"]], strategies=list(paths), nodes=trial["nodes"],
                       gpus_per_node=first["gpus_per_node"], hostfile=hostfile, launcher=launcher,
                       node_type=first["node_type"], project=project, sweep_id=sweep_id, configs=paths,
                       processes_by_name={e["name"]: e["gpus_per_node"] for e in trial["runs"]})
    outcome = run_sweep(resolve_url(db), req, on_start=lambda i, n, name, run_id: typer.echo(
        f"[{i}/{n}] {name}: run {run_id}", err=True))
    trial.update(sweep_id=outcome.sweep_id, ran=True)
    with session(db) as s:
        attach_measured(s, trial, outcome.runs)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="plan")
