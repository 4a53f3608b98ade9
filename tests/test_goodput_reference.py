"""Reference check: our goodput account against Google's ml-goodput-measurement on the same timelines.

Each generated timeline is a job chain: attempts with a start-up (training preparation), a checkpoint
restore on resumed attempts, steps with data stalls and straggler waits, evaluations, checkpoint saves,
crashes (at a step boundary, or in the middle of a save: a partial checkpoint that never completed),
a recovery gap before each restart, and a final attempt that completes. The same timeline is fed

* to our side: the phase events a tracked run records (``trainledger.sources.record.phases.PhaseAggregator``, the
  writer thread's code), then :func:`trainledger.money.goodput.account.account_seconds` per attempt (a run of the chain);
* to ``GoodputCalculator`` through an in-memory logger, as log entries written by its own
  ``GoodputRecorder`` (job start/end, training preparation, step starts, custom badput events for data
  waits, evals and straggler waits) plus the checkpoint manager's save/restore entries.

Every category must equal the library's to 1 ms, plus the difference written out in docs/GOODPUT.md ("The
reference check") where the two definitions differ; the generator covers those cases too and computes each
difference from its own ground truth (:func:`differences`), never from either implementation:

* **first-step warm-up** (half the attempts compile for 2-30 s in their first step): both count the first step's
  excess over the mean of the attempt's other kept steps as start-up (the library's ``PROGRAM_STARTUP``); the
  library's steps include the checkpoint saves and data loads inside them, ours do not;
* **crashes with and without a logged crash step**: logged, the library sees progress end at the crash; not
  logged, at the last recorded step start, and counts the rest as recovery where we count it as lost work;
* **data waits recorded both ways**: inside the step (a custom ``DATA_WAIT`` event; our ``data`` phase inside
  the step) or as a phase of its own before the step's start (the library's data-loading records, as MaxText's
  loop; our ``data`` phase between steps): the library counts the first load after each (re)start as
  ``DATA_LOADING_SYNC`` (after a restart also the next one, inside a step) and the others as productive.

Left out (the common ground): every interrupted attempt completes a checkpoint of its own first, and the chain
ends with a completed attempt (see docs/GOODPUT.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from trainledger.money.goodput.account import Category, PhaseTotal, account_seconds, seconds_decimal, sum_categories
from trainledger.sources.record import phases as ph

#: ml_goodput_measurement's ``goodput`` module and its ``BadputType``, bound by :func:`_reference` before each test:
#: the library imports SciPy and Google Cloud Logging (2 CPU-seconds), which every pytest worker would otherwise
#: pay at collection. A test dependency: a hard import, never a skip (issue 38).
goodput = BadputType = None


@pytest.fixture(autouse=True)
def _reference():
    global goodput, BadputType
    from ml_goodput_measurement.src import goodput

    BadputType = goodput.BadputType
T0 = 1_780_000_000.0
TOLERANCE = Decimal("0.001")
D = Decimal


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
    first: int = 1  # its first step
    computes: dict = field(default_factory=dict)  # step → its compute seconds (our net step)
    saves: dict = field(default_factory=dict)  # step → the completed save after it
    loads: dict = field(default_factory=dict)  # step → the data load before its start (separate-phase data waits)
    kept_to: int = 0  # its last kept step (before its last checkpoint; the last step of a completed attempt)
    warm: bool = False  # its first step compiles
    logged: bool = True  # an interrupted attempt: the library was told the crashed step's start
    tail: float = 0.0  # not logged: from the last recorded step start to the crash


class Chain:
    """Builds one timeline, writing both sides as it goes."""

    def __init__(self, rng: random.Random, log: MemoryLogger, job: str):
        self.rng, self.log, self.job = rng, log, job
        self.rec = goodput.GoodputRecorder(job, "mem", logging_enabled=True, cloud_logger=log)
        self.attempts: list[Attempt] = []
        self.t = T0
        self.resume_step = 1  # the step the next attempt starts at
        self.resume_checkpoint = 1  # the step after the last completed checkpoint
        self.labels = 0
        self.separate = rng.random() < 0.5  # data waits as a phase before the step (else inside it)

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

    def load(self, a: Attempt, k: int):
        """Step k's batch, loaded before its start is recorded (MaxText's loop): the library's data-loading
        records; ours a ``data`` phase between steps."""
        d = self.rng.uniform(0.5, 5) if self.rng.random() < 0.3 else self.rng.uniform(0.01, 0.3)
        self.rec.record_data_loading_start_time(self.at(self.t))
        self.rec.record_data_loading_end_time(self.at(self.t + d))
        a.events += [(ph.BEGIN, "data", self.t), (ph.END, "data", self.t + d)]
        a.loads[k] = d
        self.t += d

    def step(self, a: Attempt, k: int, compute: float, plain: bool):
        if self.separate:
            self.load(a, k)
        a.computes[k] = compute
        a.events.append((ph.STEP_BEGIN, None, self.t))
        self.rec.record_step_start_time(k, self.at(self.t))
        self.step_started = t = self.t
        if not plain and not self.separate and self.rng.random() < 0.3:  # a data stall inside the step
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

    def between(self, a: Attempt, k: int, every: int | None, quiet: bool) -> bool:
        """After step k: maybe an eval, maybe a save (``quiet``: neither; ``every`` None: no saves). Returns False
        when the attempt crashes in a partial save."""
        if quiet:
            return True
        if self.rng.random() < 0.15:
            e = self.rng.uniform(1, 15)
            self.custom("eval", self.t, self.t + e, a, "eval")
            self.t += e
        if every is not None and k % every == 0:
            sv = self.rng.uniform(0.5, 10)
            if a.interrupted and a.checkpoint_at is not None and self.rng.random() < 0.3:
                a.events.append((ph.BEGIN, "checkpoint_save", self.t))  # crashes mid-save: never completes
                self.t += sv * self.rng.uniform(0.1, 0.9)
                return False
            a.events += [(ph.BEGIN, "checkpoint_save", self.t), (ph.END, "checkpoint_save", self.t + sv)]
            self.t += sv
            a.events.append((ph.CHECKPOINT, None, self.t))
            a.checkpoint_at = self.t
            a.saves[k] = sv
            self.ckpt_entry(self.t, "save", k + 1, sv)
            self.resume_checkpoint = k + 1
        return True

    def run_attempt(self, final: bool, gap: float):
        a = self.start_attempt(gap)
        a.interrupted = not final
        every = self.rng.randint(2, 6)
        n = self.rng.randint(every + 2, 25)
        computes = [self.rng.uniform(0.8, 1.2) for _ in range(n)]
        a.warm = self.rng.random() < 0.5
        if a.warm:  # the first step compiles
            computes[0] += self.rng.uniform(2, 30)
        first = a.first = self.resume_step
        crash_after = None if final else self.rng.randint(every, n - 1)
        saving = every if not final or self.rng.random() < 0.5 else None  # a completed attempt needs no save
        for i in range(n):
            k = first + i
            self.step(a, k, computes[i], plain=(i == 0))
            ok = self.between(a, k, saving, (final and i == n - 1) or i == 0)
            if not ok or (crash_after is not None and i >= crash_after and a.checkpoint_at is not None):
                break
        if final:
            self.rec.record_step_start_time(k + 1, self.at(self.t))  # the last step ends where a next would start
            self.rec.record_job_end_time(self.at(self.t))
            a.kept_to = k
        else:
            if a.checkpoint_at is None:  # no checkpoint yet: keep going until one (the common ground)
                raise AssertionError("generator: an interrupted attempt without a checkpoint")
            # not logged only when the step to resume from was recorded here (else the library sees no restart)
            a.logged = k < self.resume_checkpoint or self.rng.random() < 0.5
            if a.logged:
                self.rec.record_step_start_time(k + 1, self.at(self.t))  # the step the crash interrupted
            else:
                a.tail = self.t - self.step_started
            a.kept_to = self.resume_checkpoint - 1
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


def _excess(first: float, others: list[float]) -> float:
    """The first step's excess over the mean of the others (both sides' warm-up rule)."""
    return max(0.0, first - sum(others) / len(others)) if others else 0.0


def warm_ups(a: Attempt) -> tuple[float, float]:
    """An attempt's warm-up (ours, the library's): its first kept step's excess over the mean of the others."""
    kept = range(a.first, a.kept_to + 1)
    lib = {k: a.computes[k] + a.saves.get(k, 0.0) + a.loads.get(k + 1, 0.0) for k in kept}
    return (_excess(a.computes[a.first], [a.computes[k] for k in kept if k != a.first]),
            _excess(lib[a.first], [lib[k] for k in kept if k != a.first]))


def differences(chain: Chain) -> dict[Category, float]:
    """Ours − the library's, per category, from the generator's ground truth (docs/GOODPUT.md, "The reference
    check"). Per attempt, over its kept steps (to its last checkpoint; all of a completed attempt):

    * the library's step k lasts from its recorded start to the next one's less the custom events in it: its
      compute, the save after it and the next step's data load; ours is its compute. Each side's warm-up is the
      first step's excess over the mean of the other kept steps: the difference moves between start-up and
      productive;
    * data loads recorded before a step's start lie in the previous step for the library (productive, async),
      except the first load after each (re)start, ``DATA_LOADING_SYNC``, and after a restart the next one too
      (sync and productive at once); ours are all ``data_wait`` up to the last checkpoint. The load after the
      checkpoint, before the crashed step's recorded start, is productive to it and lost work to us;
    * a crash not logged as a step start: from the last recorded step start to the crash is its recovery and our
      lost work.
    """
    d = dict.fromkeys(Category, 0.0)
    for j, a in enumerate(chain.attempts):
        kept = range(a.first, a.kept_to + 1)
        w_ours, w_lib = warm_ups(a)
        d[Category.startup] += w_ours - w_lib
        d[Category.productive] -= sum(a.loads.get(k + 1, 0.0) for k in kept) + (w_ours - w_lib)
        sync = a.loads.get(a.first, 0.0) + (a.loads.get(a.first + 1, 0.0) if j else 0.0)
        d[Category.data_wait] += sum(v for k, v in a.loads.items() if k <= a.kept_to) - sync
        if a.interrupted:
            d[Category.lost_work] += a.loads.get(a.kept_to + 1, 0.0) + a.tail
            d[Category.recovery] -= a.tail
    return d


def theirs(chain: Chain, tmp_path) -> tuple[float, dict]:
    calc = goodput.GoodputCalculator(chain.job, "mem", cloud_logger=chain.log, cache_dir=str(tmp_path))
    pct, _, _ = calc.get_job_goodput(include_badput_breakdown=True)
    details = calc.get_job_goodput_details()
    return pct, details


def compare(chain: Chain, tmp_path) -> dict[Category, float]:
    """Asserts ours = the library's + :func:`differences` per category; returns the differences."""
    mine = ours(chain)
    pct, details = theirs(chain, tmp_path)
    delta = differences(chain)
    bad = details["badput_time"]
    custom = bad.get(BadputType.CUSTOM_BADPUT_EVENTS, {}) or {}
    expected = {
        Category.productive: details["goodput_time"][goodput.GoodputType.TOTAL],
        Category.startup: bad.get(BadputType.TRAINING_PREP, 0.0) + bad.get(BadputType.PROGRAM_STARTUP, 0.0)
        + bad.get(BadputType.TPU_INITIALIZATION, 0.0),
        Category.data_wait: custom.get("DATA_WAIT", 0.0) + bad.get(BadputType.DATA_LOADING_SYNC, 0.0),
        Category.eval: custom.get("EVAL", 0.0),
        Category.straggler_wait: custom.get("STRAGGLER_WAIT", 0.0),
        Category.checkpoint_save: bad.get(BadputType.UNPRODUCTIVE_CHECKPOINT_SAVE_TIME, 0.0),
        Category.checkpoint_restore: bad.get(BadputType.UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME, 0.0),
        Category.lost_work: bad.get(BadputType.WASTED_PROGRESS_FROM_DISRUPTION, 0.0),
        Category.recovery: bad.get(BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION, 0.0),
        Category.unattributed: bad.get(BadputType.OTHER, 0.0),
    }
    for cat, value in expected.items():
        want = Decimal(repr(value)) + Decimal(repr(delta[cat]))
        assert abs(mine[cat] - want) <= TOLERANCE, (chain.job, cat, mine[cat], value, delta[cat])
    total = sum(mine.values(), Decimal(0))
    assert abs(total - Decimal(repr(details["total_elapsed_time"]))) <= TOLERANCE
    our_pct = mine[Category.productive] / total * 100  # = the chain's ETTR
    assert abs(float(our_pct) - pct - delta[Category.productive] / float(total) * 100) * float(total) / 100 <= 0.001
    return delta


def test_goodput_agrees_with_ml_goodput_measurement_on_1000_generated_timelines(tmp_path):
    rng = random.Random(20261204)
    kinds = {"restarts": 0, "partial_saves": 0, "data_stalls": 0, "straggler": 0, "recovery_gaps": 0,
             "warm_ups": 0, "crashes_logged": 0, "crashes_not_logged": 0, "data_loads_before_steps": 0,
             "warm_ups_agreed": 0, "warm_ups_apart_by_saves_or_loads": 0, "chains_agreed_exactly": 0}
    for i in range(1000):
        log = MemoryLogger()
        chain = Chain(rng, log, f"job{i}")
        chain.build()
        delta = compare(chain, tmp_path)
        kinds["chains_agreed_exactly"] += all(abs(v) < 1e-9 for v in delta.values())
        for a in chain.attempts:
            w_ours, w_lib = warm_ups(a)
            kinds["warm_ups"] += a.warm
            kinds["warm_ups_agreed"] += a.warm and w_ours > 0 and w_ours == w_lib  # no save or load in its steps
            kinds["warm_ups_apart_by_saves_or_loads"] += a.warm and w_ours != w_lib
            kinds["crashes_logged"] += a.interrupted and a.logged
            kinds["crashes_not_logged"] += a.interrupted and not a.logged
            kinds["data_loads_before_steps"] += len(a.loads)
        kinds["restarts"] += len(chain.attempts) - 1
        kinds["recovery_gaps"] += sum(1 for a in chain.attempts if a.gap > 0)
        events = [e for a in chain.attempts for e in a.events]
        kinds["partial_saves"] += sum(1 for e in events if e[0] == ph.BEGIN and e[1] == "checkpoint_save") - sum(
            1 for e in events if e[0] == ph.END and e[1] == "checkpoint_save")
        kinds["data_stalls"] += sum(1 for e in events if e[0] == ph.BEGIN and e[1] == "data") - sum(
            len(a.loads) for a in chain.attempts)
        kinds["straggler"] += sum(1 for e in events if e[0] == ph.RANKS)
    assert all(n >= 50 for n in kinds.values()), kinds  # the timelines exercise every feature


class Hand:
    """A timeline written by hand (seconds after T0), told to both sides as :class:`Chain` tells them."""

    def __init__(self, job: str):
        self.job, self.log, self.events, self.labels = job, MemoryLogger(), [], 0
        self.rec = goodput.GoodputRecorder(job, "mem", logging_enabled=True, cloud_logger=self.log)

    def at(self, s: float) -> datetime:
        return datetime.fromtimestamp(T0 + s, timezone.utc)

    def start(self, s: float, prep: float):
        self.rec.record_job_start_time(self.at(s))
        self.rec.record_training_preparation_start_time(self.at(s))
        self.rec.record_training_preparation_end_time(self.at(s + prep))

    def step(self, k: int, a: float, b: float):
        self.rec.record_step_start_time(k, self.at(a))
        self.events += [(ph.STEP_BEGIN, None, T0 + a), (ph.STEP_END, None, T0 + b)]

    def checkpoint(self, event: str, a: float, b: float, step: int):
        self.labels += 1
        key = "checkpoint_manager_blocking_duration_secs" if event == "save" else "checkpoint_manager_duration_secs"
        self.log.add(T0 + b, {"job_name": self.job, "event_type": event, "step": f"{step}.{self.labels}",
                              "directory": "/ckpt", key: b - a, "checkpointer_blocking_duration_secs": b - a,
                              "checkpointer_duration_secs": b - a, "wait_for_prev_duration_secs": 0.0,
                              "get_old_steps_duration_secs": 0.0})
        phase = "checkpoint_save" if event == "save" else "checkpoint_restore"
        self.events += [(ph.BEGIN, phase, T0 + a), (ph.END, phase, T0 + b)]
        if event == "save":
            self.events.append((ph.CHECKPOINT, None, T0 + b))

    def load(self, a: float, b: float):
        """A batch loaded before its step's start (MaxText): the library's data-loading records."""
        self.rec.record_data_loading_start_time(self.at(a))
        self.rec.record_data_loading_end_time(self.at(b))
        self.events += [(ph.BEGIN, "data", T0 + a), (ph.END, "data", T0 + b)]

    def ours(self, start: float, end: float, checkpoint: float | None = None, gap: float = 0.0):
        """Our account of the attempt from ``start`` to ``end`` (interrupted: lost after ``checkpoint``)."""
        agg = ph.PhaseAggregator(T0 + start)
        agg.feed(self.events)
        self.events = []
        rows = {name: PhaseTotal(v[0], v[1], v[2], v[3]) for name, v in agg.rows().items()}
        lost = Decimal(0) if checkpoint is None else seconds_decimal(end - checkpoint)
        return account_seconds(seconds_decimal(end - start), lost, 1, {"n0": rows}, checkpoint is not None,
                               seconds_decimal(gap))

    def theirs(self, tmp_path) -> dict:
        calc = goodput.GoodputCalculator(self.job, "mem", cloud_logger=self.log, cache_dir=str(tmp_path))
        calc.get_job_goodput(include_badput_breakdown=True)
        d = calc.get_job_goodput_details()
        return {"productive": d["goodput_time"][goodput.GoodputType.TOTAL], **d["badput_time"]}


@pytest.mark.parametrize("save", [False, True])
def test_first_step_warm_up_is_start_up_on_both_sides_and_a_save_in_the_steps_sets_them_apart(tmp_path, save):
    # prep 10 s; step 1 compiles (8 s), steps 2-4 take 2 s; with ``save`` a 4 s save after step 2
    h = Hand("warm")
    h.start(0, 10)
    h.step(1, 10, 18)
    h.step(2, 18, 20)
    s = 4 if save else 0
    if save:
        h.checkpoint("save", 20, 24, 3)
    h.step(3, 20 + s, 22 + s)
    h.step(4, 22 + s, 24 + s)
    h.rec.record_step_start_time(5, h.at(24 + s))
    h.rec.record_job_end_time(h.at(24 + s))
    mine, lib = h.ours(0, 24 + s), h.theirs(tmp_path)
    # ours: the first step (8 s) exceeds the typical one (2 s) by 6 s: start-up 10 + 6, productive 8 + 3 × 2 − 6
    assert (mine[Category.startup], mine[Category.productive], mine[Category.checkpoint_save]) == (D(16), D(8), D(s))
    assert sum(mine.values()) == D(24 + s)
    if not save:  # the library: the same 6 s as PROGRAM_STARTUP
        assert lib[BadputType.PROGRAM_STARTUP] == pytest.approx(6, abs=1e-6) and lib["productive"] == pytest.approx(8)
    else:  # its step 2 runs to step 3's start (6 s, the save in it): typical (6 + 2 + 2) / 3, warm-up 8 − 10/3
        assert lib[BadputType.PROGRAM_STARTUP] == pytest.approx(14 / 3, abs=1e-6)
        assert lib["productive"] == pytest.approx(8 + 2 + 6 + 2 + 2 - 14 / 3 - 4 - 2, abs=1e-6)  # = 28/3
        assert lib[BadputType.TRAINING_PREP] + lib[BadputType.PROGRAM_STARTUP] == pytest.approx(10 + 14 / 3)
    assert lib[BadputType.TRAINING_PREP] == pytest.approx(10)


@pytest.mark.parametrize("logged", [True, False])
def test_a_crash_without_a_logged_crash_step_is_lost_work_to_us_and_recovery_to_the_library(tmp_path, logged):
    # attempt 1: prep 10, steps 1-2 (2 s each), a save to 16 (resume at step 3), step 3 to 18, an eval, a crash
    # at 21; attempt 2 starts 4 s later: prep 5, restore 2, steps 3-4 (2 s each), done at 36
    h = Hand("crash")
    h.start(0, 10)
    h.step(1, 10, 12)
    h.step(2, 12, 14)
    h.checkpoint("save", 14, 16, 3)
    h.step(3, 16, 18)
    h.rec.record_custom_badput_event_start_time(h.at(18), "eval")
    h.rec.record_custom_badput_event_end_time(h.at(21), "eval")
    h.events += [(ph.BEGIN, "eval", T0 + 18), (ph.END, "eval", T0 + 21)]
    if logged:
        h.rec.record_step_start_time(4, h.at(21))
    first = h.ours(0, 21, checkpoint=16)
    h.start(25, 5)
    h.checkpoint("restore", 30, 32, 3)
    h.step(3, 32, 34)
    h.step(4, 34, 36)
    h.rec.record_step_start_time(5, h.at(36))
    h.rec.record_job_end_time(h.at(36))
    mine, lib = sum_categories([first, h.ours(25, 36, gap=4)]), h.theirs(tmp_path)
    # ours either way: lost 21 − 16 = 5 s, recovery the 4 s gap; kept: prep 15, restore 2, save 2, steps 4 × 2
    assert {c: v for c, v in mine.items() if v} == {
        Category.productive: D(8), Category.startup: D(15), Category.checkpoint_save: D(2),
        Category.checkpoint_restore: D(2), Category.lost_work: D(5), Category.recovery: D(4)}
    assert lib["productive"] == pytest.approx(8) and lib[BadputType.TRAINING_PREP] == pytest.approx(15)
    # logged: progress ended at 21 (as ours); not logged: at step 3's start (16), so 16 → 25 is recovery
    assert lib[BadputType.WASTED_PROGRESS_FROM_DISRUPTION] == pytest.approx(5 if logged else 0, abs=1e-6)
    assert lib[BadputType.INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION] == pytest.approx(4 if logged else 9)


def test_data_loads_recorded_before_each_step_are_data_wait_to_us_and_only_the_first_to_the_library(tmp_path):
    # MaxText's loop: prep 10 s; each batch loaded before its step's start: 1 s, 1 s, then a 3 s stall; steps 2 s
    h = Hand("loads")
    h.start(0, 10)
    h.load(10, 11)
    h.step(1, 11, 13)
    h.load(13, 14)
    h.step(2, 14, 16)
    h.load(16, 19)
    h.step(3, 19, 21)
    h.rec.record_step_start_time(4, h.at(21))
    h.rec.record_job_end_time(h.at(21))
    mine, lib = h.ours(0, 21), h.theirs(tmp_path)
    # ours: 1 + 1 + 3 s of data wait, 3 × 2 s of steps
    assert {c: v for c, v in mine.items() if v} == {Category.startup: D(10), Category.data_wait: D(5),
                                                    Category.productive: D(6)}
    # the library: the first load is DATA_LOADING_SYNC; the later ones lie inside steps 1 and 2 (3 s and 5 s to the
    # next step's start): productive (its "async" loading), 4 s more than ours; no warm-up (3 < (5 + 2) / 2)
    assert lib[BadputType.DATA_LOADING_SYNC] == pytest.approx(1) and lib["productive"] == pytest.approx(10)
    assert lib[BadputType.PROGRAM_STARTUP] == 0.0
