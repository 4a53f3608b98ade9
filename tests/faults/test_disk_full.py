"""The run journal's disk fills up in the middle of a tracked run.

The journal directory is a 1 MiB tmpfs (we mount it; root or CAP_SYS_ADMIN). Once the run
trains, the test fills the file system, so rank 0's next journal write (or applied mark) fails
with ENOSPC. Without mount rights the same fault is made with RLIMIT_FSIZE on rank 0 (EFBIG);
``TRAINLEDGER_FAULTS_DISK=rlimit`` forces that variant.

The run must fail loudly (non-zero exit, ``failed`` with the journal error, a clear line in its
log) and the ledger must stay consistent: every step it ran recorded exactly once, its nodes and
its end written, costed, and a later ``trainledger sync`` changes nothing.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from trainledger.sources.record.journal import read_events
from trainledger.store.db import make_engine
from trainledger.store.models import RunNode, RunStatus

from tests.faults.conftest import audit_samples, log_of, rank_pid, run_lost, training
from tests.tmpfs import fill_to_enospc
from tests.tracking.conftest import (
    CONFIGS,
    REPO,
    children,
    kill_leftover_runs,
    make_track_env,
    processes_of_run,
    run_row,
    sample_counts,
    trainledger,
    wait_for,
)

pytestmark = pytest.mark.slow


class TinyDisk:
    """A journal directory that can be made full: a small tmpfs, or (no mount rights) RLIMIT_FSIZE."""

    def __init__(self, path):
        self.dir = path
        self.dir.mkdir()
        self.mounted = False
        if os.environ.get("TRAINLEDGER_FAULTS_DISK") != "rlimit":
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(self.dir)],
                               capture_output=True, text=True)
            self.mounted = r.returncode == 0
        self.how = "tmpfs ENOSPC" if self.mounted else "RLIMIT_FSIZE EFBIG"

    def fill(self, run) -> None:
        if self.mounted:
            fill_to_enospc(self.dir / "filler")
            return
        # rank 0 may not grow any file past the journal's size now; the log is far smaller than the
        # journal (one line per 10 steps vs three samples per step), so its lines still get out
        launcher = wait_for(lambda: children(run.pid), 30, "the launcher")[0]
        pid = wait_for(lambda: rank_pid(launcher, 0), 30, "rank 0")
        size = (self.dir / f"{run.id}.jsonl").stat().st_size
        assert os.path.getsize(run.log_path) < size // 2, "log too large for the RLIMIT_FSIZE variant"
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size + 1, size + 1))

    def free(self) -> None:
        if self.mounted:
            (self.dir / "filler").unlink()

    def limit(self, size: int):
        """preexec_fn for a child process: files it writes may not grow past ``size`` (RLIMIT variant)."""
        if self.mounted:
            return None
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.dir)], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    disk = TinyDisk(tmp_path / "journal-disk")
    yield disk
    disk.close()


def test_full_journal_disk_fails_the_run_loudly_and_loses_nothing(tmp_path, shard_cache, tiny_disk, fault_tally):
    # held after step 3 (TRAINLEDGER_TEST_HOLD) until the disk is full: the run is still running when it fills
    gate = tmp_path / "disk-filled"
    env = {**make_track_env(tmp_path, shard_cache), "TRAINLEDGER_JOURNAL_DIR": str(tiny_disk.dir),
           "TRAINLEDGER_TEST_HOLD": f"3:{gate}"}
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = make_engine(url)
    # one rank: rank 0 writes the journal (issue 38: a rank is ~4.5 CPU-seconds)
    launch = subprocess.Popen([sys.executable, "-m", "trainledger.cli", "launch", str(CONFIGS / "dp.yaml"),
                               "--gpus-per-node", "1", "--steps", "1000", "--db", url, "--json"],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rid = None
    try:
        rid = wait_for(lambda: _only_run(engine), 120, "the run to be registered")
        wait_for(lambda: training(engine, rid), 300, "the run to train")
        recorded_before = sample_counts(engine, rid)["loss"]
        tiny_disk.fill(run_row(engine, rid))
        gate.touch()
        out, err = launch.communicate(timeout=180)
    finally:
        if launch.poll() is None:
            launch.kill()
        if rid:
            kill_leftover_runs(url, [rid])
    wait_for(lambda: not processes_of_run(rid), 60, "no processes left")
    run = run_row(engine, rid)
    audit = audit_samples(engine, rid)
    lost = run_lost(engine, rid)
    fault_tally.record(f"journal disk full ({tiny_disk.how})", 1, [audit], runs_lost=int(lost is not None),
                       status=run.status.value, error=run.error)

    # loud: non-zero exit, failed with the journal's error, and a clear line in the run's log
    assert launch.returncode == 1, (out, err)
    assert json.loads(out)["status"] == "failed"
    assert run.status == RunStatus.failed and run.exit_code == 1, (run.status, run.error)
    assert run.error.startswith("JournalWriteError: cannot write the run journal "), run.error
    assert ("No space left on device" if tiny_disk.mounted else "File too large") in run.error
    assert "is its disk full?" in run.error
    log = log_of(run)
    assert "[trainledger] error: cannot write the run journal" in log and "the run stops" in log
    assert "written straight to the ledger" in log

    # consistent: every step it ran is in the ledger exactly once (also those after the failure,
    # written straight to the ledger), its end and its node are written, and it is costed
    assert lost is None, lost
    assert audit["lost"] == 0 and audit["doubled"] == 0, audit
    assert audit["steps"] >= recorded_before
    assert run.ended_at is not None and run.ended_at >= run.started_at
    from sqlmodel import Session, select

    with Session(engine) as s:
        nodes = s.exec(select(RunNode).where(RunNode.run_id == rid)).all()
    assert len(nodes) == 1 and nodes[0].hostname and nodes[0].util_source == "cpu"

    # the journal on the full disk is whole: no torn line hides anything
    journal = tiny_disk.dir / f"{rid}.jsonl"
    data = journal.read_bytes()
    assert data.endswith(b"\n") and len(read_events(journal)) == data.count(b"\n")
    # with room again, replaying the journal changes nothing and does not reopen the run
    tiny_disk.free()
    before = (sample_counts(engine, rid), run.status, run.ended_at, run.error)
    trainledger(["sync", "--db", url], env)
    after = run_row(engine, rid)
    assert (sample_counts(engine, rid), after.status, after.ended_at, after.error) == before
    engine.dispose()


def _only_run(engine):
    from sqlmodel import Session, select
    from trainledger.store.models import Run

    with Session(engine) as s:
        ids = s.exec(select(Run.id)).all()
    return ids[0] if ids else None


APPEND_UNTIL_FULL = """
import json, sys
from trainledger.sources.record.journal import Journal, JournalWriteError
j = Journal(sys.argv[1], "r1")
n, err = 0, None
try:
    while n < int(sys.argv[2]):
        j.append([{"type": "samples", "rows": [["", -1, "tokens", "2026-01-01T00:00:00", n + 1]], "pad": "x" * 3000}])
        n += 1
except JournalWriteError as exc:
    err = str(exc)
print(json.dumps({"appended": n, "seq": j.seq, "error": err}))
"""


def test_journal_append_is_all_or_nothing_on_a_full_disk(tiny_disk, fault_tally):
    """A journal write that hits a full disk leaves no torn line: the events written before it and
    after it (once there is room again) are all readable, numbered without a gap."""
    from trainledger.sources.record.journal import read_events

    def append(limit: int, events: int) -> dict:
        out = subprocess.run([sys.executable, "-c", APPEND_UNTIL_FULL, str(tiny_disk.dir), str(events)], cwd=REPO,
                             capture_output=True, text=True, timeout=120, preexec_fn=tiny_disk.limit(limit), check=True)
        return json.loads(out.stdout)

    if tiny_disk.mounted:  # room to give back after the journal has filled the rest
        (tiny_disk.dir / "filler").write_bytes(b"\0" * 65536)
    full = append(300_000, 10_000)  # 3 kB events until the disk (or the size limit) says no
    path = tiny_disk.dir / "r1.jsonl"
    data = path.read_bytes()
    events = read_events(path)
    ok = (full["error"] is not None and data.endswith(b"\n") and len(events) == data.count(b"\n") == full["appended"]
          and full["seq"] == full["appended"])
    tiny_disk.free()
    more = append(10_000_000, 3)
    events = read_events(path)
    ok = ok and more["error"] is None and [e["seq"] for e in events] == list(range(1, full["appended"] + 4))
    fault_tally.record(f"journal append on a full disk ({tiny_disk.how})", 1, [{
        "samples": len(events), "lost": full["appended"] + 3 - len(events), "doubled": 0}], runs=0, error=full["error"])

    assert full["error"] and ("No space left on device" if tiny_disk.mounted else "File too large") in full["error"]
    assert full["appended"] > 10, full
    assert ok, (full, more, len(events))
    assert [e["rows"][0][4] for e in events] == list(range(1, full["appended"] + 1)) + [1, 2, 3]
