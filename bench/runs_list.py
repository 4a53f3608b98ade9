"""``trainledger runs list --month M`` over the 1M-run ledger: wall time of the real CLI process.

The command is run as a subprocess (the installed ``trainledger`` entry point,
``--db`` the generated ledger, an empty journal directory so no replay
happens), for the busiest month; the median wall time of several runs is
judged. Beside it: the same command over an empty ledger (the fixed cost of
starting the CLI: interpreter, imports, schema check — the ratio is against
it, informational) and ``trainledger.runs.registry.list_runs`` + ``count_runs`` in process.

Target (SPEC-less, issue #7): ≤ 1 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import Result, log, median


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "trainledger"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "trainledger.cli"]


def cli_wall(url: str, month: str, env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run([*_cli(), "runs", "list", "--month", month, "--db", url], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"trainledger runs list exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return took, proc.stderr


def in_process(url: str, month: str) -> tuple[float, float, int]:
    from trainledger.runs.registry import count_runs, list_runs
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            t0 = time.perf_counter()
            list_runs(s, month=month, limit=50)
            t1 = time.perf_counter()
            total = count_runs(s, month=month)
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1, total
    finally:
        engine.dispose()


def run(quick: bool) -> Result:
    from trainledger.store.db import make_engine

    from bench.gen import generate

    res = Result("runs_list", "`trainledger runs list --month M` (CLI process)",
                 "the same command over an empty ledger (CLI start-up; ratio informational)", None, "<=")
    n_runs, n_samples = (5_000, 50_000) if quick else (1_000_000, 10_000_000)
    repeats = 2 if quick else 5
    path, meta = generate(n_runs, n_samples)
    month = meta["busiest_month"]
    url = f"sqlite:///{path}"
    with tempfile.TemporaryDirectory(prefix="tl-bench-runs-") as tmp:
        empty = f"sqlite:///{Path(tmp) / 'empty.db'}"
        make_engine(empty).dispose()
        env = {**os.environ, "TRAINLEDGER_JOURNAL_DIR": str(Path(tmp) / "journal"), "XDG_DATA_HOME": str(Path(tmp) / "xdg")}
        env.pop("TRAINLEDGER_DB_URL", None)
        log(f"runs_list: `trainledger runs list --month {month}` × {repeats} over {n_runs:,} runs and over an empty ledger …")
        cli_wall(url, month, env)  # warm-up: page cache, .pyc
        full, empty_s = [], []
        out = ""
        for _ in range(repeats):
            t, out = cli_wall(url, month, env)
            full.append(t)
            empty_s.append(cli_wall(empty, month, env)[0])
    lst, cnt, total = in_process(url, month)
    footer = [line for line in out.splitlines() if "more of" in line][-1:] or ["(no footer line)"]
    res.ratio = median(full) / median(empty_s)
    res.measured.update({"runs": n_runs, "month": month, "runs_in_month": total, "repeats": repeats,
                         "cli_wall_s": round(median(full), 4), "cli_empty_ledger_wall_s": round(median(empty_s), 4),
                         "cli_all_s": [round(x, 4) for x in full],
                         "in_process_list_runs_s": round(lst, 4), "in_process_count_runs_s": round(cnt, 4)})
    res.extra_targets.append({"what": "CLI wall seconds", "value": round(median(full), 4), "op": "<=", "target": 1.0})
    res.target_text = "≤ 1 s"
    res.absolute = (f"CLI {median(full):.2f} s vs empty ledger {median(empty_s):.2f} s; in process list "
                    f"{lst * 1000:.0f} ms + count {cnt * 1000:.0f} ms ({total:,} runs in {month})")
    res.notes.append(f"CLI footer: {footer[0].strip()}")
    return res
