"""The real Slurm of the Slurm tests: one session-scoped single-host cluster (tests/slurm/cluster.py).

Needs Debian's slurm-wlm, slurmdbd and munge and the MariaDB server at
127.0.0.1:3306 (tests/run.sh installs and starts them). Without the programs
the tests are skipped on a laptop and fail in CI; with them, a cluster that
does not start is a failure (the message carries the daemons' logs).
"""

from __future__ import annotations

import os

import pytest

from tests.slurm.cluster import SlurmCluster, missing_programs, pids_mentioning


@pytest.fixture(scope="session")
def slurm():
    missing = missing_programs()
    if missing:
        message = f"Slurm not installed ({', '.join(missing)}): apt-get install slurm-wlm slurmdbd munge (tests/run.sh does)"
        if os.environ.get("CI"):
            raise AssertionError(message)
        pytest.skip(message)
    cluster = SlurmCluster(cpus=12, gpus=2).start()  # every job of test_slurm_live.py at once
    try:
        yield cluster
    finally:
        cluster.stop()
    left = pids_mentioning(str(cluster.dir))
    assert left == [], f"processes of the test Slurm left running: {left}"
