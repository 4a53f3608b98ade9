"""Slurm: ``sacct`` records as runs (``trainledger import`` of sacct output; ``trainledger slurm sync`` runs
sacct itself: :mod:`trainledger.sources.imports.slurm_sync`).

A job's *allocation* record becomes a run with the id
``trainledger.store.ids.slurm_run_id`` of its JobID (``slurm-<jobid>``, or
``slurm-<cluster>-<jobid>`` with ``--cluster``); job steps are never runs
(their GPU usage counts towards their job). What the job ran on (node type and
offer) comes from the Slurm mapping (``trainledger slurm map``), or from
``--node-type`` for a whole file. The import is tolerant: a well-formed record
that cannot be costed is skipped and counted in the receipt by reason (with
the first job ids); ``--strict`` refuses the file instead. See
docs/SLURM.md for the state families, the mapping rules and the sync.

States map by family (:data:`STATES`): COMPLETED → succeeded; FAILED,
TIMEOUT, OUT_OF_MEMORY, DEADLINE, SPECIAL_EXIT → failed; NODE_FAIL,
BOOT_FAIL → crashed; CANCELLED, PREEMPTED, REVOKED → cancelled; REQUEUED →
cancelled, as an earlier *attempt* of the job that the job's later record
continues (``resume_of``); RUNNING and its kin → running (finished by a later
sync); PENDING and its kin are not runs yet. A requeued job's attempts are
numbered as Slurm counts its restarts (``SLURM_RESTART_COUNT``): ``slurm-<jobid>``
ran first, ``slurm-<jobid>-r<N>`` after the N-th requeue — the ids the run
wrapper gives them inside the job, so a wrapped attempt and its record are one
run. An attempt keeps its id for good; the number of a job's first record in an
input follows the attempts the ledger already holds (:func:`ledger_attempts`).

Job-level GPU-Util: ``gres/gpuutil`` (percent) and ``gres/gpumem`` of
``TRESUsageInAve``/``TRESUsageInMax`` (Slurm 23.02+ with GPU accounting),
from the allocation record where Slurm puts them there, else the
elapsed-weighted mean over the job's steps; stored with ``util_source
"slurm"``. Without them GPU-Util stays missing, never zero.
"""

from __future__ import annotations

import itertools
import pickle
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.engine import Engine
from trainledger.errors import LedgerInputError
from trainledger.money.allocation import shares
from trainledger.sources.imports.importer import (
    FIRST_IDS,
    MAX_NODES,
    TEXT_LIMITS,
    Context,
    ImportOptions,
    NodeTypeInfo,
    Receipt,
    Spill,
    check_text,
    import_lines,
    localize,
    parse_time,
    readings,
    to_int,
)
from trainledger.store.db import session_scope
from trainledger.store.ids import previous_attempt, slurm_attempt_id, slurm_attempt_of, slurm_run_id, validate_run_id
from trainledger.store.models import Run, RunStatus

#: the fields a sacct file must have (``sacct --parsable2 --format ...``); the others are used when present
REQUIRED = ["JobID", "JobName", "Account", "User", "Start", "End", "NNodes", "AllocTRES", "State"]
OPTIONAL = ["Partition", "NodeList", "ElapsedRaw", "ExitCode", "Submit", "Cluster", "TRESUsageInAve", "TRESUsageInMax"]
#: what ``slurm sync`` asks sacct for
SYNC_FIELDS = ["JobID", "JobName", "Partition", "Account", "User", "NodeList", "NNodes", "AllocTRES", "ElapsedRaw",
               "State", "ExitCode", "Submit", "Start", "End", "Cluster", "TRESUsageInAve", "TRESUsageInMax"]

# --- states -------------------------------------------------------------------------------------------

S, F, X, C, R = RunStatus.succeeded, RunStatus.failed, RunStatus.crashed, RunStatus.cancelled, RunStatus.running
#: every job state Slurm (20.11-24.x) writes to accounting → (family, run status); None: not a run yet
STATES: dict[str, tuple[str, Optional[RunStatus]]] = {
    "COMPLETED": ("completed", S),
    "FAILED": ("failed", F), "TIMEOUT": ("failed", F), "OUT_OF_MEMORY": ("failed", F), "DEADLINE": ("failed", F),
    "SPECIAL_EXIT": ("failed", F), "LAUNCH_FAILED": ("failed", F), "RECONFIG_FAIL": ("failed", F),
    "NODE_FAIL": ("node failure", X), "BOOT_FAIL": ("node failure", X),
    "CANCELLED": ("stopped", C), "PREEMPTED": ("stopped", C), "REVOKED": ("stopped", C),
    "REQUEUED": ("requeued", C),
    "RUNNING": ("running", R), "COMPLETING": ("running", R), "CONFIGURING": ("running", R),
    "SUSPENDED": ("running", R), "STOPPED": ("running", R), "RESIZING": ("running", R), "SIGNALING": ("running", R),
    "STAGE_OUT": ("running", R), "POWER_UP_NODE": ("running", R), "UPDATE_DB": ("running", R),
    "PENDING": ("pending", None), "REQUEUE_HOLD": ("pending", None), "REQUEUE_FED": ("pending", None),
    "RESV_DEL_HOLD": ("pending", None),
}
del S, F, X, C, R

# --- skip reasons (receipt keys) and their hints -----------------------------------------------------------

STEPS = "job steps"
PENDING = "pending jobs"
NEVER_STARTED = "never started"
NO_GPUS = "jobs without GPUs"
UNMAPPED = "no Slurm mapping"
GPU_TYPE = "GPU type is not the node type's"
UNEVEN = "uneven GPU spread"
TOO_MANY = "more GPUs per node than the node type has"
ZERO_BILLING = "jobs that bill 0"
UNKNOWN_STATE = "unknown Slurm state"
NO_END = "finished without an end time"
DST = "local time skipped or repeated by a DST change"
REPEATED = "repeated records"
HINTS = {
    STEPS: "steps are parts of their job: their GPU usage counts there",
    PENDING: "imported once they start",
    NEVER_STARTED: "cancelled or failed before they ran: nothing to cost",
    NO_GPUS: "costed only where the mapping says --by-node (whole nodes)",
    UNEVEN: "cost them by nodes with a mapping rule that says --by-node",
    ZERO_BILLING: "Slurm truncates billing to a whole number: under 1 bills 0; check the rule's --billing-weights",
    UNKNOWN_STATE: "not a Slurm job state this version knows; see docs/SLURM.md",
    NO_END: "a finished state without an End time: check the record with sacct -j",
    DST: "run sacct with TZ=UTC (slurm sync --tz UTC) or pass --dst earliest|latest",
    REPEATED: "the same record twice (e.g. overlapping exports): counted once",
}
ATTEMPT_RE = re.compile(r"\.r\d{8}T\d{6}$")  # the key of a requeued record until finish() numbers it
ALIAS_PREFIX = "trainledger-"  # the job name `trainledger launch --launcher slurm` gives its sbatch jobs
SIZE = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")


# --- TRES ------------------------------------------------------------------------------------------------

def tres(text: str) -> dict[str, str]:
    """``cpu=4,gres/gpu:a100=8,mem=100G`` → {"cpu": "4", "gres/gpu:a100": "8", "mem": "100G"}."""
    out = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if eq:
            out[key.strip()] = value.strip()
    return out


def gpus(alloc: dict[str, str], where: str) -> tuple[int, tuple[str, ...]]:
    """(GPU count, GPU types) of an AllocTRES: the untyped ``gres/gpu=N`` if present, else the sum of the typed ones."""
    total, typed, types = None, 0, []
    for key, value in alloc.items():
        if key == "gres/gpu":
            total = to_int(value, where, "AllocTRES gres/gpu", 0, MAX_NODES * 1024)
        elif key.startswith("gres/gpu:"):
            n = to_int(value, where, f"AllocTRES {key}", 0, MAX_NODES * 1024)
            typed += n
            if n:
                types.append(key[9:])
    return (typed if total is None else total), tuple(sorted(types))


def size_bytes(text: str) -> Optional[int]:
    m = SIZE_RE.match(text.strip())
    return int(float(m.group(1)) * SIZE[m.group(2)]) if m else None


def exit_status(text: str) -> Optional[int]:
    """sacct's ``code:signal`` as one exit status: the code, or 128 + the signal for a job killed by one."""
    code, _, sig = text.partition(":")
    if not code.isdigit() or (sig and not sig.isdigit()):
        return None
    return 128 + int(sig) if int(code) == 0 and sig and int(sig) else int(code)


def _type_matches(gpu_type: str, gpu_model: str) -> bool:
    norm = lambda s: re.sub(r"[^a-z0-9]", "", s.lower())  # noqa: E731
    t = norm(gpu_type)
    return bool(t) and t in norm(gpu_model)


# --- the mapping ---------------------------------------------------------------------------------------------

@dataclass
class Target:
    """What a job is costed as."""

    node_type: NodeTypeInfo
    offer_id: Optional[int]
    by_node: bool
    billing: Optional[tuple] = None  # (weights, MAX_TRES, one whole node's TRES counts): share by Slurm billing


@dataclass
class Miss:
    """Why a job has no node type: a skip reason with the field and detail of its one-line error."""

    reason: str
    field: str
    detail: str
    hint: str = ""


def _hosts(nodelist: str) -> list[str]:
    import hostlist

    if not nodelist or nodelist.startswith("None"):
        return []
    try:
        return hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist:
        return []


class Mapper:
    """Resolves (cluster, partition, GPU types, node list) to a :class:`Target` or a :class:`Miss` (cached)."""

    def __init__(self, ctx: Context, opts: ImportOptions) -> None:
        self.ctx, self.opts = ctx, opts
        self.rules = ctx.rules
        self.by_pattern = any(r.node_pattern for r in self.rules)
        self.cache: dict[tuple, Any] = {}
        self.flag = ctx.node_types[opts.node_type] if opts.node_type else None
        self.flag_offer = ctx.offer(opts.offer, self.flag, "--offer") if self.flag else None
        self.offer_nt = {oid: ntid for oid, ntid in ctx.offers.values()}
        self.nt_by_id = {n.id: n for n in ctx.node_types.values()}

    def resolve(self, cluster: str, partition: str, types: tuple[str, ...], nodelist: str) -> Target | Miss:
        key = (cluster, partition, types, nodelist if self.by_pattern else "")
        got = self.cache.get(key)
        if got is None:
            if len(self.cache) > 20_000:
                self.cache.clear()
            got = self.cache[key] = self._resolve(cluster, partition, types, nodelist)
        return got

    def _resolve(self, cluster: str, partition: str, types: tuple[str, ...], nodelist: str) -> Target | Miss:
        if self.flag is not None:
            nt = self.flag
            if types and not any(_type_matches(t, nt.gpu_model) for t in types):
                return Miss(GPU_TYPE, "AllocTRES", f"gres/gpu:{types[0]} is not a {nt.gpu_model} ({nt.name})",
                            f"map it: trainledger slurm map add --gpu-type {types[0]} --node-type NAME")
            return Target(nt, self.flag_offer, self.opts.by_node)
        if not self.rules:
            raise LedgerInputError(f"node_type: missing; pass --node-type or add a Slurm mapping "
                                   f"(trainledger slurm map add --partition {partition or 'NAME'} --node-type NAME)")
        hosts: list[str] | None = None
        c, p, t = cluster.casefold(), partition.casefold(), {x.casefold() for x in types}
        for rule in self.rules:  # most specific first
            if rule.cluster and rule.cluster.casefold() != c or rule.partition and rule.partition.casefold() != p:
                continue
            if rule.gpu_type and rule.gpu_type.casefold() not in t:
                continue
            if rule.node_pattern:
                hosts = _hosts(nodelist) if hosts is None else hosts
                pat = rule.node_pattern.casefold()
                if not hosts or not all(fnmatchcase(h.casefold(), pat) for h in hosts):
                    continue
            billing = None
            if rule.billing_weights:
                billing = (shares.parse_weights(rule.billing_weights), rule.max_tres,
                           shares.tres_counts(tres(rule.node_tres)))
            return Target(self.nt_by_id[rule.node_type_id], rule.offer_id, rule.by_node, billing)
        what = f"partition {partition!r}" + (f", GPU type {types[0]!r}" if types else "")
        return Miss(UNMAPPED, "Partition", f"no Slurm mapping matches {what}",
                    f"add one: trainledger slurm map add --partition {partition or 'NAME'} --node-type NAME")


# --- parsing ----------------------------------------------------------------------------------------------

def _none_time(text: str) -> bool:
    return text in ("", "Unknown", "None") or text.startswith("None")


class SacctParser:
    """sacct ``--parsable2`` records into a :class:`Spill` (see the module docstring for what becomes what)."""

    def __init__(self, ctx: Context, opts: ImportOptions, spill: Spill, receipt: Receipt, name: str) -> None:
        self.ctx, self.opts, self.spill, self.receipt, self.name = ctx, opts, spill, receipt, name
        self.zone: ZoneInfo = opts.tz or ctx.display_tz
        self.mapper = Mapper(ctx, opts)
        self.holds: list[tuple] = []  # (job, node type, node list, start, end, share, basis): overlaps checked at the end
        self.col: dict[str, int] = {}
        self.fields: list[str] = []
        self.width = 0
        self.trailing = False
        spill.on_duplicate = self._duplicate
        db = spill.db
        db.execute("CREATE TABLE attempts (job TEXT NOT NULL, id TEXT PRIMARY KEY, start TEXT NOT NULL)")
        db.execute("CREATE INDEX attempts_job ON attempts (job)")
        db.execute("CREATE TABLE pending (id TEXT PRIMARY KEY, line INTEGER NOT NULL, row BLOB NOT NULL)")
        db.execute("CREATE TABLE steps (job TEXT NOT NULL, start TEXT, elapsed REAL, util REAL, mem INTEGER)")

    # -- header
    def header(self, fields: list[str], line: int = 1) -> None:
        if fields and fields[-1] == "":  # `sacct --parsable` ends every line with '|'
            fields, self.trailing = fields[:-1], True
        missing = [f for f in REQUIRED if f not in fields]
        if missing:
            raise LedgerInputError(f"{self.name}:{line}: header: sacct output needs {','.join(REQUIRED)}; "
                                   f"run sacct --parsable2 --format {','.join(REQUIRED + OPTIONAL)}")
        self.col = {f: i for i, f in enumerate(fields)}
        self.fields = fields
        self.width = len(fields)

    def feed(self, lines: Iterable[str], start_line: int = 1) -> None:
        """Records (no header line), numbered from ``start_line``. Steps take a short path: most rows are steps."""
        col, width, receipt = self.col, self.width, self.receipt
        i_job, i_ave, i_max = col["JobID"], col.get("TRESUsageInAve"), col.get("TRESUsageInMax")
        steps = receipt.skipped.get(STEPS)
        for lineno, line in enumerate(lines, start=start_line):
            rec = line.rstrip("\r\n").split("|")
            if len(rec) == 1 and not rec[0].strip():
                continue
            if self.trailing and rec[-1] == "":
                rec.pop()
            if len(rec) != width:
                raise LedgerInputError(f"{self.name}:{lineno}: fields: expected {width} '|'-separated fields, got {len(rec)}")
            receipt.rows_read += 1
            job = rec[i_job].strip()
            if "." not in job:
                self.record(rec, lineno, job)
                continue
            if (i_ave is not None and "gres/gpu" in rec[i_ave]) or (i_max is not None and "gres/gpu" in rec[i_max]):
                self._step(job, self._getter(rec), f"{self.name}:{lineno}")
            if steps is None or len(steps.first) < FIRST_IDS:
                receipt.skip(STEPS, job, hint=HINTS[STEPS], benign=True)
                steps = receipt.skipped[STEPS]
            else:
                steps.rows += 1

    def _getter(self, rec: list[str]) -> Any:
        values = dict(zip(self.fields, rec))
        return lambda f: values.get(f, "").strip()

    # -- one record
    def record(self, rec: list[str], line: int, job: str) -> None:
        where = f"{self.name}:{line}"
        get = self._getter(rec)
        if not job:
            raise LedgerInputError(f"{where}: JobID: empty")
        state_text = get("State")
        state = state_text.split(" ")[0]
        start_raw, end_raw = get("Start"), get("End")
        start = None if _none_time(start_raw) else parse_time(start_raw, where, "Start")
        end = None if _none_time(end_raw) else parse_time(end_raw, where, "End")
        nodes = to_int(get("NNodes"), where, "NNodes", 0, MAX_NODES)
        n_gpus, types = gpus(tres(get("AllocTRES")), where)
        family = STATES.get(state)
        if family is None:
            return self._miss(Miss(UNKNOWN_STATE, "State", f"unknown Slurm state {state!r}", HINTS[UNKNOWN_STATE]), job, where)
        status = family[1]
        if status is None:
            return self._pending(job, get, line, where)
        if start is None:
            return self.receipt.skip(NEVER_STARTED, job, hint=HINTS[NEVER_STARTED], benign=True)
        if nodes < 1:
            raise LedgerInputError(f"{where}: NNodes: must be at least 1, got {nodes}")
        if status != RunStatus.running and end is None:
            return self._miss(Miss(NO_END, "End", f"{state} without an End time", HINTS[NO_END]), job, where)
        target = self._target(get, types, job, where)
        if target is None:
            return None
        gpn = self._gpus_per_node(n_gpus, nodes, target, job, where)
        if gpn is None:
            return None
        share = self._share(get, target, nodes, gpn, job, where)
        if share is None:
            return None
        times = self._times(start, None if status == RunStatus.running else end, get("ElapsedRaw"), job, where)
        if times is None:
            return None
        row = self._row(get, job, where, state, state_text, status, target, nodes, gpn, n_gpus, types, *times)
        row["share"], row["share_basis"] = share[0], share[1]
        if share[0] is not None or share[1] == "node":
            self.holds.append((job, target.node_type.id, get("NodeList"), times[0], times[1], share[0]))
        if share[2] is not None:
            row["config"]["slurm"]["billing"] = share[2]
        if state == "REQUEUED":
            self._attempt(row, line)
        else:
            self.spill.add(row["id"], line, row)

    def _miss(self, miss: Miss, job: str, where: str) -> None:
        self.receipt.skip(miss.reason, job, where=where, fieldname=miss.field, detail=miss.detail, hint=miss.hint)

    def _target(self, get: Any, types: tuple[str, ...], job: str, where: str) -> Optional[Target]:
        cluster = get("Cluster") or self.opts.cluster
        try:
            got = self.mapper.resolve(cluster, get("Partition"), types, get("NodeList"))
        except LedgerInputError as exc:
            raise LedgerInputError(f"{where}: {exc}") from None
        if isinstance(got, Miss):
            return self._miss(got, job, where)
        return got

    def _gpus_per_node(self, n_gpus: int, nodes: int, target: Target, job: str, where: str) -> Optional[int]:
        nt = target.node_type
        if n_gpus == 0:
            if target.by_node:
                return 0
            return self.receipt.skip(NO_GPUS, job, hint=HINTS[NO_GPUS], benign=True)
        if n_gpus % nodes and not target.by_node:
            return self._miss(Miss(UNEVEN, "AllocTRES", f"{n_gpus} GPUs do not split evenly over {nodes} nodes",
                                   HINTS[UNEVEN]), job, where)
        gpn = -(-n_gpus // nodes)
        if gpn > nt.gpus_per_node:
            return self._miss(Miss(TOO_MANY, "gpus_per_node", f"{gpn} exceeds the {nt.gpus_per_node} GPUs of node type "
                                   f"{nt.name}", "map the partition or GPU type to the right node type"), job, where)
        return gpn

    def _share(self, get: Any, target: Target, nodes: int, gpn: int, job: str,
               where: str) -> Optional[tuple[Optional[str], str, Optional[str]]]:
        """(share, basis, billing units) of the job's allocation (:mod:`trainledger.money.allocation.shares`); None: skipped."""
        nt = target.node_type
        if target.by_node:
            return None, "node", None
        try:
            if target.billing is not None:
                weights, max_tres, node = target.billing
                alloc = tres(get("AllocTRES"))
                counts, reported = shares.tres_counts(alloc), shares.reported_billing(alloc)
                billed = shares.job_billing_units(counts, weights, max_tres, reported)
                if billed <= 0:
                    return self._miss(Miss(ZERO_BILLING, "AllocTRES", "the job bills 0 under the partition's "
                                           "weights", HINTS[ZERO_BILLING]), job, where)
                fr = shares.billing_share(counts, node, weights, max_tres, nodes, nt.name, reported=reported)
                return shares.text(fr), "billing", str(billed)
            fr = shares.gpu_share(gpn, nt.gpus_per_node, nt.name, "AllocTRES gres/gpu")
        except LedgerInputError as exc:
            return self._miss(Miss(TOO_MANY, "AllocTRES", str(exc), "map the job to the right node type"), job, where)
        return shares.text(fr), "gpus", None

    def _times(self, start: datetime, end: Optional[datetime], elapsed: str, job: str,
               where: str) -> Optional[tuple[datetime, Optional[datetime]]]:
        """Start and end as aware times; a DST-ambiguous one settled by ElapsedRaw where it can be."""
        zone, dst = self.zone, self.opts.dst
        a = localize(start, zone, "report", where, "Start")
        b = localize(end, zone, "report", where, "End") if end is not None else None
        if (a is None or (end is not None and b is None)) and end is not None and elapsed.isdigit():
            a, b = _by_elapsed(start, end, zone, int(elapsed), a, b)
        if a is None or (end is not None and b is None):
            if dst == "report":
                return self.receipt.skip(DST, job, where=where, fieldname="Start" if a is None else "End",
                                         detail="local time skipped or repeated by a DST change", hint=HINTS[DST])
            a = a or localize(start, zone, dst, where, "Start")
            b = b if end is None or b is not None else localize(end, zone, dst, where, "End")
        if b is not None and b < a:
            raise LedgerInputError(f"{where}: End: {b.isoformat()} is before Start {a.isoformat()}; fix the times")
        return a, b

    def _row(self, get: Any, job: str, where: str, state: str, state_text: str, status: RunStatus, target: Target,
             nodes: int, gpn: int, n_gpus: int, types: tuple[str, ...], start: datetime,
             end: Optional[datetime]) -> dict[str, Any]:
        rid = self._run_id(job, where)
        code = exit_status(get("ExitCode"))
        error = None if status in (RunStatus.succeeded, RunStatus.running) else check_text(
            f"Slurm: {state_text}" + (f" (exit {code})" if code else ""), where, "State", TEXT_LIMITS["error"])
        name = get("JobName")
        alias = name[len(ALIAS_PREFIX):] if name.startswith(ALIAS_PREFIX) else None
        slurm = {"job_id": job, "state": state_text, "partition": get("Partition"), "nodelist": get("NodeList"),
                 "gpu_type": types[0] if types else "", "cluster": get("Cluster") or self.opts.cluster}
        row = dict(id=rid, name=check_text(name, where, "JobName", TEXT_LIMITS["name"]),
                   project=check_text(get("Account"), where, "Account", TEXT_LIMITS["project"]) or None,
                   user=check_text(get("User"), where, "User", TEXT_LIMITS["user"]) or None,
                   node_type_id=target.node_type.id, offer_id=target.offer_id, nodes=nodes, gpus_per_node=gpn,
                   world_size=n_gpus or None, started_at=start, ended_at=end, heartbeat_at=end, status=status,
                   launcher="slurm", exit_code=code if status != RunStatus.running else None, error=error,
                   config={"source": "sacct", "slurm": slurm}, _merge=True, _idfield="JobID", _job=rid,
                   _alias=(alias, job, slurm["cluster"]) if alias and _valid_id(alias) else None)
        util = _usage(get("TRESUsageInAve"), get("TRESUsageInMax"), n_gpus, nodes)
        if util:
            row.update(util)
        return row

    def _run_id(self, job: str, where: str) -> str:
        try:
            return slurm_run_id(job, self.opts.cluster)
        except LedgerInputError as exc:
            raise LedgerInputError(f"{where}: {exc}") from None

    # -- steps, pending jobs, requeued attempts
    def _step(self, job: str, get: Any, where: str) -> None:
        usage = _usage(get("TRESUsageInAve"), get("TRESUsageInMax"), *self._step_gpus(get, where))
        if not usage:  # called only for steps whose usage names a GPU TRES
            return
        base = job.split(".", 1)[0]
        try:
            rid = slurm_run_id(base, self.opts.cluster)
        except LedgerInputError:
            return
        elapsed = float(get("ElapsedRaw")) if get("ElapsedRaw").isdigit() else 0.0
        self.spill.db.execute("INSERT INTO steps (job, start, elapsed, util, mem) VALUES (?, ?, ?, ?, ?)",
                              (rid, get("Start"), elapsed, usage.get("gpu_util_mean"), usage.get("peak_mem_bytes")))

    def _step_gpus(self, get: Any, where: str) -> tuple[int, int]:
        try:
            n, _ = gpus(tres(get("AllocTRES")), where)
            nodes = int(get("NNodes") or 1)
        except (LedgerInputError, ValueError):
            return 0, 1
        return n, max(1, nodes)

    def _pending(self, job: str, get: Any, line: int, where: str) -> None:
        """Kept aside: a pending job becomes a (queued) run only as the continuation of a requeued one."""
        try:
            rid = slurm_run_id(job, self.opts.cluster)  # a pending array range (123_[4-9]) is no run id
        except LedgerInputError:
            return self.receipt.skip(PENDING, job, hint=HINTS[PENDING], benign=True)
        self.receipt.skip(PENDING, job, hint=HINTS[PENDING], benign=True)
        self.spill.db.execute("INSERT OR IGNORE INTO pending (id, line, row) VALUES (?, ?, ?)",
                              (rid, line, pickle.dumps({"job": job, "name": get("JobName"), "account": get("Account"),
                                                        "user": get("User"), "where": where})))

    def pending_seen(self, job: str) -> bool:
        rid = slurm_run_id(job, self.opts.cluster)
        return self.spill.db.execute("SELECT 1 FROM pending WHERE id = ?", (rid,)).fetchone() is not None

    def _attempt(self, row: dict[str, Any], line: int) -> None:
        base = row["id"]
        rid = row["id"] = f"{base}.r{row['started_at'].astimezone(timezone.utc):%Y%m%dT%H%M%S}"
        try:
            validate_run_id(rid, "JobID (with --cluster)")
        except LedgerInputError as exc:
            raise LedgerInputError(f"{self.name}:{line}: {exc}") from None
        row["_alias"] = None
        self.spill.add(rid, line, row)
        self.spill.db.execute("INSERT OR IGNORE INTO attempts (job, id, start) VALUES (?, ?, ?)",
                              (base, rid, row["started_at"].astimezone(timezone.utc).isoformat()))

    def _duplicate(self, rid: str, line: int, row: dict, first_line: int, first: dict) -> None:
        """Two records of one job: the same record twice (counted once), or an earlier attempt that Slurm
        restarted without marking it REQUEUED (e.g. a node failure with requeue): the earlier is an attempt."""
        if row == first:
            self.receipt.skip(REPEATED, row["config"]["slurm"]["job_id"], hint=HINTS[REPEATED], benign=True)
            return
        if ATTEMPT_RE.search(rid) or row["started_at"] == first["started_at"]:
            raise LedgerInputError(f"{self.name}:{line}: JobID: {row['config']['slurm']['job_id']} appears twice "
                                   f"in the file (first at line {first_line}) with different records")
        (early, early_line), (late, late_line) = sorted([(first, first_line), (row, line)],
                                                        key=lambda x: x[0]["started_at"])
        self.spill.put(rid, late_line, late)
        self._attempt(early, early_line)
        self.spill.flush()

    # -- after the last record
    def finish(self) -> None:
        """Check that no node was held whole and shared at once, give steps' GPU usage to their jobs, then number
        requeued jobs' attempts into chains."""
        self._overlaps()
        self.spill.flush()
        db = self.spill.db
        steps = db.execute("SELECT job, start, elapsed, util, mem FROM steps ORDER BY job").fetchall()
        for job, group in itertools.groupby(steps, key=lambda r: r[0]):
            self._step_usage(job, [r[1:] for r in group])
        known = ledger_attempts(self.ctx.engine, self.opts.cluster) if self.ctx.engine is not None else {}
        jobs = {r[0] for r in db.execute("SELECT DISTINCT job FROM attempts")}
        jobs |= {job for job in known if self.spill.get(job) is not None}
        for job in sorted(jobs):
            self._chain(job, known.get(job, {}))

    def _overlaps(self) -> None:
        """A job that held a node whole (a by-node rule) overlapping a job that shared it (same node type and
        host): a one-line error naming both, before anything is written."""
        far = datetime.max.replace(tzinfo=timezone.utc)
        by_nt: dict[int, list] = {}
        for job, nt, nodelist, start, end, share in self.holds:
            for host in _hosts(nodelist):
                by_nt.setdefault(nt, []).append((job, host, start, end or far, share))
        try:
            for items in by_nt.values():
                shares.check_overlaps(items)
        except LedgerInputError as exc:
            raise LedgerInputError(f"{self.name}: {str(exc).replace('run ', 'job ')}") from None
        self.holds = []

    def _chain(self, job: str, known: dict[int, Optional[datetime]]) -> None:
        """The job's records in this input, in start order, as attempts ``job``, ``job-r1``, ... (Slurm's
        restart count, the ids the run wrapper gives them), each ``resume_of`` the one before. The first
        record's number follows the attempts the ledger already holds that started before it."""
        db = self.spill.db
        attempts = [r[0] for r in db.execute("SELECT id FROM attempts WHERE job = ? ORDER BY start", (job,))]
        rows = [(rid, *self.spill.get(rid)) for rid in attempts]
        final = self.spill.get(job)
        if final is None:
            pend = db.execute("SELECT line, row FROM pending WHERE id = ?", (job,)).fetchone()
            if pend is not None and rows:
                final = (pend[0], self._placeholder(job, rows[-1][2], pickle.loads(pend[1])))
                self.receipt.unskip(PENDING)
        if final is not None:
            rows.append((job, *final))
        first = first_attempt(known, rows[0][2]["started_at"])
        for key, _, _ in rows:
            self.spill.delete(key)
        for n, (_, line, row) in enumerate(rows, start=first):
            row["id"] = row["_job"] = slurm_attempt_id(job, n)
            row["resume_of"] = previous_attempt(job, n)
            self.spill.put(row["id"], line, row)

    def _placeholder(self, rid: str, last: dict[str, Any], pend: dict[str, Any]) -> dict[str, Any]:
        """The pending continuation of a requeued job: a queued run (no start, nothing to cost yet)."""
        row = {k: v for k, v in last.items()}
        slurm = dict(last["config"]["slurm"], state="PENDING", nodelist="")
        row.update(id=rid, status=RunStatus.queued, started_at=None, ended_at=None, heartbeat_at=None, exit_code=None,
                   error=None, gpu_util_mean=None, util_source=None, peak_mem_bytes=None, mem_kind=None,
                   config={"source": "sacct", "slurm": slurm}, _job=rid,
                   _alias=last.get("_alias"))
        name = pend.get("name") or ""
        if name.startswith(ALIAS_PREFIX) and _valid_id(name[len(ALIAS_PREFIX):]):
            row["_alias"] = (name[len(ALIAS_PREFIX):], pend["job"], slurm["cluster"])
        return row

    def _step_usage(self, job: str, steps: list[tuple]) -> None:
        chain = [job] + [r[0] for r in self.spill.db.execute("SELECT id FROM attempts WHERE job = ?", (job,))]
        rows = [(rid, *got) for rid in chain if (got := self.spill.get(rid)) is not None and got[1].get("started_at")]
        if not rows:
            return
        rows.sort(key=lambda r: r[2]["started_at"])
        for i, (rid, line, row) in enumerate(rows):
            lo = row["started_at"]
            hi = rows[i + 1][2]["started_at"] if i + 1 < len(rows) else None
            mine = [s for s in steps if _step_in(s[0], lo, hi, self.zone)]
            usage = _step_mean(mine)
            if usage and row.get("util_source") is None:
                row.update(usage)
                self.spill.put(rid, line, row)


def _valid_id(text: str) -> bool:
    try:
        validate_run_id(text)
        return True
    except LedgerInputError:
        return False


#: how much earlier than a record an attempt in the ledger must have started to be an earlier attempt
#: (a run the wrapper registered starts inside its allocation: later than sacct's Start, up to clock skew)
ATTEMPT_SKEW = timedelta(seconds=2)


def first_attempt(known: dict[int, Optional[datetime]], start: Optional[datetime]) -> int:
    """The restart number of a job's earliest record in an input: one past the last attempt the ledger
    holds that started before it (0 when none did)."""
    before = [n for n, t in known.items() if t is not None and start is not None and t < start - ATTEMPT_SKEW]
    return max(before) + 1 if before else 0


def ledger_attempts(engine: Engine, cluster: str) -> dict[str, dict[int, Optional[datetime]]]:
    """The attempts the ledger holds of every requeued Slurm job (one with a ``<job's run id>-r<N>`` run):
    job run id → {restart number: start}."""
    prefix = slurm_run_id("0", cluster)[:-1]
    pattern = re.compile(re.escape(prefix) + r"\d+(?:_\d+)?(?:\.\d+)?")
    like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%-r%"
    out: dict[str, dict[int, Optional[datetime]]] = {}
    with session_scope(engine) as s:
        for rid, started in s.execute(select(Run.id, Run.started_at).where(Run.id.like(like, escape="\\"))):
            base, n = slurm_attempt_of(rid)
            if n > 0 and pattern.fullmatch(base):
                out.setdefault(base, {})[n] = started
        bases = sorted(out)
        for i in range(0, len(bases), 500):
            for rid, started in s.execute(select(Run.id, Run.started_at).where(Run.id.in_(bases[i:i + 500]))):
                out[rid][0] = started
    return out


def _by_elapsed(start: datetime, end: datetime, zone: ZoneInfo, elapsed: int, a: Optional[datetime],
                b: Optional[datetime]) -> tuple[Optional[datetime], Optional[datetime]]:
    """The one reading of an ambiguous Start/End whose difference is the job's ElapsedRaw seconds, if exactly one."""
    starts = [a] if a is not None else readings(start, zone)[1]
    ends = [b] if b is not None else readings(end, zone)[1]
    fits = [(x, y) for x in starts for y in ends if abs((y - x).total_seconds() - elapsed) <= 1]
    return fits[0] if len(fits) == 1 else (a, b)


def _usage(ave: str, mx: str, n_gpus: int, nodes: int) -> dict[str, Any]:
    """GPU-Util (ratio) and GPU memory from ``gres/gpuutil`` (percent) and ``gres/gpumem`` of TRESUsageIn*.

    A gpuutil above 100 is read as the sum over the GPUs of a node (it is
    divided by the GPUs per node); one still above 100 is dropped (missing).
    """
    if "gres/gpu" not in ave and "gres/gpu" not in mx:
        return {}
    a, m = tres(ave), tres(mx)
    out: dict[str, Any] = {}
    raw = a.get("gres/gpuutil")
    try:
        util = float(raw) / 100 if raw not in (None, "") else None
    except ValueError:
        util = None
    if util is not None and util > 1:
        util /= max(1, n_gpus // max(1, nodes))
    if util is not None and 0 <= util <= 1:
        out.update(gpu_util_mean=util, util_source="slurm")
    mem = size_bytes(m.get("gres/gpumem") or a.get("gres/gpumem") or "")
    if mem is not None:
        out.update(peak_mem_bytes=mem, mem_kind="slurm_gres_gpumem")
    return out


def _step_in(start_text: str, lo: datetime, hi: Optional[datetime], zone: ZoneInfo) -> bool:
    if _none_time(start_text):
        return hi is None
    try:
        t = datetime.fromisoformat(start_text)
    except ValueError:
        return False
    t = readings(t, zone)[1][0] if t.tzinfo is None else t
    return t >= lo - timedelta(seconds=1) and (hi is None or t < hi)


def _step_mean(steps: list[tuple]) -> dict[str, Any]:
    """Elapsed-weighted mean GPU-Util and peak GPU memory of a job's steps (those that report them)."""
    out: dict[str, Any] = {}
    timed = [(u, max(e or 0.0, 1.0)) for _, e, u, _ in steps if u is not None]
    if timed:
        out.update(gpu_util_mean=sum(u * w for u, w in timed) / sum(w for _, w in timed), util_source="slurm")
    mems = [m for *_, m in steps if m is not None]
    if mems:
        out.update(peak_mem_bytes=max(mems), mem_kind="slurm_gres_gpumem")
    return out


def parse_sacct(lines: Iterable[str], name: str, ctx: Context, opts: ImportOptions, spill: Spill,
                receipt: Receipt) -> None:
    """A sacct ``--parsable2`` file (header line first) into the spill: the import's sacct parser."""
    it = iter(lines)
    first = next(it, None)
    if first is None or "|" not in first:
        raise LedgerInputError(f"{name}:1: header: sacct output needs {','.join(REQUIRED)}; run sacct --parsable2 "
                               f"--format {','.join(REQUIRED + OPTIONAL)}")
    parser = SacctParser(ctx, opts, spill, receipt, name)
    parser.header([f.strip() for f in first.rstrip("\r\n").split("|")])
    parser.feed(it, start_line=2)
    parser.finish()


def import_sacct(engine: Engine, path: Path | str, opts: Optional[ImportOptions] = None) -> Receipt:
    """Import a sacct ``--parsable2`` file (``-``: standard input)."""
    from trainledger.sources.imports.importer import open_input, read_lines

    opts = opts or ImportOptions(fmt="sacct")
    name = "stdin" if str(path) == "-" else Path(path).name
    with open_input(path) as fh:
        return import_lines(engine, read_lines(fh, path), name, parse_sacct, opts, "sacct")

