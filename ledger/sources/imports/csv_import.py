"""Our runs CSV (``trainledger import runs.csv``): the header, one finished run a row, validated, and the
share of each node a row held. The import itself (spill, receipt, write) is :mod:`trainledger.sources.imports.importer`.

The format (header row, any column order)::

    id,name,project,user,node_type,offer,nodes,gpus_per_node,start,end,status,
    strategy,tokens,gpu_util_mean,mfu,final_loss,launcher,gpu_fraction,mig_profile,exclusive

Required: name, node_type (or ``--node-type``), nodes, start, end, status.
Timestamps are ISO 8601; without an offset they are local times in ``--tz``
(default: the ledger's display time zone). A local time that a DST change
skips (02:30 on the spring-forward night) or repeats (the fall-back hour) is
refused with the row named, unless ``--dst earliest|latest`` says which
instant to take (:func:`trainledger.sources.imports.localtime.localize`).

**The share of each node** a row held (``run.share``, :mod:`trainledger.money.allocation.shares`), as the
wrapper and Slurm sources record it:

* ``gpus_per_node`` below the node type's GPUs: GPUs held ÷ the node type's GPUs (2 of 8: 1/4 of the node);
  absent, or all of them: the whole node, as before;
* ``gpu_fraction`` (0 < f ≤ 1, e.g. ``0.25`` or ``1/3``): each GPU held is shared by time-slicing and the row
  holds that fraction of it, as Kubernetes GPU sharing and Run:ai record it: ``gpus_per_node`` × f ÷ the node
  type's GPUs (``gpus_per_node`` defaults to 1 here: one GPU's fraction);
* ``mig_profile`` (e.g. ``1g.10gb``, ``data/mig_profiles.toml``, as the wrapper's ``--mig-profile``):
  ``gpus_per_node`` MIG slices of that profile (default 1), their compute slices ÷ 7 of a GPU ÷ the node
  type's GPUs;
* ``exclusive`` (``true``/``false``, ``yes``/``no``, ``1``/``0``): the row held the whole node, whatever its GPUs.

A fraction together with a MIG profile, either with ``exclusive``, a fraction outside (0, 1], a profile the
node type's GPU model lacks and more than the node holds are refused with the row and column named.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy.engine import Engine
from trainledger.errors import LedgerInputError
from trainledger.money.allocation import shares
from trainledger.sources.imports.importer import (
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
    open_input,
    parse_time,
    read_lines,
    to_int,
)
from trainledger.store.ids import validate_run_id
from trainledger.store.models import RunStatus

CSV_REQUIRED = ["name", "nodes", "start", "end", "status"]
CSV_OPTIONAL = ["id", "project", "user", "node_type", "offer", "gpus_per_node", "strategy", "tokens",
                "gpu_util_mean", "mfu", "final_loss", "launcher", "gpu_fraction", "mig_profile", "exclusive"]
FINISHED = {RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled, RunStatus.crashed}
#: ``exclusive`` values (any case); empty is false
YES, NO = ("true", "yes", "1"), ("false", "no", "0", "")
#: a GPU fraction as written: a decimal (0.25, .5, 1) or N/D (1/3)
FRACTION_RE = re.compile(r"(\d+(\.\d*)?|\.\d+|\d+/\d+)")
#: the finest fraction taken (6 decimals, or N/D with D up to a million): the share stays a short exact "N/D"
MAX_DENOMINATOR = 1_000_000
#: a share's basis for a time-sliced (fractional) GPU; its GPU-hours are its fraction of the GPUs, as a MIG slice's
FRACTION_BASIS = "gpu_fraction"


# --- values ----------------------------------------------------------------------------------------

def _ratio(text: str, where: str, fieldname: str) -> Optional[float]:
    if text is None or text.strip() == "":
        return None
    try:
        v = float(text)
    except ValueError:
        raise LedgerInputError(f"{where}: {fieldname}: expected a ratio between 0 and 1, got {text!r}") from None
    # NaN fails the range check below
    if not 0 <= v <= 1:
        raise LedgerInputError(f"{where}: {fieldname}: must be a ratio between 0 and 1 (e.g. 0.85 for 85%), got {text}")
    return v


def _finite(text: Optional[str], where: str, fieldname: str) -> Optional[float]:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise LedgerInputError(f"{where}: {fieldname}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise LedgerInputError(f"{where}: {fieldname}: expected a finite number, got {text!r}")
    return value


def _flag(text: Optional[str], where: str, fieldname: str) -> bool:
    value = (text or "").lower()
    if value in YES:
        return True
    if value in NO:
        return False
    shown = text if len(text) <= 40 else text[:40] + "..."
    raise LedgerInputError(f"{where}: {fieldname}: expected true or false (yes/no, 1/0), got {shown!r}")


def gpu_fraction(text: Optional[str], where: str) -> Optional[Fraction]:
    """The ``gpu_fraction`` of a row, exact: 0 < f ≤ 1 (None: the column is empty)."""
    if not text:
        return None
    shown = text if len(text) <= 40 else text[:40] + "..."
    fr = None
    if FRACTION_RE.fullmatch(text) and len(text) <= 40:
        try:
            fr = Fraction(text)
        except ZeroDivisionError:  # N/0
            fr = None
    if fr is None or not 0 < fr <= 1:
        raise LedgerInputError(f"{where}: gpu_fraction: the share of each GPU must be above 0 and at most 1 (e.g. 0.25 "
                               f"or 1/3), got {shown!r}; leave it empty for whole GPUs")
    if fr.denominator > MAX_DENOMINATOR:
        raise LedgerInputError(f"{where}: gpu_fraction: {shown!r} is finer than 6 decimals (or N/D with D up to "
                               "1,000,000); round it")
    return fr


# --- the share of each node ------------------------------------------------------------------------

def row_share(rec: dict[str, str], nt: NodeTypeInfo, where: str) -> tuple[int, Optional[str], Optional[str]]:
    """(gpus_per_node, share, basis) of a CSV row (module docstring): the whole node (share None) unless the row
    says it held a part of it."""
    frac = gpu_fraction(rec.get("gpu_fraction"), where)
    mig = rec.get("mig_profile") or ""
    exclusive = _flag(rec.get("exclusive"), where, "exclusive")
    if frac is not None and mig:
        raise LedgerInputError(f"{where}: gpu_fraction: a row holds a fraction of each GPU or MIG slices "
                               f"({mig}), not both; clear gpu_fraction or mig_profile")
    sliced = "gpu_fraction" if frac is not None else "mig_profile" if mig else None
    if exclusive and sliced:
        raise LedgerInputError(f"{where}: {sliced}: an exclusive row held the whole node, not a part of a GPU; "
                               f"clear {sliced} or exclusive")
    given = rec.get("gpus_per_node")
    gpn = to_int(given, where, "gpus_per_node", 1) if given else 1 if sliced else nt.gpus_per_node
    if sliced and nt.gpus_per_node <= 0:
        raise LedgerInputError(f"{where}: {sliced}: node type {nt.name} has no GPUs; clear {sliced} or give the "
                               "row's GPU node type")
    if gpn > nt.gpus_per_node * (7 if mig else 1):  # MIG: slices, at most 7 a GPU (mig_share bounds their sum)
        raise LedgerInputError(f"{where}: gpus_per_node: {gpn} exceeds the {nt.gpus_per_node} GPUs of node type {nt.name}"
                               + (" (MIG slices: 7 a GPU at most)" if mig else "") + "; fix the row or pass another --node-type")
    if exclusive:
        return gpn, None, "exclusive"
    if mig:
        try:
            fr = shares.mig_share([mig] * gpn, nt.gpu_model, nt.gpus_per_node, nt.name, "mig_profile")
        except LedgerInputError as exc:
            raise LedgerInputError(f"{where}: {exc}") from None
        return gpn, shares.text(fr), f"mig:{mig}"
    if frac is not None and frac < 1:
        return gpn, shares.text(Fraction(gpn) * frac / nt.gpus_per_node), FRACTION_BASIS
    if given or frac is not None:  # whole GPUs (a fraction of 1 is a whole GPU)
        return gpn, shares.text(shares.gpu_share(gpn, nt.gpus_per_node, nt.name, "gpus_per_node")), "gpus"
    return gpn, None, None  # nothing said: the whole node, as every CSV row before shares


# --- our CSV ---------------------------------------------------------------------------------------

def _check_csv_header(fieldnames: Optional[list[str]], name: str) -> None:
    if fieldnames is None:
        raise LedgerInputError(f"{name}:1: header: the file is empty; expected a header row with {','.join(CSV_REQUIRED)}")
    fields = [f.strip() for f in fieldnames]
    twice = sorted({f for f in fields if fields.count(f) > 1})
    if twice:
        raise LedgerInputError(f"{name}:1: header: column {twice[0]!r} appears twice")
    unknown = [f for f in fields if f not in CSV_REQUIRED + CSV_OPTIONAL]
    if unknown:
        raise LedgerInputError(f"{name}:1: header: unknown column {unknown[0]!r}; columns are {','.join(CSV_REQUIRED + CSV_OPTIONAL)}")
    missing = [f for f in CSV_REQUIRED if f not in fields]
    if missing:
        raise LedgerInputError(f"{name}:1: header: missing column {missing[0]!r}; required: {','.join(CSV_REQUIRED)}")


def _row_id(*parts: Any) -> str:
    return "csv-" + hashlib.sha1("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def parse_csv(lines: Iterable[str], name: str, ctx: Context, opts: ImportOptions, spill: Spill, receipt: Receipt) -> None:
    """Our runs CSV into the spill: a header with :data:`CSV_REQUIRED` (+ :data:`CSV_OPTIONAL`) columns,
    one finished run a row; any bad row refuses the file."""
    tz = opts.tz or ctx.display_tz
    try:
        reader = csv.DictReader(lines)
        _check_csv_header(reader.fieldnames, name)
        for lineno, raw in enumerate(reader, start=2):
            if None in raw:
                raise LedgerInputError(f"{name}:{lineno}: more fields than the header has columns")
            rec = {k.strip(): (v or "").strip() for k, v in raw.items()}
            if not any(rec.values()):
                continue
            receipt.rows_read += 1
            row = _csv_row(rec, f"{name}:{lineno}", ctx, opts, tz)
            spill.add(row["id"], lineno, row)
        spill.flush()
    except csv.Error as exc:  # e.g. a field over csv.field_size_limit(), a NUL byte
        raise LedgerInputError(f"{name}: not valid CSV: {exc}") from None


def _csv_times(rec: dict[str, str], where: str, tz: ZoneInfo, dst: str) -> tuple[datetime, datetime]:
    start = localize(parse_time(rec["start"], where, "start"), tz, dst, where, "start")
    end = localize(parse_time(rec["end"], where, "end"), tz, dst, where, "end")
    if end < start:
        raise LedgerInputError(f"{where}: end: {end.isoformat()} is before start {start.isoformat()}; fix the times")
    return start, end


def _csv_status(value: str, where: str) -> RunStatus:
    try:
        status = RunStatus(value.lower())
    except ValueError:
        raise LedgerInputError(f"{where}: status: expected one of {', '.join(s.value for s in FINISHED)}, got {value!r}") from None
    if status not in FINISHED:
        raise LedgerInputError(f"{where}: status: import takes finished runs ({', '.join(s.value for s in FINISHED)}), got {status.value!r}")
    return status


def _csv_row(rec: dict[str, str], where: str, ctx: Context, opts: ImportOptions, tz: ZoneInfo) -> dict[str, Any]:
    """One CSV record, validated, as the fields of a run."""
    nt = ctx.node_type(rec.get("node_type"), where, opts.node_type)
    nodes = to_int(rec["nodes"], where, "nodes", 1, MAX_NODES)
    gpn, share, basis = row_share(rec, nt, where)
    start, end = _csv_times(rec, where, tz, "refuse" if opts.dst == "report" else opts.dst)  # our CSV: refused
    status = _csv_status(rec["status"], where)
    if not rec["name"]:
        raise LedgerInputError(f"{where}: name: empty; give the run a name")
    for key in ("name", "project", "user", "id", "strategy", "launcher"):
        check_text(rec.get(key) or "", where, key, TEXT_LIMITS[key])
    tokens = to_int(rec["tokens"], where, "tokens") if rec.get("tokens") else None
    final_loss = _finite(rec.get("final_loss"), where, "final_loss")
    if rec.get("id"):
        rid = validate_run_id(rec["id"], f"{where}: id")
    else:
        rid = _row_id(rec["name"], nt.name, nodes, start.isoformat(), end.isoformat())
    return dict(id=rid, name=rec["name"], project=rec.get("project") or None, user=rec.get("user") or None,
                node_type_id=nt.id, offer_id=ctx.offer(rec.get("offer") or opts.offer, nt, where), nodes=nodes,
                gpus_per_node=gpn, world_size=nodes * gpn, started_at=start, ended_at=end,
                heartbeat_at=end, status=status, launcher=rec.get("launcher") or "import",
                strategy=rec.get("strategy") or "", tokens=tokens,
                gpu_util_mean=_ratio(rec.get("gpu_util_mean", ""), where, "gpu_util_mean"),
                mfu=_ratio(rec.get("mfu", ""), where, "mfu"), final_loss=final_loss, share=share, share_basis=basis)


def import_csv(engine: Engine, path: Path | str, opts: Optional[ImportOptions] = None) -> Receipt:
    """Import our runs CSV from ``path`` (``-``: standard input)."""
    opts = opts or ImportOptions()
    name = "stdin" if str(path) == "-" else Path(path).name
    with open_input(path) as fh:
        return import_lines(engine, read_lines(fh, path), name, parse_csv, opts, "csv")
