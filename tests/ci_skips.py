"""No silent skips in CI (issue 38): under ``CI=true`` a skipped test is a failure unless it is allow-listed here.

A skip on a developer's laptop says "this machine lacks X" (no Chromium, no root, no PostgreSQL). In CI every
such X is installed by tests/setup.sh, so a skip there means a test that silently stopped testing. This plugin
turns each skip, at collection (a module-level ``pytest.skip``) or at run time (a fixture's or the test's own),
into a failure that names the reason and the fix. It is loaded by tests/conftest.py, so a plain
``CI=true python -m pytest`` enforces it too, not only tests/run.sh.

``xfail`` is not a skip and is left alone. A test that can only run on hardware CI lacks goes in
:data:`CI_SKIP_ALLOWED` with the reason it may skip.
"""

from __future__ import annotations

import os

import pytest

#: node-id prefix -> why it may skip under CI. Nothing is listed: CI (tests/setup.sh) installs every program the
#: suite needs, and the GPU checks run on a lent device machine, not in the suite. Add GPU-only tests here.
CI_SKIP_ALLOWED: dict[str, str] = {}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def allowed(nodeid: str) -> bool:
    return any(nodeid.startswith(prefix) for prefix in CI_SKIP_ALLOWED)


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail(report) -> None:
    why = _reason(report)
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true ({why}): install what it needs in tests/setup.sh, or list it in "
                       "CI_SKIP_ALLOWED (tests/ci_skips.py) with the reason it may skip")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and in_ci() and not allowed(item.nodeid):
        _fail(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not allowed(collector.nodeid):
        _fail(report)
