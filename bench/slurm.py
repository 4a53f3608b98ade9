"""Slurm sacct import: rows/s parsed, rows/s imported on SQLite, and a 1M-row import's rate and peak RSS.

The input is synthetic ``sacct --parsable2 --duplicates`` output in the format
``trainledger slurm sync`` reads (the fields of ``trainledger.sources.imports.slurm.SYNC_FIELDS``),
shaped like a busy two-partition GPU cluster: every job has its allocation row,
``.batch`` and ``.extern`` steps and most an ``srun`` step (some with
``gres/gpuutil``); 1 % are requeued (two records), 1 % pending, 1 % running, a
few uneven GPU spreads and a partition without a mapping. About 3.3 sacct rows
per job. Three figures:

* ``slurm_parse``: phase 1 of an import (read, validate, map, spill to disk) in
  sacct rows/s (target ≥ 50,000); baseline: reading and splitting the same lines
  and nothing else (the ratio, parse time ÷ that time, is informational);
* ``slurm_import``: a whole ``import`` (both phases, the write in one
  transaction with the monthly rollup kept in step) into a SQLite ledger whose
  rollup is built, in sacct rows/s (target ≥ 20,000); baseline: the parse alone
  (ratio: import time ÷ parse time, informational);
* ``slurm_import_1m``: ``trainledger import`` of a 1,000,000-row file (~200 MB)
  as a real process: rows/s and its peak RSS (target ≤ 100 MB); baseline: the
  peak RSS of the same command importing a 10-row file (Python, SQLAlchemy and
  the CLI loaded).

Run alone: ``python -m bench --only slurm_parse,slurm_import,slurm_import_1m``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from bench import RESULTS_DIR, ROOT, Result, log, median

FIELDS = "JobID|JobName|Partition|Account|User|NodeList|NNodes|AllocTRES|ElapsedRaw|State|ExitCode|Submit|Start|End|Cluster|TRESUsageInAve|TRESUsageInMax"
RULES = [("a100", "a100-8x"), ("rtx", "rtx4090-8x")]
GEN_VERSION = 1


def _t(x: datetime) -> str:
    return x.strftime("%Y-%m-%dT%H:%M:%S")


def _job_lines(job: int, rnd: random.Random, t0: datetime) -> list[str]:
    part = rnd.choice(("a100", "a100", "rtx", "rtx", "rtx", "h200" if rnd.random() < 0.01 else "rtx"))
    gtype = {"a100": "a100", "rtx": "rtx4090", "h200": "h200"}[part]
    nodes = rnd.choice((1, 1, 1, 2, 2, 4, 8))
    gpus = nodes * 8 if rnd.random() > 0.3 else nodes * rnd.choice((1, 2, 4))
    if rnd.random() < 0.005:
        nodes, gpus = 3, 10
    start = t0 + timedelta(seconds=rnd.randrange(0, 28 * 86400))
    secs = rnd.randrange(60, 36 * 3600)
    end = start + timedelta(seconds=secs)
    r = rnd.random()
    state, end_txt, start_txt = ("COMPLETED", _t(end), _t(start))
    if r < 0.01:
        state, end_txt, start_txt, secs = "PENDING", "Unknown", "Unknown", 0
    elif r < 0.02:
        state, end_txt = "RUNNING", "Unknown"
    elif r < 0.12:
        state = rnd.choice(("FAILED", "CANCELLED by 1000", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"))
    hosts = f"{part}-[{1:02d}-{nodes:02d}]" if nodes > 1 else f"{part}-01"
    tres = f"billing={nodes * 32},cpu={nodes * 32},gres/gpu:{gtype}={gpus},gres/gpu={gpus},mem={nodes * 500}G,node={nodes}"
    user, acct = f"user{rnd.randrange(40)}", f"proj{rnd.randrange(12)}"
    head = f"|job-{job}|{part}|{acct}|{user}|{hosts if state != 'PENDING' else 'None assigned'}|{nodes}|"
    sub = _t(start - timedelta(seconds=30))
    lines = []
    if 0.12 <= r < 0.13:  # requeued once: the first attempt ran an hour
        first = start - timedelta(hours=2)
        lines.append(f"{job}{head}{tres}|3600|REQUEUED|0:0|{sub}|{_t(first)}|{_t(first + timedelta(hours=1))}|gpu1||")
    alloc = "" if state == "PENDING" else tres
    lines.append(f"{job}{head}{alloc}|{secs}|{state}|0:0|{sub}|{start_txt}|{end_txt}|gpu1||")
    if state == "PENDING":
        return lines
    usage = "cpu=00:10:00,energy=0,fs/disk=54573,mem=10712K,pages=0,vmem=219460K"
    lines.append(f"{job}.batch|batch||{acct}||{hosts.split('[')[0]}01|1|cpu=32,gres/gpu:{gtype}=8,gres/gpu=8,mem=0,node=1|"
                 f"{secs}|{state.split()[0]}|0:0|{start_txt}|{start_txt}|{end_txt}|gpu1|{usage}|{usage}")
    lines.append(f"{job}.extern|extern||{acct}||{hosts}|{nodes}|{tres}|{secs}|COMPLETED|0:0|{start_txt}|{start_txt}|{end_txt}|gpu1|energy=0|energy=0")
    if rnd.random() < 0.5:
        util = f",gres/gpumem={rnd.randrange(10000, 80000)}M,gres/gpuutil={rnd.randrange(20, 100)}" if rnd.random() < 0.3 else ""
        lines.append(f"{job}.0|python||{acct}||{hosts}|{nodes}|{tres}|{secs}|{state.split()[0]}|0:0|{start_txt}|{start_txt}|"
                     f"{end_txt}|gpu1|{usage}{util}|{usage}{util}")
    return lines


def generate(path: Path, rows: int, seed: int = 7) -> int:
    """Write about ``rows`` sacct rows (header included) to ``path``; returns the rows written."""
    rnd = random.Random(seed)
    t0 = datetime(2026, 10, 1)
    n = 0
    job = 100_000
    with open(path, "w") as fh:
        fh.write(FIELDS + "\n")
        while n < rows:
            lines = _job_lines(job, rnd, t0)
            fh.write("\n".join(lines) + "\n")
            n += len(lines)
            job += 1
    return n


def cached_file(rows: int) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"sacct-{rows}-v{GEN_VERSION}.txt"
    if not path.exists():
        log(f"slurm: generating {rows:,} sacct rows → {path}")
        tmp = path.with_suffix(".part")
        generate(tmp, rows)
        tmp.replace(path)
    return path


def _ledger(url: str) -> None:
    """A ledger with the mapping (and an a100 offer) whose rollup is built (a report has read it)."""
    from sqlmodel import Session
    from trainledger.money.facts import rollup
    from trainledger.store.catalog.presets import apply_pricing, parse_pricing
    from trainledger.store.db import make_engine, session_scope
    from trainledger.store.mappings.slurm_map import add_rule

    engine = make_engine(url)
    with session_scope(engine) as s:
        apply_pricing(s, parse_pricing('[[offer]]\nname = "a100-rent"\nnode_type = "a100-8x"\nkind = "rent_elastic"\n'
                                       'price_per_node_hour = "20"\nbilling_granularity_hours = "1"\n', where="bench"),
                      source="user", replace=True)
        for part, nt in RULES:
            add_rule(s, partition=part, node_type=nt)
    with Session(engine) as s:
        rollup.ensure(s)
        s.commit()
    engine.dispose()


def _parse_only(path: Path, url: str) -> tuple[float, int]:
    from trainledger.sources.imports.importer import ImportOptions, Receipt, Spill, load_context, open_input, read_lines
    from trainledger.sources.imports.slurm import parse_sacct
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    ctx = load_context(engine)
    opts = ImportOptions(fmt="sacct")
    receipt = Receipt(source=path.name, format="sacct")
    t0 = time.perf_counter()
    with Spill(path.name) as spill, open_input(path) as fh:
        parse_sacct(read_lines(fh, path), path.name, ctx, opts, spill, receipt)
        spill.flush()
    dt = time.perf_counter() - t0
    engine.dispose()
    return dt, receipt.rows_read


def _split_only(path: Path) -> float:
    t0 = time.perf_counter()
    n = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            n += len(line.rstrip("\n").split("|"))
    return time.perf_counter() - t0


def _import(path: Path, url: str) -> tuple[float, dict]:
    from trainledger.sources.imports.csv_import import parse_csv
    from trainledger.sources.imports.importer import ImportOptions, import_file
    from trainledger.sources.imports.slurm import parse_sacct
    from trainledger.store.db import make_engine

    engine = make_engine(url)
    t0 = time.perf_counter()
    receipt = import_file(engine, path, ImportOptions(), {"csv": parse_csv, "sacct": parse_sacct})
    dt = time.perf_counter() - t0
    engine.dispose()
    return dt, receipt.as_dict()


MEASURE = ("import resource, subprocess, sys\n"
           "code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
           "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def _process(path: Path, url: str) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a real `trainledger import` process."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "trainledger.cli", "import", str(path),
                          "--db", url], capture_output=True, text=True, cwd=ROOT, timeout=7200)
    dt = time.perf_counter() - t0
    code, rss = out.stdout.split()
    if code != "0":
        raise RuntimeError(f"trainledger import exited {code}: {out.stderr.strip()[-300:]}")
    return dt, int(rss)


def run_parse(quick: bool) -> Result:
    rows = 10_000 if quick else 300_000
    res = Result("slurm_parse", f"sacct import, phase 1 (read, validate, map, spill), {rows:,} rows",
                 "reading and splitting the same lines (ratio: times that cost, informational)", None, ">=")
    res.target_text = "≥ 50,000 rows/s"
    path = cached_file(rows)
    with tempfile.TemporaryDirectory(prefix="tl-bench-slurm-") as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        _ledger(url)
        trials = [(_split_only(path), _parse_only(path, url)) for _ in range(1 if quick else 3)]
    split = median([t[0] for t in trials])
    parse = median([t[1][0] for t in trials])
    n = trials[0][1][1]
    rate = n / parse
    res.ratio = round(parse / split, 3)
    res.measured.update(rows=n, parse_s=round(parse, 3), split_s=round(split, 3), rows_per_s=round(rate))
    res.extra_targets.append({"name": "rows_per_s", "value": rate, "op": ">=", "target": 50_000})
    res.absolute = f"{rate:,.0f} rows/s parsed ({n:,} rows in {parse:.2f} s); split only {n / split:,.0f} rows/s"
    return res


def run_import(quick: bool) -> Result:
    rows = 10_000 if quick else 300_000
    res = Result("slurm_import", f"sacct import, both phases into SQLite (rollup built), {rows:,} rows",
                 "phase 1 alone on the same file (ratio: times its time, informational)", None, ">=")
    res.target_text = "≥ 20,000 rows/s"
    path = cached_file(rows)
    with tempfile.TemporaryDirectory(prefix="tl-bench-slurm-") as tmp:
        url = f"sqlite:///{tmp}/ledger.db"
        _ledger(url)
        parse, n = _parse_only(path, url)
        dt, receipt = _import(path, url)
    rate = receipt["rows_read"] / dt
    res.ratio = round(dt / parse, 3)
    res.measured.update(rows=receipt["rows_read"], runs=receipt["imported"], import_s=round(dt, 3),
                        rows_per_s=round(rate), runs_per_s=round(receipt["imported"] / dt), skipped=receipt["skipped_rows"])
    res.extra_targets.append({"name": "rows_per_s", "value": rate, "op": ">=", "target": 20_000})
    res.absolute = (f"{rate:,.0f} rows/s imported ({receipt['rows_read']:,} rows, {receipt['imported']:,} runs in "
                    f"{dt:.1f} s: {receipt['imported'] / dt:,.0f} runs/s); parse alone {n / parse:,.0f} rows/s")
    return res


def run_1m(quick: bool) -> Result:
    rows = 20_000 if quick else 1_000_000
    res = Result("slurm_import_1m", f"`trainledger import` of {rows:,} sacct rows as a process: peak RSS",
                 "peak RSS of the same command on a 10-row file", None, "<=")
    res.target_text = "≤ 100 MB RSS" + ("" if quick else " (200 MB file)")
    path = cached_file(rows)
    with tempfile.TemporaryDirectory(prefix="tl-bench-slurm-") as tmp:
        small = Path(tmp) / "small.txt"
        with open(path) as src, open(small, "w") as dst:
            for i, line in enumerate(src):
                if i > 10:
                    break
                dst.write(line)
        _ledger(f"sqlite:///{tmp}/a.db")
        _ledger(f"sqlite:///{tmp}/b.db")
        _, base = _process(small, f"sqlite:///{tmp}/a.db")
        dt, peak = _process(path, f"sqlite:///{tmp}/b.db")
    mb = peak / 1024
    res.ratio = round(peak / base, 3)
    size = path.stat().st_size / 1e6
    res.measured.update(rows=rows, file_mb=round(size, 1), seconds=round(dt, 1), rows_per_s=round(rows / dt),
                        peak_rss_mb=round(mb, 1), base_rss_mb=round(base / 1024, 1))
    res.extra_targets.append({"name": "peak_rss_mb", "value": mb, "op": "<=", "target": 100})
    res.absolute = (f"{rows:,} rows ({size:.0f} MB) in {dt:.0f} s = {rows / dt:,.0f} rows/s; peak RSS {mb:.0f} MB "
                    f"(10-row file: {base / 1024:.0f} MB)")
    return res


if __name__ == "__main__":  # python -m bench.slurm ROWS: generate a file and print its path
    print(cached_file(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
    os._exit(0)
