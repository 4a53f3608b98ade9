#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian machine (tests/setup.sh), start the services it
# talks to, and run the suite. Used by .ci/run and the README.
#
#   bash tests/run.sh [--fast] [PYTEST ARGS...]
#
# Without --fast: every test (what CI runs). --fast: the day-to-day tier, `-m "not slow"`: unit and CLI tests
# without multi-process runs, Slurm, Prometheus or Chromium (tests/conftest.py marks whole folders slow).
set -euo pipefail
cd "$(dirname "$0")/.."

FAST=()
if [ "${1:-}" = "--fast" ]; then
  shift
  FAST=(-m "not slow")
fi

source tests/setup.sh

# --- the suite -----------------------------------------------------------------
# pytest-xdist: independent test files on several workers (tests/conftest.py keeps a file, and the folders that
# share a session fixture, on one worker); most tests wait on processes, so 3 workers fill 2 cores. The slowest
# 20 items are printed at the end of every run (issue 38)
exec "$VENV/bin/python" -m pytest -q -n "${TRAINLEDGER_TEST_WORKERS:-3}" --dist loadgroup --durations=20 "${FAST[@]}" "$@"
