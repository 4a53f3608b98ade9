"""Fast start: ``import trainledger`` and the CLI's ``--help`` load no heavy library (issue #35, item 5).

Each command imports what it needs when it runs; these tests fail when a module-level import drags a heavy
library into every command again. Timings live in ``python -m bench --only cli_start`` (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys

import pytest

#: libraries that only some commands need (and that cost tenths of a second or more to import)
HEAVY = ("pandas", "numpy", "torch", "deepspeed", "prometheus_api_client", "prometheus_client", "openpyxl",
         "streamlit", "sqlalchemy", "sqlmodel", "alembic", "psycopg", "pyarrow", "yaml", "psutil", "pynvml",
         "transformers", "lightning", "requests", "httpx", "authlib", "joserfc", "cryptography")


def _loaded(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import trainledger",
    "import trainledger.cli.commands",
    "import sys; sys.argv = ['trainledger', '--help']\nfrom trainledger.cli.commands import main\ntry:\n    main()\n"
    "except SystemExit:\n    pass",
    "import sys; sys.argv = ['trainledger', 'report', 'monthly', '--help']\nfrom trainledger.cli.commands import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass",
])
def test_no_heavy_library_before_a_command_runs(code):
    assert _loaded(code) == []


def test_the_api_loads_on_first_use_and_stays_light():
    """``trainledger.track`` is the API's own function, loaded on first use; it opens no ledger before a run."""
    code = ("import trainledger, trainledger.sources.capture.track as t\n"
            "assert trainledger.track is t.track and trainledger.current_run is t.current_run\n"
            "assert trainledger.__version__ == __import__('importlib.metadata').metadata.version('trainledger')")
    assert _loaded(code) == []


#: what ``trainledger run`` must not load before its command starts: the ledger's ORM and every heavy library.
#: psutil (the keeper's end) and NVML (the GPUs the job owns) are loaded before the keeper forks, on purpose.
NOT_BEFORE_THE_JOB = tuple(m for m in HEAVY if m not in ("psutil", "pynvml"))


def test_run_starts_its_command_before_loading_the_orm(sqlite_url, tmp_path):
    """On a SQLite ledger at the current schema the checks before the start read it with ``sqlite3``
    (``trainledger.sources.capture.precheck``): SQLAlchemy, SQLModel and the tables load while the command runs,
    in the writer, and the run is recorded all the same when the wrapper returns (issue #35)."""
    seen = tmp_path / "loaded-at-start.json"
    probe = (
        "import json, sys\n"
        "from trainledger.sources.capture import keeper\n"
        "go = keeper.Kept.go\n"
        "def seen(self):\n"
        f"    with open({str(seen)!r}, 'w') as fh:\n"
        f"        json.dump(sorted(m for m in {NOT_BEFORE_THE_JOB!r} if m in sys.modules), fh)\n"
        "    return go(self)\n"
        "keeper.Kept.go = seen\n"
        f"sys.argv = ['trainledger', 'run', '--quiet', '--db', {sqlite_url!r}, '--node-type', 'rtx4090-8x', '--', "
        "'true']\n"
        "from trainledger.cli.commands import main\n"
        "main()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.update(TRAINLEDGER_JOURNAL_DIR=str(tmp_path / "journal"), XDG_DATA_HOME=str(tmp_path / "xdg"))
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(seen.read_text()) == []
    with contextlib.closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as conn:
        assert conn.execute("SELECT status, exit_code, node_type_id IS NOT NULL FROM run").fetchall() == \
            [("succeeded", 0, 1)]
