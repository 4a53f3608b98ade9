"""``trainledger slurm sync``: sacct's records since the last sync's watermark into the ledger.

sacct runs as a child process (an argument list, never a shell) in its own
session: at its timeout the whole process group is killed (``os.killpg``), so
a child of sacct (a wrapper script's, a plugin's) that keeps the output pipe
open can never hold the sync past its timeout. The records go through the
import's parser (:class:`trainledger.sources.imports.slurm.SacctParser`) and writer.

A job that has just ended may not be in the window yet: slurmdbd completes its
record (the eligible time, by which it selects a window without ``--state``,
and the partition) up to seconds after the end (Slurm 22.05, tests/slurm). The
next sync's window overlaps this one, so it imports the job then, whole. (Asking
with ``--state`` instead finds such a job at once, but with its record still
incomplete: no partition, so no mapping.)
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import delete, select
from sqlalchemy.engine import Engine
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.rates.months import month_bounds, month_of
from trainledger.sources.imports.importer import (
    ImportOptions,
    Receipt,
    Spill,
    StageProgress,
    counting,
    load_context,
    system_timezone,
    write_spill,
)
from trainledger.sources.imports.slurm import SYNC_FIELDS, SacctParser
from trainledger.store.db import session_scope
from trainledger.store.ids import slurm_attempt_of, slurm_run_id
from trainledger.store.models import Run, RunStatus, Setting
from trainledger.store.types import utcnow

WATERMARK = "slurm:watermark:"
OVERLAP = timedelta(minutes=10)
SACCT_TIMEOUT_S = 600


def watermark_key(cluster: str) -> str:
    return WATERMARK + (cluster or "-")


def read_watermark(session: Session, cluster: str) -> Optional[datetime]:
    v = session.get(Setting, watermark_key(cluster))
    return datetime.fromisoformat(v.value) if v else None


def _set_watermark(session: Session, cluster: str, at: datetime) -> None:
    key = watermark_key(cluster)
    t = Setting.__table__
    session.execute(delete(t).where(t.c.key == key))
    session.execute(t.insert().values(key=key, value=at.astimezone(timezone.utc).isoformat()))


def _live_jobs(session: Session, cluster: str) -> list[str]:
    """Job ids of the runs this ledger still has as queued/running under Slurm (their end may lie before
    the window, if slurmdbd wrote it late): they are asked for by job id."""
    prefix = f"slurm-{cluster}-" if cluster else "slurm-"
    out = []
    rows = session.execute(select(Run.id, Run.config).where(Run.status.in_((RunStatus.queued, RunStatus.running)),
                                                           (Run.launcher == "slurm") | Run.id.startswith(prefix)))
    for rid, config in rows:
        slurm = (config or {}).get("slurm") if isinstance(config, dict) else None
        job = str(slurm.get("job_id")) if slurm and slurm.get("job_id") else None
        if job is None and rid.startswith(prefix):
            job = slurm_attempt_of(rid)[0][len(prefix):]  # a requeued job's attempt: slurm-7-r1 is job 7
        if job and re.fullmatch(r"\d+(?:_\d+)?(?:[.+]\d+)?", job):
            out.append(job.replace(".", "+"))
    return sorted(set(out))


def sacct_time(t: datetime, zone: ZoneInfo) -> str:
    """A time as sacct reads it (``--starttime``/``--endtime``): local wall time in the zone sacct runs in."""
    return t.astimezone(zone).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_command(sacct: str, *, start: Optional[str] = None, end: Optional[str] = None, cluster: str = "",
                  jobs: Optional[list[str]] = None) -> list[str]:
    """The sacct argument list of a sync (every job record, with requeued ones, in a window or by job id)."""
    argv = [sacct, "--parsable2", "--noheader", "--duplicates", "--allusers", "--format", ",".join(SYNC_FIELDS)]
    if jobs:
        argv += ["--jobs", ",".join(jobs)]
    else:
        argv += ["--starttime", start or "", "--endtime", end or ""]
    if cluster:
        argv += ["--clusters", cluster]
    return argv


def run_sacct(argv: list[str], env: Optional[dict[str, str]], parser: SacctParser,
              timeout_s: float = SACCT_TIMEOUT_S, progress: Optional[StageProgress] = None) -> None:
    """Run sacct (an argument list, never a shell) and parse its output as it streams (``progress``: the
    records read so far, see ``importer.StageProgress``)."""
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                    text=True, encoding="utf-8", errors="replace", start_new_session=True)
        except OSError as exc:
            raise LedgerInputError(f"sacct: cannot run {argv[0]}: {exc.strerror or exc}") from None
        timed_out = threading.Event()

        def kill_group() -> None:  # sacct and every child it left holding the pipe
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

        timer = threading.Timer(timeout_s, kill_group)
        timer.start()
        try:
            parser.feed(counting(proc.stdout, parser.receipt, progress))
        finally:
            proc.stdout.close()
            code = proc.wait()
            timer.cancel()
        if timed_out.is_set():
            raise LedgerInputError(f"sacct: no answer within {timeout_s:g} s; it was stopped (its whole process "
                                   "group) and nothing was written: is slurmdbd reachable? (--sacct-timeout)")
        if code != 0:
            err.seek(0)
            lines = [x for x in err.read().decode("utf-8", "replace").splitlines() if x.strip()]
            raise LedgerInputError(f"sacct exited {code}: {lines[-1].strip() if lines else 'no message'}")


@dataclass
class SyncResult:
    receipt: Receipt
    start: datetime
    end: datetime
    watermark: datetime
    commands: list[list[str]] = field(default_factory=list)
    rechecked_jobs: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {**self.receipt.as_dict(), "window": {"start": self.start, "end": self.end},
                "watermark": self.watermark, "rechecked_jobs": self.rechecked_jobs}


def _window(engine: Engine, cluster: str, since: Optional[datetime], until: Optional[datetime],
            overlap: timedelta) -> tuple[datetime, datetime, Optional[datetime], list[str]]:
    with session_scope(engine) as s:
        prior = read_watermark(s, cluster)
        live = _live_jobs(s, cluster)
        now = until or utcnow()
        if since is not None:
            start = since
        elif prior is not None:
            start = prior - overlap
        else:  # first sync: the current month (display time zone), so its report is complete
            from trainledger.store.settings import display_timezone

            tz = display_timezone(s)
            start = month_bounds(month_of(now, tz), tz)[0]
    return start, now, prior, live


def sync(engine: Engine, *, cluster: str = "", tz: Optional[ZoneInfo] = None, since: Optional[datetime] = None,
         until: Optional[datetime] = None, overlap: timedelta = OVERLAP, dst: str = "report",
         node_type: Optional[str] = None, offer: Optional[str] = None, by_node: bool = False, strict: bool = False,
         sacct: Optional[str] = None, env: Optional[dict[str, str]] = None,
         timeout_s: float = SACCT_TIMEOUT_S, progress: Optional[StageProgress] = None) -> SyncResult:
    """``trainledger slurm sync``: sacct's records since the last sync's watermark into the ledger.

    The window starts ``overlap`` before the watermark (slurmdbd may write an
    end late) and ends now; runs still live in the ledger are also asked for by
    job id. The records go through the import's parser and writer; the new
    watermark is stored in the same transaction, so a failed sync changes
    nothing and the next one covers its window. Idempotent: a second sync of
    the same records changes nothing. ``progress``: records read, then runs written
    (``importer.StageProgress``).
    """
    ctx = load_context(engine)
    zone = tz or system_timezone()
    opts = ImportOptions(node_type=node_type, offer=offer, tz=zone, fmt="sacct", cluster=cluster, strict=strict,
                         dst=dst, by_node=by_node)
    opts.check(ctx)
    binary = sacct or shutil.which("sacct")
    if not binary:
        raise LedgerInputError("sacct: not found on PATH; run slurm sync on a host with the Slurm client (apt-get install slurm-client)")
    run_env = dict(env if env is not None else os.environ)
    if tz is not None and tz.key:
        run_env["TZ"] = tz.key  # sacct prints (and reads) local times in its TZ: the zone they are read in here
    start, end, prior, live = _window(engine, cluster, since, until, overlap)
    receipt = Receipt(source="sacct" + (f" -M {cluster}" if cluster else ""), format="sacct", strict=strict)
    result = SyncResult(receipt, start, end, max(end, prior) if prior else end)
    with Spill("sacct") as spill:
        parser = SacctParser(ctx, opts, spill, receipt, "sacct")
        parser.header(SYNC_FIELDS)
        argv = sacct_command(binary, start=sacct_time(start, zone), end=sacct_time(end, zone), cluster=cluster)
        result.commands.append(argv)
        run_sacct(argv, run_env, parser, timeout_s, progress)
        spill.flush()
        missing = [j for j in live if spill.get(slurm_run_id(j, cluster)) is None and not parser.pending_seen(j)]
        for i in range(0, len(missing), 200):
            argv = sacct_command(binary, cluster=cluster, jobs=missing[i:i + 200])
            result.commands.append(argv)
            run_sacct(argv, run_env, parser, timeout_s, progress)
        result.rechecked_jobs = len(missing)
        parser.finish()
        if progress:
            progress("read", receipt.rows_read, None)
        write_spill(engine, spill, receipt, also=lambda s: _set_watermark(s, cluster, result.watermark),
                    progress=progress)
    return result
