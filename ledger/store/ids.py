"""Run ids: what a valid one looks like, and the ids of runs that come from a scheduler.

A run id names a run on every way in (import, launch, the run wrapper, the
Python API, Slurm sync) and can end up in file names (logs, journals), so it is
limited to ``[A-Za-z0-9_.-]``, at most :data:`MAX_RUN_ID` characters, and never
``..`` or a leading dot or dash.

A Slurm job is the same run whichever way it reaches the ledger (``slurm sync``
of its sacct record, or ``srun trainledger run -- ...`` inside the job): its id is
:func:`slurm_run_id` of the job id and the cluster name (given to both with
``--cluster``, else none). A requeued job runs again under the same job id; each
attempt is a run of its own, numbered by Slurm's restart count
(:func:`slurm_attempt_id`): ``slurm-7`` ran first, ``slurm-7-r1`` after the first
requeue, each ``resume_of`` the one before.
"""

from __future__ import annotations

import re
import uuid
from typing import Optional

from trainledger.errors import LedgerInputError

MAX_RUN_ID = 64
RUN_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def validate_run_id(text: str, field: str = "run id") -> str:
    """``text`` if it is a valid run id, else a one-line :class:`LedgerInputError` naming ``field``."""
    if not isinstance(text, str) or not text:
        raise LedgerInputError(f"{field}: empty; use letters, digits, '_', '.' and '-'")
    if len(text) > MAX_RUN_ID:
        raise LedgerInputError(f"{field}: {len(text)} characters; at most {MAX_RUN_ID}")
    if not RUN_ID_RE.fullmatch(text) or ".." in text:
        raise LedgerInputError(f"{field}: {text!r} is not a run id; use letters, digits, '_', '.' and '-' "
                               "(not starting with '.' or '-', no '..')")
    return text


def new_run_id() -> str:
    """A fresh random run id (16 hex digits)."""
    return uuid.uuid4().hex[:16]


def slurm_run_id(job_id: str, cluster: str = "") -> str:
    """The run id of a Slurm job: ``slurm-<job id>``, or ``slurm-<cluster>-<job id>`` with a cluster name.

    ``job_id`` is the allocation's JobID as sacct prints it (``1234``, an array
    element ``1234_7``, a het job component ``1234+0``); ``+`` becomes ``.``.
    """
    job = str(job_id).strip().replace("+", ".")
    return validate_run_id(f"slurm-{cluster + '-' if cluster else ''}{job}", "JobID (with --cluster)")


ATTEMPT_SUFFIX = re.compile(r"-r(\d+)$")


def slurm_attempt_id(base: str, restart: int) -> str:
    """The run of a Slurm job's attempt ``restart`` (``SLURM_RESTART_COUNT``, 0 for the first run): ``base``
    (the job's :func:`slurm_run_id`) for the first, ``<base>-r<N>`` for the N-th restart."""
    if restart < 0:
        raise LedgerInputError(f"SLURM_RESTART_COUNT: must be 0 or more, got {restart}")
    return base if restart == 0 else validate_run_id(f"{base}-r{restart}", "JobID (requeued attempt)")


def slurm_attempt_of(run_id: str) -> tuple[str, int]:
    """``(base, restart)`` of a Slurm job's run id: ``slurm-7-r2`` → ("slurm-7", 2), ``slurm-7`` → ("slurm-7", 0)."""
    m = ATTEMPT_SUFFIX.search(run_id)
    return (run_id[:m.start()], int(m.group(1))) if m else (run_id, 0)


def previous_attempt(base: str, restart: int) -> Optional[str]:
    """The attempt a requeued attempt restarts (its ``resume_of``); None for the first."""
    return slurm_attempt_id(base, restart - 1) if restart > 0 else None
