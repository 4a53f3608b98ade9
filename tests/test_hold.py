"""The test-only run hold (ledger/sources/capture/hold.py): parsed strictly, inert when unset, holds until its file exists."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from trainledger.sources.capture.hold import ENV, Holds, parse_holds


def test_parse_holds_reads_steps_and_files():
    assert parse_holds(None) == {} and parse_holds("") == {}
    assert parse_holds("10:/tmp/a,49:/tmp/b:c") == {10: Path("/tmp/a"), 49: Path("/tmp/b:c")}


@pytest.mark.parametrize("bad", ["10", "x:/tmp/a", ":/tmp/a", "10:", "-1:/tmp/a"])
def test_a_malformed_hold_names_the_variable(bad):
    with pytest.raises(ValueError, match=f"^{ENV}: expected STEPS:PATH"):
        parse_holds(bad)


def test_unset_is_inert(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    called = []
    Holds().after(1, lambda: called.append(1))
    assert called == []  # no hold: not even the hand-over runs


def test_a_hold_waits_for_its_file_and_only_at_its_step(tmp_path):
    gate = tmp_path / "go"
    holds = Holds(f"3:{gate}")
    holds.after(2)  # another step: returns at once
    waiting = threading.Event()
    t = threading.Thread(target=holds.after, args=(3, waiting.set), daemon=True)
    t.start()
    assert waiting.wait(60)  # the hand-over ran: it is at the hold now
    assert t.is_alive()  # and cannot go on without the file
    gate.touch()
    t.join(60)
    assert not t.is_alive()
