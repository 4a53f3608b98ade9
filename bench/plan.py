"""``trainledger plan recommend`` over ≥ 10,000 candidate plans: wall time of the real CLI process.

The seed scenario (Llama-2-70B, 2T tokens, every rtx4090 offer, 1..64 nodes,
seven strategies × tp × pp × micro-batch × recompute: 73,632 candidate plans
= 24,544 layouts × 3 offers) is run as a subprocess against a fresh ledger;
the median wall time of several runs is judged. Beside it: ``trainledger
pricing list`` on the same ledger (the fixed cost of starting the CLI — the
ratio is against it, informational) and ``trainledger.runs.plan.recommend`` in
process, with its time per candidate.

Target (issue #19): ≤ 2 s for ≥ 10,000 candidates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import Result, log, median

ARGS = ["plan", "recommend", "--model", "llama2-70b", "--tokens", "2e12", "--json"]


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "trainledger"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trainledger.cli"]


def cli_wall(args: list[str], url: str, env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([*_cli(), *args, "--db", url], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=600)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"trainledger {args[0]} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return took, proc.stdout


def in_process(url: str) -> tuple[float, dict]:
    from trainledger.runs.plan import RecommendRequest, recommend
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            t0 = time.perf_counter()
            out = recommend(s, RecommendRequest(model="llama2-70b", tokens=2e12))
            return time.perf_counter() - t0, out
    finally:
        engine.dispose()


def run(quick: bool) -> Result:
    from trainledger.store.db import make_engine

    res = Result("plan_recommend", "`trainledger plan recommend` (seed scenario, CLI process)",
                 "`trainledger pricing list` on the same ledger (CLI start-up; ratio informational)", None, "<=")
    repeats = 1 if quick else 5
    with tempfile.TemporaryDirectory(prefix="tl-bench-plan-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        make_engine(url).dispose()
        env = {**os.environ, "TRAINLEDGER_JOURNAL_DIR": str(Path(tmp) / "journal"), "XDG_DATA_HOME": str(Path(tmp) / "xdg")}
        env.pop("TRAINLEDGER_DB_URL", None)
        log(f"plan_recommend: `trainledger {' '.join(ARGS)}` × {repeats} …")
        cli_wall(ARGS, url, env)  # warm-up: page cache, .pyc
        full, start = [], []
        out = "{}"
        for _ in range(repeats):
            t, out = cli_wall(ARGS, url, env)
            full.append(t)
            start.append(cli_wall(["pricing", "list"], url, env)[0])
        took, _ = in_process(url)
    counts = json.loads(out)["counts"]
    res.ratio = median(full) / median(start)
    res.measured.update({"candidates": counts["candidates"], "layouts_evaluated": counts["plans_evaluated"],
                         "kept": counts["kept"], "repeats": repeats, "cli_wall_s": round(median(full), 4),
                         "cli_start_up_s": round(median(start), 4), "cli_all_s": [round(x, 4) for x in full],
                         "in_process_s": round(took, 4),
                         "in_process_us_per_candidate": round(took / counts["candidates"] * 1e6, 2)})
    res.extra_targets.append({"what": "CLI wall seconds", "value": round(median(full), 4), "op": "<=", "target": 2.0})
    res.extra_targets.append({"what": "candidates", "value": counts["candidates"], "op": ">=", "target": 10_000})
    res.target_text = "≤ 2 s, ≥ 10k candidates"
    res.absolute = (f"CLI {median(full):.2f} s vs start-up {median(start):.2f} s; in process {took:.2f} s for "
                    f"{counts['candidates']:,} candidates ({counts['plans_evaluated']:,} layouts)")
    return res
