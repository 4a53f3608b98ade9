"""Values that may be stored: what the API accepts from training code, and what a journal event may carry.

Two halves of one rule, *capture never hurts the job and no record is poison*:

* :class:`Guard` checks the numbers training code hands to ``run.log`` and the
  callbacks: a count (steps, tokens) must be a whole number in 0 … 2**63 − 1,
  any other figure a finite number. A value that is not is dropped, with one
  warning per field on stderr (never an exception into the training loop).
  ``Guard.off`` turns recording off for good, with one warning, when the
  journal cannot be written or the writer thread died.
* :func:`clean_event` makes an event storable by every backend before it is
  journaled and again before it is applied (a journal written by an older
  version may hold anything): text loses NUL characters (PostgreSQL refuses
  them) and invalid UTF-8 (lone surrogates, which neither backend stores) is
  replaced; integers outside the signed 64-bit range become null; NaN and
  infinities become null (PostgreSQL's JSON refuses them).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def clean_text(text: str) -> str:
    """``text`` without NUL characters and with invalid UTF-8 (lone surrogates) replaced by U+FFFD."""
    if "\0" in text:
        text = text.replace("\0", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)  # one per lone surrogate
    return text


def clean_value(value: Any) -> Any:
    """A JSON value every backend stores: see the module docstring (dict keys are cleaned too)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_value(v) for v in value]
    return value


def clean_event(event: dict[str, Any]) -> dict[str, Any]:
    """A journal event with every value storable (:func:`clean_value`)."""
    return clean_value(event)


def warn(message: str) -> None:
    """One line on stderr, never an exception (a closed or broken stderr loses the warning, not training)."""
    try:
        print(f"[trainledger] warning: {message}", file=sys.stderr, flush=True)
    except Exception:  # a closed or broken stderr: the warning is lost, training is not
        pass


class Guard:
    """The API's checks of training code's numbers; one warning per field, recording off after a fatal error."""

    def __init__(self) -> None:
        self.warned: set[str] = set()
        self.off_reason: Optional[str] = None

    def warn(self, field: str, message: str) -> None:
        if field not in self.warned:
            self.warned.add(field)
            warn(f"{message} (further bad values of {field} are dropped silently)")

    def off(self, reason: str) -> None:
        """Stop recording for the rest of the run (one warning); training goes on."""
        if self.off_reason is None:
            self.off_reason = reason
            warn(f"{reason}; recording of this run is off, training continues")

    def count(self, field: str, value: Any) -> Optional[int]:
        """A whole count 0 … 2**63 − 1, or None (dropped, with one warning) for anything else."""
        if type(value) is int and 0 <= value <= INT64_MAX:  # the usual case, first: run.log is on the step's path
            return value
        if value is None:
            return None
        try:
            number = float(value) if not isinstance(value, int) else value
            if isinstance(number, float):
                if not math.isfinite(number) or number != int(number):
                    raise ValueError
                number = int(number)
        except Exception:  # any object training code hands us: its float() may raise anything
            self.warn(field, f"{field}={shown(value)} is not a whole number; dropped")
            return None
        if number < 0:
            self.warn(field, f"{field}={shown(value)} is negative; dropped")
            return None
        if number > INT64_MAX:
            self.warn(field, f"{field}={shown(value)} is beyond 64 bits; dropped")
            return None
        return number

    def number(self, field: str, value: Any) -> Optional[float]:
        """A finite float, or None (dropped, with one warning) for NaN, infinities and non-numbers."""
        if type(value) is float and math.isfinite(value):
            return value
        if value is None:
            return None
        try:
            number = float(value)
        except Exception:  # any object training code hands us: its float() may raise anything
            self.warn(field, f"{field}={shown(value)} is not a number; dropped")
            return None
        if not math.isfinite(number):
            self.warn(field, f"{field}={shown(value)} is not a finite number; dropped")
            return None
        return number


def shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."
