"""Record one run of tests/stress.sh: counts from pytest's JUnit XML, time, load; print a one-line summary.

    python tests/stress_record.py OUT.json --run I --times N --rc RC --seconds START END --junit RUN.xml
        --loads LOADFILE --hogs K --hog-kind KIND --workers W -- PYTEST ARGS...

OUT.json holds every run so far (rewritten after each run, so an interrupted series keeps what it did).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path


def junit_counts(path: Path) -> dict:
    """passed/failed/errors/skipped summed over the XML's test suites (zeros when pytest wrote none)."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    if not path.exists():
        return counts
    root = ET.parse(path).getroot()
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        tests, failures = int(suite.get("tests", 0)), int(suite.get("failures", 0))
        errors, skipped = int(suite.get("errors", 0)), int(suite.get("skipped", 0))
        counts["failed"] += failures
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += tests - failures - errors - skipped
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--run", type=int, required=True)
    p.add_argument("--times", type=int, required=True)
    p.add_argument("--rc", type=int, required=True)
    p.add_argument("--seconds", type=float, nargs=2, required=True, metavar=("START", "END"))
    p.add_argument("--junit", type=Path, required=True)
    p.add_argument("--loads", type=Path, required=True)
    p.add_argument("--hogs", type=int, required=True)
    p.add_argument("--hog-kind", required=True)
    p.add_argument("--workers", required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    a.pytest_args = argv[cut + 1:]
    loads = [float(x) for x in a.loads.read_text().split()] if a.loads.exists() else []
    run = {"run": a.run, "rc": a.rc, **junit_counts(a.junit), "seconds": round(a.seconds[1] - a.seconds[0], 1),
           "load_1m_mean": round(sum(loads) / len(loads), 2) if loads else None,
           "load_1m_max": max(loads) if loads else None,
           "ended_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    doc = json.loads(a.out.read_text()) if a.out.exists() else {
        "pytest_args": a.pytest_args, "times": a.times, "hogs": a.hogs, "hog_kind": a.hog_kind,
        "workers": a.workers, "cores": os.cpu_count(), "host": platform.node(), "runs": []}
    doc["runs"].append(run)
    doc["all_passed"] = all(r["rc"] == 0 for r in doc["runs"])
    doc["passed_runs"] = sum(r["rc"] == 0 for r in doc["runs"])
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    verdict = "PASS" if a.rc == 0 else f"FAIL (rc {a.rc})"
    print(f"stress run {a.run}/{a.times}: {verdict}: {run['passed']} passed, {run['failed']} failed, "
          f"{run['errors']} errors, {run['skipped']} skipped in {run['seconds']:.0f} s; {a.hogs} {a.hog_kind} hog(s), "
          f"load 1m mean {run['load_1m_mean']} max {run['load_1m_max']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
