"""Run ids: what a valid one looks like, and the ids of runs that come from a scheduler.

A run id names a run on every way in (import, launch, the run wrapper, the
Python API, Slurm sync) and can end up in file names (logs, journals), so it is
limited to ``[A-Za-z0-9_.-]``, at most :data:`MAX_RUN_ID` characters, and never
``..`` or a leading dot or dash.

A Slurm job is the same run whichever way it reaches the ledger (``slurm sync``
of its sacct record, or ``srun trainledger run -- ...`` inside the job): its id is
:func:`slurm_run_id` of the job id and the cluster name.
"""

from __future__ import annotations

import re
import uuid

from ledger.errors import LedgerInputError

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
