"""Tracking: every run the trainer executes is written to the ledger as it runs.

Rank 0 owns the run row. Every rank samples its device utilization in a
background thread (NVML on GPUs; on CPU the process CPU utilization,
labelled ``cpu``) and, when asked, serves Prometheus metrics. At the end the
ranks gather their per-node numbers to rank 0, which writes one ``RunNode``
per node.

Nothing here touches the database from the training step: ``on_step`` only
appends numbers the loop already has to a list. A writer thread on rank 0
appends events to the run journal (fsync'd JSON lines, :mod:`trainledger.sources.record.journal`)
and applies them to the ledger every ``flush_s`` seconds. If the ledger is
unreachable, training goes on; the journal keeps everything and the writer
(or ``trainledger sync`` later) replays it idempotently.

Statuses: running on start; succeeded at the end; failed on an exception
(error text recorded); cancelled on SIGTERM/SIGINT. A run killed outright
stops heartbeating and is marked crashed by the reaper at its last heartbeat.
Rank 0's end is one report among the launcher's and the reaper's: the root cause wins, whatever order they
arrive in (:mod:`trainledger.sources.record.outcome`). ``TRAINLEDGER_FLUSH_S``, ``_HEARTBEAT_S`` and
``_LEDGER_WAIT_S`` are read by :func:`tracking_settings` (a bad value: one warning, the default).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional

from trainledger.sources.capture.hold import Holds
from trainledger.sources.capture.signals import RunCancelled, StopSignals, die_with_parent
from trainledger.sources.record.writer import LedgerWriter
from trainledger.sources.telemetry.exporter import Exporter
from trainledger.sources.telemetry.sampling import CpuProbe, NvmlProbe, UtilSampler, owned_gpus, percentile
from trainledger.store.envsettings import FLUSH_S, HEARTBEAT_S, LEDGER_WAIT_S, env_setting, env_step
from trainledger.store.ids import new_run_id

__all__ = ["Exporter", "LedgerTracker", "LedgerWriter", "RunCancelled", "TrackingOptions", "UtilSampler",
           "add_tracking_args", "die_with_parent", "new_run_id", "rank_sampler", "tracker_from_args"]

ENV_RUN_ID = "TRAINLEDGER_RUN_ID"


def _now() -> datetime:
    return datetime.now(timezone.utc)


def rank_sampler(local_rank: int, device: str, interval_s: float = 1.0) -> UtilSampler:
    """This rank's utilization sampler: NVML GPU-Util of its own GPU (the ``local_rank``-th the job owns),
    else (CPU, or no NVML) the process's CPU share of torch's threads, labelled ``cpu``."""
    probe = None
    if device.startswith("cuda"):
        try:
            owned = owned_gpus(os.environ)
            probe = NvmlProbe([owned[local_rank] if owned else str(local_rank)], labels=[local_rank])
        except Exception:  # no NVML: fall back to the process CPU share, labelled as such
            probe = None
    if probe is None:
        import psutil
        import torch

        proc = psutil.Process()
        probe = CpuProbe(lambda: [proc], torch.get_num_threads())
    return UtilSampler(probe, interval_s)


# --- the callback ----------------------------------------------------------------

@dataclass
class TrackingOptions:
    run_id: str = field(default_factory=lambda: os.environ.get(ENV_RUN_ID) or new_run_id())
    db_url: Optional[str] = None
    journal_dir: Optional[Path] = None
    name: str = ""
    node_type: Optional[str] = None  # None: recorded, not costed (never a guessed node type)
    offer: Optional[str] = None
    project: Optional[str] = None
    user: Optional[str] = None
    sweep_id: Optional[str] = None
    launcher: str = "local"
    config: Optional[dict] = None
    gpus_per_node: Optional[int] = None
    metrics_port: Optional[int] = None
    metrics_addr: str = "127.0.0.1"
    flush_s: float = FLUSH_S.default
    heartbeat_s: float = HEARTBEAT_S.default
    ledger_wait_s: float = LEDGER_WAIT_S.default  # at the end, how long to wait for an unreachable ledger before leaving it to `sync`
    util_interval_s: float = 1.0
    sample_every: int = 0  # 0: every step up to 1,000 steps, then ~1,000 points


class LedgerTracker:
    """Trainer callback (see :class:`trainledger.trainer.engine.Callback`) that records the run in the ledger."""

    def __init__(self, options: TrackingOptions):
        self.o = options
        self.rank = 0
        self.writer: Optional[LedgerWriter] = None
        self.sampler: Optional[UtilSampler] = None
        self.exporter: Optional[Exporter] = None
        self.info: dict = {}
        self._pending: list[list[Any]] = []
        self._every = 1
        self.signals = StopSignals(self._journal_error)
        self.phases = None  # rank 0: phase timing for the goodput account (trainledger.sources.record.phases)
        self._steps: list[tuple] = []  # rank 0: (begin, end, own data wait) of steps waiting for the ranks' figures
        self._step_end_at = 0.0
        self._closed = False  # the writer is closed: nothing more can be recorded
        self._handed_at = time.monotonic()
        # fault injection for tests and drills: raise in the training step at this step
        self._fault_step = env_step()  # a bad value is said once and injects nothing
        self._holds = Holds()  # test-only: TRAINLEDGER_TEST_HOLD (ledger/sources/capture/hold.py); inert when unset

    @property
    def run_id(self) -> str:
        return self.o.run_id

    # -- hooks --
    def on_start(self, info: dict) -> None:
        self.info = info
        self.rank = info["rank"]
        die_with_parent()
        self.signals.install()
        self.sampler = rank_sampler(info["local_rank"], info["device"], self.o.util_interval_s)
        self.sampler.start()
        if self.o.metrics_port is not None:
            port = self.o.metrics_port + info["local_rank"] if self.o.metrics_port else 0
            self.exporter = Exporter(port, self.o.metrics_addr, self.o.run_id,
                                     info["hostname"], self.rank, self.sampler.source)
            threading.Thread(target=self._export_samples, daemon=True, name="trainledger-export").start()
        steps = info["steps"]
        self._every = self.o.sample_every or max(1, -(-steps // 1000))
        if self.rank != 0:
            return
        from trainledger.sources.record.journal import default_journal_dir

        self.writer = LedgerWriter(self.o.db_url, Path(self.o.journal_dir or default_journal_dir()), self.o.run_id,
                                   self.o.flush_s, self.o.heartbeat_s)
        plan, shape = info["plan"], info["shape"]
        now = _now()
        gpn = self.o.gpus_per_node or (info["world_size"] // max(1, info["nodes"]))
        self.writer.put({"type": "run", "fields": {
            "name": self.o.name or f"{plan['strategy']}-{shape['name']}", "status": "running",
            "offer": self.o.offer, "project": self.o.project, "user": self.o.user,
            "launcher": self.o.launcher, "nodes": info["nodes"], "gpus_per_node": gpn,
            "world_size": info["world_size"], "strategy": plan["strategy"], "dp": plan["dp"], "tp": plan["tp"],
            "pp": plan["pp"], "zero_stage": plan["zero_stage"], "micro_batch": plan["micro_batch"],
            "grad_accum": plan["grad_accum"], "model_shape": shape["name"], "params": info["params"],
            "n_layers": shape["n_layers"], "hidden": shape["d_model"], "heads": shape["n_heads"],
            "seq_len": shape["seq_len"], "sweep_id": self.o.sweep_id,
            "config": {"train": self.o.config, "deepspeed": info["deepspeed_config"], "device": info["device"],
                       "backend": info["backend"], "precision": info["precision"]},
            "started_at": now.isoformat(), "heartbeat_at": now.isoformat(), "ended_at": None,
            "tokens_per_epoch": info["samples_per_epoch"] * shape["seq_len"], "error": None, "exit_code": None,
            # no node type: leave what `trainledger launch` registered; a run of its own is recorded, not costed
            **({"node_type": self.o.node_type} if self.o.node_type else {}),
        }})
        if not self.o.node_type and self.o.launcher == "local":
            from trainledger.store.defaults import warn_not_costed

            warn_not_costed(self.o.run_id, None)
        self.writer.put({"type": "nodes", "rows": _start_nodes(info, now)})
        self._attach_phases(now, info["hostname"])
        if self.o.launcher == "local":  # not started by `trainledger launch`, which records its own process
            self.writer.queue.put({"type": "run", "fields": {"hostname": info["hostname"], "pid": os.getpid()}})
        self.writer.flush()
        self.writer.start()

    def _attach_phases(self, started: datetime, hostname: str) -> None:
        """Steps, data waits, straggler waits and checkpoint saves for the goodput account, aggregated on the
        writer thread: a step began ``step_time_s`` before ``on_step``; its data wait (the ranks' mean time
        blocked on the next batch) is at its start and the straggler wait from every rank's busy time
        (``on_rank_steps``: the steps wait on rank 0 until the ranks' figures arrive); a save runs from the
        step's end to ``on_checkpoint``; start-up is from the run's registration to the first step."""
        from trainledger.sources.record.phases import PhaseRecorder, PhaseSource, ledger_timezone

        self.phases = PhaseRecorder()
        self.writer.sources.append(PhaseSource(self.phases, started.timestamp(), hostname,
                                               ledger_timezone(self.writer)).events)

    def _phase_step(self, seconds: float, data_wait: Optional[float]) -> None:
        t = time.time()
        self._steps.append((t - max(0.0, float(seconds or 0.0)), t, data_wait))
        self._step_end_at = t

    def _record_steps(self, figures: Optional[list] = None) -> None:
        """Rank 0's waiting steps into the phase recorder, with the ranks' figures when they came (else its own
        data wait and no straggler figure: a run that failed between two gathers)."""
        from trainledger.sources.record.phases import RANKS, SPAN, STEP_BEGIN, STEP_END

        events = []
        for i, (begin, end, own_wait) in enumerate(self._steps):
            ranks = figures[i] if figures is not None and i < len(figures) else None
            waits = [r[0] for r in ranks if r[0] is not None] if ranks else []
            wait = sum(waits) / len(waits) if waits else own_wait
            events.append((STEP_BEGIN, None, begin))
            if wait:
                wait = min(float(wait), end - begin)
                events.append((SPAN, ("data", wait), begin + wait))
            busy = [r[1] for r in ranks] if ranks else []
            if len(busy) > 1 and None not in busy:
                events.append((RANKS, tuple(busy), end))
            events.append((STEP_END, None, end))
        self._steps = []
        self.phases.events += events

    def on_rank_steps(self, first_step: int, figures: list) -> None:
        """Every rank's (data wait, busy) of the steps since the last call (:meth:`trainledger.trainer.engine.Callback.on_rank_steps`)."""
        if self.rank == 0 and self.phases is not None:
            self._record_steps(figures)

    def on_step(self, step: int, metrics: dict) -> None:
        if step == self._fault_step:
            raise RuntimeError(f"injected fault at step {step} (TRAINLEDGER_FAULT_STEP)")
        if self.exporter is not None:
            self.exporter.on_step(metrics, self.info["tokens_per_step"])
        if self.rank != 0:
            self._holds.after(step + 1)
            return
        if self.phases is not None:
            self._phase_step(metrics.get("step_time_s"), metrics.get("data_wait_s"))
        if step % self._every == 0 or step == self.info["steps"] - 1:
            ts = _now().isoformat()
            self._pending.append(["", -1, "loss", ts, metrics["loss"]])
            self._pending.append(["", -1, "step_seconds", ts, metrics["step_time_s"]])
            self._pending.append(["", -1, "tokens", ts, metrics["tokens"]])
            now = time.monotonic()  # hand over every flush interval so live views see the loss
            if len(self._pending) >= 300 or now - self._handed_at >= self.o.flush_s:
                self._hand_over_samples()
                self._handed_at = now
        if self.writer.error is not None:
            raise self.writer.error
        self._holds.after(step + 1, self._hand_over_samples)

    def on_end(self, result) -> None:
        import torch.distributed as dist

        self.sampler.stop()
        mine = {"hostname": self.info["hostname"], "rank": self.rank, "local_rank": self.info["local_rank"],
                "util": self.sampler.summary(), "peak_memory_bytes": result.peak_memory_bytes[self.rank],
                "comm_share": None}
        gathered = [None] * self.info["world_size"]
        if dist.is_initialized():
            dist.all_gather_object(gathered, mine)
        else:
            gathered = [mine]
        self._close_exporter()
        if self.rank != 0:
            return
        self.signals.finishing = True  # from here on, signals must not cut rank 0's final write short
        if self.phases is not None:
            self._record_steps()
        self._hand_over_samples()
        nodes_rows, samples, util_mean, util_p95, source = self._per_node(gathered, result)
        self.writer.put({"type": "samples", "rows": samples})
        self.writer.put({"type": "nodes", "rows": nodes_rows})
        self.writer.put({"type": "run", "fields": {
            "status": "succeeded", "ended_at": _now().isoformat(), "steps": result.steps, "tokens": result.tokens,
            "step_time_median_s": result.step_time_median_s, "step_time_p95_s": result.step_time_p95_s,
            "tokens_per_s": result.tokens_per_s, "mfu": result.mfu, "gpu_util_mean": util_mean,
            "gpu_util_p95": util_p95, "util_source": source, "peak_mem_bytes": max(result.peak_memory_bytes),
            "mem_kind": result.memory_kind, "comm_share": result.comm_share, "final_loss": result.final_loss,
            "exit_code": 0, "nodes": result.nodes,
        }})
        self._finish(fail_if_lost=True)

    def on_checkpoint(self, step: int, path: str) -> None:
        """A checkpoint of the first ``step`` steps is saved: lost work, if the run dies, starts here."""
        if self.rank == 0 and self.writer is not None and not self._closed:
            if self.phases is not None:  # the save ran from the step's end to now
                self._record_steps()  # (the engine gathered the ranks' figures just before: none wait)
                self.phases.checkpoint(time.time() - self._step_end_at if self._step_end_at else None)
            self.writer.put({"type": "checkpoint", "ts": _now().isoformat(), "step": step, "path": str(path)})

    def on_error(self, exc: BaseException) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self._close_exporter()
        if self.rank != 0 or self.writer is None or self._closed:
            return
        self.signals.finishing = True  # a SIGTERM from the launcher (stopping the ranks) must not cut the final write short
        cancelled = isinstance(exc, (RunCancelled, KeyboardInterrupt))
        text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:1000] if not cancelled else None
        if self.phases is not None:
            self._record_steps()  # the steps since the last gather, without the other ranks' figures
        self._hand_over_samples()
        summary = self.sampler.summary() if self.sampler else {"mean": None, "p95": None, "source": None}
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.info["hostname"], "node_rank": 0, "status": "cancelled" if cancelled else "failed",
            "gpu_util_mean": summary["mean"],
            "gpu_util_p95": summary["p95"], "util_source": summary["source"]}]})
        self.writer.put({"type": "run", "fields": {
            "status": "cancelled" if cancelled else "failed", "ended_at": _now().isoformat(),
            "error": text if not cancelled else "cancelled by signal", "exit_code": 130 if cancelled else 1,
            "gpu_util_mean": summary["mean"], "gpu_util_p95": summary["p95"], "util_source": summary["source"],
        }})
        self._finish()

    # -- helpers --
    def _hand_over_samples(self) -> None:
        if self._pending and self.writer is not None:
            self.writer.put({"type": "samples", "rows": self._pending})
            self._pending = []

    def _per_node(self, gathered: list[dict], result) -> tuple[list[dict], list[list], Optional[float], Optional[float], Optional[str]]:
        hosts: dict[str, list[dict]] = {}
        for g in gathered:
            hosts.setdefault(g["hostname"], []).append(g)
        order = sorted(hosts, key=lambda h: min(g["rank"] for g in hosts[h]))
        rows, samples, all_vals = [], [], []
        source = None
        for node_rank, host in enumerate(order):
            ranks = hosts[host]
            vals = [v for g in ranks for v in g["util"]["values"]]
            all_vals += vals
            source = source or ranks[0]["util"]["source"]
            rows.append({"hostname": host, "node_rank": node_rank, "status": "succeeded",
                         "gpu_util_mean": sum(vals) / len(vals) if vals else None,
                         "gpu_util_p95": percentile(vals, 95) if vals else None,
                         "util_source": ranks[0]["util"]["source"],
                         "mem_peak_bytes": max(g["peak_memory_bytes"] for g in ranks),
                         "step_time_share": (1 - result.comm_share) if result.comm_share is not None else None})
            metric = "gpu_util" if ranks[0]["util"]["source"] != "cpu" else "cpu_util"
            for g in ranks:
                for t, v in g["util"]["series"]:
                    samples.append([host, g["local_rank"], metric, datetime.fromtimestamp(t, timezone.utc).isoformat(), v])
        mean = sum(all_vals) / len(all_vals) if all_vals else None
        return rows, samples, mean, (percentile(all_vals, 95) if all_vals else None), source

    def _finish(self, fail_if_lost: bool = False) -> None:
        # our handlers stay until the end is journaled: a SIGTERM/SIGUSR1 must not kill the process
        # (their default action) half-way through its final write; waiting for the ledger may be cut short
        self._closed = True
        try:
            ok = self.writer.close(self.o.ledger_wait_s, on_durable=self.signals.restore)
        finally:
            self.signals.restore()
        if fail_if_lost and not ok and self.writer.error is not None:
            raise self.writer.error  # neither the journal nor the ledger has the end of this run: exit non-zero

    def _export_samples(self) -> None:
        while self.sampler is not None and self.sampler.is_alive() and self.exporter is not None:
            self.exporter.on_sample(self.sampler.last(), self.sampler.memory_bytes)
            time.sleep(self.o.util_interval_s)

    def _close_exporter(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None

    def _journal_error(self) -> BaseException:
        """What SIGUSR1 (the writer thread: the journal failed) raises in the training step."""
        from trainledger.sources.record.journal import JournalWriteError

        err = self.writer.error if self.writer else None
        if isinstance(err, JournalWriteError):
            return JournalWriteError(str(err))
        return RuntimeError(f"run tracking failed: {type(err).__name__}: {err}" if err else "run journal failed")


def _start_nodes(info: dict, now: datetime) -> list[dict]:
    """One ``running`` row per node (in rank order) at the start: a node that dies before the end is still
    in the run (``trainledger launch`` marks a node that never reported its end ``crashed``)."""
    hosts: dict[str, int] = {}
    for h in info.get("hostnames") or [info["hostname"]]:
        hosts[h] = hosts.get(h, 0) + 1
    return [{"hostname": h, "node_rank": i, "status": "running", "processes": n, "heartbeat_at": now.isoformat()}
            for i, (h, n) in enumerate(hosts.items())]


# --- entry-point glue (python -m trainledger.trainer.train --track ...) -----------------------------

def add_tracking_args(parser) -> None:
    """The ``--track`` options of ``python -m trainledger.trainer.train`` (set by ``trainledger launch``)."""
    g = parser.add_argument_group("tracking (record the run in the trainledger ledger)")
    g.add_argument("--track", action="store_true", help=f"record the run; implied by ${ENV_RUN_ID}")
    g.add_argument("--db", default=None, help="ledger URL (default: $TRAINLEDGER_DB_URL, else the embedded SQLite file)")
    g.add_argument("--run-id", default=None, help=f"run id (default: ${ENV_RUN_ID}, else a new one)")
    g.add_argument("--name", default="", help="run name")
    g.add_argument("--node-type", default=None, help="node type the run is costed as (default: "
                   "$TRAINLEDGER_NODE_TYPE; none: the run is recorded but not costed)")
    g.add_argument("--offer", default=None, help="offer the node-hours are paid under")
    g.add_argument("--project", default=None)
    g.add_argument("--user", default=None)
    g.add_argument("--sweep-id", default=None)
    g.add_argument("--launcher", default="local", help="how the run was started (recorded)")
    g.add_argument("--gpus-per-node", type=int, default=None, help="GPUs per node to record (default: ranks per node)")
    g.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on PORT + local_rank (default off; 0 picks a free port)")
    g.add_argument("--metrics-addr", default="127.0.0.1", help="address of the metrics endpoint (0.0.0.0 for a cluster Prometheus)")
    g.add_argument("--journal-dir", default=None, help="run journal directory (default: $TRAINLEDGER_JOURNAL_DIR or the user data dir)")


def check_tracking_args(args) -> None:
    """Refuse a ``--run-id`` / ``$TRAINLEDGER_RUN_ID`` or ``--sweep-id`` that is not a valid id (ConfigError, one line).

    A run id names files (the run's journal, its log), so it is checked with
    ``trainledger.store.ids.validate_run_id`` before anything starts.
    """
    from trainledger.errors import LedgerInputError
    from trainledger.store.ids import validate_run_id
    from trainledger.trainer.config import ConfigError

    run_id = getattr(args, "run_id", None) or os.environ.get(ENV_RUN_ID)
    try:
        if run_id is not None:
            validate_run_id(run_id, "--run-id" if getattr(args, "run_id", None) else f"${ENV_RUN_ID}")
        if getattr(args, "sweep_id", None):
            validate_run_id(args.sweep_id, "--sweep-id")
    except LedgerInputError as exc:
        raise ConfigError(str(exc)) from None


def tracking_settings(env: Optional[Mapping[str, str]] = None) -> dict[str, float]:
    """``flush_s``, ``heartbeat_s`` and ``ledger_wait_s`` from ``$TRAINLEDGER_FLUSH_S``, ``_HEARTBEAT_S`` and
    ``_LEDGER_WAIT_S`` (:mod:`trainledger.store.envsettings`): a bad value never stops the run, it is one warning
    line naming the variable and the default used."""
    return {"flush_s": env_setting(FLUSH_S, env), "heartbeat_s": env_setting(HEARTBEAT_S, env),
            "ledger_wait_s": env_setting(LEDGER_WAIT_S, env)}


def tracker_from_args(args, config_dict: Optional[dict]) -> Optional["LedgerTracker"]:
    """A :class:`LedgerTracker` when ``--track`` or ``$TRAINLEDGER_RUN_ID`` asks for one (a bad run id:
    :class:`~trainledger.errors.LedgerInputError`)."""
    if not (args.track or os.environ.get(ENV_RUN_ID)):
        return None
    check_tracking_args(args)  # one-line ConfigError before anything starts
    from trainledger.store.defaults import default_node_type

    given = args.run_id or os.environ.get(ENV_RUN_ID)
    opts = TrackingOptions(
        run_id=given or new_run_id(), db_url=args.db,
        journal_dir=Path(args.journal_dir) if args.journal_dir else None, name=args.name,
        node_type=args.node_type or default_node_type(),
        offer=args.offer, project=args.project, user=args.user, sweep_id=args.sweep_id, launcher=args.launcher,
        config=config_dict, gpus_per_node=args.gpus_per_node, metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        **tracking_settings(),
    )
    return LedgerTracker(opts)
