"""Output files (``report monthly -o``, ``db backup --out``): never through a planted link, never over a file unasked.

The finding: ``report monthly -o X`` followed a planted ``X.part`` symlink (writing through it into
another file) and replaced an existing X without a word, while ``db backup`` refused one. Both
now go through ``trainledger.store.files.write_output``: an existing output needs ``--force``; the
bytes go to a temporary file created with O_EXCL under a random name in X's directory, then
take X's name (a hard link that fails if X appeared meanwhile; ``os.replace`` with --force, which
replaces a link at X rather than following it). Nothing is left behind when a write fails.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from trainledger.errors import LedgerInputError
from trainledger.store.db import make_engine
from trainledger.store.files import write_output

from tests.hostile.conftest import assert_clean, assert_refused, invoke
from tests.hostile.test_migrations_backups import write_history

MONTH = "2026-10"


@pytest.fixture
def ledger(sqlite_url):
    make_engine(sqlite_url).dispose()
    write_history(sqlite_url)
    return sqlite_url


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def test_a_planted_part_symlink_is_never_followed(ledger, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "report.csv"
    (tmp_path / "report.csv.part").symlink_to(victim)
    assert_clean(invoke(["report", "monthly", "--month", MONTH, "-o", out], ledger), codes=(0,))
    assert victim.read_text() == "precious\n"
    assert out.read_bytes().startswith(b"metric,value\nmonth,2026-10\n")
    assert not out.is_symlink()
    assert _leftovers(tmp_path) == ["report.csv.part"]  # the planted link itself, untouched
    assert os.readlink(tmp_path / "report.csv.part") == str(victim)


@pytest.mark.parametrize("command", [["report", "monthly", "--month", MONTH, "--format", "json", "-o"],
                                     ["db", "backup", "--out"]])
def test_an_existing_output_needs_force(ledger, tmp_path, command):
    out = tmp_path / "existing.out"
    out.write_text("keep me\n")
    result = invoke([*command, out], ledger)
    assert_refused(result, "exists", "--force")
    assert out.read_text() == "keep me\n"
    assert_clean(invoke([*command, out, "--force"], ledger), codes=(0,))
    assert out.read_bytes() != b"keep me\n" and out.stat().st_size > 0
    assert _leftovers(tmp_path) == []


def test_force_replaces_a_link_at_the_output_instead_of_writing_through_it(ledger, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "report.json"
    out.symlink_to(victim)
    assert_refused(invoke(["report", "monthly", "--month", MONTH, "--format", "json", "-o", out], ledger), "exists")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x.json")  # a dangling link counts as existing too
    assert_refused(invoke(["report", "monthly", "--month", MONTH, "--format", "json", "-o", dangling], ledger), "exists")
    assert_clean(invoke(["report", "monthly", "--month", MONTH, "--format", "json", "-o", out, "--force"], ledger),
                 codes=(0,))
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and out.read_text().startswith("{")


def test_a_backup_is_private_and_a_report_follows_the_umask(ledger, tmp_path):
    backup = tmp_path / "ledger.backup"
    assert_clean(invoke(["db", "backup", "--out", backup], ledger), codes=(0,))
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600
    old = os.umask(0o027)
    try:
        report = tmp_path / "r.csv"
        assert_clean(invoke(["report", "monthly", "--month", MONTH, "-o", report], ledger), codes=(0,))
    finally:
        os.umask(old)
    assert stat.S_IMODE(report.stat().st_mode) == 0o640


def test_a_name_that_appears_during_the_write_is_not_overwritten(tmp_path):
    out = tmp_path / "race.bin"

    def slow_writer(tmp: Path) -> None:  # another process creates the output while we write
        tmp.write_bytes(b"ours")
        out.write_bytes(b"theirs")

    with pytest.raises(LedgerInputError, match="exists; pass --force"):
        write_output(out, writer=slow_writer)
    assert out.read_bytes() == b"theirs"
    assert _leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["race.bin"]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), LedgerInputError("pg_dump failed: boom")])
def test_a_failed_write_leaves_nothing(tmp_path, error):
    out = tmp_path / "half.bin"

    def failing_writer(tmp: Path) -> None:
        tmp.write_bytes(b"half of it")
        raise error

    with pytest.raises(LedgerInputError) as info:
        write_output(out, writer=failing_writer)
    assert "No space left on device" in str(info.value) or "pg_dump failed" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_bad_output_paths_are_one_line(ledger, tmp_path):
    assert_refused(invoke(["report", "monthly", "--month", MONTH, "-o", tmp_path / "missing" / "r.csv"], ledger),
                   "does not exist")
    assert_refused(invoke(["report", "monthly", "--month", MONTH, "-o", tmp_path], ledger), "is a directory")
    assert _leftovers(tmp_path) == []
