"""The goodput account's vocabulary and pure arithmetic: :class:`Category`, phase names, the time split
(:func:`account_seconds`), the money split (:func:`split_cost`) and the account's data classes.

Imported by the writer thread (:mod:`trainledger.sources.record.phases`) and by the ledger side
(:mod:`trainledger.money.goodput.goodput_ledger`); the public API and its description are :mod:`trainledger.money.goodput.account`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Iterable, Mapping, Optional

ZERO = Decimal(0)
#: seconds are exact on this grid (a microsecond), money on SLICE_QUANTUM
MICRO = Decimal("0.000001")
SLICE_QUANTUM = Decimal("1e-12")
#: clipping below this is the rounding of measured floats, not bad input worth reporting
ROUNDING = Decimal("0.001")


class Category(str, enum.Enum):
    """The goodput categories: ``productive`` and the badput kinds. They partition a run's paid time."""

    productive = "productive"
    startup = "startup"
    data_wait = "data_wait"
    checkpoint_save = "checkpoint_save"
    checkpoint_restore = "checkpoint_restore"
    eval = "eval"
    lost_work = "lost_work"
    recovery = "recovery"
    straggler_wait = "straggler_wait"
    unattributed = "unattributed"

    __hash__ = str.__hash__  # C-level hashing: categories key every per-run dict (Enum's own hash is Python code)


CATEGORIES: tuple[Category, ...] = tuple(Category)
#: (category, its name): reading ``.value`` is slow Python code, and reports read it per run
NAMED: tuple[tuple[Category, str], ...] = tuple((c, c.value) for c in CATEGORIES)
BADPUT: tuple[Category, ...] = tuple(c for c in Category if c is not Category.productive)

# phase names as recorded (run.phase(NAME), the callbacks, the trainer)
PHASE_STARTUP = "startup"
PHASE_DATA = "data"
PHASE_SAVE = "checkpoint_save"
PHASE_RESTORE = "checkpoint_restore"
PHASE_EVAL = "eval"
PHASE_STEP = "step"
PHASE_STRAGGLER = "straggler_wait"
#: the writer's row of the first step's net seconds (count 1; a copy of that step, also inside ``step``): its excess
#: over the run's typical step is start-up (warm-up), as ml-goodput-measurement's PROGRAM_STARTUP (:func:`warm_up`)
PHASE_FIRST_STEP = "first_step"
PHASES = (PHASE_STARTUP, PHASE_DATA, PHASE_SAVE, PHASE_RESTORE, PHASE_EVAL, PHASE_STEP, PHASE_STRAGGLER,
          PHASE_FIRST_STEP)
#: recorded phase → the category its time counts under (``step`` is ``productive``)
PHASE_CATEGORY: dict[str, Category] = {
    PHASE_STARTUP: Category.startup, PHASE_DATA: Category.data_wait, PHASE_SAVE: Category.checkpoint_save,
    PHASE_RESTORE: Category.checkpoint_restore, PHASE_EVAL: Category.eval, PHASE_STEP: Category.productive,
    PHASE_STRAGGLER: Category.straggler_wait}
#: aliases a user may pass to run.phase()
PHASE_ALIASES = {"data_wait": PHASE_DATA, "save": PHASE_SAVE, "restore": PHASE_RESTORE, "evaluation": PHASE_EVAL}
QUALITY_PREFIX = "quality:"
#: a month-edge row: ``<phase>@<edge instant, ISO UTC>``, the phase's cumulative totals at a month edge the run crossed
EDGE_MARK = "@"
#: measured categories take their time in this order, each clipped to what is left of the kept time
CLIP_ORDER = (Category.checkpoint_restore, Category.checkpoint_save, Category.eval, Category.data_wait,
              Category.straggler_wait, Category.startup, Category.productive)


def seconds_decimal(x: Any) -> Decimal:
    """Seconds (a float as measured) as an exact Decimal on the microsecond grid."""
    try:
        d = Decimal(repr(float(x)))
    except (TypeError, ValueError):
        return ZERO
    if not d.is_finite():
        return ZERO
    return d.quantize(MICRO)


@dataclass
class PhaseTotal:
    """One node's total time in one phase, and the total at the run's last checkpoint."""

    seconds: float = 0.0
    count: int = 0
    ckpt_seconds: Optional[float] = None
    ckpt_count: Optional[int] = None


def zero_account() -> dict[Category, Decimal]:
    return {c: ZERO for c in CATEGORIES}


def account_seconds(wall_s: Decimal, lost_s: Decimal, nodes: int, phases: Mapping[str, Mapping[str, PhaseTotal]],
                    interrupted: bool, recovery_s: Decimal = ZERO,
                    quality: Optional[list[str]] = None) -> dict[Category, Decimal]:
    """A run's node-seconds per category (exact on the µs grid; they add up to nodes × (wall + recovery)).

    ``phases``: node → phase name → :class:`PhaseTotal`. ``interrupted``: the run lost its work since
    its last checkpoint (``lost_s`` of the wall time ``wall_s``); its kept time is then explained by the
    totals at that checkpoint. Bad figures are clipped and described in ``quality``.
    """
    quality = quality if quality is not None else []
    out = zero_account()
    wall_s, lost_s = max(ZERO, wall_s), max(ZERO, lost_s)
    if lost_s > wall_s:
        quality.append(f"lost time {lost_s}s longer than the run ({wall_s}s): clipped")
        lost_s = wall_s
    kept = wall_s - lost_s
    n = Decimal(max(1, int(nodes or 1)))
    reporting = [node for node, rows in phases.items() if any(p in rows for p in PHASES)]
    if reporting and kept > 0:
        per_node = [_node_seconds(phases[node], kept, interrupted, quality, node) for node in reporting]
        scale = n / Decimal(len(reporting))
        for cat in CATEGORIES:
            total = sum((p[cat] for p in per_node), ZERO)
            out[cat] = (total * scale).quantize(MICRO, rounding=ROUND_FLOOR)
        measured = sum(out.values(), ZERO)
        out[Category.unattributed] += max(ZERO, kept * n - measured)
    else:
        out[Category.unattributed] = kept * n
    out[Category.lost_work] = lost_s * n
    out[Category.recovery] = max(ZERO, recovery_s) * n
    return out


def _node_seconds(rows: Mapping[str, PhaseTotal], kept: Decimal, interrupted: bool, quality: list[str],
                  node: str) -> dict[Category, Decimal]:
    """One node's kept time split by its phase totals, clipped in :data:`CLIP_ORDER`; the rest unattributed."""
    measured: dict[Category, Decimal] = {}
    for phase, cat in PHASE_CATEGORY.items():
        row = rows.get(phase)
        if row is None:
            continue
        value = row.ckpt_seconds if interrupted else row.seconds
        secs = seconds_decimal(value or 0.0)
        if secs < 0:
            quality.append(f"node {node}: {phase} {secs}s is negative: counted as 0")
            secs = ZERO
        measured[cat] = measured.get(cat, ZERO) + secs
    if Category.productive in measured:
        extra = warm_up(rows, interrupted, measured[Category.productive])
        measured[Category.productive] -= extra
        measured[Category.startup] = measured.get(Category.startup, ZERO) + extra
    out = zero_account()
    left = kept
    for cat in CLIP_ORDER:
        want = measured.get(cat, ZERO)
        take = min(want, left)
        if want - take > ROUNDING:  # measured to the µs: a few µs over is rounding, not bad input
            quality.append(f"node {node}: {cat.value} {want}s exceeds the run's remaining {left}s: clipped")
        out[cat] = take
        left -= take
    out[Category.unattributed] = left
    return out


def warm_up(rows: Mapping[str, PhaseTotal], interrupted: bool, steps_s: Decimal) -> Decimal:
    """The first step's excess over the typical step: max(0, first − mean of the other steps), on the µs grid.

    ml-goodput-measurement counts it as ``PROGRAM_STARTUP`` (``_compute_segment_final_metrics``: ``max(0.0,
    first_step_time - average_step_time)``, the average over the segment's other steps); so do we, moved from
    ``productive`` to ``startup``. ``steps_s``: the net step seconds of ``rows`` (kept ones when ``interrupted``).
    0 without a ``first_step`` row (a writer before it, ``run.log``-only steps, imports, the demo), with fewer than
    two steps, or when the rows do not hold the first step whole (a month part cut before it ended)."""
    first, step = rows.get(PHASE_FIRST_STEP), rows.get(PHASE_STEP)
    if first is None or step is None:
        return ZERO
    n_first = first.ckpt_count if interrupted else first.count
    n = step.ckpt_count if interrupted else step.count
    if not n_first or not n or n < 2:
        return ZERO
    f = seconds_decimal((first.ckpt_seconds if interrupted else first.seconds) or 0.0)
    others = steps_s - f
    if f <= 0 or others < 0:
        return ZERO
    extra = (f - others / (n - 1)).quantize(MICRO, rounding=ROUND_FLOOR)
    return max(ZERO, min(extra, steps_s))


def on_grid(amount: Decimal) -> Decimal:
    """Money on the account's grid (:data:`SLICE_QUANTUM`, as the rollup's): sums of such amounts below 10¹⁵ are
    exact in any order at Decimal's default precision, so every identity of the account holds exactly."""
    return amount.quantize(SLICE_QUANTUM)


def split_cost(cost: Decimal, lost_cost: Decimal, weights: Mapping[Category, Decimal]) -> dict[Category, Decimal]:
    """A cost split by category on the :func:`on_grid` grid: ``lost_work`` = ``lost_cost`` (clipped to [0, cost]);
    the rest by ``weights`` (node-seconds of the other categories). Each share is floored to the grid, the
    remainder goes to the largest weight (ties: category order), so the shares add up to ``on_grid(cost)`` exactly."""
    out = zero_account()
    cost = on_grid(cost)
    lost = on_grid(min(max(ZERO, lost_cost), cost)) if cost >= 0 else ZERO
    out[Category.lost_work] = lost
    rest = cost - lost
    cats = [c for c in CATEGORIES if c is not Category.lost_work and weights.get(c, ZERO) > 0]
    total_w = sum((weights[c] for c in cats), ZERO)
    if not cats or total_w <= 0:
        out[Category.unattributed] += rest
        return out
    for c in cats:
        out[c] = (rest * weights[c] / total_w).quantize(SLICE_QUANTUM, rounding=ROUND_FLOOR)
    biggest = max(cats, key=lambda c: (weights[c], -CATEGORIES.index(c)))
    out[biggest] += rest - sum((out[c] for c in cats), ZERO)
    return out


def goodput_ratio(productive: Decimal, total: Decimal) -> Optional[Decimal]:
    """productive ÷ total (None when total is 0)."""
    return (productive / total) if total > 0 else None


# --- the account over the ledger: data classes (computed in trainledger.money.goodput.goodput_ledger) ---------------

@dataclass
class RunAccount:
    """One run's goodput account in one month (``month`` None: over its whole life)."""

    run_id: str
    name: str
    project: str
    status: str
    node_type: str
    offer_kind: str
    nodes: int
    month: Optional[str]
    start: datetime
    end: datetime
    resume_of: Optional[str]
    chain: str  # id of the chain's first run
    seconds: dict[Category, Decimal]  # node-seconds
    cost: dict[Category, Decimal]  # in the report's currency; Σ = total_cost exactly
    run_cost: Decimal  # the run's own cost (the monthly report's line)
    recovery_cost: Decimal  # held capacity before it, moved from idle
    total_cost: Decimal  # run_cost + recovery_cost
    goodput_pct: Optional[Decimal]  # productive cost ÷ total cost × 100
    data_quality: list[str] = field(default_factory=list)

    @property
    def badput_cost(self) -> Decimal:
        return sum((self.cost[c] for c in BADPUT), ZERO)


@dataclass
class MonthAccount:
    """A month: spend = goodput + badput + idle (idle after recovery took its part), exactly."""

    month: str
    currency: str
    spend: Decimal
    goodput: Decimal
    badput: Decimal
    idle: Decimal
    by_category: dict[Category, Decimal]
    seconds: dict[Category, Decimal]
    goodput_pct: Optional[Decimal]  # goodput ÷ spend × 100
    ettr: Optional[Decimal]  # productive ÷ wall node-time of its runs' chains (in the month)
    period: str = ""  # "to date (3 of 31 days)" while the month runs
    runs: int = 0
    identity_residual: Decimal = ZERO  # (report idle − recovery) − idle: what the report's own line rounding leaves


@dataclass
class GoodputReport:
    """Months, runs and totals; ``chains`` and ``projects`` (the runs summed per chain and per project:
    :func:`group_accounts`) are computed on first use, since most pages read neither."""

    months: list[MonthAccount]
    runs: list[RunAccount]
    totals: dict[str, Any]
    currency: str

    @property
    def chains(self) -> list[dict[str, Any]]:
        return self._grouped("chain")

    @property
    def projects(self) -> list[dict[str, Any]]:
        return self._grouped("project")

    def _grouped(self, key: str) -> list[dict[str, Any]]:
        kept = self.__dict__.setdefault("_groups", {})
        if key not in kept:
            kept[key] = group_accounts(self.runs, key)
        return kept[key]

    def __getstate__(self) -> dict[str, Any]:  # the groups are computed again where they are read
        return {k: v for k, v in self.__dict__.items() if k != "_groups"}


def percent(part: Decimal, whole: Decimal) -> Optional[Decimal]:
    """part ÷ whole × 100 (:func:`goodput_ratio`: None when whole is 0)."""
    r = goodput_ratio(part, whole)
    return None if r is None else r * 100


def group_accounts(runs: list[RunAccount], key: str) -> list[dict[str, Any]]:
    """Runs summed per ``key`` (``chain`` or ``project``): cost and node-seconds by category, goodput %, ETTR
    (productive ÷ all node-time)."""
    acc: dict[str, list] = {}
    for r in runs:
        g = acc.get(getattr(r, key))
        if g is None:
            g = acc[getattr(r, key)] = [set(), zero_account(), ZERO, ZERO, ZERO, zero_account()]
        g[0].add(r.run_id)
        cost, secs = g[1], g[5]
        for c, v in r.cost.items():
            cost[c] += v
        g[2] += r.total_cost
        g[3] += r.seconds[Category.productive]
        g[4] += sum(r.seconds.values(), ZERO)
        for c, v in r.seconds.items():
            secs[c] += v
    out = []
    for name in sorted(acc):
        ids, cost, total, productive, seconds, secs = acc[name]
        out.append({key: name, "runs": len(ids), "total_cost": total,
                    "goodput_cost": cost[Category.productive], "badput_cost": sum((cost[c] for c in BADPUT), ZERO),
                    "goodput_pct": percent(cost[Category.productive], total),
                    "ettr": _ratio(goodput_ratio(productive, seconds)),
                    "cost": {name: cost[c] for c, name in NAMED}, "node_seconds": {name: secs[c] for c, name in NAMED}})
    return out


#: how many runs the month's ranking by badput lists (the Goodput page's "Runs ranked by badput")
RANKED = 50


def ranked_by_badput(runs: Iterable[RunAccount], limit: Optional[int] = RANKED) -> list[RunAccount]:
    """Runs ranked by badput cost (:attr:`RunAccount.badput_cost`), the most first, ties by run id; the first
    ``limit`` (None: all)."""
    out = sorted(runs, key=lambda r: (-r.badput_cost, r.run_id))
    return out if limit is None else out[:limit]


def report_to_dict(rep: GoodputReport) -> dict[str, Any]:
    """The report as JSON-ready dicts (keys named so that ``trainledger.reports.present`` rounds money to cents,
    percentages to 0.1 and node-hours to 0.001; ``ettr`` to 4 decimals; ``node_seconds`` stay exact, µs)."""
    def cats(d: Mapping[Category, Decimal]) -> dict[str, Decimal]:
        return {name: d[c] for c, name in NAMED}

    def hours(d: Mapping[Category, Decimal]) -> dict[str, Decimal]:
        return {name: d[c] / 3600 for c, name in NAMED}

    return {
        "currency": rep.currency, "totals": rep.totals,
        "months": [{"month": m.month, "period": m.period, "currency": m.currency, "spend": m.spend,
                    "goodput_cost": m.goodput, "badput_cost": m.badput, "account_idle_cost": m.idle,
                    "goodput_pct": m.goodput_pct, "ettr": _ratio(m.ettr), "runs": m.runs,
                    "identity_residual": m.identity_residual, "cost": cats(m.by_category),
                    "node_hours": hours(m.seconds), "node_seconds": cats(m.seconds)}
                   for m in rep.months],
        "runs": [{"run_id": r.run_id, "name": r.name, "project": r.project, "status": r.status, "month": r.month,
                  "node_type": r.node_type, "offer_kind": r.offer_kind, "nodes": r.nodes, "chain": r.chain,
                  "resume_of": r.resume_of, "start": r.start, "end": r.end, "run_cost": r.run_cost,
                  "recovery_cost": r.recovery_cost, "total_cost": r.total_cost, "goodput_pct": r.goodput_pct,
                  "cost": cats(r.cost), "node_hours": hours(r.seconds), "node_seconds": cats(r.seconds),
                  "data_quality": r.data_quality}
                 for r in rep.runs],
        "chains": rep.chains, "projects": rep.projects,
    }


def _ratio(x: Optional[Decimal]) -> Optional[float]:
    return None if x is None else float(x.quantize(Decimal("0.0001")))


def sum_categories(items: Iterable[Mapping[Category, Decimal]]) -> dict[Category, Decimal]:
    out = zero_account()
    for d in items:
        for c, v in d.items():
            out[c] += v
    return out
