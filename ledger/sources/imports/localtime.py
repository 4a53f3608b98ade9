"""Local times and daylight saving: what a naive local time in a zone can mean.

A time without an offset (a CSV ``start``, sacct's ``Start``/``End``) is read in a
zone; the hour the clocks pass twice (fall back) has two readings and the hour they
skip (spring forward) none: :func:`readings` says which, :func:`localize` applies
the ``--dst`` policy (refuse, earliest, latest, or report it for the caller to skip).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Optional
from zoneinfo import ZoneInfo

from trainledger.errors import LedgerInputError

_UTC = timezone.utc

def readings(ts: datetime, zone: ZoneInfo) -> tuple[str, list[datetime]]:
    """The instants a naive local time ``ts`` in ``zone`` can mean, earliest first.

    ``("ok", [t])`` for an ordinary time; ``("overlap", [t1, t2])`` for a time
    the clocks pass twice (the fall-back hour); ``("gap", [t1, t2])`` for a
    time that never happens (the spring-forward hour): read with the offset
    after and before the change.
    """
    first = ts.replace(tzinfo=zone)
    second = ts.replace(tzinfo=zone, fold=1)
    off1, off2 = first.utcoffset(), second.utcoffset()
    if off1 == off2:
        return "ok", [first]
    pair = sorted([first.astimezone(_UTC), second.astimezone(_UTC)])
    back = first.astimezone(_UTC).astimezone(zone).replace(tzinfo=None)
    return ("overlap" if back == ts else "gap"), pair


def localize(ts: datetime, zone: ZoneInfo, dst: str, where: str, fieldname: str) -> Optional[datetime]:
    """An aware time: ``ts`` itself if it has an offset, else the naive local time read in ``zone``.

    A time a DST change skips or repeats is refused with a one-line error
    naming the row (``dst="refuse"``), read as the earliest or latest of its
    two possible instants (``"earliest"``/``"latest"``), or returned as
    ``None`` for the caller to skip and report (``"report"``).
    """
    if ts.tzinfo is not None:
        return ts
    kind, options = readings(ts, zone)
    if kind == "ok":
        return options[0]
    if dst == "earliest":
        return options[0]
    if dst == "latest":
        return options[1]
    if dst == "report":
        return None
    what = ("does not exist in {z} (the clocks moved forward)" if kind == "gap"
            else "happened twice in {z} (the clocks moved back)").format(z=zone.key or "the local time zone")
    raise LedgerInputError(f"{where}: {fieldname}: {ts.isoformat()} {what}; give the time with its offset "
                           "or pass --dst earliest|latest")


def system_timezone() -> ZoneInfo:
    """The zone of this process: ``$TZ`` if it names one, else /etc/localtime, else UTC.

    /etc/localtime is read by its name where it links into a zoneinfo folder (``Europe/Berlin``): a zone
    with a key can be pickled into an import's temporary store; one read from a file cannot.
    """
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except Exception:
            pass
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in target:
        try:
            return ZoneInfo(target.split("/zoneinfo/", 1)[1])
        except Exception:
            pass
    try:
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key=None)
    except OSError:
        return ZoneInfo("UTC")
