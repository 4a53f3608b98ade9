"""Tracking: every run the trainer executes is written to the ledger as it runs.

Rank 0 owns the run row. Every rank samples its device utilization in a
background thread (NVML on GPUs; on CPU the process CPU utilization,
labelled ``cpu``) and, when asked, serves Prometheus metrics. At the end the
ranks gather their per-node numbers to rank 0, which writes one ``RunNode``
per node.

Nothing here touches the database from the training step: ``on_step`` only
appends numbers the loop already has to a list. A writer thread on rank 0
appends events to the run journal (fsync'd JSON lines, :mod:`ledger.sources.journal`)
and applies them to the ledger every ``flush_s`` seconds. If the ledger is
unreachable, training goes on; the journal keeps everything and the writer
(or ``trainledger sync`` later) replays it idempotently.

Statuses: running on start; succeeded at the end; failed on an exception
(error text recorded); cancelled on SIGTERM/SIGINT. A run killed outright
stops heartbeating and is marked crashed by the reaper at its last heartbeat.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from trainer.metrics import percentile

ENV_RUN_ID = "TRAINLEDGER_RUN_ID"
MAX_SERIES_POINTS = 300


class RunCancelled(KeyboardInterrupt):
    """Raised in the main thread when the run receives SIGTERM or SIGINT."""


def new_run_id() -> str:
    """A fresh random run id (``ledger.store.ids.new_run_id``)."""
    from ledger.store.ids import new_run_id as fresh

    return fresh()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (the launcher) dies: no orphans."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


# --- utilization sampling ------------------------------------------------------

class UtilSampler(threading.Thread):
    """Samples this rank's device utilization (ratio 0-1) every ``interval_s``.

    GPU: NVML utilization.gpu of the rank's device (source ``nvml``).
    CPU: process CPU time ÷ (wall time × torch threads) (source ``cpu``).
    """

    def __init__(self, local_rank: int, device: str, interval_s: float = 1.0):
        super().__init__(name="trainledger-util", daemon=True)
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []  # (unix time, ratio)
        self.memory_bytes: Optional[int] = None
        self._halt = threading.Event()
        self._read = None
        self.source = "cpu"
        if device.startswith("cuda"):
            try:
                import pynvml

                pynvml.nvmlInit()
                index = local_rank
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                if visible:
                    index = int(visible.split(",")[local_rank])
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._read = lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
                self._mem = lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
                self.source = "nvml"
            except Exception:  # no NVML: fall back to the process CPU share, labelled as such
                self._read = None
        if self._read is None:
            import psutil
            import torch

            proc = psutil.Process()
            threads = max(1, torch.get_num_threads())
            proc.cpu_percent(None)
            self._read = lambda: min(1.0, proc.cpu_percent(None) / (100.0 * threads))
            self._mem = lambda: int(proc.memory_info().rss)

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self.samples.append((time.time(), float(self._read())))
                self.memory_bytes = self._mem()
            except Exception:
                pass

    def stop(self) -> None:
        self._halt.set()

    def summary(self) -> dict[str, Any]:
        vals = [v for _, v in self.samples]
        step = max(1, len(self.samples) // MAX_SERIES_POINTS)
        return {"mean": sum(vals) / len(vals) if vals else None, "p95": percentile(vals, 95) if vals else None,
                "values": vals, "series": self.samples[::step], "source": self.source}


# --- Prometheus exporter --------------------------------------------------------

class Exporter:
    """Per-rank Prometheus metrics (base units, ``_total`` counters, labels run_id/node/rank)."""

    def __init__(self, port: int, addr: str, run_id: str, node: str, rank: int, source: str):
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        self.registry = CollectorRegistry()
        labels = ["run_id", "node", "rank"]
        self.tokens = Counter("trainledger_tokens", "Tokens processed by the run (global batch × seq len per step).", labels, registry=self.registry)
        self.step = Gauge("trainledger_step_seconds", "Wall time of the last optimizer step.", labels, registry=self.registry)
        self.loss = Gauge("trainledger_loss", "Training loss of the last step.", labels, registry=self.registry)
        self.util = Gauge("trainledger_gpu_utilization_ratio", "Device busy share 0-1 (source=nvml on GPUs; cpu: process CPU share on CPU-only runs).",
                          labels + ["source"], registry=self.registry)
        self.mem = Gauge("trainledger_gpu_memory_used_bytes", "Device memory in use (process RSS on CPU-only runs).", labels, registry=self.registry)
        self.lv = dict(run_id=run_id, node=node, rank=str(rank))
        self.source = source
        # labelled children, looked up once (``labels()`` costs ~10× the update) and made on first use,
        # so a series appears only once it has a value (missing is never exported as zero)
        self._step_children: Optional[tuple] = None
        self._util_child = self._mem_child = None
        self.server, self.thread = start_http_server(port, addr=addr, registry=self.registry)

    def on_step(self, metrics: dict, tokens_per_step: int) -> None:
        c = self._step_children
        if c is None:
            c = self._step_children = (self.tokens.labels(**self.lv), self.step.labels(**self.lv),
                                       self.loss.labels(**self.lv))
        c[0].inc(tokens_per_step)
        c[1].set(metrics["step_time_s"])
        c[2].set(metrics["loss"])

    def on_sample(self, util: Optional[float], mem: Optional[int]) -> None:
        if util is not None:
            if self._util_child is None:
                self._util_child = self.util.labels(**self.lv, source=self.source)
            self._util_child.set(util)
        if mem is not None:
            if self._mem_child is None:
                self._mem_child = self.mem.labels(**self.lv)
            self._mem_child.set(mem)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- the writer (rank 0) ---------------------------------------------------------

class LedgerWriter(threading.Thread):
    """Journals events, then applies them to the ledger, off the training thread."""

    def __init__(self, db_url: Optional[str], journal_dir: Path, run_id: str, flush_s: float, heartbeat_s: float):
        super().__init__(name="trainledger-writer", daemon=True)
        from ledger.sources.journal import Journal

        self.journal = Journal(journal_dir, run_id)
        self.db_url = db_url
        self.flush_s = flush_s
        self.heartbeat_s = heartbeat_s
        self.queue: "queue.Queue[dict]" = queue.Queue()
        self._halt = threading.Event()
        self._engine = None
        self.ledger_ok: Optional[bool] = None
        self.error: Optional[BaseException] = None  # a journal write failure: fatal for the run
        self.run_id = run_id
        self._unjournaled: list[dict] = []  # events the failed journal could not keep: written straight to the ledger
        self._last_beat = 0.0
        self._lock = threading.Lock()

    def put(self, event: dict) -> None:
        """Queue an event. After a journal failure it is kept for :meth:`close` to write straight to the ledger
        (the training step raises :attr:`error` itself, see ``on_step``)."""
        if self.error is not None:
            with self._lock:
                self._unjournaled.append({"run_id": self.run_id, **event})
            return
        self.queue.put(event)

    def _engine_or_none(self):
        if self._engine is None:
            from ledger.store.db import make_engine

            self._engine = make_engine(self.db_url)
        return self._engine

    def flush(self) -> None:
        """Journal whatever is queued (fsync), then try to apply all pending events.

        A journal write failure (disk full, ...) raises :class:`~ledger.sources.journal.JournalWriteError`
        and is fatal for the run; the events of the failed write are kept for :meth:`close`.
        """
        from ledger.sources.journal import JournalWriteError

        with self._lock:
            events = []
            now = time.monotonic()
            if self.error is None and now - self._last_beat >= self.heartbeat_s:
                events.append({"type": "heartbeat", "ts": _now().isoformat()})
                self._last_beat = now
            while True:
                try:
                    events.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            if self.error is not None:  # the journal already failed: never write to it again
                self._unjournaled += [{"run_id": self.run_id, **ev} for ev in events]
                return
            try:
                self.journal.append(events)  # all or nothing
            except JournalWriteError as exc:
                self._journal_failed(exc, events)
                raise
            try:
                self._apply()
            except JournalWriteError as exc:  # events are journaled and applied; only the applied mark failed
                self._journal_failed(exc, [])
                raise

    def _journal_failed(self, exc: BaseException, events: list[dict]) -> None:
        self._unjournaled += [{"run_id": self.run_id, **ev} for ev in events]
        if self.error is None:
            self.error = exc
            print(f"[trainledger] error: {exc}; the run stops (tracking cannot go on without its journal)",
                  file=sys.stderr, flush=True)

    def _apply(self) -> None:
        from ledger.sources.journal import JournalWriteError, sync_journal
        from ledger.store.db import redact_url, resolve_url

        try:
            sync_journal(self._engine_or_none(), self.journal)
            if self.ledger_ok is False:
                print("[trainledger] ledger reachable again; journal replayed", file=sys.stderr, flush=True)
            self.ledger_ok = True
        except JournalWriteError:  # the ledger has the events; the journal's applied mark could not be written
            self.ledger_ok = True
            raise
        except Exception as exc:  # unreachable ledger: keep journaling, retry next flush
            if self.ledger_ok is not False:
                reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]
                print(f"[trainledger] warning: ledger {redact_url(resolve_url(self.db_url))} unreachable ({reason}); "
                      f"training continues, events kept in {self.journal.path}", file=sys.stderr, flush=True)
            self.ledger_ok = False
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    def run(self) -> None:
        while not self._halt.wait(self.flush_s):
            try:
                self.flush()
            except BaseException as exc:  # journal write failed (or a bug): stop the run loudly
                if self.error is None:
                    self._journal_failed(exc, [])
                os.kill(os.getpid(), signal.SIGUSR1)  # the main thread raises it in the training step
                return

    def close(self, timeout_s: float = 30.0, on_durable=None) -> bool:
        """Stop the thread, flush the rest, and try to reach the ledger for up to ``timeout_s``.

        ``on_durable`` is called once every event is safe (fsync'd in the journal, or, after a journal
        failure, written to the ledger): from then on the process may be interrupted without loss.
        """
        from ledger.sources.journal import JournalWriteError

        self._halt.set()
        if self.is_alive():
            self.join()
        try:
            self.flush()
        except JournalWriteError:
            pass
        if self.error is not None:
            try:
                return self._write_through(timeout_s)
            finally:
                if on_durable is not None:
                    on_durable()
        if on_durable is not None:
            on_durable()
        deadline = time.monotonic() + timeout_s
        while self.ledger_ok is False and time.monotonic() < deadline:
            time.sleep(1.0)
            self._apply()
        if self.ledger_ok is False:
            print(f"[trainledger] the ledger stayed unreachable; run `trainledger sync` to replay {self.journal.path}",
                  file=sys.stderr, flush=True)
        if self._engine is not None:
            self._engine.dispose()
        return bool(self.ledger_ok)

    def _write_through(self, timeout_s: float) -> bool:
        """After a journal failure: apply what the journal holds and what it could not keep straight to
        the ledger, in one transaction (idempotent), retrying for up to ``timeout_s``."""
        from sqlmodel import Session

        from ledger.sources.journal import JournalWriteError, apply_events
        from ledger.store.db import redact_url, resolve_url

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with Session(self._engine_or_none()) as session:
                    apply_events(session, self.journal.pending())
                    apply_events(session, self._unjournaled)
                    session.commit()
                break
            except Exception as exc:
                if self._engine is not None:
                    self._engine.dispose()
                    self._engine = None
                if time.monotonic() >= deadline:
                    reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]
                    print(f"[trainledger] error: the run journal failed and the ledger {redact_url(resolve_url(self.db_url))} "
                          f"is unreachable ({reason}); the last {len(self._unjournaled)} tracking events are lost",
                          file=sys.stderr, flush=True)
                    return False
                time.sleep(1.0)
        try:
            self.journal.mark_applied(self.journal.seq)
        except JournalWriteError:
            pass  # replaying the journal again is idempotent
        print(f"[trainledger] the run journal failed; its events and the {len(self._unjournaled)} it could not keep "
              f"were written straight to the ledger", file=sys.stderr, flush=True)
        self._engine.dispose()
        self._engine = None
        return True


# --- the callback ----------------------------------------------------------------

@dataclass
class TrackingOptions:
    run_id: str = field(default_factory=lambda: os.environ.get(ENV_RUN_ID) or new_run_id())
    db_url: Optional[str] = None
    journal_dir: Optional[Path] = None
    name: str = ""
    node_type: str = "rtx4090-8x"
    offer: Optional[str] = None
    project: Optional[str] = None
    user: Optional[str] = None
    sweep_id: Optional[str] = None
    launcher: str = "local"
    config: Optional[dict] = None
    gpus_per_node: Optional[int] = None
    metrics_port: Optional[int] = None
    metrics_addr: str = "127.0.0.1"
    flush_s: float = 2.0
    heartbeat_s: float = 5.0
    ledger_wait_s: float = 30.0  # at the end, how long to wait for an unreachable ledger before leaving it to `sync`
    util_interval_s: float = 1.0
    sample_every: int = 0  # 0: every step up to 1,000 steps, then ~1,000 points


class LedgerTracker:
    """Trainer callback (see :class:`trainer.engine.Callback`) that records the run in the ledger."""

    def __init__(self, options: TrackingOptions):
        self.o = options
        self.rank = 0
        self.writer: Optional[LedgerWriter] = None
        self.sampler: Optional[UtilSampler] = None
        self.exporter: Optional[Exporter] = None
        self.info: dict = {}
        self._pending: list[list[Any]] = []
        self._every = 1
        self._prev_handlers: dict[int, Any] = {}
        self._cancelling = False
        self._finishing = False  # the final write has begun: signals must not interrupt it
        self._closed = False  # the writer is closed: nothing more can be recorded
        self._handed_at = time.monotonic()
        # fault injection for tests and drills: raise in the training step at this step
        fault = os.environ.get("TRAINLEDGER_FAULT_STEP")
        self._fault_step = int(fault) if fault else None

    @property
    def run_id(self) -> str:
        return self.o.run_id

    # -- hooks --
    def on_start(self, info: dict) -> None:
        self.info = info
        self.rank = info["rank"]
        die_with_parent()
        self._install_signals()
        self.sampler = UtilSampler(info["local_rank"], info["device"], self.o.util_interval_s)
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
        from ledger.sources.journal import default_journal_dir

        self.writer = LedgerWriter(self.o.db_url, Path(self.o.journal_dir or default_journal_dir()), self.o.run_id,
                                   self.o.flush_s, self.o.heartbeat_s)
        plan, shape = info["plan"], info["shape"]
        now = _now()
        gpn = self.o.gpus_per_node or (info["world_size"] // max(1, info["nodes"]))
        self.writer.put({"type": "run", "fields": {
            "name": self.o.name or f"{plan['strategy']}-{shape['name']}", "status": "running",
            "node_type": self.o.node_type, "offer": self.o.offer, "project": self.o.project, "user": self.o.user,
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
        }})
        if self.o.launcher == "local":  # not started by `trainledger launch`, which records its own process
            self.writer.queue.put({"type": "run", "fields": {"hostname": info["hostname"], "pid": os.getpid()}})
        self.writer.flush()
        self.writer.start()

    def on_step(self, step: int, metrics: dict) -> None:
        if step == self._fault_step:
            raise RuntimeError(f"injected fault at step {step} (TRAINLEDGER_FAULT_STEP)")
        if self.exporter is not None:
            self.exporter.on_step(metrics, self.info["tokens_per_step"])
        if self.rank != 0:
            return
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
        self._finishing = True  # from here on, signals must not cut rank 0's final write short
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

    def on_error(self, exc: BaseException) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self._close_exporter()
        if self.rank != 0 or self.writer is None or self._closed:
            return
        self._finishing = True  # a SIGTERM from the launcher (stopping the ranks) must not cut the final write short
        cancelled = isinstance(exc, (RunCancelled, KeyboardInterrupt))
        text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:1000] if not cancelled else None
        self._hand_over_samples()
        summary = self.sampler.summary() if self.sampler else {"mean": None, "p95": None, "source": None}
        self.writer.put({"type": "nodes", "rows": [{
            "hostname": self.info["hostname"], "node_rank": 0, "gpu_util_mean": summary["mean"],
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
            rows.append({"hostname": host, "node_rank": node_rank,
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
            ok = self.writer.close(self.o.ledger_wait_s, on_durable=self._restore_signals)
        finally:
            self._restore_signals()
        if fail_if_lost and not ok and self.writer.error is not None:
            raise self.writer.error  # neither the journal nor the ledger has the end of this run: exit non-zero

    def _export_samples(self) -> None:
        while self.sampler is not None and self.sampler.is_alive() and self.exporter is not None:
            last = self.sampler.samples[-1][1] if self.sampler.samples else None
            self.exporter.on_sample(last, self.sampler.memory_bytes)
            time.sleep(self.o.util_interval_s)

    def _close_exporter(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def cancel(signum, frame):
            if self._cancelling or self._finishing:  # one cancellation is enough; later signals must not interrupt the final write
                return
            self._cancelling = True
            raise RunCancelled(f"received {signal.Signals(signum).name}")

        def journal_failed(signum, frame):  # SIGUSR1 from the writer thread: stop training, record `failed`
            if self._finishing:  # already writing the end: close() writes it past the broken journal
                return
            from ledger.sources.journal import JournalWriteError

            err = self.writer.error if self.writer else None
            if isinstance(err, JournalWriteError):
                raise JournalWriteError(str(err))
            raise RuntimeError(f"run tracking failed: {type(err).__name__}: {err}" if err else "run journal failed")

        for sig, handler in ((signal.SIGTERM, cancel), (signal.SIGINT, cancel), (signal.SIGUSR1, journal_failed)):
            self._prev_handlers[sig] = signal.signal(sig, handler)

    def _restore_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._prev_handlers.items():
            signal.signal(sig, handler)
        self._prev_handlers = {}


# --- entry-point glue (python -m trainer.train --track ...) -----------------------------

def add_tracking_args(parser) -> None:
    """The ``--track`` options of ``python -m trainer.train`` (set by ``trainledger launch``)."""
    g = parser.add_argument_group("tracking (record the run in the trainledger ledger)")
    g.add_argument("--track", action="store_true", help=f"record the run; implied by ${ENV_RUN_ID}")
    g.add_argument("--db", default=None, help="ledger URL (default: $TRAINLEDGER_DB_URL, else the embedded SQLite file)")
    g.add_argument("--run-id", default=None, help=f"run id (default: ${ENV_RUN_ID}, else a new one)")
    g.add_argument("--name", default="", help="run name")
    g.add_argument("--node-type", default="rtx4090-8x", help="node type the run is costed as")
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
    ``ledger.store.ids.validate_run_id`` before anything starts.
    """
    from ledger.errors import LedgerInputError
    from ledger.store.ids import validate_run_id
    from trainer.config import ConfigError

    run_id = getattr(args, "run_id", None) or os.environ.get(ENV_RUN_ID)
    try:
        if run_id is not None:
            validate_run_id(run_id, "--run-id" if getattr(args, "run_id", None) else f"${ENV_RUN_ID}")
        if getattr(args, "sweep_id", None):
            validate_run_id(args.sweep_id, "--sweep-id")
    except LedgerInputError as exc:
        raise ConfigError(str(exc)) from None


def tracker_from_args(args, config_dict: Optional[dict]) -> Optional["LedgerTracker"]:
    """A :class:`LedgerTracker` when ``--track`` or ``$TRAINLEDGER_RUN_ID`` asks for one."""
    if not (args.track or os.environ.get(ENV_RUN_ID)):
        return None
    check_tracking_args(args)
    opts = TrackingOptions(
        run_id=args.run_id or os.environ.get(ENV_RUN_ID) or new_run_id(), db_url=args.db,
        journal_dir=Path(args.journal_dir) if args.journal_dir else None, name=args.name, node_type=args.node_type,
        offer=args.offer, project=args.project, user=args.user, sweep_id=args.sweep_id, launcher=args.launcher,
        config=config_dict, gpus_per_node=args.gpus_per_node, metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        flush_s=float(os.environ.get("TRAINLEDGER_FLUSH_S", 2.0)),
        heartbeat_s=float(os.environ.get("TRAINLEDGER_HEARTBEAT_S", 5.0)),
        ledger_wait_s=float(os.environ.get("TRAINLEDGER_LEDGER_WAIT_S", 30.0)),
    )
    return LedgerTracker(opts)
