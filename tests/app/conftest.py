"""Fixtures for the dashboard tests (builders in tests/app/helpers.py)."""

from __future__ import annotations

import pytest

from tests.app.helpers import build_ledger


@pytest.fixture(scope="session")
def demo_url(tmp_path_factory) -> str:
    """A read-only demo ledger (SQLite), built once for the session."""
    return build_ledger(f"sqlite:///{tmp_path_factory.mktemp('demo') / 'ledger.db'}")


@pytest.fixture
def app_env(monkeypatch):
    """Loopback, no auth file, fresh caches; returns a function pointing the app at a ledger."""
    from streamlit import config
    from trainledger.app.queries.data import clear_caches

    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    config.set_option("server.address", "127.0.0.1")
    clear_caches()

    def use(url: str) -> None:
        monkeypatch.setenv("TRAINLEDGER_DB_URL", url)

    yield use
    clear_caches()
    config.set_option("server.address", "127.0.0.1")


@pytest.fixture(scope="session")
def shard_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("shard-cache")


RUN_ENV = {"TRAINLEDGER_HEARTBEAT_S": "1", "TRAINLEDGER_FLUSH_S": "0.5", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def run_env(monkeypatch, tmp_path, shard_cache) -> dict:
    """Environment for runs the dashboard (in this process) or `trainledger demo` starts: private journal,
    logs and data dirs, a shared shard cache, fast heartbeats (as tests/tracking does)."""
    values = {**RUN_ENV, "TRAINLEDGER_JOURNAL_DIR": str(tmp_path / "journal"),
              "TRAINLEDGER_CACHE_DIR": str(shard_cache), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    return values
