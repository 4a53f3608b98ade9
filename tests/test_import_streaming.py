"""Imports stream (issue 20, item 6), shown with real ``trainledger import`` processes on a SQLite ledger.

* The file is parsed and validated before the ledger's write lock is taken: a big import that is still
  reading its input (here: a named pipe the test holds open) does not stop a small import beside it;
  on the old importer, which took ``BEGIN IMMEDIATE`` before reading, the small one waited for the busy
  timeout and failed with "database is locked".
* Memory is bounded: peak RSS of an import of a large file is close to that of a tiny one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, func, select
from trainledger.store.db import make_engine
from trainledger.store.models import Run

pytestmark = pytest.mark.slow  # real import processes on large inputs: not in `tests/run.sh --fast`

HEADER = "id,name,project,user,node_type,nodes,start,end,status\n"


def _rows(prefix: str, n: int) -> list[str]:
    t0 = datetime(2026, 11, 1)
    return [f"{prefix}-{i},{prefix} run {i},p{i % 7},u{i % 5},rtx4090-8x,{1 + i % 4},"
            f"{(t0 + timedelta(minutes=i)).isoformat()},{(t0 + timedelta(minutes=i + 90)).isoformat()},succeeded\n"
            for i in range(n)]


def _trainledger(args: list[str], env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainledger.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _count(url: str) -> int:
    engine = make_engine(url)
    with Session(engine) as s:
        n = s.exec(select(func.count()).select_from(Run)).one()
    engine.dispose()
    return n


def test_a_small_import_beside_a_big_one_is_not_locked_out(sqlite_url, tmp_path):
    make_engine(sqlite_url).dispose()  # the ledger exists (schema, presets) before the imports start
    env = {**os.environ, "TRAINLEDGER_DB_URL": sqlite_url}
    fifo = tmp_path / "big.csv"
    os.mkfifo(fifo)
    big = _trainledger(["import", str(fifo), "--json"], env)
    try:
        with open(fifo, "w") as pipe:  # returns once the big import has opened its input: it is parsing now
            pipe.write(HEADER + "".join(_rows("big", 2000)))
            pipe.flush()
            small_file = tmp_path / "small.csv"
            small_file.write_text(HEADER + "".join(_rows("small", 3)))
            small = _trainledger(["import", str(small_file), "--json"], env)
            out, err = small.communicate(timeout=240)
            assert small.returncode == 0, err
            assert json.loads(out)["imported"] == 3
            assert big.poll() is None  # the big import is still reading (it waits for the rest of its input)
            assert _count(sqlite_url) == 3
            pipe.write("".join(_rows("late", 500)))
        out, err = big.communicate(timeout=600)
    finally:
        if big.poll() is None:
            big.kill()
            big.wait()
    assert big.returncode == 0, err
    assert json.loads(out)["imported"] == 2500
    assert _count(sqlite_url) == 2503


MEASURE = """
import resource, subprocess, sys
code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _peak_rss_kib(path: Path, url: str) -> int:
    out = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "trainledger.cli", "import", str(path),
                          "--db", url], capture_output=True, text=True, timeout=1200)
    code, rss = out.stdout.split()
    assert code == "0", out.stderr
    return int(rss)


def test_import_memory_does_not_grow_with_the_file(tmp_path):
    """50,000 rows (4.5 MB): the old importer held the text and every row (+150 MB for 110,000 rows here, so about
    +68 MB for these); the streaming one holds one batch (1,000 rows)."""
    small, big = tmp_path / "small.csv", tmp_path / "big.csv"
    small.write_text(HEADER + "".join(_rows("s", 10)))
    with open(big, "w") as fh:
        fh.write(HEADER)
        for start in range(0, 50_000, 10_000):
            fh.writelines(r.replace("b-", f"b{start}-", 1) for r in _rows("b", 10_000))
    assert big.stat().st_size > 4_000_000
    base = _peak_rss_kib(small, f"sqlite:///{tmp_path / 'a.db'}")
    peak = _peak_rss_kib(big, f"sqlite:///{tmp_path / 'b.db'}")
    assert _count(f"sqlite:///{tmp_path / 'b.db'}") == 50_000
    assert peak - base < 40 * 1024, (base, peak)


def test_stdin_is_read_as_a_stream(sqlite_url, tmp_path):
    env = {**os.environ, "TRAINLEDGER_DB_URL": sqlite_url}
    proc = _trainledger(["import", "-", "--json"], env, stdin=subprocess.PIPE)
    out, err = proc.communicate(HEADER + "".join(_rows("in", 50)), timeout=240)
    assert proc.returncode == 0, err
    receipt = json.loads(out)
    assert (receipt["source"], receipt["imported"]) == ("stdin", 50)
