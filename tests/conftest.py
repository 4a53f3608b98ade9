"""Shared fixtures: a fresh ledger per test on SQLite and on a real PostgreSQL.

The PostgreSQL leg talks to the server at ``TRAINLEDGER_TEST_PG``; unset, the run starts a server of its own
(tests/pgcluster.py ``suite_server``: a cluster in memory without fsync, on a free loopback port, stopped at the
end; its URL is passed on to the workers and subprocesses in ``TRAINLEDGER_TEST_PG``), and where PostgreSQL's
programs are missing, the machine's server at ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``. Each
test creates its own database and drops it afterwards. CI installs PostgreSQL (.ci/run); set
``TRAINLEDGER_SKIP_PG=1`` only on a laptop without PostgreSQL.

Each test's ledger starts as a copy of a ledger created once per test process (issue 38): a SQLite file copied,
a PostgreSQL database made with ``CREATE DATABASE ... TEMPLATE``: the schema at head and the presets, exactly what
the first connection would create, without running the migrations again for every test (0.7 s on SQLite and
1.2-1.9 s on PostgreSQL per ledger on a loaded 2-core machine, against a copy's few milliseconds / 0.5 s). A test
that needs a ledger that does not exist yet (creation, ``db upgrade --revision``, the configured time zone of a new
ledger) is marked ``@pytest.mark.new_ledger``: its URL names nothing yet.
"""

from __future__ import annotations

import gc
import json
import os
import uuid
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlmodel import Session
from trainledger.process import tune_gc
from typer.testing import CliRunner

tune_gc()  # the test processes collect garbage as trainledger's own processes do (ledger/process.py)

#: under CI=true an unlisted skip fails (issue 38)
pytest_plugins = ["tests.ci_skips", "pytester"]

PG_ADMIN = os.environ.get("TRAINLEDGER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
#: Every ledger test runs on both backends in the full suite (CI). The PostgreSQL leg is ``slow``: the fast tier
#: (`bash tests/run.sh --fast`) checks the SQLite leg only, which keeps it under 5 minutes on 2 cores.
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


def _pg_admin():
    return create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")


@pytest.fixture(scope="session", autouse=True)
def _private_user_dirs(tmp_path_factory):
    """No test writes to the real user's ledger, journals or logs."""
    home = tmp_path_factory.mktemp("user-data")
    saved = {k: os.environ.get(k) for k in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "TRAINLEDGER_DB_URL",
                                            "TRAINLEDGER_JOURNAL_DIR", "TRAINLEDGER_CONFIG")}
    os.environ["XDG_DATA_HOME"] = str(home)
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")  # no user's config file (trainledger.store.config)
    os.environ.pop("TRAINLEDGER_CONFIG", None)
    os.environ["TRAINLEDGER_DB_URL"] = f"sqlite:///{home / 'default-ledger.db'}"
    os.environ["TRAINLEDGER_JOURNAL_DIR"] = str(home / "journal")
    yield home
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(autouse=True)
def _config_per_test():
    """Each test starts with no ``--config`` and the config file's strict rule. Both are per process, as in the
    console script: an in-process ``--config PATH`` names the file for every later lookup, and ``trainledger run``
    and ``trainledger.track`` relax the rule (``config.never_refuse``: the job's side says a broken file once and
    ignores it). Neither may reach a later test on the same worker (CI's failure at 5ec6dcd: a ``report`` after an
    in-process ``trainledger.track`` warned instead of refusing)."""
    import sys

    def reset() -> None:
        config = sys.modules.get("trainledger.store.config")
        if config is not None:
            config.set_path(None)
            config._lenient = False
            config._said.clear()

    reset()  # a session fixture's in-process run may have relaxed it before this test
    yield
    reset()


@pytest.fixture(scope="session", autouse=True)
def _apptest_work_once_per_process():
    """Streamlit's ``AppTest`` redoes two things on every run that cannot change within a test process (issue 38;
    py-spy over the fast tier: 9.6 % and 4.7 % of its CPU):

    * each new ``AppTest`` scans every installed distribution's metadata for v2 components
      (``manifest_scanner.scan_component_manifests``): the installed packages do not change, so it scans once;
    * each run compiles ``app/main.py`` and the page into a new ``ScriptCache`` (with Streamlit's "magic" AST pass):
      the runs share one cache here, keyed by the file's path, size and modification time, so a script rewritten
      under the same name is compiled again.

    A Streamlit server does each of these once per process itself; the page scripts run as before."""
    import functools

    try:
        from streamlit.components.v2 import manifest_scanner
        from streamlit.runtime.scriptrunner.script_cache import ScriptCache
        from streamlit.testing.v1 import app_test
    except ImportError:  # a test process without the dashboard's dependencies
        yield
        return

    class SharedScriptCache(ScriptCache):
        _shared: dict = {}

        def get_bytecode(self, script_path: str):
            stat = os.stat(script_path)
            key = (os.path.abspath(script_path), stat.st_size, stat.st_mtime_ns)
            if key not in self._shared:
                self._shared[key] = super().get_bytecode(script_path)
            return self._shared[key]

    scan, cache = manifest_scanner.scan_component_manifests, app_test.ScriptCache
    manifest_scanner.scan_component_manifests = functools.cache(scan)
    app_test.ScriptCache = SharedScriptCache
    yield
    manifest_scanner.scan_component_manifests, app_test.ScriptCache = scan, cache


def _new_ledger_wanted(request) -> bool:
    return request.node.get_closest_marker("new_ledger") is not None


@pytest.fixture(scope="session")
def _sqlite_template(_private_user_dirs, tmp_path_factory) -> Path:
    """A SQLite ledger at head with the presets, created once per test process; tests get a copy."""
    from trainledger.store.db import make_engine

    path = tmp_path_factory.mktemp("template-ledger") / "ledger.db"
    make_engine(f"sqlite:///{path}").dispose()  # the last connection closed: the WAL is folded into the file
    return path


def _sqlite_ledger(request, tmp_path: Path) -> str:
    path = tmp_path / "ledger.db"
    if not _new_ledger_wanted(request) and not path.exists():
        import shutil

        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def _pg_template(_private_user_dirs):
    """A PostgreSQL ledger at head with the presets, created once per test process and dropped at its end; each
    test's database is ``CREATE DATABASE ... TEMPLATE`` it (no connection may be open to it then: none is)."""
    from trainledger.store.db import make_engine

    name = f"tl_template_{uuid.uuid4().hex[:12]}"
    admin = _pg_admin()
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    make_engine(f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}").dispose()
    yield name
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=BACKENDS)
def ledger_url(request, tmp_path: Path):
    """A URL of a new ledger (schema and presets, nothing recorded): a SQLite file, or a new PostgreSQL database;
    under ``@pytest.mark.new_ledger`` one that does not exist yet (the SQLite file absent, the database empty)."""
    if request.param == "sqlite":
        yield _sqlite_ledger(request, tmp_path)
        return
    if os.environ.get("TRAINLEDGER_SKIP_PG") == "1" and not os.environ.get("CI"):
        pytest.skip("TRAINLEDGER_SKIP_PG=1")
    name = f"tl_test_{uuid.uuid4().hex[:12]}"
    template = "" if _new_ledger_wanted(request) else f' TEMPLATE "{request.getfixturevalue("_pg_template")}"'
    admin = _pg_admin()
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"{template}'))
    base = PG_ADMIN.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    from trainledger.store.db import get_engine

    get_engine.cache_clear()
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(request, tmp_path: Path) -> str:
    """A SQLite ledger's URL: a copy of the process's template ledger (``new_ledger``: no file yet)."""
    return _sqlite_ledger(request, tmp_path)


@pytest.fixture
def engine(ledger_url):
    from trainledger.store.db import make_engine

    eng = make_engine(ledger_url)
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine):
    with Session(engine, expire_on_commit=False) as s:
        yield s


@pytest.fixture
def cli(ledger_url, monkeypatch):
    """Run ``trainledger ARGS --db <this test's ledger>``; returns the click Result."""
    from trainledger.cli.commands import app
    from trainledger.store.db import get_engine

    monkeypatch.delenv("TRAINLEDGER_DB_URL", raising=False)
    runner = CliRunner()

    def run(*args: str, db: bool = True, input: str | None = None):
        argv = [str(a) for a in args] + (["--db", ledger_url] if db else [])
        return runner.invoke(app, argv, catch_exceptions=False, input=input)

    yield run
    get_engine.cache_clear()


@pytest.fixture
def fake_popen(monkeypatch):
    """``subprocess.Popen`` replaced by :class:`tests.helpers.FakePopen`; yields the recorded calls."""
    import subprocess

    from tests.helpers import FakePopen

    FakePopen.calls = []
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    return FakePopen.calls


# --- one test run, several processes (pytest-xdist: tests/run.sh runs the suite on -n workers) ---------

#: Folders whose tests share an expensive session fixture (a Prometheus, a Slurm cluster, the strategy runs) or a
#: tally: each goes to one worker whole. Every other test file goes to one worker whole (its module fixtures
#: are set up once).
ONE_WORKER_FOLDERS = ("trainer", "collect", "slurm", "faults", "multihost")


#: Folders whose every test runs real processes or servers (DeepSpeed ranks, PostgreSQL clusters, Slurm,
#: Prometheus): all ``slow``, so `bash tests/run.sh --fast` (``-m "not slow"``) leaves them out.
SLOW_FOLDERS = ("faults", "tracking", "slurm", "collect", "multihost")


#: Folders that share one worker, one after the other: their tests mostly wait (gloo timeouts after a cut link,
#: Slurm's daemons starting and jobs ending: ~440 s of test time for ~70 CPU-s, measured 2026-12-06), so while
#: they wait the other two workers' CPU-bound tests fill both cores. Each on a worker of its own, both started at
#: once and left one worker of three busy for the first three minutes.
SHARED_WORKER = {"multihost": "hosts", "slurm": "hosts"}


#: The groups that take longest: seconds of test time on one of 3 workers on 2 idle cores (``--durations=0`` and
#: each test's start and end per worker, 2026-12-06; only their order matters). xdist hands groups out by how many
#: tests they hold, so the few-but-long groups (the hosts above all) started last and ran on while the other
#: workers had nothing left. Longest first, the workers end within a minute of each other. Every other group
#: follows, most tests first, as xdist orders them.
LONG_GROUPS = {
    "hosts": 441,
    "tracking/test_tracked_runs.py": 91,
    "faults": 91,
    "capture/test_wrapper_never_hurts.py": 87,
    "capture/test_wrapper.py": 79,
    "app/test_runs_periods_browser.py": 77,
    "capture/test_goodput_capture.py": 77,
    "trainer": 69,
    "app/test_readability_browser.py": 65,
    "app/test_budgets_browser.py": 61,
    "test_bench_quick.py": 59,
    "app/test_signin_browser.py": 55,
    "collect": 51,
    "app/test_dashboard_browser.py": 62,
}


def _group(item) -> str:
    rel = Path(str(item.fspath)).relative_to(Path(__file__).parent)
    if len(rel.parts) > 1 and rel.parts[0] in ONE_WORKER_FOLDERS:
        return SHARED_WORKER.get(rel.parts[0], rel.parts[0])
    return rel.as_posix()


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems gives the groups
    _start_suite_server(config)
    _make_hosts_fabric(config)


def _make_hosts_fabric(config) -> None:
    """The run's bridge for the multi-host tests' namespaces, with its gateway address (tests/hosts.py ``Fabric``),
    made by the controller (or the only process) before any test, and so before any browser, runs: an address
    that comes or goes while Chromium loads a page fails its fetches (ERR_NETWORK_CHANGED), and each set of hosts
    used to add and remove one. Where namespaces cannot be made, nothing (the multi-host tests say why)."""
    from tests.hosts import FABRIC_ENV, Fabric, unavailable

    if hasattr(config, "workerinput") or os.environ.get(FABRIC_ENV) or unavailable() is not None:
        return
    fabric = Fabric.make()
    config._trainledger_fabric = fabric
    os.environ[FABRIC_ENV] = fabric.env_value()


def _start_suite_server(config) -> None:
    """The run's own PostgreSQL (module docstring), started by the controller (or the only process) before the
    workers start, so that they inherit its URL; the workers and nested runs find ``TRAINLEDGER_TEST_PG`` set."""
    global PG_ADMIN
    if hasattr(config, "workerinput") or "TRAINLEDGER_TEST_PG" in os.environ or (
            os.environ.get("TRAINLEDGER_SKIP_PG") == "1" and not os.environ.get("CI")):
        return
    from tests.pgcluster import suite_server

    try:
        server = suite_server()
    except (RuntimeError, OSError) as e:  # no initdb here (a laptop): the machine's server, as before
        config._trainledger_pg_note = f"PostgreSQL for tests: {PG_ADMIN} (no server of the run's own: {e})"
        return
    config._trainledger_pg = server
    config._trainledger_pg_note = f"PostgreSQL for tests: the run's own server, {server.url} ({server.dir})"
    os.environ["TRAINLEDGER_TEST_PG"] = PG_ADMIN = server.url
    os.environ["TRAINLEDGER_TEST_PG_SUITE"] = str(server.dir)


def pytest_report_header(config):
    return getattr(config, "_trainledger_pg_note", None)


def pytest_unconfigure(config):
    fabric = getattr(config, "_trainledger_fabric", None)
    if fabric is not None:
        from tests.hosts import FABRIC_ENV

        os.environ.pop(FABRIC_ENV, None)
        fabric.remove()
    server = getattr(config, "_trainledger_pg", None)
    if server is not None:
        os.environ.pop("TRAINLEDGER_TEST_PG", None)
        os.environ.pop("TRAINLEDGER_TEST_PG_SUITE", None)
        server.destroy()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).relative_to(Path(__file__).parent)
        if len(rel.parts) > 1 and rel.parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    group_of = {item.nodeid: _group(item) for item in items}
    sizes = Counter(group_of.values())
    # a stable sort: within a group (and a file) the collection order stays as it was
    items.sort(key=lambda item: (-LONG_GROUPS.get(group_of[item.nodeid], 0), -sizes[group_of[item.nodeid]]))
    for item in items:
        group = group_of[item.nodeid]
        if getattr(config.option, "loadgroup", False) and hasattr(item, "_id"):
            # pytest >= 9 keeps the node id in ``_id``: xdist 3.8's own hook still sets ``_nodeid``, which no
            # longer takes, and every test would be scheduled alone. Add the ``@group`` suffix it means to add.
            from _pytest.nodeid import NodeId

            item._id = NodeId.parse(f"{item.nodeid}@{group}")
        else:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """The collected tests, their modules and fixtures definitions live until the process ends: the garbage
    collector need not walk them again (issue 38: the in-process tests spent ~20 % of their CPU in it)."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session):
    from tests import summaries

    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand the counters to the controller
        session.config.workeroutput["trainledger_summaries"] = json.dumps(summaries.exported(), default=str)


_WORKER_PARTS: dict[str, list] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    for name, part in json.loads(getattr(node, "workeroutput", {}).get("trainledger_summaries", "{}")).items():
        _WORKER_PARTS.setdefault(name, []).append(part)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from tests import summaries

    if hasattr(config, "workeroutput"):
        return
    parts = _WORKER_PARTS or {name: [part] for name, part in summaries.exported().items()}
    for line in summaries.lines(parts):
        terminalreporter.write_line(line)
