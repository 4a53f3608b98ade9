"""What trainledger's entry points set for their process before anything else (ledger/process.py): the garbage
collector's thresholds, and for a trainer rank TorchDynamo off unless its user said (trainer/train.py).

Each entry point runs in a process of its own, as it starts in use; where the work behind it is heavy (a training
run, a Streamlit server), the function it hands over to is replaced by one that reports what it finds."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from trainledger.process import GC_THRESHOLDS

REPO = Path(__file__).resolve().parents[1]
PYTHON_DEFAULT = (700, 10, 10)


def _run(code: str, **env: str) -> dict:
    child_env = {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"} | env
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


REPORT = "json.dumps({'gc': list(gc.get_threshold()), 'dynamo': os.environ.get('TORCHDYNAMO_DISABLE')})"


def test_the_thresholds_differ_from_pythons_own():
    assert GC_THRESHOLDS[0] > PYTHON_DEFAULT[0] and gc.get_threshold() == GC_THRESHOLDS  # tests/conftest.py too


def test_the_console_script_sets_them_before_its_command_runs():
    got = _run("import gc, json, os, sys\n"
               "from trainledger.cli import main\n"  # the console script's entry, as it imports it
               "import trainledger.cli.commands as m\n"
               f"m.main = lambda: print({REPORT})\n"
               "sys.argv = ['trainledger', '--version']\n"
               "main()\n")
    assert got == {"gc": list(GC_THRESHOLDS), "dynamo": None}


def test_a_trainer_rank_sets_them_and_runs_eagerly_unless_told():
    code = ("import gc, json, os\n"
            "import trainledger.trainer.train as t\n"
            f"t.main = lambda: print({REPORT}) or 0\n"
            "t.run_and_exit()\n")
    assert _run(code) == {"gc": list(GC_THRESHOLDS), "dynamo": "1"}
    assert _run(code, TORCHDYNAMO_DISABLE="0") == {"gc": list(GC_THRESHOLDS), "dynamo": "0"}


def test_the_dashboard_server_sets_them_before_streamlit_starts():
    got = _run("import gc, json, os\n"
               "import streamlit.web.cli as cli\n"
               f"cli.main = lambda: print({REPORT})\n"
               "from trainledger.app.serving.serve import main\n"
               "main(['run', 'app/serving/asgi.py'])\n")
    assert got == {"gc": list(GC_THRESHOLDS), "dynamo": None}
