"""Waste, defined once: the goodput account's badput + idle (issue 36, "one account of spend").

A month's spend = goodput + badput + idle, exactly (:class:`~trainledger.money.goodput.goodput_core.MonthAccount`);
its **waste** is everything but goodput::

    waste_cost      = badput + idle                                   (= spend − goodput)
    waste_by_reason = each badput category's cost, in the order of Category (startup, data_wait, checkpoint_save,
                      checkpoint_restore, eval, lost_work, recovery, straggler_wait, unattributed), then ``idle``

The reasons add up to the waste exactly (money on the account's 10⁻¹² grid); presented, each is half-up to the
cent on its own with a ``rounding`` reason when their cents do not add up (``trainledger.reports.export``).
Failed, crashed and cancelled runs are ``lost_work`` (their cost after their last checkpoint, their whole cost
when they never checkpointed); straggler wait is priced like every other category.

A run's waste is the badput of its line in the account (:func:`run_waste`: its cost less what bought kept progress,
the export's ``badput_cost``) and its reason the largest of its line's badput categories; a project's is Σ its
runs'. "Most wasted" ranks runs by it on every surface. Recovery (capacity an owned or reserved fleet held
between an interrupted run and its resume) is the month's (reason ``recovery``), in no run line's cost.

The monthly report (``trainledger.money.account.monthly``, a room below) keeps ``lost_work_cost`` and
``failed_run_cost`` and defines no waste; every surface above reads it from here.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Iterable, Optional

from trainledger.errors import LedgerInputError
from trainledger.money.goodput.goodput_core import BADPUT, ZERO, Category, MonthAccount, RunAccount, goodput_ratio

IDLE = "idle"
#: the reasons of ``waste_by_reason``, in order: the badput categories, then idle
REASONS: tuple[str, ...] = tuple(c.value for c in BADPUT) + (IDLE,)
#: ``?waste=`` values of the reasons before issue 36 (runs' lost work by status): all are now ``lost_work``
OLD_REASONS = {"failed": Category.lost_work, "crashed": Category.lost_work, "cancelled": Category.lost_work,
               "lost_since_checkpoint": Category.lost_work}


def waste_cost(m: MonthAccount) -> Decimal:
    """The month's waste: badput + idle (exact)."""
    return m.badput + m.idle


def waste_by_reason(m: MonthAccount) -> dict[str, Decimal]:
    """Each badput category's cost (Category's order), then idle: Σ = :func:`waste_cost` exactly."""
    out = {c.value: m.by_category[c] for c in BADPUT}
    out[IDLE] = m.idle
    return out


#: the categories of a run line's own cost (recovery is the fleet's capacity held before a resumed run: the
#: month's waste, reason ``recovery``, but no run line's cost)
LINE_BADPUT: tuple[Category, ...] = tuple(c for c in BADPUT if c is not Category.recovery)


def run_waste(a: RunAccount) -> Decimal:
    """A run's waste in the month: the badput of its line (its cost − goodput; the export's ``badput_cost``)."""
    return a.run_cost - a.cost[Category.productive]


def run_reason(a: RunAccount) -> Optional[str]:
    """The largest badput category of a run's line (ties: Category's order); None when it has no badput."""
    best = max(LINE_BADPUT, key=lambda c: (a.cost[c], -LINE_BADPUT.index(c)))
    return best.value if a.cost[best] > ZERO else None


def project_waste(runs: Iterable[RunAccount]) -> dict[str, Decimal]:
    """Project → Σ its runs' waste (:func:`run_waste`)."""
    out: dict[str, Decimal] = {}
    for a in runs:
        out[a.project] = out.get(a.project, ZERO) + run_waste(a)
    return out


def check_reason(value: str, flag: str = "?waste=") -> str:
    """A ``?waste=`` value as the badput category it filters: a category's name, or a reason of before issue 36
    (failed, crashed, cancelled, lost_since_checkpoint: ``lost_work``); else a one-line error naming ``flag``."""
    if value in OLD_REASONS:
        return OLD_REASONS[value].value
    if value in REASONS and value != IDLE:
        return value
    raise LedgerInputError(f"{flag}: expected a badput category ({', '.join(c.value for c in BADPUT)}) or "
                           f"failed, crashed, cancelled, lost_since_checkpoint (= lost_work), got {value!r}; "
                           "idle is the fleet's, no run's")


def over_months(accounts: Iterable[RunAccount]) -> dict[str, RunAccount]:
    """Each run's account over every month given (``month`` None): its monthly lines' node-seconds and costs summed
    per category, so :func:`run_waste` and :func:`run_reason` of it are the run's waste and reason over those months
    (all time: the Runs page's "All months" ranking). Exact: every month's money is on the account's 10⁻¹² grid."""
    out: dict[str, RunAccount] = {}
    for a in accounts:
        have = out.get(a.run_id)
        if have is None:
            out[a.run_id] = replace(a, month=None, seconds=dict(a.seconds), cost=dict(a.cost),
                                    data_quality=list(a.data_quality))
            continue
        for c, v in a.seconds.items():
            have.seconds[c] = have.seconds.get(c, ZERO) + v
        for c, v in a.cost.items():
            have.cost[c] = have.cost.get(c, ZERO) + v
        have.run_cost += a.run_cost
        have.recovery_cost += a.recovery_cost
        have.total_cost += a.total_cost
        have.start, have.end = min(have.start, a.start), max(have.end, a.end)
        have.data_quality += [q for q in a.data_quality if q not in have.data_quality]
    for a in out.values():
        ratio = goodput_ratio(a.cost.get(Category.productive, ZERO), a.total_cost)  # as a month's line's
        a.goodput_pct = None if ratio is None else ratio * 100
    return out
