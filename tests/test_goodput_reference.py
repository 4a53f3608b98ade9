"""Reference check: our goodput account against Google's ml-goodput-measurement on the same timelines.

Each generated timeline is a job chain: attempts with a start-up (training preparation), a checkpoint
restore on resumed attempts, steps with data stalls and straggler waits, evaluations, checkpoint saves,
crashes (at a step boundary, or in the middle of a save: a partial checkpoint that never completed),
a recovery gap before each restart, and a final attempt that completes. The same timeline is fed

* to our side: the phase events a tracked run records (``trainledger.sources.phases.PhaseAggregator``, the
  writer thread's code), then :func:`trainledger.money.goodput.account.account_seconds` per attempt (a run of the chain);
* to ``GoodputCalculator`` through an in-memory logger, as log entries written by its own
  ``GoodputRecorder`` (job start/end, training preparation, step starts, custom badput events for data
  waits, evals and straggler waits) plus the checkpoint manager's save/restore entries.

They must agree on goodput and on every category to 1 ms (docs/GOODPUT.md maps them). Where the two
definitions differ the generator stays inside their common ground, as documented there: every interrupted
attempt completes a checkpoint of its own; a crash is seen by the library as the start of the step that
never finished; the chain ends with a completed attempt; the first step of an attempt is not slower than
the others (the library's PROGRAM_STARTUP rule is then 0, and our start-up is measured directly).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from trainledger.money.goodput.account import Category, PhaseTotal, account_seconds, seconds_decimal, sum_categories
from trainledger.sources import phases as ph

goodput = pytest.importorskip("ml_goodput_measurement.src.goodput")
BadputType = goodput.BadputType
T0 = 1_780_000_000.0
TOLERANCE = Decimal("0.001")


class MemoryLogger:
    """The calculator's logger, in memory: what the recorder writes, it reads back."""

    def __init__(self):
        self.entries: list[tuple[float, int, dict]] = []

    def write_cloud_logging_entry(self, entry):
        t = next(v for k, v in entry.items() if "time" in k and isinstance(v, float))
        self.entries.append((t, len(self.entries), entry))

    def add(self, t: float, entry: dict):
        self.entries.append((t, len(self.entries), entry))

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        if last_entry_info:
            return [], last_entry_info
        ordered = [e for _, _, e in sorted(self.entries, key=lambda x: (x[0], x[1]))]
        return ordered, (datetime.now(timezone.utc), str(len(ordered)))


@dataclass
class Attempt:
    start: float
    events: list = field(default_factory=list)  # our phase events (kind, value, t)
    end: float = 0.0
    interrupted: bool = False
    checkpoint_at: float | None = None
    gap: float = 0.0  # recovery before it


class Chain:
    """Builds one timeline, writing both sides as it goes."""

    def __init__(self, rng: random.Random, log: MemoryLogger, job: str):
        self.rng, self.log, self.job = rng, log, job
        self.rec = goodput.GoodputRecorder(job, "mem", logging_enabled=True, cloud_logger=log)
        self.attempts: list[Attempt] = []
        self.t = T0
        self.resume_step = 1  # the step the next attempt starts at
        self.labels = 0

    def at(self, t: float) -> datetime:
        return datetime.fromtimestamp(t, timezone.utc)

    def custom(self, kind: str, a: float, b: float, ours: Attempt, phase: str | None):
        self.rec.record_custom_badput_event_start_time(self.at(a), kind)
        self.rec.record_custom_badput_event_end_time(self.at(b), kind)
        if phase:
            ours.events += [(ph.BEGIN, phase, a), (ph.END, phase, b)]

    def ckpt_entry(self, t: float, event: str, step: int, seconds: float):
        self.labels += 1  # each save/restore is its own operation (the calculator averages repeats of one key)
        key = "checkpoint_manager_blocking_duration_secs" if event == "save" else "checkpoint_manager_duration_secs"
        self.log.add(t, {"job_name": self.job, "event_type": event, "step": f"{step}.{self.labels}",
                         "directory": "/ckpt", key: seconds, "checkpointer_blocking_duration_secs": seconds,
                         "checkpointer_duration_secs": seconds, "wait_for_prev_duration_secs": 0.0,
                         "get_old_steps_duration_secs": 0.0})

    def start_attempt(self, gap: float) -> Attempt:
        a = Attempt(start=self.t + gap, gap=gap)
        self.t = a.start
        self.rec.record_job_start_time(self.at(self.t))
        prep = self.rng.uniform(1, 30)
        self.rec.record_training_preparation_start_time(self.at(self.t))
        self.rec.record_training_preparation_end_time(self.at(self.t + prep))
        self.t += prep
        if self.attempts:  # resumed: restore, then more preparation
            restore = self.rng.uniform(1, 20)
            a.events += [(ph.BEGIN, "checkpoint_restore", self.t), (ph.END, "checkpoint_restore", self.t + restore)]
            self.ckpt_entry(self.t + restore, "restore", self.resume_step, restore)
            self.t += restore
            prep2 = self.rng.uniform(0, 10)
            self.rec.record_training_preparation_start_time(self.at(self.t))
            self.rec.record_training_preparation_end_time(self.at(self.t + prep2))
            self.t += prep2
        self.attempts.append(a)
        return a

    def step(self, a: Attempt, k: int, compute: float, plain: bool):
        a.events.append((ph.STEP_BEGIN, None, self.t))
        self.rec.record_step_start_time(k, self.at(self.t))
        t = self.t
        if not plain and self.rng.random() < 0.3:  # a data stall
            dw = self.rng.uniform(0.1, 5)
            self.custom("data_wait", t, t + dw, a, "data")
            t += dw
        t += compute
        if not plain and self.rng.random() < 0.2:  # the slowest rank holds the others
            w = self.rng.uniform(0.05, 2)
            self.custom("straggler_wait", t, t + w, a, None)
            a.events.append((ph.RANKS, (compute + 2 * w, compute), t + w))
            t += w
        a.events.append((ph.STEP_END, None, t))
        self.t = t

    def between(self, a: Attempt, k: int, every: int, quiet: bool) -> bool:
        """After step k: maybe an eval, maybe a save (``quiet``: neither). Returns False when the attempt
        crashes in a partial save."""
        if quiet:
            return True
        if self.rng.random() < 0.15:
            e = self.rng.uniform(1, 15)
            self.custom("eval", self.t, self.t + e, a, "eval")
            self.t += e
        if k % every == 0:
            sv = self.rng.uniform(0.5, 10)
            if a.interrupted and a.checkpoint_at is not None and self.rng.random() < 0.3:
                a.events.append((ph.BEGIN, "checkpoint_save", self.t))  # crashes mid-save: never completes
                self.t += sv * self.rng.uniform(0.1, 0.9)
                return False
            a.events += [(ph.BEGIN, "checkpoint_save", self.t), (ph.END, "checkpoint_save", self.t + sv)]
            self.t += sv
            a.events.append((ph.CHECKPOINT, None, self.t))
            a.checkpoint_at = self.t
            self.ckpt_entry(self.t, "save", k + 1, sv)
            self.resume_checkpoint = k + 1
        return True

    def run_attempt(self, final: bool, gap: float):
        a = self.start_attempt(gap)
        a.interrupted = not final
        every = self.rng.randint(2, 6)
        n = self.rng.randint(every + 2, 25)
        computes = [self.rng.uniform(0.8, 1.2) for _ in range(n)]
        computes[0] = min(computes)  # the first step is not slower than the others (see the module)
        first = self.resume_step
        crash_after = None if final else self.rng.randint(every, n - 1)
        for i in range(n):
            k = first + i
            self.step(a, k, computes[i], plain=(i == 0))
            ok = self.between(a, k, every, (final and i == n - 1) or i == 0)
            if not ok or (crash_after is not None and i >= crash_after and a.checkpoint_at is not None):
                break
        if final:
            self.rec.record_step_start_time(k + 1, self.at(self.t))  # the last step ends where a next would start
            self.rec.record_job_end_time(self.at(self.t))
        else:
            self.rec.record_step_start_time(k + 1, self.at(self.t))  # the step the crash interrupted
            if a.checkpoint_at is None:  # no checkpoint yet: keep going until one (the common ground)
                raise AssertionError("generator: an interrupted attempt without a checkpoint")
            self.resume_step = self.resume_checkpoint
        a.end = self.t

    def build(self):
        attempts = self.rng.randint(1, 4)
        for i in range(attempts):
            self.run_attempt(i == attempts - 1, 0.0 if i == 0 else self.rng.choice([0.0, self.rng.uniform(1, 300)]))


def ours(chain: Chain) -> dict[Category, Decimal]:
    """Our account of the chain: each attempt a run, aggregated as the writer thread does."""
    parts = []
    for a in chain.attempts:
        agg = ph.PhaseAggregator(a.start)
        agg.feed(a.events)
        rows = {name: PhaseTotal(v[0], v[1], v[2], v[3]) for name, v in agg.rows().items()}
        wall = seconds_decimal(a.end - a.start)
        lost = seconds_decimal(a.end - a.checkpoint_at) if a.interrupted else Decimal(0)
        quality: list[str] = []
        parts.append(account_seconds(wall, lost, 1, {"n0": rows}, a.interrupted, seconds_decimal(a.gap), quality))
        assert not quality, quality
    return sum_categories(parts)


def theirs(chain: Chain, tmp_path) -> tuple[float, dict]:
    calc = goodput.GoodputCalculator(chain.job, "mem", cloud_logger=chain.log, cache_dir=str(tmp_path))
    pct, _, _ = calc.get_job_goodput(include_badput_breakdown=True)
    details = calc.get_job_goodput_details()
    return pct, details


def compare(chain: Chain, tmp_path) -> None:
    mine = ours(chain)
    pct, details = theirs(chain, tmp_path)
    bad = details["badput_time"]
    custom = bad.get(BadputType.CUSTOM_BADPUT_EVENTS, {}) or {}
    expected = {
        Category.productive: details["goodput_time"][goodput.GoodputType.TOTAL],
        Category.startup: bad.get(BadputType.TRAINING_PREP, 0.0) + bad.get(BadputType.PROGRAM_STARTUP, 0.0)
        + bad.get(BadputType.TPU_INITIALIZATION, 0.0),
        Category.data_wait: custom.get("DATA_WAIT", 0.0),
        Category.eval: custom.get("EVAL", 0.0),
        Category.straggler_wait: custom.get("STRAGGLER_WAIT", 0.0),
        Category.checkpoint_save: bad.get(BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, 0.0),
        Category.checkpoint_restore: bad.get(BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME, 0.0),
        Category.lost_work: bad.get(BadputType.WASTED_PROGRESS_FROM_DISRUPTION, 0.0),
        Category.recovery: bad.get(BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, 0.0),
        Category.unattributed: bad.get(BadputType.OTHER, 0.0),
    }
    for cat, value in expected.items():
        assert abs(mine[cat] - Decimal(repr(value))) <= TOLERANCE, (chain.job, cat, mine[cat], value)
    total = sum(mine.values(), Decimal(0))
    assert abs(total - Decimal(repr(details["total_elapsed_time"]))) <= TOLERANCE
    our_pct = mine[Category.productive] / total * 100  # = the chain's ETTR
    assert abs(float(our_pct) - pct) * float(total) / 100 <= 0.001


def test_goodput_agrees_with_ml_goodput_measurement_on_1000_generated_timelines(tmp_path):
    rng = random.Random(20261204)
    kinds = {"restarts": 0, "partial_saves": 0, "data_stalls": 0, "straggler": 0, "recovery_gaps": 0}
    for i in range(1000):
        log = MemoryLogger()
        chain = Chain(rng, log, f"job{i}")
        chain.build()
        compare(chain, tmp_path)
        kinds["restarts"] += len(chain.attempts) - 1
        kinds["recovery_gaps"] += sum(1 for a in chain.attempts if a.gap > 0)
        events = [e for a in chain.attempts for e in a.events]
        kinds["partial_saves"] += sum(1 for e in events if e[0] == ph.BEGIN and e[1] == "checkpoint_save") - sum(
            1 for e in events if e[0] == ph.END and e[1] == "checkpoint_save")
        kinds["data_stalls"] += sum(1 for e in events if e[0] == ph.BEGIN and e[1] == "data")
        kinds["straggler"] += sum(1 for e in events if e[0] == ph.RANKS)
    assert all(n >= 50 for n in kinds.values()), kinds  # the timelines exercise every feature
