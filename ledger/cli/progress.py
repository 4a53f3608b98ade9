"""Progress bars for long work, on standard error, only on a terminal (``--no-progress``, ``NO_COLOR``).

A command wraps its long work in :func:`bar` and hands the :class:`Bar` (a
``(done, total)`` callable) to the library function's ``progress`` argument;
the library never imports this module. No bar is drawn, and nothing at all is
written, when standard error is not a terminal (a pipe, a file, cron), after
``--no-progress``/``--quiet`` (:func:`set_enabled`), or with
``TRAINLEDGER_NO_PROGRESS=1``. ``NO_COLOR`` draws the bar without colour or
any other styling. The bar shows the items done (of the total, when known),
the rate in items per second and the time left; it stays on the terminal,
finished, above the command's result.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

_ENABLED = True
#: set to 1 (any value but 0 or empty) to draw no bar, like ``--no-progress``
ENV = "TRAINLEDGER_NO_PROGRESS"
#: redraws per second of a live bar (each redraw costs the command a little)
REFRESH_PER_SECOND = 4


def set_enabled(flag: bool) -> None:
    """``--no-progress`` and ``--quiet`` turn every bar of this process off."""
    global _ENABLED
    _ENABLED = flag


def enabled() -> bool:
    return _ENABLED


def active() -> bool:
    """Would a bar be drawn now: bars enabled, ``TRAINLEDGER_NO_PROGRESS`` unset, standard error a terminal."""
    if not _ENABLED or os.environ.get(ENV, "").strip() not in ("", "0"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def _columns() -> list[Any]:
    """Description, bar, done/total (or done when the total is unknown), rate, time left (elapsed once done)."""
    from rich.progress import BarColumn, ProgressColumn, TextColumn
    from rich.text import Text

    class Count(ProgressColumn):
        def render(self, task: Any) -> Text:
            unit = task.fields.get("unit", "")
            shown = f"{int(task.completed):,}" if task.total is None else f"{int(task.completed):,}/{int(task.total):,}"
            return Text(f"{shown} {unit}".rstrip(), style="progress.download")

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            if not speed and task.completed and task.elapsed:  # too few updates for rich's estimate: the average
                speed = task.completed / task.elapsed
            unit = task.fields.get("unit", "")
            if not speed:
                return Text("")
            shown = f"{speed:,.0f} {unit}/s" if speed >= 1 else f"{speed * 60:,.1f} {unit}/min"
            return Text(shown, style="progress.data.speed")

    class Eta(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.finished:
                return Text(f"in {_clock(task.finished_time or task.elapsed)}", style="progress.elapsed")
            left = task.time_remaining
            return Text("" if left is None else f"eta {_clock(left)}", style="progress.remaining")

    return [TextColumn("{task.description}"), BarColumn(bar_width=30), Count(), Rate(), Eta()]


def _clock(seconds: Optional[float]) -> str:
    """Seconds as H:MM:SS."""
    s = int(seconds or 0)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Bar:
    """One command's progress display: call it as ``bar(done, total)`` (what the library's ``progress``
    arguments expect), or :meth:`advance`; every method is a no-op when no bar is drawn."""

    def __init__(self, description: str, total: Optional[int], unit: str, min_items: int, live: bool) -> None:
        self.unit, self.min_items, self.live = unit, min_items, live
        self._progress: Any = None
        self._task: Any = None
        self._shown = False
        self._printed: Any = None  # live=False: the (task, done, total) of the line printed last
        self.done, self.total = 0, total
        if active():
            from rich.console import Console
            from rich.progress import Progress

            plain = bool(os.environ.get("NO_COLOR"))  # no colour, and no bold or dim either
            console = Console(stderr=True, no_color=plain, color_system=None if plain else "auto")
            self._progress = Progress(*_columns(), console=console, auto_refresh=live, transient=False,
                                      refresh_per_second=REFRESH_PER_SECOND, redirect_stdout=False, redirect_stderr=True)
            self._task = self._progress.add_task(description, total=total, unit=unit)
            self._maybe_show()

    @property
    def drawn(self) -> bool:
        """Is a bar on the terminal (or waiting for ``min_items`` to be drawn)?"""
        return self._progress is not None

    def __call__(self, done: int, total: Optional[int] = None) -> None:
        self.update(done, total)

    def update(self, done: int, total: Optional[int] = None) -> None:
        """``done`` items so far, of ``total`` (None: the total given before, or unknown)."""
        if self._progress is None:
            return
        self.done = done
        if total is not None:
            self.total = total
        self._progress.update(self._task, completed=done, total=self.total)
        self._maybe_show()
        if self._shown and not self.live:
            self._print()

    def advance(self, n: int = 1) -> None:
        """``n`` more items done."""
        self.update(self.done + n)

    def stage(self, description: str, total: Optional[int] = None, unit: Optional[str] = None) -> None:
        """Finish this bar's line (full) and go on with a new line below it: the next stage of the work."""
        if self._progress is None:
            return
        self._progress.update(self._task, total=self.done if self.total is None else self.total)
        self._progress.stop_task(self._task)
        self.done, self.total = 0, total
        self._task = self._progress.add_task(description, total=total, unit=unit or self.unit)
        self._maybe_show()

    def staged(self, descriptions: dict[str, str], units: Optional[dict[str, str]] = None) -> Callable[[str, int, Optional[int]], None]:
        """A ``(stage, done, total)`` callback for work in stages: a new line whenever the stage changes,
        described by ``descriptions[stage]``."""
        current = [next(iter(descriptions), None)]

        def report(stage: str, done: int, total: Optional[int]) -> None:
            if stage != current[0]:
                current[0] = stage
                self.stage(descriptions.get(stage, stage), total, (units or {}).get(stage))
            self.update(done, total)

        return report

    def _maybe_show(self) -> None:
        if self._shown or self._progress is None:
            return
        if self.min_items and max(self.done, self.total or 0) < self.min_items:
            return
        self._shown = True
        if self.live:
            self._progress.start()
        else:
            self._print()

    def _print(self) -> None:
        """live=False: the current line once more, below whatever was written since (unless unchanged)."""
        state = (self._task, self.done, self.total)
        if state != self._printed:
            self._printed = state
            self._progress.console.print(self._progress.make_tasks_table(
                [t for t in self._progress.tasks if t.id == self._task]))

    def close(self, finished: bool = True) -> None:
        """Draw the bar one last time (``finished``: full) and leave it on the terminal."""
        if self._progress is None:
            return
        if self._shown:
            if finished and self.total is None:
                self.total = self.done
                self._progress.update(self._task, total=self.done)
            if self.live:
                self._progress.stop()
            else:
                self._print()
        self._progress = None


@contextmanager
def bar(description: str, total: Optional[int] = None, unit: str = "rows", *, min_items: int = 0,
        live: bool = True) -> Iterator[Bar]:
    """A progress bar for the work inside the ``with`` block (see the module docstring for when it is drawn).

    ``total``: the items the work will do, if known; ``unit``: what they are (rows, runs, months, files);
    ``min_items``: draw nothing until ``done`` or ``total`` reach it (short work shows no bar); ``live=False``:
    no bar redrawn in place, but one line printed per update (for work whose child processes write to the
    terminal too, and whose updates are few: a sweep's strategies).
    """
    b = Bar(description, total, unit, min_items, live)
    try:
        yield b
    except BaseException:
        b.close(finished=False)
        raise
    b.close()
