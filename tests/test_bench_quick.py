"""``python -m bench --quick`` completes and writes its JSON (no timed assertions: docs/PERFORMANCE.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEYS = ("tracking_overhead", "wrapper_overhead", "api_overhead", "ingest_sqlite", "ingest_pg", "rollup", "dashboard",
        "runs_list", "exporter", "plan_recommend", "mfu", "slurm_parse", "slurm_import", "slurm_import_1m", "goodput")


@pytest.mark.slow
def test_quick_bench_runs_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if os.environ.get("TRAINLEDGER_TEST_PG"):
        env["TRAINLEDGER_BENCH_PG"] = os.environ["TRAINLEDGER_TEST_PG"]
    skip = ["--skip", "ingest_pg"] if os.environ.get("TRAINLEDGER_SKIP_PG") == "1" and not os.environ.get("CI") else []
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json", str(out), *skip], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["quick"] is True and data["machine"]["cpus"]
    benches = data["benchmarks"]
    assert set(KEYS) <= set(benches)
    for key in KEYS:
        b = benches[key]
        if key in ("ingest_pg",) and skip:
            continue
        if key == "mfu" and b["ratio"] is None:  # no GPU here: null with the reason
            assert b["error"] is None and b["notes"] and b["notes"][0].startswith("no GPU available"), b
            continue
        assert b["error"] is None, (key, b["error"])
        assert isinstance(b["ratio"], (int, float)) and b["ratio"] > 0, (key, b)
        assert isinstance(b["passed"], bool), (key, b)
    assert "benchmark" in proc.stdout and "ratio" in proc.stdout  # the table
