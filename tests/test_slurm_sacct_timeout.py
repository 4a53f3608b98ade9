"""``slurm sync`` kills sacct's whole process group at its timeout (issue 24, item 6).

The fake sacct is a real shell script whose child keeps sacct's stdout open: killing only sacct would
leave the sync waiting for the pipe's end until that child finishes (here: 120 s, after which it
leaves a DONE file). The sync must end with a one-line error, write nothing, and the child must be gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a fake sacct process group killed at its timeout: not in `tests/run.sh --fast`

REPO = Path(__file__).resolve().parents[1]

FAKE = """#!/bin/sh
echo started > "{base}/started"
(sleep 120; touch "{base}/DONE") &
echo $! > "{base}/child.pid"
sleep 120
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def test_sacct_timeout_kills_its_children_that_hold_the_pipe(tmp_path):
    base = tmp_path / "sacct"
    base.mkdir()
    fake = base / "sacct"
    fake.write_text(FAKE.format(base=base))
    fake.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TZ": "UTC"}
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "slurm", "sync", "--db", url, "--sacct", str(fake),
                          "--sacct-timeout", "2"], capture_output=True, text=True, env=env, cwd=REPO, timeout=100)
    child = int((base / "child.pid").read_text())
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: sacct: no answer within 2 s"), out.stderr
    deadline = time.monotonic() + 60  # the kill is sent; the kernel reaps on its own time
    while _alive(child):
        assert time.monotonic() < deadline, "sacct's child outlived the timeout"
        time.sleep(0.05)
    assert not (base / "DONE").exists()
    from sqlmodel import Session, select
    from trainledger.store.db import make_engine
    from trainledger.store.models import Setting

    engine = make_engine(url)
    with Session(engine) as s:  # nothing written: no watermark
        assert [k for k in s.exec(select(Setting.key)).all() if k.startswith("slurm:watermark")] == []
    engine.dispose()


def test_the_system_time_zone_has_its_name_so_an_import_can_pickle_it(monkeypatch):
    """``slurm sync`` without ``--tz`` or ``$TZ`` read /etc/localtime as a nameless zone, which an import's
    temporary store could not pickle (PicklingError)."""
    import os
    import pickle

    from trainledger.sources.imports.localtime import system_timezone

    monkeypatch.delenv("TZ", raising=False)
    zone = system_timezone()
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" not in target:
        pytest.skip("/etc/localtime is not a link into a zoneinfo folder here")
    assert zone.key == target.split("/zoneinfo/", 1)[1]
    assert pickle.loads(pickle.dumps(zone)) is zone
