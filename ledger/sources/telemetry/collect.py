"""Metrics from Prometheus: ``trainledger collect`` (SPEC §7, docs/PROMETHEUS.md).

For each run's window [started_at, ended_at or now] and nodes, the collector
asks Prometheus (prometheus-api-client) for

* DCGM exporter series, names verbatim: ``DCGM_FI_DEV_GPU_UTIL`` (percent →
  ratio 0-1), ``DCGM_FI_DEV_FB_USED`` (MiB → bytes), ``DCGM_FI_DEV_POWER_USAGE``
  (W), ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ counter → kWh by
  ``increase`` over the window) and ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio;
  absent on GeForce cards: noted, not an error);
* node_exporter ``node_network_{receive,transmit}_bytes_total`` and, where the
  InfiniBand collector runs, ``node_infiniband_port_data_{received,transmitted}_bytes_total``
  (``rate`` → bytes/s);
* the trainer's own ``trainledger_*`` series of the run (``run_id`` label).

It stores one summary per node in ``RunNode`` (GPU-Util mean/p95 with
``util_source="dcgm"``, memory peak, energy, NIC throughput, straggler flag)
and downsampled series in ``MetricSample`` (step = the first of 1, 2, 5, 10,
15, 30 s, 1, 2, 5, 10, 15, 30 min, 1 h ... at or above max(min step, window ÷
300), on a grid aligned to the epoch, so a finished run always gets the same
grid).

Missing is never zero: a series Prometheus does not have, or a Prometheus
that cannot be reached, leaves the summary field as it was (``None`` if never
measured) and stores the series' grid points with ``value=None``. Samples are
inserted once per (run, node, gpu, metric, ts); a later collect fills a
``None`` point (upsert *where value IS NULL*) but never rewrites a measured one.

Series are mapped to nodes by a label: DCGM exporter's ``Hostname`` first,
else ``instance`` with the port stripped (``--node-label``, in order). The
trainer's series carry their node in the ``node`` label.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from datetime import time as dtime
from typing import Any, Callable, Iterable, Optional, Sequence
from urllib.parse import urlparse

from sqlalchemy import delete, or_
from sqlalchemy.engine import Engine
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.rates.months import run_interval
from trainledger.store.ingest import insert_samples
from trainledger.store.models import MetricSample, Run, RunNode, RunStatus
from trainledger.store.types import utcnow

ENV_PROMETHEUS = "TRAINLEDGER_PROMETHEUS_URL"
DEFAULT_PROMETHEUS = "http://127.0.0.1:9090"
DEFAULT_NODE_LABELS = ("Hostname", "instance")

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
NET_RX = "node_network_receive_bytes_total"
NET_TX = "node_network_transmit_bytes_total"
IB_RX = "node_infiniband_port_data_received_bytes_total"
IB_TX = "node_infiniband_port_data_transmitted_bytes_total"

MIB = 2**20
MJ_PER_KWH = 3.6e9  # 1 kWh = 3.6e6 J = 3.6e9 mJ
#: network devices that never carry training traffic (loopback, containers, bridges, overlays)
NETDEV_EXCLUDE = "lo|veth.*|docker.*|br-.*|virbr.*|cali.*|flannel.*|cni.*|tunl.*|vxlan.*"
STEP_LADDER_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)

#: MetricSample.metric names this module writes (units in the name; ratios 0-1)
M_UTIL = "dcgm_gpu_util"
M_FB = "dcgm_fb_used_bytes"
M_POWER = "dcgm_power_watts"
M_GR = "dcgm_gr_engine_active"
M_RX = "nic_rx_bytes_per_s"
M_TX = "nic_tx_bytes_per_s"
M_TOKENS = "trainer_tokens_per_s"
M_LOSS = "trainer_loss"
M_STEP = "trainer_step_seconds"
M_TRAINER_UTIL = "trainer_gpu_util"  # trainer_cpu_util on CPU-only runs (source label "cpu")
COLLECT_METRICS = (M_UTIL, M_FB, M_POWER, M_GR, M_RX, M_TX, M_TOKENS, M_LOSS, M_STEP, M_TRAINER_UTIL, "trainer_cpu_util")
#: per-node series whose absence is a warning (values stored as missing)
EXPECTED = {M_UTIL: GPU_UTIL, M_FB: FB_USED, M_POWER: POWER, M_RX: NET_RX, M_TX: NET_TX}


@dataclass
class CollectOptions:
    """How to reach Prometheus, map series to nodes, downsample and flag stragglers."""

    prometheus_url: str = field(default_factory=lambda: os.environ.get(ENV_PROMETHEUS) or DEFAULT_PROMETHEUS)
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS
    util_margin: float = 0.15  # GPU-Util below the run's median by more than 15 percentage points
    nic_margin: float = 0.30  # NIC throughput below the run's median by more than 30%
    min_step_s: int = 15
    max_points: int = 300
    rate_window_s: int = 60  # counters: rate over max(step, this) (a few scrape intervals)
    timeout_s: float = 10.0
    netdev_exclude: str = NETDEV_EXCLUDE

    def __post_init__(self) -> None:
        u = urlparse(self.prometheus_url or "")
        if u.scheme not in ("http", "https") or not u.netloc:
            raise LedgerInputError(f"--prometheus: expected a URL such as http://127.0.0.1:9090, got {self.prometheus_url!r}")
        self.prometheus_url = self.prometheus_url.rstrip("/")
        labels = tuple(x.strip() for name in self.node_labels for x in name.split(",") if x.strip())
        if not labels:
            raise LedgerInputError("--node-label: give at least one label, e.g. Hostname or instance")
        self.node_labels = labels
        if not 0 <= self.util_margin < 1:
            raise LedgerInputError(f"--util-margin: expected a ratio in [0, 1) such as 0.15, got {self.util_margin}")
        if not 0 <= self.nic_margin < 1:
            raise LedgerInputError(f"--nic-margin: expected a ratio in [0, 1) such as 0.3, got {self.nic_margin}")
        if self.min_step_s < 1 or self.max_points < 1 or self.rate_window_s < 1:
            raise LedgerInputError("--min-step, max points and --rate-window must be at least 1")


class PrometheusUnreachable(RuntimeError):
    """Prometheus did not answer (connection error, timeout, 5xx)."""


# --- Prometheus access -----------------------------------------------------------

class Prometheus:
    """The few queries the collector needs, over prometheus-api-client's ``PrometheusConnect``."""

    def __init__(self, opts: CollectOptions):
        from prometheus_api_client import PrometheusConnect
        from urllib3.util.retry import Retry

        # a short retry: an unreachable server must cost seconds, not minutes
        retry = Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])
        self.url = opts.prometheus_url
        self.client = PrometheusConnect(url=opts.prometheus_url, retry=retry, timeout=opts.timeout_s)

    def _call(self, fn: Callable[[], Any]) -> Any:
        import requests
        from prometheus_api_client import PrometheusApiClientException

        try:
            return fn()
        except requests.RequestException as exc:
            raise PrometheusUnreachable(_reason(exc)) from None
        except PrometheusApiClientException as exc:
            text = str(exc)
            if "Status Code 400" in text or "Status Code 422" in text:  # a bad query is our bug: say so loudly
                raise RuntimeError(f"Prometheus rejected a query: {text[:300]}") from None
            raise PrometheusUnreachable(text.splitlines()[0][:200]) from None  # 5xx, or 401/403 from a proxy

    def probe(self) -> None:
        self._call(lambda: self.client.custom_query("vector(1)"))

    def instant(self, query: str, at: datetime) -> list[dict]:
        return self._call(lambda: self.client.custom_query(query, params={"time": f"{at.timestamp():.3f}"}))

    def range(self, query: str, start: datetime, end: datetime, step_s: int) -> list[dict]:
        return self._call(lambda: self.client.custom_query_range(query, start_time=start, end_time=end, step=str(step_s)))

    def close(self) -> None:
        self.client.close()


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "Connection refused" in text or "NewConnectionError" in text:
        text = "connection refused"
    elif "timed out" in text.lower():
        text = "timed out"
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def _value(v: Any) -> Optional[float]:
    """A Prometheus sample value as float; NaN/Inf are missing, not numbers."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


# --- windows and grids -------------------------------------------------------------

def pick_step(window_s: float, min_step_s: int = 15, max_points: int = 300) -> int:
    """Downsampling step in seconds: the first ladder value ≥ max(min step, window ÷ max points)."""
    need = max(float(min_step_s), window_s / max_points)
    for s in STEP_LADDER_S:
        if s >= need:
            return s
    return int(math.ceil(need / 86400.0)) * 86400


def grid(start: datetime, end: datetime, step_s: int) -> list[datetime]:
    """Sample times: multiples of ``step_s`` since the epoch inside [start, end] (at least one)."""
    a, b = start.timestamp(), end.timestamp()
    first = math.ceil(a / step_s) * step_s
    pts = []
    t = first
    while t <= b + 1e-9:
        pts.append(datetime.fromtimestamp(t, timezone.utc))
        t += step_s
    if not pts:
        pts.append(datetime.fromtimestamp(math.floor(b), timezone.utc))
    return pts


def _dur(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (at least 1 s)."""
    return f"{max(1000, int(round(seconds * 1000)))}ms"


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# --- label → node ------------------------------------------------------------------

def strip_port(instance: str) -> str:
    """``host:9100`` → ``host``; ``[::1]:9100`` → ``::1``; a bare IPv6 address is left alone."""
    if instance.startswith("["):
        return instance[1:instance.index("]")] if "]" in instance else instance
    if instance.count(":") == 1:
        return instance.split(":", 1)[0]
    return instance


def node_of(labels: dict[str, str], node_labels: Sequence[str]) -> Optional[str]:
    """The node a series belongs to: the first of ``node_labels`` it carries (``instance`` without its port)."""
    for name in node_labels:
        value = labels.get(name)
        if value:
            return strip_port(value) if name == "instance" else value
    return None


def _matcher(hosts: Iterable[str]) -> Callable[[Optional[str]], Optional[str]]:
    """Map a series' node name to one of the run's hostnames (exact, else the same short name)."""
    hosts = list(hosts)
    exact = set(hosts)
    short: dict[str, list[str]] = {}
    for h in hosts:
        short.setdefault(h.split(".")[0], []).append(h)

    def match(name: Optional[str]) -> Optional[str]:
        if not name:
            return None
        if name in exact:
            return name
        cands = short.get(name.split(".")[0], [])
        return cands[0] if len(cands) == 1 else None

    return match


def _gpu(labels: dict[str, str]) -> int:
    try:
        return int(labels.get("gpu", -1))
    except ValueError:
        return -1


# --- one run -------------------------------------------------------------------------

@dataclass
class _RunWindow:
    run_id: str
    nodes: int
    hostnames: list[str]
    start: datetime
    end: datetime
    live: bool


def _windows(session: Session, run_id: Optional[str], since: Optional[datetime], now: datetime) -> list[_RunWindow]:
    from trainledger.store.lookup import get_run

    if run_id:
        runs = [get_run(session, run_id)]
    else:
        runs = session.exec(select(Run).where(
            Run.started_at.is_not(None), Run.started_at <= now,
            or_(Run.ended_at.is_(None), Run.ended_at >= since)).order_by(Run.started_at, Run.id)).all()
    ids = [r.id for r in runs]
    hosts: dict[str, list[str]] = {}
    if ids:
        for rid, host in session.exec(select(RunNode.run_id, RunNode.hostname).where(RunNode.run_id.in_(ids))
                                      .order_by(RunNode.node_rank, RunNode.hostname)).all():
            hosts.setdefault(rid, []).append(host)
    out = []
    for r in runs:
        status = r.status.value
        iv = run_interval(r.started_at, r.ended_at, status, r.heartbeat_at, now)
        if iv is None:
            continue
        s, e = iv
        if e <= s:
            continue
        out.append(_RunWindow(r.id, r.nodes, hosts.get(r.id, []), s, e, r.ended_at is None and status == RunStatus.running.value))
    return out


@dataclass
class _Fetched:
    """Everything Prometheus returned for one run window (labels kept, nodes mapped later)."""

    instant: dict[str, list[dict]]
    ranged: dict[str, list[dict]]


def _queries(opts: CollectOptions, run_id: str, window: str, step_s: int) -> tuple[dict[str, str], dict[str, str]]:
    net = f'{{device!~"{opts.netdev_exclude}"}}'
    rw = f"{max(step_s, opts.rate_window_s)}s"
    st = f"{step_s}s"
    rid = f'{{run_id="{_quote(run_id)}"}}'
    instant = {
        "util_mean": f"avg_over_time({GPU_UTIL}[{window}])",
        "util_p95": f"quantile_over_time(0.95, {GPU_UTIL}[{window}])",
        "fb_peak": f"max_over_time({FB_USED}[{window}])",
        "power_mean": f"avg_over_time({POWER}[{window}])",
        "energy": f"increase({ENERGY}[{window}])",
        "gr_mean": f"avg_over_time({GR_ACTIVE}[{window}])",
        "rx": f"rate({NET_RX}{net}[{window}])",
        "tx": f"rate({NET_TX}{net}[{window}])",
        "ib_rx": f"rate({IB_RX}[{window}])",
        "ib_tx": f"rate({IB_TX}[{window}])",
        "tokens": f"increase(trainledger_tokens_total{rid}[{window}])",
    }
    ranged = {
        M_UTIL: f"avg_over_time({GPU_UTIL}[{st}])",
        M_FB: f"max_over_time({FB_USED}[{st}])",
        M_POWER: f"avg_over_time({POWER}[{st}])",
        M_GR: f"avg_over_time({GR_ACTIVE}[{st}])",
        "rx": f"rate({NET_RX}{net}[{rw}])",
        "tx": f"rate({NET_TX}{net}[{rw}])",
        "ib_rx": f"rate({IB_RX}[{rw}])",
        "ib_tx": f"rate({IB_TX}[{rw}])",
        M_TOKENS: f"rate(trainledger_tokens_total{rid}[{rw}])",
        M_LOSS: f"avg_over_time(trainledger_loss{rid}[{st}])",
        M_STEP: f"max_over_time(trainledger_step_seconds{rid}[{st}])",
        M_TRAINER_UTIL: f"avg_over_time(trainledger_gpu_utilization_ratio{rid}[{st}])",
    }
    return instant, ranged


def _fetch(prom: Prometheus, opts: CollectOptions, w: _RunWindow, step_s: int, pts: list[datetime]) -> _Fetched:
    window = _dur((w.end - w.start).total_seconds())
    iq, rq = _queries(opts, w.run_id, window, step_s)
    instant = {k: prom.instant(q, w.end) for k, q in iq.items()}
    ranged = {k: prom.range(q, pts[0], pts[-1], step_s) for k, q in rq.items()}
    return _Fetched(instant, ranged)


def _run_hosts(w: _RunWindow, f: _Fetched, opts: CollectOptions) -> tuple[list[str], Optional[str]]:
    """The run's hostnames: its RunNodes, else the trainer's series of the run, else the DCGM hosts
    of the window when there are exactly as many as the run has nodes. Returns (hosts, how)."""
    if w.hostnames:
        return w.hostnames, None
    trainer = sorted({r["metric"].get("node") for r in f.instant.get("tokens", []) + f.ranged.get(M_TRAINER_UTIL, [])
                      if r["metric"].get("node")})
    if trainer:
        return trainer, "trainer series"
    dcgm = sorted({n for r in f.instant.get("util_mean", []) if (n := node_of(r["metric"], opts.node_labels))})
    if dcgm and len(dcgm) == w.nodes:
        return dcgm, "DCGM series"
    if dcgm:
        return [], f"{len(dcgm)} hosts report DCGM metrics in the run's window but the run has {w.nodes} nodes; record its nodes (trainer --metrics-port, or RunNode rows) to collect it"
    return [], None


def _per_node(results: list[dict], match: Callable[[Optional[str]], Optional[str]], opts: CollectOptions,
              label: Optional[str] = None) -> dict[str, dict[int, list[float]]]:
    """{host: {gpu: [values]}} of an instant vector, mapped to the run's hosts."""
    out: dict[str, dict[int, list[float]]] = {}
    for r in results:
        labels = r["metric"]
        host = match(labels.get(label) if label else node_of(labels, opts.node_labels))
        v = _value(r["value"][1])
        if host is None or v is None:
            continue
        out.setdefault(host, {}).setdefault(_gpu(labels), []).append(v)
    return out


def _mean(xs: Sequence[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def _gpu_means(d: dict[int, list[float]]) -> dict[int, float]:
    return {g: sum(v) / len(v) for g, v in d.items()}


def _netdev_ok(labels: dict[str, str], has_ib: bool) -> bool:
    # IPoIB interfaces (ib*) carry traffic the InfiniBand port counters already count
    return not (has_ib and labels.get("device", "").startswith("ib"))


@dataclass
class NodeFigures:
    hostname: str
    gpu_util_mean: Optional[float] = None
    gpu_util_p95: Optional[float] = None
    mem_peak_bytes: Optional[int] = None
    power_watts: Optional[float] = None
    energy_kwh: Optional[float] = None
    energy_basis: Optional[str] = None  # "counter" (DCGM energy) | "power" (mean power × hours)
    gr_engine_active: Optional[float] = None
    nic_rx_bytes_per_s: Optional[float] = None
    nic_tx_bytes_per_s: Optional[float] = None
    straggler: Optional[bool] = None
    straggler_reasons: list[str] = field(default_factory=list)


def summarize(f: _Fetched, hosts: list[str], window_s: float, opts: CollectOptions) -> dict[str, NodeFigures]:
    """Per-node summaries over the whole window (see the module docstring for units)."""
    match = _matcher(hosts)
    nodes = {h: NodeFigures(h) for h in hosts}
    util = _per_node(f.instant["util_mean"], match, opts)
    p95 = _per_node(f.instant["util_p95"], match, opts)
    fb = _per_node(f.instant["fb_peak"], match, opts)
    power = _per_node(f.instant["power_mean"], match, opts)
    energy = _per_node(f.instant["energy"], match, opts)
    gr = _per_node(f.instant["gr_mean"], match, opts)
    ib_rx = _per_node(f.instant["ib_rx"], match, opts)
    ib_tx = _per_node(f.instant["ib_tx"], match, opts)
    for h, n in nodes.items():
        if h in util:
            n.gpu_util_mean = _mean(list(_gpu_means(util[h]).values())) / 100.0  # percent → ratio
        if h in p95:
            n.gpu_util_p95 = _mean(list(_gpu_means(p95[h]).values())) / 100.0
        if h in fb:
            n.mem_peak_bytes = int(round(max(max(v) for v in fb[h].values()) * MIB))  # MiB → bytes
        if h in power:
            n.power_watts = sum(_gpu_means(power[h]).values())  # the node's GPUs together
        if h in energy:
            n.energy_kwh = sum(_gpu_means(energy[h]).values()) / MJ_PER_KWH  # mJ → kWh
            n.energy_basis = "counter"
        elif n.power_watts is not None:
            n.energy_kwh = n.power_watts * window_s / 3.6e6  # W × s → kWh
            n.energy_basis = "power"
        if h in gr:
            n.gr_engine_active = _mean(list(_gpu_means(gr[h]).values()))
    for key, ib, attr in (("rx", ib_rx, "nic_rx_bytes_per_s"), ("tx", ib_tx, "nic_tx_bytes_per_s")):
        total: dict[str, float] = {}
        for r in f.instant[key]:
            host = match(node_of(r["metric"], opts.node_labels))
            v = _value(r["value"][1])
            if host is None or v is None or not _netdev_ok(r["metric"], host in ib):
                continue
            total[host] = total.get(host, 0.0) + v
        for host, per_gpu in ib.items():
            total[host] = total.get(host, 0.0) + sum(x for vs in per_gpu.values() for x in vs)
        for host, v in total.items():
            setattr(nodes[host], attr, v)
    return nodes


def flag_stragglers(nodes: Iterable[NodeFigures], util_margin: float = 0.15, nic_margin: float = 0.30) -> None:
    """Flag stragglers (GPU-Util below the run's median by more than ``util_margin``, in ratio
    points) and communication-blocked nodes (NIC rx+tx below the median by more than
    ``nic_margin`` of it). Nodes without figures are not judged (``straggler`` stays None)."""
    nodes = list(nodes)
    utils = {n.hostname: n.gpu_util_mean for n in nodes if n.gpu_util_mean is not None}
    nics = {n.hostname: n.nic_rx_bytes_per_s + n.nic_tx_bytes_per_s for n in nodes
            if n.nic_rx_bytes_per_s is not None and n.nic_tx_bytes_per_s is not None}
    med_u = statistics.median(utils.values()) if len(utils) >= 2 else None
    med_n = statistics.median(nics.values()) if len(nics) >= 2 else None
    for n in nodes:
        judged = False
        if med_u is not None and n.hostname in utils:
            judged = True
            if utils[n.hostname] < med_u - util_margin:
                n.straggler_reasons.append(f"GPU-Util {utils[n.hostname]:.1%} vs run median {med_u:.1%}")
        if med_n is not None and med_n > 0 and n.hostname in nics:
            judged = True
            if nics[n.hostname] < med_n * (1 - nic_margin):
                n.straggler_reasons.append(f"communication-blocked: NIC {nics[n.hostname] / 1e6:,.1f} MB/s vs run median {med_n / 1e6:,.1f} MB/s")
        if judged:
            n.straggler = bool(n.straggler_reasons)


def _points(r: dict) -> dict[float, float]:
    """A range-query result as timestamp (ms-rounded seconds) → value, missing values left out."""
    out = {}
    for t, v in r.get("values", []):
        x = _value(v)
        if x is not None:
            out[round(float(t), 3)] = x
    return out


def _combine(per: dict[tuple[str, int], list[dict[float, float]]], how: str) -> dict[tuple[str, int], dict[float, float]]:
    """Several series of one (node, gpu) as one: ``sum`` (a point missing in any series is missing), ``max`` or mean."""
    out = {}
    for key, series in per.items():
        merged: dict[float, list[float]] = {}
        for s in series:
            for t, v in s.items():
                merged.setdefault(t, []).append(v)
        if how == "sum":
            out[key] = {t: sum(v) for t, v in merged.items() if len(v) == len(series)}  # a partial sum is missing
        elif how == "max":
            out[key] = {t: max(v) for t, v in merged.items()}
        else:
            out[key] = {t: sum(v) / len(v) for t, v in merged.items()}
    return out


def series_rows(f: _Fetched, hosts: list[str], pts: list[datetime], opts: CollectOptions) -> tuple[list[list[Any]], dict[str, list[str]]]:
    """Downsampled rows [node, gpu, metric, ts, value] on the grid; ``None`` where a point is missing.

    Returns the rows and, per expected metric, the hosts it was missing for."""
    match = _matcher(hosts)
    keys = [p.timestamp() for p in pts]
    rows: list[list[Any]] = []

    def emit(host: str, gpu: int, metric: str, by_ts: dict[float, Optional[float]]) -> None:
        for p, k in zip(pts, keys):
            rows.append([host, gpu, metric, p, by_ts.get(round(k, 3))])

    seen: dict[str, set[str]] = {m: set() for m in EXPECTED}
    # per GPU (DCGM)
    for metric, scale in ((M_UTIL, 0.01), (M_FB, float(MIB)), (M_POWER, 1.0), (M_GR, 1.0)):
        per: dict[tuple[str, int], list[dict[float, float]]] = {}
        for r in f.ranged[metric]:
            host = match(node_of(r["metric"], opts.node_labels))
            if host is None:
                continue
            per.setdefault((host, _gpu(r["metric"])), []).append({t: v * scale for t, v in _points(r).items()})
        for (host, gpu), by_ts in sorted(_combine(per, "mean").items()):
            emit(host, gpu, metric, by_ts)
            if metric in seen:
                seen[metric].add(host)
    # per node (network: Ethernet devices + InfiniBand ports)
    ib_hosts = {match(node_of(r["metric"], opts.node_labels)) for k in ("ib_rx", "ib_tx") for r in f.ranged[k]}
    for metric, net, ib in ((M_RX, "rx", "ib_rx"), (M_TX, "tx", "ib_tx")):
        per = {}
        for is_netdev, results in ((True, f.ranged[net]), (False, f.ranged[ib])):
            for r in results:
                host = match(node_of(r["metric"], opts.node_labels))
                if host is None or (is_netdev and not _netdev_ok(r["metric"], host in ib_hosts)):
                    continue
                per.setdefault((host, -1), []).append(_points(r))
        for (host, gpu), by_ts in sorted(_combine(per, "sum").items()):
            emit(host, gpu, metric, by_ts)
            seen[metric].add(host)
    # the trainer's own series: run-level (node "", gpu -1), utilization per node
    for metric, how in ((M_TOKENS, "max"), (M_LOSS, "mean"), (M_STEP, "max")):
        series = [_points(r) for r in f.ranged[metric]]
        if series:
            emit("", -1, metric, _combine({("", -1): series}, how)[("", -1)])
    per = {}
    names = {}
    for r in f.ranged[M_TRAINER_UTIL]:
        host = match(r["metric"].get("node"))
        if host is None:
            continue
        per.setdefault((host, -1), []).append(_points(r))
        names[host] = "trainer_cpu_util" if r["metric"].get("source") == "cpu" else M_TRAINER_UTIL
    for (host, gpu), by_ts in sorted(_combine(per, "mean").items()):
        emit(host, gpu, names[host], by_ts)
    # expected series that Prometheus does not have at all: the whole grid is missing
    missing: dict[str, list[str]] = {}
    for metric in EXPECTED:
        for host in hosts:
            if host not in seen[metric]:
                emit(host, -1, metric, {})
                missing.setdefault(EXPECTED[metric], []).append(host)
    return rows, missing


def placeholder_rows(hosts: list[str], pts: list[datetime]) -> list[list[Any]]:
    """Prometheus unreachable: every expected per-node series is missing on the whole grid."""
    return [[h, -1, m, p, None] for h in hosts for m in EXPECTED for p in pts]


def store_samples(session: Session, run_id: str, rows: list[list[Any]]) -> int:
    """Insert samples once per (run, node, gpu, metric, ts); fill a stored ``None`` with a value.

    The run's ``None`` placeholders of collected metrics are dropped first (a
    running run's grid moves as it grows; missing points are written again if
    still missing), so nothing is stored twice and a measured value is never
    rewritten. Returns the number of rows written.
    """
    session.execute(delete(MetricSample).where(MetricSample.run_id == run_id, MetricSample.value.is_(None),
                                               MetricSample.metric.in_(COLLECT_METRICS)))
    if not rows:
        return 0
    return insert_samples(session, rows, run_id=run_id, fill_missing=True)


def _apply_nodes(session: Session, run_id: str, figures: dict[str, NodeFigures]) -> None:
    """Write the measured fields into RunNode (create rows for new hosts); missing stays as it was."""
    existing = {n.hostname: n for n in session.exec(select(RunNode).where(RunNode.run_id == run_id)).all()}
    for rank, (host, f) in enumerate(sorted(figures.items())):
        node = existing.get(host)
        if node is None:
            node = RunNode(run_id=run_id, hostname=host, node_rank=rank)
            session.add(node)
        if f.gpu_util_mean is not None:
            node.gpu_util_mean, node.util_source = f.gpu_util_mean, "dcgm"
            if f.gpu_util_p95 is not None:
                node.gpu_util_p95 = f.gpu_util_p95
        for attr in ("mem_peak_bytes", "energy_kwh", "nic_rx_bytes_per_s", "nic_tx_bytes_per_s"):
            value = getattr(f, attr)
            if value is not None:
                setattr(node, attr, value)
        if f.straggler is not None:
            node.straggler = f.straggler
    session.flush()
    run = session.get(Run, run_id)
    utils = [f.gpu_util_mean for f in figures.values()]
    # the run's own GPU-Util: from DCGM when no one measured it (import, Slurm) or DCGM did before;
    # the trainer's per-rank NVML figure is not overwritten
    if utils and all(u is not None for u in utils) and run.util_source in (None, "dcgm"):
        run.gpu_util_mean = sum(utils) / len(utils)
        p95s = [f.gpu_util_p95 for f in figures.values()]
        run.gpu_util_p95 = sum(p95s) / len(p95s) if all(p is not None for p in p95s) else run.gpu_util_p95
        run.util_source = "dcgm"


# --- the command ---------------------------------------------------------------------

def parse_since(text: Optional[str], tz, now: datetime) -> datetime:
    """``--since``: YYYY-MM-DD (midnight in the display time zone) or an ISO time; default 24 h ago."""
    if not text:
        return now - timedelta(days=1)
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), dtime(0), tzinfo=tz).astimezone(timezone.utc)
        ts = datetime.fromisoformat(text)
    except ValueError:
        raise LedgerInputError(f"--since: expected YYYY-MM-DD or an ISO time such as 2026-11-03T08:00, got {text!r}") from None
    return (ts if ts.tzinfo else ts.replace(tzinfo=tz)).astimezone(timezone.utc)


def collect(engine: Engine, opts: Optional[CollectOptions] = None, *, run_id: Optional[str] = None,
            since: Optional[str] = None, now: Optional[datetime] = None) -> dict[str, Any]:
    """``trainledger collect``: pull each run's GPU, power and network figures from Prometheus.

    Reads the runs in one short transaction, queries Prometheus outside any
    transaction (a SQLite ledger stays writable for running trainers), then
    writes each run in its own transaction. Returns a JSON-ready dict with
    ``reachable`` (False: Prometheus could not be reached; figures stored as
    missing), ``warnings`` (one line each), ``notes`` and one entry per run.
    """
    from trainledger.store.settings import display_timezone

    opts = opts or CollectOptions()
    now = now or utcnow()
    if run_id and since:
        raise LedgerInputError("collect: pass --run ID or --since DATE, not both")
    with Session(engine) as s:
        tz = display_timezone(s)
        windows = _windows(s, run_id, parse_since(since, tz, now) if not run_id else None, now)
    result: dict[str, Any] = {"prometheus": opts.prometheus_url, "reachable": True, "runs": [], "warnings": [], "notes": []}
    prom = Prometheus(opts)
    unreachable: Optional[str] = None
    try:
        try:
            prom.probe()
        except PrometheusUnreachable as exc:
            unreachable = str(exc)
        for w in windows:
            window_s = (w.end - w.start).total_seconds()
            step_s = pick_step(window_s, opts.min_step_s, opts.max_points)
            pts = grid(w.start, w.end, step_s)
            fetched = None
            if unreachable is None:
                try:
                    fetched = _fetch(prom, opts, w, step_s, pts)
                except PrometheusUnreachable as exc:  # went away mid-collect: the rest is missing too
                    unreachable = str(exc)
            result["runs"].append(_store_one(engine, opts, w, step_s, pts, fetched, result))
    finally:
        prom.close()
    if unreachable is not None:
        result["reachable"] = False
        stored = sum(1 for r in result["runs"] if r["nodes"])
        result["warnings"].insert(0, f"Prometheus at {opts.prometheus_url} unreachable ({unreachable}); "
                                     f"GPU, power and network figures of {stored} run(s) stored as missing; "
                                     "run `trainledger collect` again to fill them")
    return result


def _store_one(engine: Engine, opts: CollectOptions, w: _RunWindow, step_s: int, pts: list[datetime],
               fetched: Optional[_Fetched], result: dict) -> dict[str, Any]:
    """Summaries, stragglers and series of one run, written in one transaction."""
    window_s = (w.end - w.start).total_seconds()
    out: dict[str, Any] = {"run_id": w.run_id, "start": w.start, "end": w.end, "live": w.live, "step_s": step_s,
                           "nodes": [], "energy_kwh": None, "stragglers": [], "missing": {}, "samples_written": 0}
    if fetched is None:  # Prometheus unreachable: the run's known nodes get missing points
        with _write(engine) as s:
            out["samples_written"] = store_samples(s, w.run_id, placeholder_rows(w.hostnames, pts))
        out["nodes"] = [{"hostname": h} for h in w.hostnames]
        out["missing"] = {m: list(w.hostnames) for m in EXPECTED.values()} if w.hostnames else {}
        return out
    hosts, how = _run_hosts(w, fetched, opts)
    if not hosts:
        result["warnings"].append(f"run {w.run_id}: {how or 'no series of its nodes in Prometheus for its window; nothing stored'}")
        return out
    if how:
        out["nodes_from"] = how
    figures = summarize(fetched, hosts, window_s, opts)
    flag_stragglers(figures.values(), opts.util_margin, opts.nic_margin)
    rows, missing = series_rows(fetched, hosts, pts, opts)
    with _write(engine) as s:
        _apply_nodes(s, w.run_id, figures)
        out["samples_written"] = store_samples(s, w.run_id, rows)
    out["missing"] = missing
    if missing:
        result["warnings"].append(f"run {w.run_id}: no " + "; no ".join(f"{m} for {', '.join(h)}" for m, h in missing.items())
                                  + " in Prometheus; stored as missing")
    no_gr = [h for h, f in figures.items() if f.gr_engine_active is None and f.gpu_util_mean is not None]
    if no_gr:
        result["notes"].append(f"run {w.run_id}: {GR_ACTIVE} absent for {', '.join(no_gr)} (GeForce cards, or DCGM "
                               "profiling off): GPU-Util there is DCGM_FI_DEV_GPU_UTIL only")
    out["nodes"] = [vars(f).copy() for f in figures.values()]
    energies = [f.energy_kwh for f in figures.values()]
    out["energy_kwh"] = sum(energies) if energies and all(e is not None for e in energies) else None
    out["stragglers"] = [{"hostname": f.hostname, "reasons": f.straggler_reasons} for f in figures.values() if f.straggler]
    tokens = [t for r in fetched.instant["tokens"] if (t := _value(r["value"][1])) is not None]
    out["tokens_per_s"] = max(tokens) / window_s if tokens else None  # every rank counts the run's tokens
    return out


def _write(engine: Engine):
    from trainledger.store.db import session_scope

    return session_scope(engine)

