"""Phases of a run, timed on the training thread and aggregated on the writer thread.

The training step only appends a tuple to a list (:class:`PhaseRecorder`: ``with run.phase("eval"):``,
step begin/end, checkpoints, per-rank step times): no database, no lock, about a microsecond per call
(``python -m bench --only goodput``). The writer thread drains the list into a :class:`PhaseAggregator`
at each flush and journals one ``phases`` event with the node's **cumulative** totals
(``{"type": "phases", "node": HOST, "rows": {phase: [seconds, count, ckpt_seconds, ckpt_count, first_at,
last_at]}}``); applying it sets the ``run_phase`` rows (:func:`apply_phases`), so a journal replayed any
number of times gives the same rows: nothing is doubled, and never one row per step.

What the aggregator measures (``trainledger.money.goodput.account`` turns it into the account):

* ``startup``: from the run's start to the first step's start, nested phases (restore, data, eval) taken out;
* ``step``: from each step's start to the next step's start (the last: to its end), nested phases taken out
  (the ``data`` wait for a batch, an ``eval``, a ``checkpoint_save`` and the ``straggler_wait`` of the other
  ranks); without explicit step starts (``run.log`` only), each log ends a step that began at the previous
  one, and the time to the first log is start-up;
* ``first_step``: the first step's net seconds (count 1) when it began with an explicit step start: the account
  counts its excess over the typical step as start-up (``trainledger.money.goodput.goodput_core.warm_up``);
* ``straggler_wait``: per step, Σ over ranks (slowest rank's time − the rank's time) ÷ ranks, the mean time a
  rank waited (``run.step_times([...])``);
* every phase's seconds and count, and all of it again as of the last checkpoint (what an interrupted run kept);
* at each month edge the run crosses (local midnight of the 1st in the ledger's display time zone, given as
  ``edges``), the costed phases' cumulative totals **at that instant** (open phases, the open step and a span
  that straddles the edge cut there): rows ``<phase>@<edge, ISO UTC>``, so the account attributes a
  month-crossing run's phases to each month at the time they happened (``trainledger.money.goodput.goodput_ledger``).

Bad input is clipped, never raised: an end without a begin is ignored, a begin of an open phase closes it
first, time going backwards is held at the last time seen, a negative duration counts 0; each is counted in
a ``quality:<issue>`` row.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone, tzinfo
from typing import Any, Callable, Optional

from trainledger.money.goodput.goodput_core import (
    EDGE_MARK,
    PHASE_ALIASES,
    PHASE_DATA,
    PHASE_FIRST_STEP,
    PHASE_SAVE,
    PHASE_STARTUP,
    PHASE_STEP,
    PHASE_STRAGGLER,
    PHASES,
    QUALITY_PREFIX,
)
from trainledger.sources.record.sanitize import clean_text

#: no run is longer: a later time is a clock jump (issue 37), held at the last time seen
MAX_RUN_S = 10 * 366 * 86400.0
# event kinds on the recorder's list
BEGIN, END, STEP_BEGIN, STEP_END, CHECKPOINT, RANKS, SPAN = range(7)


def phase_name(name: Any) -> str:
    """A phase name as recorded: aliases resolved, at most 100 characters, never empty."""
    try:
        text = name if isinstance(name, str) else ("" if name is None else str(name))
    except Exception:  # an object whose str() raises: never the training's problem
        text = ""
    text = clean_text(text).strip()[:100] or "custom"
    if text == PHASE_FIRST_STEP:  # the writer's own row: a user's phase of that name stays a custom one
        return "custom:" + text
    return PHASE_ALIASES.get(text, text)


def steady_clock() -> Callable[[], float]:
    """Epoch seconds that never jump: the wall time when it was made plus the monotonic time since. A wall
    clock set decades ahead (or back) mid-run must not become a decades-long step (issue 37)."""
    wall0, mono0 = time.time(), time.monotonic()
    return lambda: wall0 + (time.monotonic() - mono0)


class PhaseRecorder:
    """The training thread's side: append ``(kind, value, time)``; :meth:`drain` hands them to the writer."""

    __slots__ = ("events", "clock")

    def __init__(self, clock: Optional[Callable[[], float]] = None):
        self.events: list[tuple] = []
        self.clock = clock or steady_clock()

    def begin(self, name: str) -> None:
        self.events.append((BEGIN, name, self.clock()))

    def end(self, name: str) -> None:
        self.events.append((END, name, self.clock()))

    def step_begin(self) -> None:
        self.events.append((STEP_BEGIN, None, self.clock()))

    def step_end(self) -> None:
        self.events.append((STEP_END, None, self.clock()))

    def checkpoint(self, seconds: Optional[float] = None) -> None:
        """A checkpoint finished now; ``seconds``: how long its save took (a ``checkpoint_save`` span ending now)."""
        t = self.clock()
        if seconds is not None:
            self.events.append((SPAN, (PHASE_SAVE, float(seconds)), t))
        self.events.append((CHECKPOINT, None, t))

    def rank_times(self, seconds: list) -> None:
        self.events.append((RANKS, tuple(seconds), self.clock()))

    def drain(self) -> list[tuple]:
        out, self.events = self.events, []  # a list swap: atomic under the GIL
        return out


class _Phase:
    """A ``with run.phase(name):`` block."""

    __slots__ = ("rec", "name")

    def __init__(self, rec: PhaseRecorder, name: str):
        self.rec, self.name = rec, name

    def __enter__(self):
        self.rec.events.append((BEGIN, self.name, self.rec.clock()))
        return self

    def __exit__(self, *exc):
        self.rec.events.append((END, self.name, self.rec.clock()))
        return False


def month_edges(tz: tzinfo) -> Callable[[float], float]:
    """``next_edge(t)``: the first local month start in ``tz`` strictly after the epoch time ``t`` (epoch s)."""
    def next_edge(t: float) -> float:
        d = datetime.fromtimestamp(t, tz)
        return datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=tz).timestamp()
    return next_edge


def edge_row_name(phase: str, edge: float) -> str:
    return f"{phase}{EDGE_MARK}{_iso(edge)}"


class PhaseAggregator:
    """Folds phase events into per-phase totals (the writer thread's side). ``started``: the run's start (epoch s);
    ``edges``: next month edge after a time (:func:`month_edges`), or None for no month split."""

    def __init__(self, started: float, edges: Optional[Callable[[float], float]] = None):
        self.started = started
        self.edges = edges
        self.next_edge = edges(started) if edges is not None else None
        self.at_edges: dict[float, dict[str, tuple[float, int]]] = {}  # edge → cumulative totals at that instant
        self.ckpt_t: Optional[float] = None
        self.totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
        self.first_at: dict[str, float] = {}
        self.last_at: dict[str, float] = {}
        self.open: dict[str, float] = {}
        self.quality: Counter = Counter()
        self.step_at: Optional[float] = None  # start of the open step interval
        self.nested = 0.0  # nested phase seconds inside the open step interval (or before the first step)
        self.last_end: Optional[float] = None
        self.nested_at_end = 0.0  # ``nested`` when the last step ended (phases after it are not the step's)
        self.begun = False  # an explicit step start since the last step end
        self.first_explicit = False  # the first step began with an explicit step start (its ``first_step`` row)
        self.last_t = started
        self.ckpt: Optional[dict[str, tuple[float, int]]] = None

    def feed(self, events: list[tuple]) -> None:
        for kind, value, t in events:
            try:
                self._one(kind, value, float(t))
            except (TypeError, ValueError):
                self.quality["unreadable_event"] += 1

    def _clock(self, t: float) -> float:
        if t != t or t < self.last_t:  # NaN or time going backwards
            self.quality["out_of_order"] += 1
            return self.last_t
        if t > self.started + MAX_RUN_S:  # a clock set decades ahead (or ±inf): held at the last time seen
            self.quality["clock_jump"] += 1
            return self.last_t
        self.last_t = t
        return t

    def _one(self, kind: int, value: Any, t: float) -> None:
        t = self._clock(t)
        if kind == SPAN:
            value = (value[0], self._span(value[1], t))
        while self.next_edge is not None and t >= self.next_edge:
            self._cut(self.next_edge, kind, value, t)
            self.next_edge = self.edges(self.next_edge)
        if kind == BEGIN:
            if value in self.open:
                self.quality["overlapping"] += 1
                self._close(value, t)
            self.open[value] = t
        elif kind == END:
            if value not in self.open:
                self.quality["end_without_begin"] += 1
                return
            self._close(value, t)
        elif kind == STEP_BEGIN:
            self._step_boundary(t, True)
            self.begun = True
        elif kind == STEP_END:
            if not self.begun:  # run.log only: this step began where the last one ended
                self._step_boundary(t)
            self.begun = False
            self.last_end, self.nested_at_end = t, self.nested
        elif kind == CHECKPOINT:
            self.ckpt, self.ckpt_t = self.snapshot(t), t
        elif kind == RANKS:
            self._ranks(value, t)
        elif kind == SPAN:
            name, secs = value
            self._add(name, secs, t - secs, t)

    def _span(self, secs: Any, t: float) -> float:
        """A span's seconds clipped to 0 … the run's time so far (NaN, ±inf, 1e300, negative: counted in quality)."""
        secs = float(secs)
        if not 0.0 <= secs <= t - self.started:
            self.quality["negative" if not secs >= 0.0 else "too_long"] += 1
            secs = min(max(secs, 0.0), t - self.started) if secs == secs else 0.0
        return secs

    def _cut(self, edge: float, kind: int, value: Any, t: float) -> None:
        """The totals at ``edge``, crossed by an event at ``t`` (every earlier event was before it): phases still
        open, a span ending at ``t`` and the open step interval (or start-up) count up to the edge."""
        totals = {k: list(v) for k, v in self.totals.items()}
        nested = self.nested
        parts = [(name, edge - began) for name, began in self.open.items()]
        if kind == SPAN:
            name, secs = value
            parts.append((name, secs - max(0.0, t - edge)))
        for name, part in parts:
            if part > 0:
                totals.setdefault(name, [0.0, 0])[0] += part
                nested += part if name != PHASE_STARTUP else 0.0
        key = PHASE_STARTUP if self.step_at is None else PHASE_STEP
        net = edge - (self.started if self.step_at is None else self.step_at) - nested
        totals.setdefault(key, [0.0, 0])[0] += max(0.0, net)
        self.at_edges[edge] = {k: (v[0], v[1]) for k, v in totals.items() if k in PHASES}

    def _close(self, name: str, t: float) -> None:
        self._add(name, t - self.open.pop(name), None, t)

    def _add(self, name: str, secs: float, began: Optional[float], t: float) -> None:
        if secs < 0 or secs != secs:
            self.quality["negative"] += 1
            secs = 0.0
        row = self.totals[name]
        row[0] += secs
        row[1] += 1
        self.first_at.setdefault(name, began if began is not None else t - secs)
        self.last_at[name] = t
        if name != PHASE_STARTUP:
            self.nested += secs

    def _ranks(self, times: tuple, t: float) -> None:
        vals = [v for v in map(_seconds, times) if v is not None]
        if len(vals) < 2:
            return
        slowest = max(vals)
        wait = sum(slowest - v for v in vals) / len(vals)
        if wait > t - self.started:  # longer than the run so far: clipped, as a span is
            self.quality["too_long"] += 1
            wait = t - self.started
        self._add(PHASE_STRAGGLER, wait, t, t)

    def _step_boundary(self, t: float, explicit: bool = False) -> None:
        """A step starts at ``t``: the open step interval (if any) closes here; the first one ends start-up."""
        if self.step_at is None:
            self.first_explicit = explicit
            startup = t - self.started - self.nested
            if startup < 0:
                self.quality["negative"] += 1
                startup = 0.0
            row = self.totals[PHASE_STARTUP]
            row[0] += startup
            row[1] += 1
            self.first_at.setdefault(PHASE_STARTUP, self.started)
            self.last_at[PHASE_STARTUP] = t
        else:
            self._close_step(self.totals, t)
        self.step_at, self.nested = t, 0.0

    def _close_step(self, totals: dict, t: float, nested: Optional[float] = None) -> None:
        net = t - self.step_at - (self.nested if nested is None else nested)
        if net < 0:
            net = 0.0
        row = totals[PHASE_STEP]
        if row[1] == 0 and self.first_explicit:  # the first step (run.log only: it lies in start-up already)
            totals[PHASE_FIRST_STEP] = [net, 1]
            self.first_at.setdefault(PHASE_FIRST_STEP, self.step_at)
            self.last_at[PHASE_FIRST_STEP] = t
        row[0] += net
        row[1] += 1
        self.first_at.setdefault(PHASE_STEP, self.step_at)
        self.last_at[PHASE_STEP] = max(self.last_at.get(PHASE_STEP, t), t)

    def snapshot(self, t: float, nested: Optional[float] = None) -> dict[str, tuple[float, int]]:
        """The totals as if the open step interval ended at ``t`` (a checkpoint: what the run keeps)."""
        totals = {k: list(v) for k, v in self.totals.items()}
        if self.step_at is not None and t > self.step_at:
            totals.setdefault(PHASE_STEP, [0.0, 0])
            self._close_step(totals, t, nested)
        return {k: (v[0], v[1]) for k, v in totals.items()}

    def rows(self) -> dict[str, list]:
        """Cumulative totals per phase ``[seconds, count, ckpt_seconds, ckpt_count, first_at, last_at]`` and
        ``quality:<issue>`` counts; the open step interval counts up to the last step's end."""
        closed = self.last_end is not None and self.step_at is not None and self.last_end >= self.step_at
        now = self.snapshot(self.last_end, self.nested_at_end) if closed else {k: (v[0], v[1]) for k, v in self.totals.items()}
        out: dict[str, list] = {}
        for name, (secs, count) in now.items():
            ck = self.ckpt.get(name) if self.ckpt is not None else None
            if self.ckpt is not None and ck is None:
                ck = (0.0, 0)
            out[name] = [round(secs, 6), count, None if ck is None else round(ck[0], 6), None if ck is None else ck[1],
                         _iso(self.first_at.get(name)), _iso(self.last_at.get(name))]
        for edge, snap in self.at_edges.items():
            for name, (secs, count) in snap.items():
                if self.ckpt is None:
                    ck = None
                elif self.ckpt_t >= edge:  # checkpointed after the edge: everything before it was kept
                    ck = (secs, count)
                else:
                    ck = self.ckpt.get(name, (0.0, 0))
                out[edge_row_name(name, edge)] = [round(secs, 6), count, None if ck is None else round(ck[0], 6),
                                                   None if ck is None else ck[1], None, _iso(edge)]
        for issue, n in self.quality.items():
            out[QUALITY_PREFIX + issue] = [0.0, n, None, None, None, None]
        return out


def _seconds(x: Any) -> Optional[float]:
    """A rank's step time in seconds, or None when it is not a finite number ≥ 0."""
    try:
        v = float(x)
    except Exception:
        return None
    return v if math.isfinite(v) and v >= 0 else None


def _iso(t: Optional[float]) -> Optional[str]:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat()


class PhaseSource:
    """Joins a recorder to a run's writer: ``writer.sources.append(source.events)``; each flush drains
    the recorder into the aggregator and journals the node's totals when they changed."""

    def __init__(self, recorder: PhaseRecorder, started: float, node: str,
                 timezone_of: Optional[Callable[[], Optional[tzinfo]]] = None):
        self.recorder = recorder
        self.started = started
        self.agg: Optional[PhaseAggregator] = None if timezone_of is not None else PhaseAggregator(started)
        self.timezone_of = timezone_of
        self.node = node[:200]
        self._last: Optional[dict] = None

    def _aggregator(self) -> PhaseAggregator:
        """Made at the first flush: the month edges come from the ledger's display time zone (UTC when the
        ledger cannot say; the account then spreads a month-crossing run's phases evenly)."""
        if self.agg is None:
            try:
                tz = self.timezone_of() or timezone.utc
            except Exception:
                tz = timezone.utc
            self.agg = PhaseAggregator(self.started, month_edges(tz))
        return self.agg

    def events(self) -> list[dict]:
        self._aggregator()
        drained = self.recorder.drain()
        if drained:
            self.agg.feed(drained)
        rows = self.agg.rows()
        if not rows or rows == self._last:
            return []
        self._last = rows
        return [{"type": "phases", "node": self.node, "rows": rows}]


def ledger_timezone(writer: Any) -> Callable[[], Optional[tzinfo]]:
    """The display time zone of the ledger a run writer applies to (None when it cannot be read)."""
    def resolve() -> Optional[tzinfo]:
        from sqlmodel import Session
        from trainledger.store.settings import display_timezone

        try:
            with Session(writer._engine_or_none()) as s:
                return display_timezone(s)
        except Exception:  # an unreachable ledger: month edges in UTC
            return None
    return resolve


def apply_phases(session: Any, run_id: str, ev: dict[str, Any], registered: Any, ts: Any) -> None:
    """Journal handler: set a node's ``run_phase`` rows to the event's totals (idempotent). ``registered`` and
    ``ts`` are the journal's (the run must be in the ledger; ISO text → datetime)."""
    from sqlmodel import select
    from trainledger.store.models import RunPhase

    registered(session, run_id)
    _ts = ts
    node = str(ev.get("node") or "")[:200]
    existing = {r.phase: r for r in session.exec(
        select(RunPhase).where(RunPhase.run_id == run_id, RunPhase.node == node)).all()}
    for phase, vals in (ev.get("rows") or {}).items():
        vals = list(vals) + [None] * (6 - len(vals))
        fields = dict(seconds=float(vals[0] or 0.0), count=int(vals[1] or 0),
                      ckpt_seconds=None if vals[2] is None else float(vals[2]),
                      ckpt_count=None if vals[3] is None else int(vals[3]),
                      first_at=_ts(vals[4]) if vals[4] else None, last_at=_ts(vals[5]) if vals[5] else None)
        row = existing.get(str(phase)[:100])
        if row is None:
            session.add(RunPhase(run_id=run_id, node=node, phase=str(phase)[:100], **fields))
        else:
            for k, v in fields.items():
                setattr(row, k, v)
    session.flush()


__all__ = ["PhaseRecorder", "PhaseAggregator", "PhaseSource", "apply_phases", "ledger_timezone", "month_edges",
           "phase_name", "PHASE_DATA", "EDGE_MARK"]
