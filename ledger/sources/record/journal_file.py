"""The run journal's file: append-only, fsync'd JSON lines of one run's events, and its applied mark
(the event format and the guarantees: :mod:`trainledger.sources.record.journal`)."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Optional

from trainledger.sources.record.sanitize import clean_event
from trainledger.store.ids import validate_run_id

ENV_JOURNAL_DIR = "TRAINLEDGER_JOURNAL_DIR"


def default_journal_dir() -> Path:
    env = os.environ.get(ENV_JOURNAL_DIR)
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "journal"


class JournalWriteError(RuntimeError):
    """The journal could not be written (e.g. disk full): the run must stop loudly."""


class RunNotRegistered(LookupError):
    """An event of a run that another process owns arrived before that run's registration: retry later."""


class Journal:
    """Append-only, fsync'd event log of one run (``name``: the file's stem, default the run id; each process
    that writes events of a run on one machine has its own, e.g. ``<run>.node1``, ``<run>.api-<pid>``)."""

    def __init__(self, directory: Path | str, run_id: str, name: Optional[str] = None):
        validate_run_id(run_id)  # it names the journal's files
        if name is not None:
            validate_run_id(name, "journal name")
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only or forbidden folder: the first append fails and says why (the writer then
            pass         # writes the run straight to the ledger, issue 37), never a run that is silently lost
        name = name or run_id
        self.path = self.dir / f"{name}.jsonl"
        self.applied_path = self.dir / f"{name}.applied"
        self.quarantine_path = self.dir / f"{name}.quarantine"
        self.pending_end = 0  # byte offset after the last whole line pending() read
        self.bad_lines: list[tuple[int, bytes]] = []  # (offset, line): whole lines pending() found not to be events
        self.run_id = run_id
        self.seq = 0
        self._skip = (0, 0)  # (byte offset, seq): every event before the offset has seq <= this seq
        if self.path.exists():
            for ev in read_events(self.path):
                self.seq = max(self.seq, ev["seq"])

    def append(self, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Number, write and fsync events; returns them with their ``seq``.

        All or nothing: if the write fails (disk full, file too large, I/O
        error) the file is cut back to where it was, ``seq`` is restored and
        :class:`JournalWriteError` is raised, so a half-written line never
        hides the events appended after it.
        """
        out = [clean_event({"seq": self.seq + i, "run_id": self.run_id, **ev}) for i, ev in enumerate(events, 1)]
        if not out:
            return out
        data = "".join(json.dumps(ev, separators=(",", ":"), default=_json_default) + "\n" for ev in out)
        fd = None
        size = None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            size = os.fstat(fd).st_size
            view = memoryview(data.encode("utf-8"))
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        except OSError as exc:
            if fd is not None and size is not None:
                try:  # drop the torn tail; truncating only frees space
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                except OSError:
                    pass
            raise JournalWriteError(_write_error(self.path, exc)) from exc
        finally:
            if fd is not None:
                os.close(fd)
        self.seq = out[-1]["seq"]
        return out

    def applied_seq(self) -> int:
        return read_applied(self.applied_path)[0]

    def mark_applied(self, seq: int, offset: Optional[int] = None) -> None:
        """Record that every event up to ``seq`` is applied (and, when known, that the file up to byte
        ``offset`` holds nothing else pending)."""
        tmp = self.applied_path.with_suffix(".applied.tmp")
        try:
            tmp.write_text(str(seq) if offset is None else f"{seq} {offset}")
            os.replace(tmp, self.applied_path)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise JournalWriteError(_write_error(self.applied_path, exc)) from exc

    def pending(self) -> list[dict[str, Any]]:
        """Events not applied yet. The file is read from the end of the last applied event seen
        (seq only grows along the file), so a flush costs O(new events), not O(journal)."""
        done, marked_end = read_applied(self.applied_path)
        self.bad_lines = []
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        start, seen = self._skip
        if seen > done or start > size:  # the applied mark went back, or the file is not ours any more
            start, seen = 0, 0
        if start == 0 and marked_end is not None and marked_end <= size:
            start = marked_end  # the last replay read this far: everything before it is applied or quarantined
        out: list[dict[str, Any]] = []
        with open(self.path, "rb") as fh:
            fh.seek(start)
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # torn write: never fsync'd, so never acknowledged
                offset, start = start, start + len(line)
                ev = _event(line)
                if ev is None:  # a whole line that is not an event: corrupt, quarantined by the replay
                    self.bad_lines.append((offset, line))
                elif ev["seq"] > done:
                    out.append(ev)
                elif not out and not self.bad_lines:
                    self._skip = (start, ev["seq"])
        self.pending_end = start
        return out


def _event(line: bytes) -> Optional[dict[str, Any]]:
    """A journal line as an event, or None when it is not one (not JSON, not UTF-8, no integer seq)."""
    try:
        ev = json.loads(line)
    except ValueError:
        return None
    if not isinstance(ev, dict) or not isinstance(ev.get("seq"), int) or isinstance(ev["seq"], bool):
        return None
    return ev


def read_applied(path: Path) -> tuple[int, Optional[int]]:
    """``(seq, offset)`` of a journal's applied mark (offset None in marks written before offsets were kept)."""
    try:
        parts = path.read_text().split()
        return int(parts[0]) if parts else 0, int(parts[1]) if len(parts) > 1 else None
    except (FileNotFoundError, ValueError):
        return 0, None


def _write_error(path: Path, exc: OSError) -> str:
    return f"cannot write the run journal {path}: {exc.strerror or exc} (is its disk full?)"


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_events(path: Path) -> list[dict[str, Any]]:
    """Events of a journal file; a torn last line (crash mid-write) and lines that are not events are ignored."""
    events = []
    with open(path, "rb") as fh:
        for line in fh:
            if not line.endswith(b"\n"):
                break  # torn write: never fsync'd, so never acknowledged
            ev = _event(line)
            if ev is not None:
                events.append(ev)
    return events
