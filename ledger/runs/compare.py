"""Runs side by side: ``trainledger runs compare A B C`` and the dashboard's Compare page (``/compare?runs=A,B,C``).

For each run: its **config** (parallel layout, batch, model, hardware), its **figures** (as ``trainledger runs show``
prints them: cost is ``cost_actual``, the run's monthly report lines summed; cost per 1M tokens, node- and GPU-hours,
tokens/s, step time, GPU-Util, MFU, final loss), and its **series** on one time axis, hours since the run started (each point ``{"hours": h, NAME: value}``):

* ``loss`` and ``step_seconds``: the run's samples of those metrics (the tracked trainer, the callbacks, the API);
* ``tokens_per_s``: Δ tokens ÷ Δ seconds between consecutive ``tokens`` samples (cumulative tokens);
* ``utilization``: the run's GPU-Util samples (``gpu_util``, NVML or DCGM busy share; ``cpu_util`` on a CPU run,
  labelled as such), the mean over its nodes and GPUs at each sample time;
* ``cumulative``: the cumulative cost (points ``{"hours", "cost"}``): 0 at the start, then at the end of each month's part of the run the sum of its
  monthly lines so far (``cost_by_month``), so its last point is the run's cost; between points each month's cost is
  drawn evenly over the run's hours in that month (a straight line), not measured.

``differs``: the config keys whose values are not the same for every run (the table marks them). MFU is null on CPU
(no peak FLOPs to divide by); GPU-Util and time utilization are different figures (docs/METRICS.md).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates.months import month_bounds, run_interval
from trainledger.runs.registry import show_run
from trainledger.store.models import MetricSample
from trainledger.store.settings import display_timezone
from trainledger.store.types import report_clock

#: the most runs one comparison takes (a chart of more lines is unreadable; the URL stays short)
MAX_RUNS = 8
#: config keys, in the table's order
CONFIG_KEYS = ("strategy", "dp", "tp", "pp", "zero_stage", "micro_batch", "grad_accum", "seq_len", "model_shape",
               "params", "node_type", "nodes", "gpus_per_node", "world_size", "launcher", "project", "user")
#: figures, in the table's order (each as ``runs show`` gives it)
FIGURE_KEYS = ("status", "cost_actual", "cost_per_1m_tokens", "node_hours", "gpu_hours", "tokens", "tokens_per_s",
               "step_time_median_s", "gpu_util_mean", "util_source", "mfu", "final_loss", "finality")
SERIES = ("loss", "step_seconds", "tokens_per_s", "utilization", "cumulative")


def check_ids(raw: Any, flag: str = "RUN_IDS") -> list[str]:
    """Run ids from a list or a comma-separated text, each once, in order; 2 to :data:`MAX_RUNS` of them, else a
    one-line error naming ``flag``."""
    parts = raw.split(",") if isinstance(raw, str) else list(raw)
    ids = list(dict.fromkeys(p.strip() for p in parts if p and p.strip()))
    if len(ids) < 2:
        raise LedgerInputError(f"{flag}: give at least 2 run ids to compare, got {len(ids)}")
    if len(ids) > MAX_RUNS:
        raise LedgerInputError(f"{flag}: at most {MAX_RUNS} runs in one comparison, got {len(ids)}")
    return ids


def _hours(start: datetime, ts: datetime) -> float:
    ts = ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)
    return (ts - start).total_seconds() / 3600


def _samples(session: Session, run_id: str, metrics: tuple[str, ...]) -> dict[str, list[tuple[datetime, float]]]:
    out: dict[str, list[tuple[datetime, float]]] = defaultdict(list)
    rows = session.exec(select(MetricSample.metric, MetricSample.ts, MetricSample.value)
                        .where(MetricSample.run_id == run_id, MetricSample.metric.in_(metrics),
                               MetricSample.value.is_not(None))
                        .order_by(MetricSample.metric, MetricSample.ts, MetricSample.node, MetricSample.gpu)).all()
    for metric, ts, value in rows:
        out[metric].append((ts, float(value)))
    return out


def _mean_per_time(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    by: dict[datetime, list[float]] = defaultdict(list)
    for ts, v in points:
        by[ts].append(v)
    return [(ts, sum(vs) / len(vs)) for ts, vs in sorted(by.items())]


def _rates(tokens: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    """Δ tokens ÷ Δ seconds between consecutive cumulative-token samples, at the later one."""
    out = []
    for (t0, v0), (t1, v1) in zip(tokens, tokens[1:]):
        dt = (t1 - t0).total_seconds()
        if dt > 0 and v1 >= v0:
            out.append((t1, (v1 - v0) / dt))
    return out


def _cost_points(d: dict[str, Any], start: datetime, end: datetime, tz) -> list[tuple[float, Decimal]]:
    """(hours since start, cumulative cost) at the start and at the end of each month's part of the run."""
    points = [(0.0, Decimal(0))]
    total = Decimal(0)
    for line in d["cost_by_month"]:
        total += line["cost"]
        month_end = month_bounds(line["month"], tz)[1]
        points.append((_hours(start, min(month_end, end)), total))
    return points


def compare_runs(session: Session, run_ids: list[str], *, currency: Optional[str] = None,
                 now: Optional[datetime] = None) -> dict[str, Any]:
    """The runs' config, figures and series (see the module's docstring); an unknown run id: a one-line error."""
    ids = check_ids(run_ids)
    now = now or report_clock()
    tz = display_timezone(session)
    runs = []
    for rid in ids:
        d = show_run(session, rid, currency=currency, now=now)
        iv = run_interval(d["started_at"], d["ended_at"], d["status"], d["heartbeat_at"], now)
        start, end = iv if iv else (d["created_at"], d["created_at"])
        start = start if start.tzinfo else start.replace(tzinfo=timezone.utc)
        end = end if end.tzinfo else end.replace(tzinfo=timezone.utc)
        util_metric = "cpu_util" if d.get("util_source") == "cpu" else "gpu_util"
        raw = _samples(session, d["id"], ("loss", "step_seconds", "tokens", util_metric))
        series = {"loss": raw["loss"], "step_seconds": raw["step_seconds"], "tokens_per_s": _rates(raw["tokens"]),
                  "utilization": _mean_per_time(raw[util_metric])}
        cost = d["cost_actual"] if isinstance(d["cost_actual"], Decimal) else None
        runs.append({
            "id": d["id"], "name": d["name"], "currency": d["currency"], "started_at": start, "ended_at": end,
            "config": {k: d.get(k) for k in CONFIG_KEYS},
            "figures": {**{k: d.get(k) for k in FIGURE_KEYS}, "cost_actual": cost,
                        "cost_per_1m_tokens": d["cost_per_1m_tokens"] if cost is not None else None},
            "utilization_metric": util_metric,
            "series": {**{name: [{"hours": _hours(start, ts), name: v} for ts, v in pts] for name, pts in series.items()},
                       "cumulative": ([{"hours": h, "cost": c} for h, c in _cost_points(d, start, end, tz)]
                                      if cost is not None else [])},
        })
    differs = [k for k in CONFIG_KEYS if len({repr(r["config"][k]) for r in runs}) > 1]
    currencies = {r["currency"] for r in runs if r["currency"]}
    return {"runs": runs, "differs": differs, "currency": currencies.pop() if len(currencies) == 1 else None,
            "timezone": str(tz)}
