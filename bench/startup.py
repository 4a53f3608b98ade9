"""Start-up of the command line, side by side in one run (``python -m bench --only cli_start``).

Four commands, interleaved round by round so that a change in the machine's load hits all of them alike:

* ``python -c pass``: the interpreter alone, the floor;
* ``trainledger --help``: the CLI's imports and its help;
* ``trainledger run --quiet -- true``: the run wrapper around a command that does nothing, recording it
  into a SQLite ledger (start, end, the run row);
* ``true``: that command bare.

Targets (issue #35): ``--help`` and the wrapper's added wall time (wrapped ``true`` − bare ``true``) each
within 0.5 s of ``python -c pass``. The ratio shown is the wrapper's added time ÷ the interpreter's.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT, Result, log

MARGIN_S = 0.5


def _wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                   timeout=600)
    return time.perf_counter() - t0


def _commands(work: Path) -> dict[str, list[str]]:
    exe = Path(sys.executable).with_name("trainledger")
    cli = [str(exe)] if exe.exists() else [sys.executable, "-m", "trainledger.cli"]
    db_url = f"sqlite:///{work / 'ledger.db'}"
    return {"pass": [sys.executable, "-c", "pass"], "help": [*cli, "--help"],
            "wrapped": [*cli, "run", "--quiet", "--db", db_url, "--node-type", "rtx4090-8x", "--project", "bench",
                        "--", "true"],
            "bare": [shutil.which("true") or "/bin/true"]}


def run(quick: bool) -> Result:
    res = Result("cli_start", "CLI start: `trainledger --help` and `trainledger run -- true` (SQLite ledger)",
                 "python -c pass; bare `true`, interleaved", None, "<=")
    res.target_text = f"each ≤ python -c pass + {MARGIN_S} s"
    rounds = 1 if quick else 9  # quick: a run-through (the suite runs it), not a measurement
    with tempfile.TemporaryDirectory(prefix="tl-bench-cli-") as tmp:
        work = Path(tmp)
        # as installed from the wheel: pip writes the bytecode, so the warm-up run may write it here too
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(XDG_DATA_HOME=str(work / "xdg"), XDG_CONFIG_HOME=str(work / "xdg-config"),
                   TRAINLEDGER_JOURNAL_DIR=str(work / "journal"))
        cmds = _commands(work)
        _wall(cmds["wrapped"], env)  # the ledger's schema and the bytecode, once, outside the rounds
        _wall(cmds["help"], env)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for i in range(rounds):
            log(f"cli start: round {i + 1}/{rounds}", progress=True)
            for key, cmd in cmds.items():
                times[key].append(_wall(cmd, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    added = med["wrapped"] - med["bare"]
    res.ratio = added / med["pass"]
    res.extra_targets += [
        {"name": "--help − python -c pass (s)", "value": med["help"] - med["pass"], "target": MARGIN_S, "op": "<="},
        {"name": "wrapper's added time − python -c pass (s)", "value": added - med["pass"], "target": MARGIN_S,
         "op": "<="}]
    res.measured.update({f"{k}_s": v for k, v in times.items()}, **{f"{k}_median_s": v for k, v in med.items()},
                        wrapper_added_s=added, rounds=rounds)
    res.absolute = (f"python -c pass {med['pass']:.3f} s; --help {med['help']:.3f} s; run -- true {med['wrapped']:.3f} s "
                    f"vs true {med['bare']:.3f} s (adds {added:.3f} s); medians of {rounds}")
    return res
