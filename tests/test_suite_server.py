"""The suite's own PostgreSQL (tests/pgcluster.py ``suite_server``, issue 38): its settings, and the clusters a
killed run left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
    """Judged by the owner's pid; a folder without an owner is a cluster another run is making this instant (kept:
    removing it failed that run's initdb, seen with three runs started at once) unless it is a minute old."""
    import time

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name, owner in (("dead", dead.stdout.strip()), ("alive", str(os.getpid())), ("foreign", "not-a-pid"),
                        ("making", None), ("orphan", None)):
        folder = tmp_path / f"{pgcluster.SUITE_PREFIX}{name}"
        (folder / "data").mkdir(parents=True)
        if owner is not None:
            (folder / "owner").write_text(owner)
    hour_ago = time.time() - 3600
    os.utime(tmp_path / f"{pgcluster.SUITE_PREFIX}orphan", (hour_ago, hour_ago))
    (tmp_path / "tl-pg-other").mkdir()  # another kind of cluster (an outage test's): never touched
    pgcluster._remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tl-pg-other", f"{pgcluster.SUITE_PREFIX}alive",
                                                          f"{pgcluster.SUITE_PREFIX}foreign",
                                                          f"{pgcluster.SUITE_PREFIX}making"]


def test_a_cluster_names_its_owner_before_initdb_runs(tmp_path, monkeypatch):
    """The owner file is there while initdb runs (another run's clean-up reads it), and a failed program's own
    words are in the error."""
    seen = []

    def run(self, cmd):
        seen.append((self.dir / "owner").read_text())
        raise subprocess.CalledProcessError(1, cmd)

    monkeypatch.setattr(pgcluster.PgCluster, "_run", run)
    with pytest.raises(subprocess.CalledProcessError):
        pgcluster.PgCluster(parent=tmp_path, prefix=pgcluster.SUITE_PREFIX)
    assert seen == [str(os.getpid())]
    cluster = pgcluster.PgCluster.__new__(pgcluster.PgCluster)
    cluster.as_postgres = False
    monkeypatch.undo()
    with pytest.raises(subprocess.CalledProcessError) as failed:
        cluster._run([sys.executable, "-c", "import sys; print('first'); sys.exit('initdb: error: no room')"])
    assert failed.value.__notes__ == [f"{Path(sys.executable).name} said: first | initdb: error: no room"]
