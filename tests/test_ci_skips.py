"""Issue 38: under CI=true a skip is a failure unless allow-listed (tests/ci_skips.py), in a plain pytest run too.

Each case runs a small inner pytest session (pytester, in process) with the plugin, as tests/conftest.py loads it.
"""

from __future__ import annotations

import pytest

from tests import ci_skips

SOURCE = """
import pytest

def test_runtime_skip():
    pytest.skip("no widget here")

@pytest.mark.skipif(True, reason="marked off")
def test_marker_skip():
    pass

def test_importorskip():
    pytest.importorskip("a_module_that_is_not_installed")

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert False

def test_passes():
    assert 1 + 1 == 2
"""


def _run(pytester, monkeypatch, ci: str | None, source: str = SOURCE):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_inprocess("-p", "tests.ci_skips", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA")


def test_each_kind_of_skip_fails_under_ci(pytester, monkeypatch):
    result = _run(pytester, monkeypatch, "true")
    result.assert_outcomes(passed=1, failed=2, errors=1, xfailed=1)  # a marker skips in setup: an error there
    out = result.stdout.str()
    for why in ("no widget here", "marked off", "could not import 'a_module_that_is_not_installed'"):
        assert f"skipped under CI=true ({why}" in out, why
    assert out.count("CI_SKIP_ALLOWED (tests/ci_skips.py)") >= 3


def test_skips_stay_skips_off_ci(pytester, monkeypatch):
    for ci in (None, "", "false", "0"):
        result = _run(pytester, monkeypatch, ci)
        result.assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_a_module_level_skip_fails_collection_under_ci(pytester, monkeypatch):
    source = 'import pytest\npytest.skip("whole module off", allow_module_level=True)\n\ndef test_a():\n    pass\n'
    result = _run(pytester, monkeypatch, "true", source)
    result.assert_outcomes(errors=1)
    assert "skipped under CI=true (whole module off)" in result.stdout.str()
    result = _run(pytester, monkeypatch, None, source)
    result.assert_outcomes(skipped=1)


def test_an_allow_listed_skip_stays_a_skip_under_ci(pytester, monkeypatch):
    monkeypatch.setitem(ci_skips.CI_SKIP_ALLOWED, "test_inner.py::test_runtime_skip", "needs a GPU")
    result = _run(pytester, monkeypatch, "true")
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=1, xfailed=1)


@pytest.mark.parametrize("value, expected", [("true", True), ("1", True), ("yes", True), ("", False),
                                             ("false", False), ("0", False), ("No", False)])
def test_what_counts_as_ci(monkeypatch, value, expected):
    monkeypatch.setenv("CI", value)
    assert ci_skips.in_ci() is expected
