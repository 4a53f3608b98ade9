"""The suite's own PostgreSQL (tests/pgcluster.py ``suite_server``, issue 38): its settings, and the clusters a
killed run left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy import text

from tests import pgcluster


def test_the_runs_server_has_the_suite_settings():
    """When this run started its own server, it runs with :data:`SUITE_SETTINGS` (else skipped: not ours)."""
    from tests.conftest import _pg_admin

    if "TRAINLEDGER_TEST_PG_SUITE" not in os.environ:
        pytest.skip("TRAINLEDGER_TEST_PG was set outside this run: not the run's own server")
    engine = _pg_admin()
    with engine.connect() as c:
        assert c.execute(text("SHOW data_directory")).scalar() == os.environ["TRAINLEDGER_TEST_PG_SUITE"] + "/data"
        shown = {s.split("=")[0]: c.execute(text(f"SHOW {s.split('=')[0]}")).scalar() for s in pgcluster.SUITE_SETTINGS}
    engine.dispose()
    assert shown == {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "wal_level": "minimal",
                     "max_wal_senders": "0", "max_wal_size": "256MB", "max_connections": "200"}


def test_a_killed_runs_cluster_is_removed_and_a_running_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name, owner in (("dead", dead.stdout.strip()), ("alive", str(os.getpid())), ("foreign", "not-a-pid")):
        folder = tmp_path / f"{pgcluster.SUITE_PREFIX}{name}"
        (folder / "data").mkdir(parents=True)
        (folder / "owner").write_text(owner)
    (tmp_path / "tl-pg-other").mkdir()  # another kind of cluster (an outage test's): never touched
    pgcluster._remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tl-pg-other", f"{pgcluster.SUITE_PREFIX}alive",
                                                          f"{pgcluster.SUITE_PREFIX}foreign"]
