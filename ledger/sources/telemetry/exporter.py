"""Prometheus metrics of a tracked run, served from the process that trains (or wraps) it.

One exporter per trainer rank, per ``trainledger run`` wrapper (one per node)
and per ``trainledger.track`` process that asks for one. Names follow the
Prometheus conventions (``trainledger_`` prefix, base units, ``_total``
counters, ratios 0–1, labels ``run_id``/``node``/``rank``); ``trainledger
collect`` reads them back (:mod:`trainledger.sources.telemetry.collect`). A series appears only
once it has a value: missing is never exported as zero.
"""

from __future__ import annotations

from typing import Any, Optional


class Exporter:
    """Per-process Prometheus metrics (base units, ``_total`` counters, labels run_id/node/rank).

    ``rank``: the trainer rank, or ``node`` for a wrapper's node-level series.
    """

    def __init__(self, port: int, addr: str, run_id: str, node: str, rank: int | str, source: str,
                 allowed_hosts: tuple[str, ...] = ()):
        from prometheus_client import CollectorRegistry, Counter, Gauge
        from trainledger.sources.telemetry.metrics_http import serve

        self.registry = CollectorRegistry()
        labels = ["run_id", "node", "rank"]
        self.tokens = Counter("trainledger_tokens", "Tokens processed by the run (global batch × seq len per step).",
                              labels, registry=self.registry)
        self.step = Gauge("trainledger_step_seconds", "Wall time of the last optimizer step.", labels,
                          registry=self.registry)
        self.loss = Gauge("trainledger_loss", "Training loss of the last step.", labels, registry=self.registry)
        self.util = Gauge("trainledger_gpu_utilization_ratio",
                          "Device busy share 0-1 (source=nvml on GPUs; cpu: process CPU share on CPU-only runs).",
                          labels + ["source"], registry=self.registry)
        self.mem = Gauge("trainledger_gpu_memory_used_bytes", "Device memory in use (process RSS on CPU-only runs).",
                         labels, registry=self.registry)
        self.lv = dict(run_id=run_id, node=node, rank=str(rank))
        self.source = source
        # labelled children, looked up once (``labels()`` costs ~10× the update) and made on first use
        self._children: dict[str, Any] = {}
        # the hardened server of every /metrics endpoint: Host allow-list, timeouts, bounded connections
        self.server, self.thread = serve(self.registry, addr, port, allowed_hosts)

    def _child(self, name: str, metric, **extra):
        c = self._children.get(name)
        if c is None:
            c = self._children[name] = metric.labels(**self.lv, **extra)
        return c

    def on_step(self, metrics: dict, tokens: Optional[int]) -> None:
        """One step: ``tokens`` processed, ``metrics["step_time_s"]`` and ``metrics["loss"]`` when known."""
        if tokens:
            self._child("tokens", self.tokens).inc(tokens)
        if metrics.get("step_time_s") is not None:
            self._child("step", self.step).set(metrics["step_time_s"])
        if metrics.get("loss") is not None:
            self._child("loss", self.loss).set(metrics["loss"])

    def on_sample(self, util: Optional[float], mem: Optional[int]) -> None:
        if util is not None:
            self._child("util", self.util, source=self.source).set(util)
        if mem is not None:
            self._child("mem", self.mem).set(mem)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
