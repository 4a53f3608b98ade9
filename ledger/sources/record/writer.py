"""The run writer: events go to the run journal first, then a background thread applies them to the ledger.

One implementation for the bundled trainer's rank 0, every ``trainledger run``
wrapper (one per node) and the Python API (``trainledger.track``). The training
step only queues an event (a ``queue.put``); the writer thread appends what is
queued to the journal (fsync'd, :mod:`trainledger.sources.record.journal`) every
``flush_s`` seconds, with a heartbeat every ``heartbeat_s``, and applies the
journal to the ledger. An unreachable ledger never stops training: the journal
keeps everything and the next flush (or ``trainledger sync``) replays it
idempotently. A journal that cannot be written (disk full) is fatal: the run
stops loudly, and the events are written straight to the ledger at the end.

A writer for a run another process owns (a second node, the API under the
wrapper) may start before that run is in the ledger: its events wait in its
journal (:class:`~trainledger.sources.record.journal.RunNotRegistered`) until the owner's
registration has been applied.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def run_heartbeat(ts: str) -> list[dict]:
    """The heartbeat of the process that owns the run row."""
    return [{"type": "heartbeat", "ts": ts}]


class LedgerWriter(threading.Thread):
    """Journals events, then applies them to the ledger, off the training thread.

    ``beats(ts)`` gives the liveness events journaled every ``heartbeat_s``
    (default: the run's heartbeat; a second node beats its own ``RunNode``).
    ``journal_name`` is the journal file's stem (default: the run id); processes
    that write events of the same run on one machine use different names.
    """

    def __init__(self, db_url: Optional[str], journal_dir: Path, run_id: str, flush_s: float, heartbeat_s: float,
                 beats: Optional[Callable[[str], list[dict]]] = run_heartbeat, journal_name: Optional[str] = None):
        super().__init__(name="trainledger-writer", daemon=True)
        from trainledger.sources.record.journal_file import Journal

        self.journal = Journal(journal_dir, run_id, name=journal_name)
        self.db_url = db_url
        self.flush_s = flush_s
        self.heartbeat_s = heartbeat_s
        self.beats = beats
        self.queue: "queue.Queue[dict]" = queue.Queue()
        self._halt = threading.Event()
        self._engine = None
        self.ledger_ok: Optional[bool] = None
        self.url_unusable = False  # a malformed ledger URL: events wait in the journal for `trainledger sync --db`
        self.waiting_for_run = False  # events of a run whose owner has not registered it yet
        self.error: Optional[BaseException] = None  # a journal write failure: fatal for the run
        self.on_error: Callable[[], None] = lambda: os.kill(os.getpid(), signal.SIGUSR1)
        #: what a journal failure means, said once on stderr (None: the owner says it, e.g. trainledger.track)
        self.failure_note: Optional[str] = "the run stops (tracking cannot go on without its journal)"
        self.run_id = run_id
        self._unjournaled: list[dict] = []  # events the failed journal could not keep: written straight to the ledger
        self._last_beat = 0.0
        self._lock = threading.Lock()
        #: more event sources drained at each flush, before the heartbeat (the run's phases: trainledger.sources.record.phases)
        self.sources: list[Callable[[], list[dict]]] = []
        #: called once with the writer's engine after the first apply that reached the ledger: a check that needs
        #: the ledger rides on the writer's connection (trainledger.track's "no offer" warning), opens none of its own
        self.after_first_apply: Optional[Callable[[Any], None]] = None

    def put(self, event: dict) -> None:
        """Queue an event. After a journal failure it is kept for :meth:`close` to write straight to the ledger
        (the training step raises :attr:`error` itself)."""
        if self.error is not None:
            with self._lock:
                self._unjournaled.append({"run_id": self.run_id, **event})
            return
        self.queue.put(event)

    def release(self) -> None:
        """Close this writer's ledger connections (before a fork, so that the child inherits none);
        the next flush opens new ones."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _shown_url(self) -> str:
        """The ledger URL safe to print; never raises (a malformed URL is a ledger out of reach, issue 37)."""
        from trainledger.store.db import redact_url, resolve_url

        try:
            return redact_url(resolve_url(self.db_url))
        except Exception:
            return redact_url(str(self.db_url))

    def _engine_or_none(self):
        if self._engine is None:
            from trainledger.store.db import make_engine

            self._engine = make_engine(self.db_url)
        return self._engine

    def flush(self) -> None:
        """Journal whatever is queued (fsync), then try to apply all pending events.

        A journal write failure (disk full, ...) raises :class:`~trainledger.sources.record.journal.JournalWriteError`
        and is fatal for the run; the events of the failed write are kept for :meth:`close`.
        """
        from trainledger.sources.record.journal_file import JournalWriteError

        with self._lock:
            events = self._drain()
            if self.error is not None:  # the journal already failed: never write to it again
                self._unjournaled += [{"run_id": self.run_id, **ev} for ev in events]
                return
            try:
                self.journal.append(events)  # all or nothing
            except JournalWriteError as exc:
                self._journal_failed(exc, events)
                raise
            try:
                self._apply()
            except JournalWriteError as exc:  # events are journaled and applied; only the applied mark failed
                self._journal_failed(exc, [])
                raise

    def _after_first_apply(self) -> None:
        hook, self.after_first_apply = self.after_first_apply, None
        if hook is not None:
            try:
                hook(self._engine)
            except Exception:  # a check of ours is never a reason to stop recording
                pass

    def _drain(self) -> list[dict]:
        """The queued events, then the liveness events when a heartbeat is due (after: a first beat must not
        come before the registration queued with it)."""
        events = []
        while True:
            try:
                events.append(self.queue.get_nowait())
            except queue.Empty:
                break
        for source in self.sources:
            events += source()
        now = time.monotonic()
        if self.beats is not None and self.error is None and now - self._last_beat >= self.heartbeat_s:
            events += self.beats(utc_now().isoformat())
            self._last_beat = now
        return events

    def _journal_failed(self, exc: BaseException, events: list[dict]) -> None:
        self._unjournaled += [{"run_id": self.run_id, **ev} for ev in events]
        if self.error is None:
            self.error = exc
            if self.failure_note:
                print(f"[trainledger] error: {exc}; {self.failure_note}", file=sys.stderr, flush=True)

    def _apply(self) -> None:
        from trainledger.sources.record.journal import JournalWriteError, RunNotRegistered, sync_journal

        try:
            sync_journal(self._engine_or_none(), self.journal)
            if self.ledger_ok is False:
                print("[trainledger] ledger reachable again; journal replayed", file=sys.stderr, flush=True)
            self.ledger_ok, self.waiting_for_run = True, False
            self._after_first_apply()
        except JournalWriteError:  # the ledger has the events; the journal's applied mark could not be written
            self.ledger_ok = True
            raise
        except RunNotRegistered:  # the ledger is there; the run's owner has not registered it yet
            self.ledger_ok, self.waiting_for_run = True, True
        except Exception as exc:  # unreachable ledger: keep journaling, retry next flush
            from trainledger.errors import LedgerURLError

            self.url_unusable = isinstance(exc, LedgerURLError)  # never reachable: the end does not wait for it
            if self.ledger_ok is not False:
                reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]
                print(f"[trainledger] warning: ledger {self._shown_url()} unreachable ({reason}); "
                      f"training continues, events kept in {self.journal.path}", file=sys.stderr, flush=True)
            self.ledger_ok = False
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None

    def run(self) -> None:
        while not self._halt.wait(self.flush_s):
            try:
                self.flush()
            except BaseException as exc:  # journal write failed (or a bug): stop the run loudly
                if self.error is None:
                    self._journal_failed(exc, [])
                self.on_error()  # by default SIGUSR1: the main thread raises it in the training step
                return

    def close(self, timeout_s: float = 30.0, on_durable=None) -> bool:
        """Stop the thread, flush the rest, and try to reach the ledger for up to ``timeout_s``.

        ``on_durable`` is called once every event is safe (fsync'd in the journal, or, after a journal
        failure, written to the ledger): from then on the process may be interrupted without loss.
        """
        from trainledger.sources.record.journal_file import JournalWriteError

        self._halt.set()
        if self.is_alive():
            self.join()
        try:
            self.flush()
        except JournalWriteError:
            pass
        if self.error is not None:
            try:
                return self._write_through(timeout_s)
            finally:
                if on_durable is not None:
                    on_durable()
        if on_durable is not None:
            on_durable()
        deadline = time.monotonic() + timeout_s
        while (self.ledger_ok is False or self.waiting_for_run) and not self.url_unusable \
                and time.monotonic() < deadline:
            time.sleep(0.5 if self.waiting_for_run else 1.0)
            self._apply()
        if self.ledger_ok is False or self.waiting_for_run:
            why = (f"run {self.run_id} is not in the ledger yet" if self.ledger_ok is not False
                   else "the ledger stayed unreachable")
            print(f"[trainledger] {why}; run `trainledger sync` to replay {self.journal.path}",
                  file=sys.stderr, flush=True)
        if self._engine is not None:
            self._engine.dispose()
        return bool(self.ledger_ok) and not self.waiting_for_run

    def _journaled(self) -> list[dict]:
        """What the failed journal holds ([] when it cannot even be read: a folder that was never made)."""
        try:
            return self.journal.pending()
        except OSError:
            return []

    def _write_through(self, timeout_s: float) -> bool:
        """After a journal failure: apply what the journal holds and what it could not keep straight to
        the ledger, in one transaction (idempotent), retrying for up to ``timeout_s``."""
        from sqlmodel import Session
        from trainledger.sources.record.journal import JournalWriteError, apply_events

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with Session(self._engine_or_none()) as session:
                    apply_events(session, self._journaled())
                    apply_events(session, self._unjournaled)
                    session.commit()
                break
            except Exception as exc:
                if self._engine is not None:
                    self._engine.dispose()
                    self._engine = None
                from trainledger.errors import LedgerURLError

                if time.monotonic() >= deadline or isinstance(exc, LedgerURLError):
                    reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]
                    print(f"[trainledger] error: the run journal failed and the ledger {self._shown_url()} "
                          f"is unreachable ({reason}); the last {len(self._unjournaled)} tracking events are lost",
                          file=sys.stderr, flush=True)
                    return False
                time.sleep(1.0)
        try:
            self.journal.mark_applied(self.journal.seq)
        except JournalWriteError:
            pass  # replaying the journal again is idempotent
        print(f"[trainledger] the run journal failed; its events and the {len(self._unjournaled)} it could not keep "
              f"were written straight to the ledger", file=sys.stderr, flush=True)
        self._engine.dispose()
        self._engine = None
        return True
