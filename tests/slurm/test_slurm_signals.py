"""A signal Slurm delivers to a wrapped job reaches it exactly once (issue 37), against a real Slurm.

``scancel --signal=USR1 JOB`` (and ``sbatch --signal USR1@60``) makes the step's slurmstepd signal every process
of the step (``ProctrackType=proctrack/linuxproc`` here, as ``proctrack/cgroup``): the wrapper, its keeper and
the command. The wrapper takes its signals with ``sigtimedwait``, sees slurmstepd as the sender and does not
forward it again; a signal from anyone else (a user's ``kill -USR1 <wrapper>``) is forwarded, once. In the batch
step, ``scancel --batch`` signals the batch shell alone: a wrapper that is the batch shell forwards it; so
does every wrapper under ``proctrack/pgid``, where slurmstepd signals the task's process group only.

The job (tests/capture/hostile_job.py ``--signals``) appends the name of each USR1/USR2 it gets to a file.
Ordering is the barrier, never a sleep: after the signal under test, the test sends the wrapper a USR2 and
waits for it in the job; a second, forwarded USR1 would have been forwarded before that USR2 (one thread
forwards in order) and the job would have seen it first.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from sqlmodel import Session
from trainledger.store.db import make_engine
from trainledger.store.ids import slurm_run_id
from trainledger.store.models import Run, RunStatus

from tests.slurm.cluster import SlurmCluster, missing_programs

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
JOB = HERE.parent / "capture" / "hostile_job.py"
SRUN = HERE / "srun.sh"
WAIT_S = 300  # generous: the machine is shared


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def submit(slurm, tmp_path: Path, step: str) -> tuple[str, dict[str, Path], str]:
    """The wrapped job: ``srun trainledger run -- JOB`` (step "srun") or a batch script that is the wrapper
    (``exec trainledger run -- JOB``, step "batch"); returns the job id, its files and its ledger."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    make_engine(url).dispose()
    files = {name: tmp_path / name for name in ("started", "signals", "done")}
    env = (f"--export=ALL,TRAINLEDGER_JOURNAL_DIR={tmp_path / 'journal'},TRAINLEDGER_FLUSH_S=0.5,"
           f"TRAINLEDGER_HEARTBEAT_S=1,XDG_DATA_HOME={tmp_path / 'xdg'}")
    wrapper = [sys.executable, "-m", "trainledger.cli", "run", "--name", f"signals-{step}", "--grace", "1",
               "--db", url, "--", sys.executable, str(JOB), "--started", str(files["started"]),
               "--signals", str(files["signals"]), "--wait-for", str(files["done"])]
    if step == "srun":
        script = SRUN
    else:
        script = tmp_path / "batch.sh"
        script.write_text('#!/bin/sh\nexec "$@"\n')
        script.chmod(0o755)
    return slurm.sbatch("-p", "debug", "-J", f"signals-{step}", env, str(script), *wrapper), files, url


def wait_lines(slurm, files: dict[str, Path], n: int, what: str) -> list[str]:
    slurm.wait_for(what, lambda: len(lines(files["signals"])) >= n, timeout=WAIT_S)
    return lines(files["signals"])


def barrier(slurm, wrapper: int, files: dict[str, Path]) -> list[str]:
    """A USR2 from us through the wrapper; every signal forwarded before it has reached the job once it arrives."""
    before = len(lines(files["signals"]))
    os.kill(wrapper, signal.SIGUSR2)
    got = wait_lines(slurm, files, before + 1, "the job to get the barrier USR2 through the wrapper")
    assert got[-1] == "SIGUSR2", got
    return got[:-1]


@pytest.fixture(scope="module")
def pgid_slurm():
    """A cluster whose ProctrackType is proctrack/pgid: slurmstepd signals the task's process group only."""
    if missing_programs():
        pytest.skip(f"Slurm not installed ({', '.join(missing_programs())})")
    cluster = SlurmCluster(cpus=2, gpus=0, proctrack="proctrack/pgid").start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.parametrize("step, scancel", [("srun", []), ("batch", ["--batch"])])
def test_a_slurm_signal_reaches_the_wrapped_job_once_and_a_users_kill_too(slurm, tmp_path, step, scancel):
    check_once(slurm, tmp_path, step, scancel)


def test_with_proctrack_pgid_slurms_signal_is_forwarded_once(pgid_slurm, tmp_path):
    """proctrack/pgid: slurmstepd signals the wrapper's process group, not the command's own: forwarded."""
    check_once(pgid_slurm, tmp_path, "srun", [])


def check_once(slurm, tmp_path: Path, step: str, scancel: list[str]) -> None:
    job, files, url = submit(slurm, tmp_path, step)
    slurm.wait_for(f"job {job} to start its command", files["started"].exists, timeout=WAIT_S)
    command = int(lines(files["started"])[0])
    wrapper = parent(parent(command))  # the command's parent is the keeper, the keeper's the wrapper
    assert b"trainledger.cli\0run" in Path(f"/proc/{wrapper}/cmdline").read_bytes()

    # Slurm's signal: slurmstepd signals every process of the srun step (the command directly, the wrapper
    # does not forward it again), or the batch shell alone with --batch (the wrapper forwards it)
    slurm.run("scancel", "--signal=USR1", *scancel, job)
    assert wait_lines(slurm, files, 1, "the job to get scancel's USR1") == ["SIGUSR1"]
    assert barrier(slurm, wrapper, files) == ["SIGUSR1"]  # once, not twice

    # a user's kill of the wrapper: forwarded, once
    os.kill(wrapper, signal.SIGUSR1)
    assert wait_lines(slurm, files, 3, "the job to get the user's USR1")[2] == "SIGUSR1"
    assert barrier(slurm, wrapper, files) == ["SIGUSR1", "SIGUSR2", "SIGUSR1"]

    files["done"].touch()
    slurm.wait_for(f"job {job} to complete", lambda: slurm.job_state(job).split()[:1] == ["COMPLETED"],
                   timeout=WAIT_S)
    assert lines(files["signals"]) == ["SIGUSR1", "SIGUSR2", "SIGUSR1", "SIGUSR2"]

    def recorded():
        engine = make_engine(url)
        try:
            with Session(engine) as s:
                run = s.get(Run, slurm_run_id(job))
                return run if run is not None and run.status != RunStatus.running else None
        finally:
            engine.dispose()
    run = slurm.wait_for("the wrapper to record the run's end", recorded, timeout=WAIT_S)
    assert (run.status, run.exit_code) == (RunStatus.succeeded, 0)  # a forwarded signal never cancels it
