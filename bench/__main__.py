"""``python -m bench [--quick] [--json FILE] [--only KEYS] [--skip KEYS]``: run the benchmarks, print the table.

Every figure is a ratio measured in this run against its baseline (absolute
times beside it) with pass/fail against SPEC §11. ``--quick`` runs a small
version of everything (well under a minute once its ledgers are cached). The
JSON (default ``bench/results/latest.json``) holds every figure, the machine
and the date. A benchmark that fails to run is recorded with its error (ratio
null) and the others still run; the exit status is 0 unless the harness
itself breaks. See docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

from bench import RESULTS_DIR, ROOT, Result, log

KEYS = ("tracking_overhead", "wrapper_overhead", "wrapper_start", "api_overhead", "ingest_sqlite", "ingest_pg", "rollup",
        "dashboard", "runs_list", "exporter", "plan_recommend", "mfu", "slurm_parse", "slurm_import", "slurm_import_1m",
        "goodput", "cli_start")


def _mfu(quick: bool) -> Result:
    res = Result("mfu", "MFU, ~1B shape, one GPU, bf16 (python -m bench.mfu)",
                 "peak bf16 TFLOPs of the detected GPU (catalog)", 0.45, ">=")
    res.target_text = "≥ 45% (goal, H100/H200)"
    with tempfile.TemporaryDirectory(prefix="tl-bench-mfu-") as tmp:
        out = Path(tmp) / "mfu.json"
        cmd = [sys.executable, "-m", "bench.mfu", "--steps", "10" if quick else "30", "--json", str(out)]
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"bench.mfu exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}")
        data = json.loads(out.read_text())
    res.measured.update({k: v for k, v in data.items() if k != "reason"})
    res.ratio = data.get("mfu")
    if data.get("reason"):
        res.notes.append(data["reason"])
    if res.ratio is None:
        res.absolute = data.get("reason") or "n/a"
    else:
        res.absolute = (f"{data['tokens_per_s']:,.0f} tokens/s, {data['achieved_tflops']:.0f} of "
                        f"{data['peak_bf16_tflops']:.0f} TFLOPs ({data['device']})")
    return res


def _runner(key: str) -> Callable[[bool], Result]:
    if key == "mfu":
        return _mfu
    import importlib

    if key.startswith("slurm_"):
        from bench import slurm

        return {"slurm_parse": slurm.run_parse, "slurm_import": slurm.run_import, "slurm_import_1m": slurm.run_1m}[key]

    module, _, fn = {"tracking_overhead": "bench.overhead", "wrapper_overhead": "bench.capture:run_wrapper",
                     "wrapper_start": "bench.capture:run_wrapper_start",
                     "api_overhead": "bench.capture:run_api", "ingest_sqlite": "bench.ingest",
                     "ingest_pg": "bench.ingest_pg", "rollup": "bench.rollup", "dashboard": "bench.dashboard",
                     "runs_list": "bench.runs_list", "exporter": "bench.exporter", "plan_recommend": "bench.plan",
                     "goodput": "bench.goodput", "cli_start": "bench.startup"}[key].partition(":")
    return getattr(importlib.import_module(module), fn or "run")


def calibrate() -> float:
    """Seconds for a fixed pure-Python loop: how loaded the machine was (≈0.3-0.5 s on an idle core)."""
    t0 = time.perf_counter()
    s = 0
    for i in range(5_000_000):
        s += i
    return round(time.perf_counter() - t0, 3)


def fmt_ratio(r: Result) -> str:
    if r.ratio is None:
        return "n/a"
    if r.key == "mfu":
        return f"{r.ratio:.1%}"
    return f"{r.ratio:.3f}"


def verdict(r: Result) -> str:
    if r.error:
        return "skipped" if r.error.startswith("skipped") else "ERROR"
    if r.passed is None:
        return "n/a"
    return "pass" if r.passed else "FAIL"


def table(results: list[Result]) -> str:
    rows = [("benchmark", "baseline", "target", "ratio", "absolute", "result")]
    for r in results:
        rows.append((r.key, r.baseline, r.target_text, fmt_ratio(r), r.error or r.absolute, verdict(r)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    widths[1] = min(widths[1], 44)
    widths[4] = min(widths[4], 90)
    lines = []
    for j, row in enumerate(rows):
        cells = [str(c) if len(str(c)) <= widths[i] else str(c)[: widths[i] - 1] + "…" for i, c in enumerate(row)]
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small version of everything (well under a minute once cached)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here (default bench/results/latest.json)")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(KEYS)}")
    ap.add_argument("--skip", default="", help="comma-separated benchmarks to leave out (recorded as skipped)")
    a = ap.parse_args(argv)
    only = [k.strip() for k in a.only.split(",")] if a.only else list(KEYS)
    skip = {k.strip() for k in a.skip.split(",") if k.strip()}
    unknown = [k for k in [*only, *skip] if k not in KEYS]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; use {', '.join(KEYS)}")
    started = time.perf_counter()
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
               "load_avg_start": [round(x, 2) for x in os.getloadavg()], "calibration_loop_s_start": calibrate()}
    log(f"bench: {'quick' if a.quick else 'full'} run on {machine['cpus']} CPUs, load {machine['load_avg_start']}, "
        f"calibration loop {machine['calibration_loop_s_start']} s")
    results: list[Result] = []
    for key in only:
        if key in skip:
            r = Result(key, key, "", None, "<=")
            r.error = "skipped (--skip)"
            results.append(r)
            continue
        t0 = time.perf_counter()
        try:
            r = _runner(key)(a.quick)
        except Exception as exc:  # record and go on: one broken benchmark must not hide the others
            traceback.print_exc(file=sys.stderr)
            r = Result(key, key, "", None, "<=")
            r.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        r.seconds = round(time.perf_counter() - t0, 2)
        log(f"bench: {key}: {fmt_ratio(r)} {verdict(r)} ({r.seconds:.1f} s)")
        results.append(r)
    machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    machine["calibration_loop_s_end"] = calibrate()
    total = round(time.perf_counter() - started, 1)
    print(table(results))
    for r in results:
        for note in r.notes:
            print(f"  {r.key}: {note}")
    print(f"\n{'quick' if a.quick else 'full'} run: {total} s on {machine['cpus']} CPUs "
          f"(load {machine['load_avg_start']} → {machine['load_avg_end']})")
    payload = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick": a.quick, "total_s": total,
               "machine": machine, "benchmarks": {r.key: r.to_dict() for r in results}}
    out = a.json or (RESULTS_DIR / ("latest-quick.json" if a.quick else "latest.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str, ensure_ascii=False) + "\n")
    log(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
