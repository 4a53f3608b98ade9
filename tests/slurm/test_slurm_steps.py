"""Two wrapped steps of one real Slurm job (issue 24, item 4): both run, and they are one run with its steps
(docs/SLURM.md). Before, the second step was refused ("already ended") and never ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ledger.store.db import make_engine
from ledger.store.models import RunStatus
from tests.capture.conftest import nodes_of, run_row

pytestmark = pytest.mark.slow
STEPS = Path(__file__).with_name("steps.sh")
#: each step appends its step id to a file
TRAIN = "import os, sys; open(sys.argv[1], 'a').write(os.environ['SLURM_STEP_ID'] + chr(10))"


def test_two_sequential_wrapped_steps_both_run_as_one_run(slurm, tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    make_engine(url).dispose()
    ran = tmp_path / "ran"
    env = f"--export=ALL,TRAINLEDGER_JOURNAL_DIR={tmp_path / 'journal'},TRAINLEDGER_FLUSH_S=0.5"
    wrapper = [sys.executable, "-m", "ledger.cli", "run", "--db", url, "--", sys.executable, "-c", TRAIN, str(ran)]
    job = slurm.sbatch("-p", "debug", "-J", "steps", env, str(STEPS), *wrapper)
    slurm.wait_for(f"job {job} to end", lambda: slurm.job_state(job).split()[:1] in (["COMPLETED"], ["FAILED"]),
                   timeout=420)
    out = (slurm.dir / f"job-{job}.out").read_text(errors="replace")
    assert slurm.job_state(job).split()[0] == "COMPLETED", out
    assert ran.read_text().splitlines() == ["0", "1"], out
    run = run_row(url, f"slurm-{job}")
    assert (run.status, run.exit_code) == (RunStatus.succeeded, 0)
    rows = sorted((n.hostname.partition("/")[2], n.status) for n in nodes_of(url, run.id))
    assert rows == [("", "succeeded"), ("step1", "succeeded")], out
