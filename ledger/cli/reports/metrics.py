"""``trainledger collect``: GPU, power, energy and network figures of runs from Prometheus.

Exit status of ``collect``: 0 when Prometheus answered (series it lacks are
warned about and stored as missing), 1 when Prometheus could not be reached
(one warning line; the runs' figures are stored as missing and the next
collect fills them) or the ledger could not be reached, 2 on bad input.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, warn


def _fmt_pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.1%}"


def _collect_text(d: dict[str, Any]) -> str:
    lines = []
    for r in d["runs"]:
        if not r["nodes"]:
            continue
        energy = "—" if r["energy_kwh"] is None else f"{r['energy_kwh']:.4g} kWh"
        utils = [n.get("gpu_util_mean") for n in r["nodes"]]
        util = _fmt_pct(sum(utils) / len(utils)) if utils and all(u is not None for u in utils) else "—"
        head = f"run {r['run_id']}: {len(r['nodes'])} nodes, GPU-Util (dcgm) {util}, energy {energy}, step {r['step_s']} s"
        if r.get("nodes_from"):
            head += f" (nodes from {r['nodes_from']})"
        lines.append(head)
        for s in r["stragglers"]:
            lines.append(f"  straggler {s['hostname']}: {'; '.join(s['reasons'])}")
    lines += d["notes"]
    if not lines:
        lines.append("no runs with nodes in the window" if d["reachable"] else "nothing collected")
    return "\n".join(lines)


@command
def collect_command(
        prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Prometheus URL (default: $TRAINLEDGER_PROMETHEUS_URL, else http://127.0.0.1:9090).", show_default=False)] = None,
        run: Annotated[Optional[str], typer.Option("--run", help="One run (id or a unique prefix of 6+ characters).")] = None,
        since: Annotated[Optional[str], typer.Option("--since", help="Runs active since DATE (YYYY-MM-DD in the display time zone, or an ISO time); default: the last 24 hours.")] = None,
        node_label: Annotated[Optional[list[str]], typer.Option("--node-label", help="Label naming a series' node, tried in order (repeat or comma-separate): Hostname (DCGM exporter), instance (port stripped). Default: Hostname,instance.")] = None,
        util_margin: Annotated[float, typer.Option(help="Straggler: GPU-Util below the run's median by more than this (ratio points; 0.15 = 15 percentage points).")] = 0.15,
        nic_margin: Annotated[float, typer.Option(help="Communication-blocked: NIC rx+tx below the run's median by more than this share of it.")] = 0.30,
        min_step: Annotated[int, typer.Option(help="Smallest downsampling step in seconds (step = max(this, window ÷ 300), rounded up to 1, 2, 5, 10, 15, 30 s, 1 min ...).")] = 15,
        rate_window: Annotated[int, typer.Option(help="Counter series: rate over max(step, this many seconds).")] = 60,
        timeout: Annotated[float, typer.Option(help="Seconds to wait for each Prometheus answer.", min=0.1, max=3600)] = 10.0,
        db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Pull GPU (DCGM), power, energy and network (node_exporter) figures of runs from Prometheus.

    Stores per-node summaries (RunNode) and downsampled series (MetricSample),
    flags stragglers and communication-blocked nodes. Missing data is stored as
    missing, never as zero; running it again fills what was missing and stores
    nothing twice. Exit 1 when Prometheus cannot be reached.
    """
    from trainledger.sources.telemetry.collect import DEFAULT_NODE_LABELS, CollectOptions, collect
    from trainledger.store.db import get_engine

    kwargs: dict[str, Any] = {"node_labels": tuple(node_label) if node_label else DEFAULT_NODE_LABELS,
                              "util_margin": util_margin, "nic_margin": nic_margin, "min_step_s": min_step,
                              "rate_window_s": rate_window, "timeout_s": timeout}
    if prometheus:
        kwargs["prometheus_url"] = prometheus
    opts = CollectOptions(**kwargs)
    data = collect(get_engine(db), opts, run_id=run, since=since)
    for w in data["warnings"]:
        warn(w)
    emit(data, as_json, _collect_text)
    if not data["reachable"]:
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.command("collect")(collect_command)
