"""The ``TRAINLEDGER_*`` environment variables that tune capture, each parsed here once with its range and default.

Two ways to read one (issue 37):

* **lenient** (:func:`env_setting`; the job's side: ``trainledger.track``, the callbacks, the trainer's
  tracker, the ``trainledger run`` wrapper): a bad value is never a reason to stop or change the job.
  It gives one line on stderr naming the variable and the default used (once per variable and value in
  a process) and the default is used;
* **strict** (:func:`env_setting` with ``strict=True``; CLI commands that wrap no job): a bad value is one
  :class:`~trainledger.errors.LedgerInputError` naming the variable, its range and an example (exit 2
  before anything runs).

A bad value is anything that is not a plain decimal number in the variable's range: text, NaN, ±inf,
``1e999``, a negative or zero interval. Unset or empty means the default.

============================  =======  ====================  =======================================
variable                      default  range                 what
============================  =======  ====================  =======================================
TRAINLEDGER_FLUSH_S           2        0.01 … 3600 s         how often the writer journals and applies
TRAINLEDGER_HEARTBEAT_S       5        0.01 … 3600 s         heartbeat period
TRAINLEDGER_LEDGER_WAIT_S     30       0 … 86400 s           how long the end waits for the ledger
TRAINLEDGER_UTIL_INTERVAL_S   1        0.05 … 3600 s         utilization sampling period (wrapper)
TRAINLEDGER_SQLITE_BUSY_S     60       0.001 … 86400 s       how long a SQLite writer waits for a lock
TRAINLEDGER_COMM_TIMEOUT_S    torch's  0.001 … 604800 s      how long a collective waits for the other
                                                             ranks (the bundled trainer; unset or bad:
                                                             torch's default)
============================  =======  ====================  =======================================

Which way applies is the process's: lenient unless a CLI command that wraps no job is running
(:func:`strict_for`, set by ``trainledger.cli.common.command`` around each such command).
``TRAINLEDGER_FAULT_STEP`` (tests and drills: the bundled trainer raises at that step) is read leniently by
:func:`env_step`: a bad one is said once and no fault is injected.

``TRAINLEDGER_RUN_ID`` (a run id, :func:`trainledger.store.ids.validate_run_id`) is read leniently by
:func:`env_run_id`: a bad one is said once and a new id is used.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Optional

from trainledger.errors import LedgerInputError


@dataclass(frozen=True)
class Seconds:
    """A number of seconds in ``low`` … ``high`` (both included), ``default`` when unset or bad."""

    name: str
    default: float
    low: float
    high: float

    def parse(self, raw: str) -> Optional[float]:
        """The value, or None when it is not a finite number in range."""
        try:
            value = float(raw.strip())
        except (TypeError, ValueError, OverflowError):
            return None
        return value if math.isfinite(value) and self.low <= value <= self.high else None

    def expected(self) -> str:
        return f"seconds from {self.low:g} to {self.high:g}"


FLUSH_S = Seconds("TRAINLEDGER_FLUSH_S", 2.0, 0.01, 3600.0)
HEARTBEAT_S = Seconds("TRAINLEDGER_HEARTBEAT_S", 5.0, 0.01, 3600.0)
LEDGER_WAIT_S = Seconds("TRAINLEDGER_LEDGER_WAIT_S", 30.0, 0.0, 86400.0)
UTIL_INTERVAL_S = Seconds("TRAINLEDGER_UTIL_INTERVAL_S", 1.0, 0.05, 3600.0)
SQLITE_BUSY_S = Seconds("TRAINLEDGER_SQLITE_BUSY_S", 60.0, 0.001, 86400.0)
COMM_TIMEOUT_S = Seconds("TRAINLEDGER_COMM_TIMEOUT_S", 1800.0, 0.001, 604800.0)
SETTINGS = {s.name: s for s in (FLUSH_S, HEARTBEAT_S, LEDGER_WAIT_S, UTIL_INTERVAL_S, SQLITE_BUSY_S, COMM_TIMEOUT_S)}
ENV_RUN_ID = "TRAINLEDGER_RUN_ID"
ENV_FAULT_STEP = "TRAINLEDGER_FAULT_STEP"

_said: set[tuple[str, str]] = set()
_strict = [False]  # a CLI command that wraps no job is running (strict_for)


@contextmanager
def strict_for() -> Iterator[None]:
    """Inside: the variables read by the ledger's own code (``TRAINLEDGER_SQLITE_BUSY_S`` when an engine is made)
    are strict (a bad value is a LedgerInputError, exit 2). The CLI wraps each command that starts no job in it."""
    was = _strict[0]
    _strict[0] = True
    try:
        yield
    finally:
        _strict[0] = was


def process_setting(setting: Seconds, env: Optional[Mapping[str, str]] = None) -> float:
    """``setting`` read the process's way: strict inside :func:`strict_for`, else lenient."""
    return env_setting(setting, env, strict=_strict[0])


def say_once(name: str, raw: str, line: str, write: Optional[Callable[[str], None]] = None) -> None:
    """``line`` through ``write`` (the caller says it once per run), else on stderr once per variable and value in
    this process; never raises."""
    if write is None:
        if (name, raw) in _said:
            return
        _said.add((name, raw))
    try:
        if write is not None:
            write(line)
        else:
            print(f"[trainledger] warning: {line}", file=sys.stderr, flush=True)
    except Exception:  # a closed stderr loses the warning, never the job
        pass


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def env_setting(setting: Seconds, env: Optional[Mapping[str, str]] = None, *, strict: bool = False,
                write: Optional[Callable[[str], None]] = None) -> float:
    """``setting``'s value from ``env`` (default: ``os.environ``): see the module docstring for the two ways."""
    env = os.environ if env is None else env
    raw = env.get(setting.name)
    if raw is None or not str(raw).strip():
        return setting.default
    value = setting.parse(str(raw))
    if value is not None:
        return value
    if strict:
        raise LedgerInputError(f"{setting.name}: expected {setting.expected()} such as {setting.default:g}, "
                               f"got {_shown(str(raw))}")
    say_once(setting.name, str(raw), f"{setting.name}={_shown(str(raw))} is not {setting.expected()}; "
             f"using the default {setting.default:g}", write)
    return setting.default


def check_settings(env: Optional[Mapping[str, str]] = None) -> dict[str, float]:
    """Every variable of :data:`SETTINGS` read strictly (commands that start a job of ours but wrap none, e.g.
    ``trainledger launch``): the first bad one is a :class:`~trainledger.errors.LedgerInputError` before
    anything runs."""
    return {name: env_setting(setting, env, strict=True) for name, setting in SETTINGS.items()}


def seconds_or_default(setting: Seconds, given, write: Optional[Callable[[str], None]] = None,
                       env: Optional[Mapping[str, str]] = None) -> float:
    """A value handed in by code (``flush_s=``) checked like the variable (read from ``env`` when None): out of
    range or not a number → the default, said once naming the argument."""
    if given is None:
        return env_setting(setting, env, write=write)
    arg = setting.name.removeprefix("TRAINLEDGER_").lower()
    try:
        value = setting.parse(str(float(given)))
    except (TypeError, ValueError, OverflowError):
        value = None
    if value is not None:
        return value
    say_once(arg, repr(given), f"{arg}={_shown(given)} is not {setting.expected()}; using the default "
             f"{setting.default:g}", write)
    return setting.default


def env_optional(setting: Seconds, env: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """A variable without a default of ours (``TRAINLEDGER_COMM_TIMEOUT_S``: unset means the library's): its value,
    None when unset, and None said once when bad (strict: the error)."""
    env = os.environ if env is None else env
    raw = env.get(setting.name)
    if raw is None or not str(raw).strip():
        return None
    value = setting.parse(str(raw))
    if value is None and _strict[0]:
        env_setting(setting, env, strict=True)  # raises
    if value is None:
        say_once(setting.name, str(raw), f"{setting.name}={_shown(str(raw))} is not {setting.expected()}; "
                 "using the library's default")
    return value


def env_step(env: Optional[Mapping[str, str]] = None, name: str = ENV_FAULT_STEP) -> Optional[int]:
    """``$TRAINLEDGER_FAULT_STEP`` as a step number ≥ 0 (tests and drills); None when unset, or bad (said once)."""
    env = os.environ if env is None else env
    raw = env.get(name)
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    say_once(name, str(raw), f"{name}={_shown(str(raw))} is not a step number; no fault is injected")
    return None


def env_run_id(env: Optional[Mapping[str, str]] = None, name: str = ENV_RUN_ID,
               write: Optional[Callable[[str], None]] = None) -> Optional[str]:
    """``$TRAINLEDGER_RUN_ID`` (or ``name``) when it is a valid run id; None (a new id is used) when unset or
    bad, a bad one said once."""
    from trainledger.store.ids import validate_run_id

    env = os.environ if env is None else env
    raw = env.get(name)
    if not raw:
        return None
    try:
        return validate_run_id(raw, name)
    except LedgerInputError as exc:
        say_once(name, raw, f"{exc}; ignored, the run gets a new id", write)
        return None


__all__ = ["Seconds", "SETTINGS", "FLUSH_S", "HEARTBEAT_S", "LEDGER_WAIT_S", "UTIL_INTERVAL_S", "env_setting",
           "check_settings", "env_optional", "env_step", "process_setting", "strict_for",
           "seconds_or_default", "env_run_id", "say_once"]
