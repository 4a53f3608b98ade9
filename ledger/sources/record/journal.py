"""The run journal: every tracking event is appended (fsync'd JSON lines) before
it is applied to the ledger, so an unreachable ledger never loses anything.

Events (one JSON object per line, ``seq`` increasing within a run's journal)::

    {"seq": 1, "type": "run", "run_id": "...", "fields": {...}}      # upsert the run row
    {"seq": 2, "type": "heartbeat", "run_id": "...", "ts": "..."}    # liveness
    {"seq": 3, "type": "samples", "run_id": "...", "rows": [[node, gpu, metric, ts, value], ...]}
    {"seq": 4, "type": "nodes", "run_id": "...", "rows": [{"hostname": ..., ...}]}
    {"seq": 5, "type": "node_beat", "run_id": "...", "hostname": "...", "ts": "..."}   # a node's liveness
    {"seq": 6, "type": "checkpoint", "run_id": "...", "ts": "...", "step": 100, "path": "..."}
    {"seq": 7, "type": "phases", "run_id": "...", "node": "...", "rows": {"eval": [s, n, ckpt_s, ckpt_n, first, last]}}

A ``run`` event with ``"attach": true`` only updates a run that another
process registered (the Python API under the run wrapper); ``nodes``,
``node_beat`` and attached ``run`` events of a run that is not in the ledger
yet raise :class:`RunNotRegistered` and wait in the journal until it is.

Applying is idempotent: run fields are set (not added), heartbeats only move
forward, samples are inserted once per (run, node, gpu, metric, ts), nodes
are upserted by (run, hostname), and a checkpoint replaces the run's last
checkpoint only if it is later (its step is also kept as a ``checkpoint_step``
sample, the run's checkpoint history). Replaying a journal any number of times
therefore gives the same ledger: nothing is lost and nothing is counted twice.
``<run>.applied`` records the last applied ``seq`` and the byte offset the
journal was read to (``"SEQ OFFSET"``): what is pending is decided by content
(a journal longer than its applied offset), never by modification times.

Every event is made storable by every backend (:mod:`trainledger.sources.record.sanitize`)
before it is journaled and again before it is applied. An event that still
cannot be applied, and a line that is not an event, is *quarantined* with its
reason in ``<name>.quarantine`` beside the journal and never stops the replay
of the others (:mod:`trainledger.sources.record.replay`; ``trainledger sync --show-quarantine``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sqlalchemy.engine import Engine
from trainledger.sources.record.journal_apply import ENDED, NAMED, REAPED_ERROR, REOPENING, TIME_FIELDS, apply_events
from trainledger.sources.record.journal_file import (
    ENV_JOURNAL_DIR,
    Journal,
    JournalWriteError,
    RunNotRegistered,
    default_journal_dir,
    read_applied,
    read_events,
)
from trainledger.sources.record.replay import replay_all, replay_journal

__all__ = ["ENDED", "ENV_JOURNAL_DIR", "NAMED", "REAPED_ERROR", "REOPENING", "TIME_FIELDS", "Journal",
           "JournalWriteError", "RunNotRegistered", "apply_events", "default_journal_dir", "read_applied",
           "read_events", "sync_all", "sync_journal"]


def sync_journal(engine: Engine, journal: Journal) -> int:
    """Apply a journal's pending events; returns how many (poison events quarantined: :mod:`trainledger.sources.record.replay`)."""
    return replay_journal(engine, journal)


def sync_all(engine: Engine, directory: Optional[Path] = None) -> dict[str, int]:
    """``trainledger sync``: replay every journal in ``directory`` (default: the journal directory)."""
    return replay_all(engine, Path(directory or default_journal_dir()))
