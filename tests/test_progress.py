"""Progress bars (issue 35, part 4): real ``trainledger`` processes with standard error on a real pseudo-terminal.

Standard output is a pipe throughout: it holds the command's result and nothing else. On the terminal the bar
shows its description and the exact count of items done; with standard error a pipe nothing at all is written
there; ``TRAINLEDGER_NO_PROGRESS=1``, ``--no-progress`` and ``--quiet`` (``progress.set_enabled(False)``) draw nothing;
``NO_COLOR`` draws the bar without a single SGR (colour or style) sequence. The output is read until the process
exits: no sleeps, nothing timed.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import selectors
import struct
import subprocess
import sys
import termios
from datetime import datetime, timedelta
from pathlib import Path

import pytest

#: real `trainledger` processes on a pseudo-terminal, each doing the long work it draws (the demo, imports, a
#: chargeback): the full suite's, not the day-to-day tier's (issue 38: the fast tier within 3 minutes)
pytestmark = pytest.mark.slow

HEADER = "id,name,project,user,node_type,nodes,start,end,status\n"
ROWS = 3000
#: the pieces of cursor control and styling that a terminal interprets (CSI ... letter), and SGR among them
CSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
SGR = re.compile(rb"\x1b\[[0-9;]*m")
#: what the environment may hold that changes how rich draws: the tests set their own
RICH_ENV = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM",
            "TRAINLEDGER_NO_PROGRESS", "CLICOLOR_FORCE")
NOW = "2026-06-01T00:00:00Z"


def _csv(path: Path, n: int = ROWS) -> Path:
    """``n`` finished runs of three projects, one every 37 minutes from 2026-01-01 (into March)."""
    t0 = datetime(2026, 1, 1)
    with open(path, "w") as fh:
        fh.write(HEADER)
        for i in range(n):
            start = t0 + timedelta(minutes=37 * i)
            fh.write(f"r-{i},run {i},p{i % 3},u{i % 5},rtx4090-8x,{1 + i % 4},{start.isoformat()},"
                     f"{(start + timedelta(minutes=90)).isoformat()},succeeded\n")
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RICH_ENV}
    return {**env, "TERM": "xterm-256color", "COLUMNS": "200", **extra}


def _argv(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "trainledger.cli", *args]


def on_pty(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """Run ``trainledger ARGS`` with standard error on a new pseudo-terminal (200 columns) and standard output a
    pipe; read both until the process has exited and closed them. Returns (exit status, stdout, terminal bytes)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    try:
        proc = subprocess.Popen(_argv(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                                env=env or _env())
    finally:
        os.close(slave)
    out, term = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    sel.register(master, selectors.EVENT_READ, term)
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    while sel.get_map():
        for key, _ in sel.select():
            try:
                chunk = os.read(key.fd, 65536)
            except OSError:  # EIO: every end of the terminal's slave side is closed (the process exited)
                chunk = b""
            if chunk:
                key.data.extend(chunk)
            else:
                sel.unregister(key.fileobj)
    sel.close()
    os.close(master)
    proc.stdout.close()
    return proc.wait(), out.decode(), bytes(term)


def on_pipes(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(args), stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env or _env())


def lines(term: bytes) -> list[str]:
    """What the terminal shows, line by line as drawn (cursor control and styling removed)."""
    text = CSI.sub(b"", term).decode("utf-8", "replace")
    return [x.strip() for x in re.split(r"[\r\n]+", text) if x.strip()]


def last(term: bytes, description: str) -> str:
    """The bar line of ``description`` as last drawn."""
    drawn = [x for x in lines(term) if x.startswith(description)]
    assert drawn, f"no bar {description!r} in {lines(term)!r}"
    return drawn[-1]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> str:
    """A ledger with the :data:`ROWS` runs of :func:`_csv` (January to March 2026), imported through pipes."""
    base = tmp_path_factory.mktemp("progress")
    url = f"sqlite:///{base / 'ledger.db'}"
    r = on_pipes(["import", str(_csv(base / "runs.csv")), "--db", url, "--json"])
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["imported"] == ROWS, r.stderr
    return url


# --- import --------------------------------------------------------------------------------------------------

def test_import_draws_reading_and_writing_bars_with_exact_counts(tmp_path):
    f = _csv(tmp_path / "runs.csv")
    code, out, term = on_pty(["import", str(f), "--db", f"sqlite:///{tmp_path / 'l.db'}", "--json"])
    assert code == 0, term
    receipt = json.loads(out)  # standard output is the receipt, whole and alone
    assert (receipt["rows_read"], receipt["imported"], receipt["skipped_rows"]) == (ROWS, ROWS, 0)
    assert "3,000/3,000 rows" in last(term, "reading runs.csv")  # the total is known once the file is read
    final = last(term, "writing runs.csv")
    assert "3,000/3,000 rows" in final and "rows/s" in final and re.search(r"in \d+:\d\d:\d\d$", final)
    assert SGR.search(term)  # coloured (see the NO_COLOR test)


def test_import_writes_nothing_to_a_stderr_pipe(tmp_path):
    f = _csv(tmp_path / "runs.csv")
    r = on_pipes(["import", str(f), "--db", f"sqlite:///{tmp_path / 'l.db'}"])
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == ("read 3,000 rows (csv) from runs.csv\n"
                        "  imported            3,000 runs\n"
                        "  updated                 0 runs\n"
                        "  already present         0 runs\n"
                        "  skipped                 0 rows\n")


@pytest.mark.parametrize("how", ["TRAINLEDGER_NO_PROGRESS=1", "--no-progress", "--quiet"])
def test_no_progress_draws_nothing_on_a_terminal(tmp_path, how):
    """The environment variable, and both global flags (``progress.set_enabled(False)``)."""
    args = ["import", str(_csv(tmp_path / "runs.csv")), "--db", f"sqlite:///{tmp_path / 'l.db'}", "--json"]
    if how.startswith("--"):
        code, out, term = on_pty([how, *args])
    else:
        code, out, term = on_pty(args, env=_env(TRAINLEDGER_NO_PROGRESS="1"))
    assert code == 0 and term == b"", term
    assert json.loads(out)["imported"] == ROWS


def test_no_color_draws_the_bar_without_any_styling(tmp_path):
    f = _csv(tmp_path / "runs.csv")
    code, out, term = on_pty(["import", str(f), "--db", f"sqlite:///{tmp_path / 'l.db'}", "--json"],
                             env=_env(NO_COLOR="1"))
    assert code == 0 and json.loads(out)["imported"] == ROWS
    assert "3,000/3,000 rows" in last(term, "writing runs.csv")
    assert not SGR.search(term), SGR.findall(term)[:5]  # no colour (\x1b[3x, \x1b[9x, 38;5;...), no bold or dim
    assert b"\x1b[" in term  # the cursor is still moved: the bar is redrawn in place


def test_a_sacct_import_counts_its_records(tmp_path):
    t0 = datetime(2026, 2, 1)
    records = [f"{4000 + i}|j{i}|rtx|llm|bob|rtx-01|1|billing=32,cpu=32,gres/gpu:rtx4090=8,gres/gpu=8,node=1|01:00:00|"
               f"COMPLETED|0:0|{(t0 + timedelta(hours=i)).isoformat()}|{(t0 + timedelta(hours=i)).isoformat()}|"
               f"{(t0 + timedelta(hours=i + 1)).isoformat()}\n" for i in range(1200)]
    f = tmp_path / "sacct.txt"
    f.write_text("JobID|JobName|Partition|Account|User|NodeList|NNodes|AllocTRES|Elapsed|State|ExitCode|Submit|Start|End\n"
                 + "".join(records))
    code, out, term = on_pty(["import", str(f), "--db", f"sqlite:///{tmp_path / 'l.db'}", "--node-type", "rtx4090-8x",
                              "--json"])
    assert code == 0, term
    receipt = json.loads(out)
    assert (receipt["format"], receipt["rows_read"], receipt["imported"]) == ("sacct", 1200, 1200)
    assert "1,200/1,200 rows" in last(term, "reading sacct.txt")
    assert "1,200/1,200 rows" in last(term, "writing sacct.txt")


# --- db rollup --rebuild, report chargeback, report period -----------------------------------------------

def test_rollup_rebuild_counts_runs(ledger):
    code, out, term = on_pty(["db", "rollup", "--rebuild", "--db", ledger])
    assert (code, out) == (0, "rollup rebuilt from 3,000 runs\n")
    assert "3,000/3,000 runs" in last(term, "rebuilding the rollup")
    r = on_pipes(["db", "rollup", "--rebuild", "--db", ledger])  # no "rollup: N/M runs" lines on a pipe any more
    assert (r.returncode, r.stdout, r.stderr) == (0, "rollup rebuilt from 3,000 runs\n", "")


def test_chargeback_counts_the_files_it_renders(ledger, tmp_path):
    args = ["report", "chargeback", "--month", "2026-01", "--db", ledger, "--now", NOW, "--json"]
    code, out, term = on_pty([*args, "-o", str(tmp_path / "tty")])
    assert code == 0, term
    files = json.loads(out)["files"]
    assert len(files) == 7 and sorted(os.listdir(tmp_path / "tty")) == files  # 3 projects × (xlsx, html) + summary
    assert "7/7 files" in last(term, "chargeback 2026-01")
    r = on_pipes([*args, "-o", str(tmp_path / "pipe")])
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["lines"] == json.loads(out)["lines"]


def test_a_long_period_shows_its_months_and_a_short_one_nothing(ledger):
    code, out, term = on_pty(["report", "period", "--from", "2026-01", "--to", "2026-03", "--db", ledger,
                              "--now", NOW, "--format", "json"])
    assert code == 0, term
    data = json.loads(out)
    assert data["months"] == ["2026-01", "2026-02", "2026-03"]
    assert "6/6 reports" in last(term, "period 2026-01 to 2026-03")  # 3 months and the 3 before
    code, out, term = on_pty(["report", "period", "--from", "2026-01", "--to", "2026-01", "--db", ledger,
                              "--now", NOW, "--format", "json"])
    assert code == 0 and json.loads(out)["months"] == ["2026-01"] and term == b""  # 2 reports: no bar
    r = on_pipes(["report", "period", "--from", "2026-01", "--to", "2026-03", "--db", ledger, "--now", NOW,
                  "--format", "json"])
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout) == data


# --- slurm sync, demo ------------------------------------------------------------------------------------

FAKE_SACCT = """#!{python}
import sys
sys.stdout.write(open({records!r}).read())
"""


def test_a_first_slurm_sync_draws_a_bar_and_a_routine_one_does_not(tmp_path):
    t0 = datetime(2026, 2, 1)
    records = tmp_path / "records.txt"
    records.write_text("".join(
        f"{5000 + i}|j|rtx|llm|bob|rtx-01|1|billing=32,cpu=32,gres/gpu:rtx4090=8,gres/gpu=8,node=1|01:00:00|COMPLETED|"
        f"0:0|{(t0 + timedelta(hours=i)).isoformat()}|{(t0 + timedelta(hours=i)).isoformat()}|"
        f"{(t0 + timedelta(hours=i + 1)).isoformat()}|gpu1||\n" for i in range(1500)))
    sacct = tmp_path / "sacct"
    sacct.write_text(FAKE_SACCT.format(python=sys.executable, records=str(records)))
    sacct.chmod(0o755)
    args = ["slurm", "sync", "--sacct", str(sacct), "--node-type", "rtx4090-8x", "--tz", "UTC", "--db",
            f"sqlite:///{tmp_path / 'l.db'}", "--json"]
    code, out, term = on_pty(args)
    assert code == 0, term
    assert (json.loads(out)["rows_read"], json.loads(out)["imported"]) == (1500, 1500)
    assert "1,500/1,500 records" in last(term, "reading sacct")
    assert "1,500/1,500 runs" in last(term, "writing runs")
    code, out, term = on_pty(args)  # 1,500 records < LONG_SYNC after a watermark: a routine sync, no bar
    assert code == 0 and json.loads(out)["already_present"] == 1500 and term == b""


def test_demo_draws_its_steps(tmp_path):
    args = ["demo", "--no-sweep", "--end-month", "2026-03", "--json"]
    code, out, term = on_pty([*args, "--db", f"sqlite:///{tmp_path / 'tty.db'}"])
    assert code == 0, term
    assert "4/4 steps" in last(term, "demo history")
    r = on_pipes([*args, "--db", f"sqlite:///{tmp_path / 'pipe.db'}"])
    assert r.returncode == 0 and r.stderr == ""
    tty, pipe = json.loads(out), json.loads(r.stdout)
    tty.pop("ledger", None), pipe.pop("ledger", None)  # the ledger's URL, where the result names it
    assert tty == pipe and tty["runs"] > 0


def test_progress_module_is_silent_without_a_terminal(monkeypatch):
    """In process: a bar on a standard error that is not a terminal draws nothing and writes nothing."""
    import io

    from trainledger.cli import progress

    monkeypatch.delenv("TRAINLEDGER_NO_PROGRESS", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with progress.bar("x", total=3) as b:
        assert not b.drawn
        b(1, 3)
        b.advance()
        b.staged({"read": "r", "write": "w"})("write", 3, 3)
    assert err.getvalue() == ""
