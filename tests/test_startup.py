"""Fast start: ``import trainledger`` and the CLI's ``--help`` load no heavy library (issue #35, item 5).

Each command imports what it needs when it runs; these tests fail when a module-level import drags a heavy
library into every command again. Timings live in ``python -m bench --only cli_start`` (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import json
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
    "import trainledger.cli.main",
    "import sys; sys.argv = ['trainledger', '--help']\nfrom trainledger.cli.main import main\ntry:\n    main()\n"
    "except SystemExit:\n    pass",
    "import sys; sys.argv = ['trainledger', 'report', 'monthly', '--help']\nfrom trainledger.cli.main import main\n"
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
