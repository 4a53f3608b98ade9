"""The goodput account: what every paid node-hour of a run bought, in time and in money.

**Categories** (:class:`Category`, the one list every figure, report, export and page uses;
``docs/GOODPUT.md`` maps each to ``ml-goodput-measurement``'s ``BadputType``)::

    productive          steps whose progress was kept (data and straggler waits inside a step taken out)
    startup             process start / allocation → the first step (restore, data and eval phases taken out),
                        plus the first step's excess over the typical step (warm-up: :func:`warm_up`)
    data_wait           a step waiting for its batch          (phase "data")
    checkpoint_save     blocking checkpoint saves             (phase "checkpoint_save", run.checkpoint(seconds=))
    checkpoint_restore  loading a checkpoint                  (phase "checkpoint_restore")
    eval                evaluation                            (phase "eval")
    lost_work           after the last checkpoint of a failed/crashed/cancelled run (trainledger.money.rates.months.lost_interval)
    recovery            held capacity between an interruption and the resumed run of the same chain (resume_of)
    straggler_wait      other ranks waiting for the slowest one (per-rank step times)
    unattributed        everything no phase explains: a run seen only by the wrapper or a Slurm import is all
                        ``unattributed`` (never guessed), as are gaps between phases outside steps

**Data model.** ``run_phase`` (:class:`trainledger.store.models.RunPhase`, migration 0011): one row per
(run, node, phase) with the node's total ``seconds``/``count`` and the totals at the run's last
checkpoint (``ckpt_seconds``/``ckpt_count``); phase names are :data:`PHASES` (``step`` is the net time
of steps, from one step's start to the next one's, nested phases taken out) or custom names (shown,
not costed: their time stays in the step or gap it fell in); ``first_step`` is the first step's net seconds, a copy
(also inside ``step``) for the warm-up rule. Rows ``quality:<issue>`` count bad input
the writer clipped. Written by :mod:`trainledger.sources.record.phases` on the run's writer thread.

**Time account of a run** (:func:`account_seconds`, pure): per node, the run's wall time W is
split: lost L (an interrupted run: its lost interval, as the monthly report's lost work), then the
kept part W − L from the phase totals (an interrupted run: the totals at its last checkpoint),
each clipped in the order of :data:`CLIP_ORDER` to what is left (clipping is reported in
``data_quality``), and the rest ``unattributed``. Node-seconds = per-node seconds × nodes ÷ nodes
that reported. ``recovery`` is the gap before the run when it resumes an interrupted run.

**Money** (:func:`split_cost`): a run's cost in a month (the monthly report's line, at the run's own
prices) is split: ``lost_work`` = the line's ``lost_work_cost``; the rest by the other categories'
node-seconds in the month (a run across a month edge: its phases where they happened, from the writer's
``<phase>@<edge>`` rows; without them spread evenly over its kept interval); remainders
to the largest category, so the categories add up to the cost **exactly** (money here is on the rollup's
10⁻¹² grid, :func:`on_grid`, so every sum is exact in any order). Recovery on an owned or
reserved fleet is priced at the fleet's idle rate and moved from idle to the resumed run (on elastic
rent the gap is not billed: time only). Per month: goodput + badput + idle = spend.

**Modules.** This one is the API; :mod:`trainledger.money.goodput.goodput_core` holds the categories, the pure time and
money splits and the data classes (re-exported here); :mod:`trainledger.money.goodput.goodput_ledger` reads the ledger.

**API** (``h25b`` builds the dashboard and advice on it; stable)::

    goodput_account(session, *, month=None, project=None, run_id=None, currency=None, now=None) -> GoodputReport
    phase_timeline(session, run_id) -> list[dict]      # per node and phase: seconds, count, first_at, last_at

:class:`GoodputReport`: ``months`` (:class:`MonthAccount`: spend, idle, goodput, badput, by_category,
goodput_pct, ettr), ``runs`` (:class:`RunAccount` per run and month), ``chains``, ``projects``,
``totals``; :func:`report_to_dict` for ``--json``. ETTR = productive time ÷ wall time from the chain's
first start to its last end (the chain: runs linked by ``resume_of``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from trainledger.money.goodput.goodput_core import (  # noqa: F401  (the account's vocabulary, re-exported)
    BADPUT,
    CATEGORIES,
    CLIP_ORDER,
    NAMED,
    PHASE_ALIASES,
    PHASE_CATEGORY,
    PHASE_DATA,
    PHASE_EVAL,
    PHASE_FIRST_STEP,
    PHASE_RESTORE,
    PHASE_SAVE,
    PHASE_STARTUP,
    PHASE_STEP,
    PHASE_STRAGGLER,
    PHASES,
    QUALITY_PREFIX,
    Category,
    GoodputReport,
    MonthAccount,
    PhaseTotal,
    RunAccount,
    account_seconds,
    goodput_ratio,
    on_grid,
    report_to_dict,
    seconds_decimal,
    split_cost,
    sum_categories,
    warm_up,
    zero_account,
)
from trainledger.money.goodput.goodput_ledger import build_account, load_timeline


def goodput_account(session: Any, *, month: Optional[str] = None, project: Optional[str] = None,
                    run_id: Optional[str] = None, currency: Optional[str] = None,
                    now: Optional[datetime] = None) -> GoodputReport:
    """The goodput account of a month (default: the current one), filtered to a project or a run."""
    return build_account(session, month=month, project=project, run_id=run_id, currency=currency, now=now)


def phase_timeline(session: Any, run_id: str) -> list[dict[str, Any]]:
    """Per node and phase of a run: seconds, count, seconds at the last checkpoint, first and last time."""
    return load_timeline(session, run_id)
