"""``trainledger.track``: record a run from inside your own training code.

    import trainledger

    with trainledger.track(project="llm", node_type="h100-8x", flops_per_token=6 * n_params) as run:
        for step, batch in enumerate(loader):
            loss = train_step(batch)
            run.log(step=step, tokens=batch.numel(), loss=loss.item(), lr=sched.get_last_lr()[0])
            if step % 1000 == 0:
                save(model, f"ckpt/{step}")
                run.checkpoint(step=step, path=f"ckpt/{step}")

    @trainledger.track(project="llm")           # as a decorator: trainledger.current_run() inside
    def main(): ...

* **Under ``trainledger run``** (``TRAINLEDGER_WRAPPED`` in the environment) the API
  attaches to the wrapper's run: it adds steps, tokens, loss, MFU and checkpoints,
  while the wrapper owns the status, the nodes and the utilization.
* **On its own** it registers the run, heartbeats, samples this process's device
  (NVML for the GPUs it owns, else its CPU share, labelled ``cpu``) and ends the
  run ``succeeded``, ``failed`` (an exception, with its text), ``cancelled``
  (KeyboardInterrupt; SIGTERM too, where no one else handles it) or, if the
  process is killed, ``crashed`` at its last heartbeat (``runs reap``).
* **Rank ≠ 0** (``RANK`` in the environment) records nothing: ``log`` and
  ``checkpoint`` return at once.

Nothing here raises into training (issue 24): bad values are dropped with one
warning per field, and a journal that cannot be written or a writer thread that
died turns recording off with one warning (docs/CAPTURE.md); ``sys.exit(0)``
inside the run ends it ``succeeded``, ``sys.exit(n)`` records exit code n.

``log`` never touches the database: it updates a few numbers and appends
samples to a list; a background thread journals them (fsync'd) and applies
them to the ledger (:mod:`trainledger.sources.record.writer`). Its cost per call is measured
in ``bench/`` (``python -m bench capture``).

MFU = tokens/s × FLOPs per token ÷ (peak FLOP/s per GPU × GPUs)
(:func:`trainledger.money.rates.costs.mfu`, the same formula as the bundled trainer's).
Pass ``flops_per_token`` (for a model of the bundled trainer's family:
``trainledger.trainer.shapes.flops_per_token(shape)``, the one function the trainer uses); the
peak is ``peak_tflops`` or the node type's ``peak_bf16_tflops``. On CPU MFU is null.
"""

from __future__ import annotations

import functools
import os
import socket
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from trainledger.sources.capture.signals import RunCancelled, StopSignals
from trainledger.sources.record.sanitize import INT64_MAX, Guard, shown, warn
from trainledger.sources.record.writer import LedgerWriter, run_heartbeat, utc_now
from trainledger.store.envsettings import FLUSH_S, HEARTBEAT_S, LEDGER_WAIT_S, env_run_id, seconds_or_default

ENV_RUN_ID = "TRAINLEDGER_RUN_ID"
ENV_WRAPPED = "TRAINLEDGER_WRAPPED"
#: points kept per series before thinning (every k-th call, k doubling)
MAX_POINTS = 1000
_CURRENT: list["TrackedRun"] = []


def current_run() -> Optional["TrackedRun"]:
    """The innermost run opened by :func:`track` in this process (None outside one)."""
    return _CURRENT[-1] if _CURRENT else None


def _rank(env) -> int:
    return _env_int(env, "RANK", 0)


def _env_int(env, name: str, default: int) -> int:
    """A launcher's whole-number variable (``RANK``, ``WORLD_SIZE``); ``default`` when it is not one."""
    try:
        value = int(str(env.get(name, default) or default).strip())
    except ValueError:
        return default
    return value if 0 <= value <= 2**31 else default


class TrackedRun:
    """A run recorded from the training code. Use it as a context manager or a decorator (see the module)."""

    def __init__(self, project: Optional[str] = None, *, name: Optional[str] = None, user: Optional[str] = None,
                 node_type: Optional[str] = None, offer: Optional[str] = None, tags: Optional[dict] = None,
                 run_id: Optional[str] = None, resume_of: Optional[str] = None, db: Optional[str] = None,
                 journal_dir: Optional[str | Path] = None, flops_per_token: Optional[float] = None,
                 peak_tflops: Optional[float] = None, gpus: Optional[int] = None, metrics_port: Optional[int] = None,
                 flush_s: Optional[float] = None, heartbeat_s: Optional[float] = None,
                 ledger_wait_s: Optional[float] = None, env: Optional[dict] = None, exclusive: bool = False):
        self.guard = Guard()
        self.dropped: list[str] = []  # the arguments dropped or replaced, recorded with the run
        try:
            self.env = dict(os.environ if env is None else env)
        except Exception:
            self.env = dict(os.environ)
            self._drop("env", " is not a mapping; os.environ is used")
        self.rank = _rank(self.env)
        self.attached = bool(self.env.get(ENV_WRAPPED))
        # under the wrapper, its run; else the given id, else $TRAINLEDGER_RUN_ID, else a new one at start
        self._given_id = env_run_id(self.env, ENV_WRAPPED, warn) if self.attached else (
            self._run_id("run_id", run_id) if run_id is not None else env_run_id(self.env, write=warn))
        self.run_id = self._given_id
        from trainledger.store import config
        from trainledger.store.defaults import default_node_type

        config.never_refuse()  # inside training code: a broken config file is said once and ignored
        node_type = self._text("node_type", node_type)
        # no node type given or configured: the run is recorded, not costed, and says so (never a guess)
        self.opts = dict(project=self._text("project", project), name=self._text("name", name),
                         user=self._text("user", user), node_type=node_type or self.env.get(
                             "TRAINLEDGER_NODE_TYPE") or (default_node_type() if env is None else None),
                         offer=self._text("offer", offer), tags=self._tags(tags),
                         resume_of=self._run_id("resume_of", resume_of))
        self.db = self._text("db", db) or self.env.get("TRAINLEDGER_DB_URL")
        self.journal_dir = journal_dir if isinstance(journal_dir, (str, Path)) and str(journal_dir) else \
            self._text("journal_dir", journal_dir)
        self.flops_per_token = self._positive("flops_per_token", flops_per_token)
        self.peak_tflops = self._positive("peak_tflops", peak_tflops)
        self.gpus = self.guard.count("gpus", gpus) or None
        self.exclusive = exclusive is True
        port = self.guard.count("metrics_port", metrics_port)
        self.metrics_port = port if port is not None and port <= 65535 else None
        if port is not None and port > 65535:
            self._drop("metrics_port", f"={port} is not a port (0 to 65535); dropped")
        for field, value, kept in (("gpus", gpus, self.gpus), ("metrics_port", metrics_port, port)):
            if value is not None and kept is None and field not in self.dropped:
                self.dropped.append(field)
        self.flush_s = seconds_or_default(FLUSH_S, flush_s, warn, self.env)
        self.heartbeat_s = seconds_or_default(HEARTBEAT_S, heartbeat_s, warn, self.env)
        self.ledger_wait_s = seconds_or_default(LEDGER_WAIT_S, ledger_wait_s, warn, self.env)
        self._reset()

    def _reset(self) -> None:
        self.writer: Optional[LedgerWriter] = None
        self.sampler = None
        self.exporter = None
        self.signals: Optional[StopSignals] = None
        self.started_at: Optional[datetime] = None
        self.step: Optional[int] = None
        self.tokens = 0
        self.loss: Optional[float] = None
        self._t_first = self._t_last = None
        self._tokens_first = 0
        self._step_first: Optional[int] = None
        self._intervals: list[float] = []  # seconds per step between log calls
        self._pending: list[list[Any]] = []
        self._every, self._calls, self._points, self._handed = 1, 0, 0, time.monotonic()
        self._open = False
        self.guard.off_reason = None
        self.phases = None  # trainledger.sources.record.phases.PhaseRecorder of rank 0

    # -- the arguments: any value is taken, a bad one dropped with one warning naming it (issue 37) --
    def _drop(self, field: str, why: str) -> None:
        self.dropped.append(field)
        self.guard.warn(field, f"{field}{why}")

    def _text(self, field: str, value: Any) -> Optional[str]:
        if value is None or isinstance(value, str):
            return value or None
        self._drop(field, f"={shown(value)} is not text; dropped")
        return None

    def _run_id(self, field: str, value: Any) -> Optional[str]:
        from trainledger.errors import LedgerInputError
        from trainledger.store.ids import validate_run_id

        if value is None:
            return None
        try:
            return validate_run_id(value, field)
        except LedgerInputError as exc:
            self._drop(field, f" is not a run id ({str(exc).partition(': ')[2][:120]}); dropped")
            return None

    def _positive(self, field: str, value: Any) -> Optional[float]:
        number = self.guard.number(field, value)
        if number is not None and number <= 0:
            self._drop(field, f"={shown(value)} is not above 0; dropped")
            return None
        if value is not None and number is None:
            self.dropped.append(field)
        return number

    def _tags(self, tags: Any) -> dict:
        if tags is None:
            return {}
        try:
            return {str(k)[:100]: str(v)[:500] for k, v in dict(tags).items()}
        except Exception:
            self._drop("tags", f"={shown(tags)} is not a mapping; dropped")
            return {}

    @property
    def active(self) -> bool:
        """Whether this process records anything (rank 0 of an open run)."""
        return self._open and self.rank == 0

    @property
    def recording(self) -> bool:
        """Whether this process still records: rank 0 of an open run whose journal and writer are alive."""
        return self.active and self._writable()

    def _writable(self) -> bool:
        """The writer takes events: none failed and its thread, once started, is alive (else recording turns off)."""
        if self.writer is None or self.guard.off_reason is not None:
            return False
        if self.writer.error is not None:
            self.guard.off(str(self.writer.error))
            return False
        if self.writer.ident is not None and not self.writer.is_alive():
            self.guard.off("the run's writer thread stopped")
            return False
        return True

    # -- opening and closing --
    def __enter__(self) -> "TrackedRun":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(exc)
        return False

    def __call__(self, fn: Callable) -> Callable:
        """Use as a decorator: every call of ``fn`` is one run (``trainledger.current_run()`` inside)."""
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped

    def start(self) -> "TrackedRun":
        """Open the run. Whatever goes wrong with the journal or the ledger, training goes on: recording
        turns off with one warning (:class:`trainledger.sources.record.sanitize.Guard`)."""
        if self._open:
            raise RuntimeError("this run is already open; use a new trainledger.track(...) for another run")
        self._reset()
        self._open = True
        _CURRENT.append(self)
        if self.rank != 0:
            return self
        try:
            self._open_recording()
        except Exception as exc:  # an unwritable journal, a bug of ours: never the training's problem
            self.guard.off(f"cannot start recording ({_reason(exc)})")
        return self

    def _open_recording(self) -> None:
        from trainledger.sources.record.journal import default_journal_dir
        from trainledger.store.ids import new_run_id

        self.run_id = self._given_id or new_run_id()  # a decorated function: a new run per call
        self.started_at = utc_now()
        jdir = Path(self.journal_dir or self.env.get("TRAINLEDGER_JOURNAL_DIR") or default_journal_dir())
        name = f"{self.run_id}.api-{os.getpid()}" if self.attached else self.run_id
        self.writer = LedgerWriter(self.db, jdir, self.run_id, self.flush_s, self.heartbeat_s,
                                   beats=None if self.attached else run_heartbeat, journal_name=name)
        self.writer.on_error = lambda: None  # log() sees the journal's error and turns recording off
        self.writer.failure_note = None  # ... and says so, once (Guard.off)
        try:
            self._attach_phases()
        except Exception as exc:  # phase timing is optional: never a reason not to record or train
            self.phases = None
            warn(f"phase timing is off ({_reason(exc)}); recording and training continue")
        self._peak = self._lookup_peak()
        if not self.attached:
            self._register()
        self.writer.flush()
        self.writer.start()
        if self.metrics_port is not None:
            self._open_exporter()

    def _open_exporter(self) -> None:
        """The Prometheus endpoint: a port in use (or any error) leaves it off, never the recording or training."""
        from trainledger.sources.telemetry.exporter import Exporter

        try:
            self.exporter = Exporter(self.metrics_port, "127.0.0.1", self.run_id, socket.gethostname(), self.rank,
                                     self.sampler.source if self.sampler else "cpu")
        except Exception as exc:
            self.dropped.append("metrics_port")
            warn(f"metrics_port={self.metrics_port}: no metrics endpoint ({_reason(exc)}); recording and training "
                 "continue")

    def _attach_phases(self) -> None:
        """Phase timing (``run.phase``, steps, checkpoints), aggregated on the writer thread; start-up counts
        from the run's start (the paid interval's start)."""
        from trainledger.sources.record.phases import PhaseRecorder, PhaseSource, ledger_timezone

        self.phases = PhaseRecorder()
        self.writer.sources.append(PhaseSource(self.phases, self.started_at.timestamp(), socket.gethostname(),
                                               ledger_timezone(self.writer)).events)

    def _register(self) -> None:
        from trainledger.sources.telemetry.sampling import UtilSampler, node_probe, process_tree

        o, now = self.opts, self.started_at.isoformat()
        world = max(1, _env_int(self.env, "WORLD_SIZE", 1))
        local = max(1, _env_int(self.env, "LOCAL_WORLD_SIZE", world))
        self.sampler = UtilSampler(node_probe(self.env, process_tree(os.getpid())))
        self.sampler.start()
        self.signals = StopSignals(lambda: self.writer.error or RuntimeError("run journal failed"), polite=True)
        self.signals.install()
        self.writer.put({"type": "run", "fields": {
            "name": o["name"] or os.path.basename(sys.argv[0] or "python")[:200], "status": "running",
            "node_type": o["node_type"], "offer": o["offer"], "project": o["project"],
            "user": o["user"] or self.env.get("USER") or None, "launcher": "api", "nodes": max(1, world // local),
            "gpus_per_node": self.gpus or local, "world_size": world, "resume_of": o["resume_of"],
            "started_at": now, "heartbeat_at": now, "ended_at": None, "error": None, "exit_code": None,
            "hostname": socket.gethostname(), "pid": os.getpid(), **self._share(),
            "config": {"api": {"argv": _argv(), **({"dropped": self.dropped} if self.dropped else {})},
                       "tags": o["tags"]}}})
        if not o["node_type"]:
            self._warn_not_costed()
        elif not o["offer"]:  # whether the node type has an offer: asked on the writer's connection once it applies
            self.writer.after_first_apply = self._warn_without_offer

    def _warn_not_costed(self) -> None:
        from trainledger.store.defaults import warn_not_costed

        warn_not_costed(self.run_id, self.opts["node_type"], write=lambda line: warn(line.removeprefix("warning: ")))

    def _warn_without_offer(self, engine) -> None:
        """Once the run reached the ledger (the writer's engine): warn if its node type has no offer."""
        from sqlmodel import Session
        from trainledger.store.defaults import has_offer

        with Session(engine) as s:
            if has_offer(s, self.opts["node_type"]):
                return
        self._warn_not_costed()

    def _share(self) -> dict:
        """``share``/``share_basis`` of the node this process holds (``CUDA_VISIBLE_DEVICES`` /
        ``SLURM_GPUS_ON_NODE`` ÷ the node type's GPUs, :mod:`trainledger.money.allocation.shares`); {} when the environment
        does not say or the ledger cannot tell the node type's GPUs (the whole node, as before)."""
        from trainledger.money.allocation.shares import alloc_share
        from trainledger.sources.telemetry.sampling import owned_gpus
        from trainledger.sources.telemetry.topology import Flags, allocation

        try:
            slurm_gpus = self.env.get("SLURM_GPUS_ON_NODE")
            alloc = allocation(Flags(exclusive=self.exclusive), self.env, [], owned_gpus(self.env),
                               int(slurm_gpus) if slurm_gpus and slurm_gpus.isdigit() else None)
            if not alloc.get("exclusive") and not alloc.get("gpus"):
                return {}
            nt = self._node_type()
            if nt is None:
                return {}
            share, basis = alloc_share(alloc, nt[0], nt[1], nt[2])
        except Exception as exc:  # never a reason not to train: the whole node, said once
            warn(f"the run's share of its node is unknown ({_reason(exc)}); it is costed as the whole node")
            return {}
        return {"share": share, "share_basis": basis} if basis else {}

    def _node_type(self) -> Optional[tuple]:
        from sqlmodel import Session, select
        from trainledger.store.db import make_engine
        from trainledger.store.models import NodeType

        engine = make_engine(self.db)
        try:
            with Session(engine) as s:
                return s.exec(select(NodeType.name, NodeType.gpu_model, NodeType.gpus_per_node)
                              .where(NodeType.name == self.opts["node_type"])).first()
        finally:
            engine.dispose()

    def _lookup_peak(self) -> Optional[float]:
        """Peak dense TFLOP/s per GPU for MFU: ``peak_tflops``, else the node type's; None on CPU."""
        if self.flops_per_token is None or not _on_gpu(self.env):
            return None
        if self.peak_tflops:
            return float(self.peak_tflops)
        try:
            from sqlmodel import Session, select
            from trainledger.store.db import make_engine
            from trainledger.store.models import NodeType

            engine = make_engine(self.db)
            try:
                with Session(engine) as s:
                    return s.exec(select(NodeType.peak_bf16_tflops)
                                  .where(NodeType.name == self.opts["node_type"])).first()
            finally:
                engine.dispose()
        except Exception:  # unreachable ledger: MFU stays unknown, never guessed
            return None

    def finish(self, exc: Optional[BaseException] = None) -> None:
        """End the run: succeeded, or failed/cancelled by ``exc`` (attached: only the figures; the wrapper
        owns the status)."""
        if not self._open:
            return
        self._open = False
        if self in _CURRENT:
            _CURRENT.remove(self)
        if self.rank != 0 or self.writer is None:
            return
        try:
            self._close_recording(exc)
        except Exception as exc2:  # never into the code that ends training
            self.guard.off(f"cannot end the run's record ({_reason(exc2)})")
        finally:
            self._release()

    def _release(self) -> None:
        for what, close in (("signal handlers", self.signals and self.signals.restore),
                            ("metrics endpoint", self.exporter and self.exporter.close)):
            try:
                if close:
                    close()
            except Exception as exc:
                self.guard.off(f"cannot close the {what} ({_reason(exc)})")

    def _close_recording(self, exc: Optional[BaseException]) -> None:
        if self.signals is not None:
            self.signals.finishing = True
        self._hand_over()
        fields = self._figures()
        if not self.attached:
            fields.update(self._end_fields(exc))
        # after a journal failure the end still goes straight to the ledger (LedgerWriter.close)
        self.writer.put({"type": "run", "attach": self.attached, "fields": fields})
        self.writer.close(self.ledger_wait_s)

    def _end_fields(self, exc: Optional[BaseException]) -> dict:
        from trainledger.sources.telemetry.sampling import sample_rows

        ended = utc_now().isoformat()
        if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
            status, code, error = "succeeded", 0, None
        elif isinstance(exc, SystemExit):  # sys.exit(n): exit code n (a message: 1, as Python exits)
            code = exc.code if isinstance(exc.code, int) and not isinstance(exc.code, bool) else 1
            status, code, error = "failed", max(-(2**31), min(code, 2**31 - 1)), f"SystemExit: {exc.code}"[:1000]
        elif isinstance(exc, (KeyboardInterrupt, RunCancelled)):
            status, code, error = "cancelled", 130, f"cancelled ({type(exc).__name__}: {exc})".strip()
        else:
            status, code, error = "failed", 1, f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:1000]
        out = {"status": status, "ended_at": ended, "heartbeat_at": ended, "exit_code": code, "error": error}
        if self.sampler is not None:
            self.sampler.stop()
            s = self.sampler.summary()
            out.update(gpu_util_mean=s["mean"], gpu_util_p95=s["p95"], util_source=s["source"],
                       peak_mem_bytes=s["mem_peak_bytes"])
            self.writer.put({"type": "samples", "rows": sample_rows(s, socket.gethostname())})
            self.writer.put({"type": "nodes", "rows": [{
                "hostname": socket.gethostname(), "node_rank": 0, "status": status, "heartbeat_at": ended,
                "exit_code": code, "gpu_util_mean": s["mean"], "gpu_util_p95": s["p95"], "util_source": s["source"],
                "mem_peak_bytes": s["mem_peak_bytes"], "energy_kwh": s["energy_kwh"]}]})
        return out

    # -- during the run --
    def log(self, step: Optional[int] = None, tokens: Optional[int] = None, loss: Optional[float] = None, *,
            tokens_total: Optional[int] = None, **metrics: float) -> None:
        """One training step's figures: ``tokens`` processed by it (added to the run's total) or
        ``tokens_total`` (a cumulative count, e.g. a framework's own counter), ``loss`` and any other
        numbers (``lr=…``). Never touches the database."""
        if not self._open or self.rank != 0 or self.guard.off_reason is not None or self.writer is None:
            return
        if self.writer.error is not None:  # the journal failed (the writer thread's liveness: at each hand-over)
            self.guard.off(str(self.writer.error))
            return
        try:
            self._log(step, tokens, loss, tokens_total, metrics)
        except Exception as exc:  # a bug of ours must never stop training
            self.guard.off(f"cannot record a step ({_reason(exc)})")

    def _log(self, step, tokens, loss, tokens_total, metrics: dict) -> None:
        g = self.guard
        now = time.monotonic()
        step, tokens, loss = g.count("step", step), g.count("tokens", tokens), g.number("loss", loss)
        if tokens_total is not None:
            total = g.count("tokens_total", tokens_total)
            self.tokens = self.tokens if total is None else total
        elif tokens:
            self.tokens = min(INT64_MAX, self.tokens + tokens)
        prev_step = self.step
        self.step = step if step is not None else (0 if prev_step is None else min(INT64_MAX, prev_step + 1))
        if loss is not None:
            self.loss = loss
        if self.phases is not None and (prev_step is None or self.step != prev_step):
            self.phases.step_end()
        if self._t_first is None:
            self._t_first, self._tokens_first, self._step_first = now, self.tokens, self.step
        elif prev_step is not None and self.step > prev_step:
            self._intervals.append((now - self._t_last) / (self.step - prev_step))
        self._t_last = now
        if self.exporter is not None:
            self.exporter.on_step({"loss": loss, "step_time_s": self._intervals[-1] if self._intervals else None},
                                  tokens)
        self._sample(loss, metrics)
        if now - self._handed >= self.flush_s or len(self._pending) >= 3000:
            self._hand_over()
            self._handed = now

    def _sample(self, loss: Optional[float], metrics: dict) -> None:
        self._calls += 1
        if self._calls % self._every:
            return
        ts = datetime.now(timezone.utc).isoformat()
        pending = self._pending
        if loss is not None:
            pending.append(["", -1, "loss", ts, float(loss)])
        pending.append(["", -1, "tokens", ts, float(self.tokens)])
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                v = self.guard.number(str(k)[:100], v)
                if v is not None:
                    pending.append(["", -1, str(k)[:100], ts, v])
        self._points += 1
        if self._points >= MAX_POINTS:  # a long run keeps ~1,000 points per doubling of its length, not one per step
            self._every, self._points = self._every * 2, 0

    def phase(self, name: str):
        """``with run.phase("checkpoint_save"): ...``: time a phase (``checkpoint_save``, ``checkpoint_restore``,
        ``eval``, ``data``, ``startup`` or a custom name) for the goodput account. About a microsecond;
        never touches the database (aggregated on the writer thread, :mod:`trainledger.sources.record.phases`)."""
        if self.phases is None or not self._open:
            return _NO_PHASE
        from trainledger.sources.record.phases import _Phase, phase_name

        return _Phase(self.phases, phase_name(name))

    def phase_span(self, name: str, seconds: float) -> None:
        """A phase of ``seconds`` that ended now (a framework hook that fires only at the end of one)."""
        if self.phases is not None and self._open:
            from trainledger.sources.record.phases import SPAN, phase_name

            seconds = self.guard.number("seconds", seconds)
            if seconds is not None:
                self.phases.events.append((SPAN, (phase_name(name), seconds), self.phases.clock()))

    def step_begin(self) -> None:
        """A training step starts now (the callbacks call it; ``run.log`` ends the step)."""
        if self.phases is not None and self._open:
            self.phases.step_begin()

    def step_times(self, seconds_per_rank: list) -> None:
        """This step's time on each rank (e.g. all-gathered): the others' wait for the slowest is ``straggler_wait``."""
        if self.phases is not None and self._open:
            try:
                times = [self.guard.number("seconds_per_rank", t) for t in list(seconds_per_rank)[:100_000]]
            except Exception:
                self.guard.warn("seconds_per_rank", f"seconds_per_rank={shown(seconds_per_rank)} is not a list of "
                                "seconds; dropped")
                return
            self.phases.rank_times(times)

    def checkpoint(self, step: Optional[int] = None, path: Optional[str | Path] = None,
                   seconds: Optional[float] = None) -> None:
        """A checkpoint was saved: if the run dies, its lost work starts here. ``seconds``: how long the save
        blocked training (a ``checkpoint_save`` phase ending now; not needed inside ``run.phase("checkpoint_save")``)."""
        if not self.recording:
            return
        try:
            step = self.guard.count("step", step)
            if self.phases is not None:
                self.phases.checkpoint(self.guard.number("seconds", seconds))
            self.writer.put({"type": "checkpoint", "ts": utc_now().isoformat(),
                             "step": step if step is not None else self.step, "path": str(path) if path else None})
        except Exception as exc:
            self.guard.off(f"cannot record a checkpoint ({_reason(exc)})")

    def _hand_over(self) -> None:
        if self._pending and self._writable():
            self.writer.put({"type": "samples", "attach": self.attached, "rows": self._pending})
            self._pending = []

    def _figures(self) -> dict:
        """Steps, tokens, throughput, step-time statistics, MFU and the last loss."""
        out: dict[str, Any] = {}
        if self.step is not None:  # 0-based steps (a loop index) or 1-based (a framework's global step)
            out["steps"] = self.step + 1 if self._step_first == 0 else self.step
        if self.tokens:
            out["tokens"] = self.tokens
        if self.loss is not None:
            out["final_loss"] = self.loss
        if self._intervals:
            ordered = sorted(self._intervals)
            out["step_time_median_s"] = statistics.median(ordered)
            out["step_time_p95_s"] = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
        span = (self._t_last - self._t_first) if self._t_first is not None else 0
        if span > 0 and self.tokens > self._tokens_first:
            tps = (self.tokens - self._tokens_first) / span
            out["tokens_per_s"] = tps
            if self._peak and self.flops_per_token:
                from trainledger.money.rates.costs import mfu

                world = max(1, _env_int(self.env, "WORLD_SIZE", 1))
                out["mfu"] = mfu(tps, float(self.flops_per_token), self._peak, self.gpus or world)
        return out


def _argv() -> list[str]:
    """This process's command line as recorded, with credentials redacted where the wrapper's redaction exists."""
    argv = [str(a) for a in sys.argv[:50]]
    try:
        from trainledger.sources.capture.redact import redact_argv  # the wrapper's redaction (issue 24)
    except ImportError:
        return argv
    return list(redact_argv(argv))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


class _NoPhase:
    """``run.phase`` on a rank that records nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NO_PHASE = _NoPhase()


def _on_gpu(env) -> bool:
    """Whether this process trains on a GPU: torch says so if it is loaded, else NVML sees one it owns."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return bool(torch.cuda.is_available())
        except Exception:
            return False
    from trainledger.sources.telemetry.sampling import owned_gpus

    if owned_gpus(env) == []:
        return False
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetCount() > 0
    except Exception:
        return False


def track(project: Optional[str] = None, **kwargs: Any) -> TrackedRun:
    """A run recorded from your code: ``with trainledger.track(project=...) as run:`` or ``@trainledger.track(...)``.

    Keyword arguments: ``name``, ``user``, ``node_type``, ``offer``, ``tags`` (dict),
    ``run_id``, ``resume_of`` (the run this one restarts from a checkpoint of),
    ``db`` (ledger URL; else ``$TRAINLEDGER_DB_URL``), ``journal_dir``,
    ``flops_per_token`` and ``peak_tflops`` (MFU), ``gpus`` (GPUs the run uses, for
    MFU; default ``WORLD_SIZE``), ``metrics_port`` (Prometheus).
    """
    return TrackedRun(project, **kwargs)
