"""No poison record (issue 24, item 3), on SQLite and PostgreSQL.

Journals are written here line by line as an older version (or a crash) could have left them: NUL
characters and lone surrogates in text, integers beyond 64 bits, NaN, a timestamp that is not one, a
corrupt line. Everything storable is stored clean; what cannot be applied is quarantined with its reason
and never stops the other events or the other journals; pending is decided by content, not by mtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trainledger.sources.record.journal import Journal, sync_all
from trainledger.store.db import make_engine
from trainledger.store.models import RunStatus

from tests.capture.conftest import REPO, all_runs, run_row, samples_of

T0 = "2026-11-03T10:00:00+00:00"
T1 = "2026-11-03T11:00:00+00:00"


def _start(rid: str, **extra) -> dict:
    fields = {"name": rid, "status": "running", "node_type": "rtx4090-8x", "launcher": "api", "nodes": 1,
              "gpus_per_node": 1, "world_size": 1, "started_at": T0, "heartbeat_at": T0, **extra}
    return {"type": "run", "run_id": rid, "fields": fields}


def _end(rid: str, **extra) -> dict:
    return {"type": "run", "run_id": rid, "fields": {"status": "succeeded", "ended_at": T1, "heartbeat_at": T1,
                                                     "exit_code": 0, **extra}}


def _write(path: Path, events: list, raw_lines: dict[int, bytes] | None = None) -> None:
    """Events as JSON lines with seq 1, 2, ...; ``raw_lines``: lines put before the event of that index."""
    with open(path, "ab") as fh:
        for i, ev in enumerate(events):
            if raw_lines and i in raw_lines:
                fh.write(raw_lines[i])
            fh.write(json.dumps({"seq": i + 1, **ev}).encode() + b"\n")


def _sync(url: str, journal: Path) -> dict:
    engine = make_engine(url)
    try:
        return sync_all(engine, journal)
    finally:
        engine.dispose()


def test_nul_bad_utf8_huge_integers_and_nan_are_stored_clean(ledger_url, tmp_path):
    journal = tmp_path / "journal"
    journal.mkdir()
    _write(journal / "dirty.jsonl", [
        _start("dirty", name="train\udcff.py", config={"argv": ["--tag", "a\x00b"], "n": 2**70}),
        {"type": "samples", "run_id": "dirty", "rows": [["", -1, "loss", T0, float("nan")], ["", -1, "lr", T0, 0.5]]},
        _end("dirty", tokens=2**70, final_loss=float("nan"), error="stderr tail: bad\x00byte", exit_code=0)])
    assert _sync(ledger_url, journal) == {"dirty": 3}
    run = run_row(ledger_url, "dirty")
    assert (run.status, run.name, run.tokens, run.final_loss, run.error) == (
        RunStatus.succeeded, "train\ufffd.py", None, None, "stderr tail: badbyte")
    assert run.config == {"argv": ["--tag", "ab"], "n": None}
    assert [v for _, _, v in samples_of(ledger_url, "dirty", "lr")] == [0.5]
    assert [v for _, _, v in samples_of(ledger_url, "dirty", "loss")] == [None]
    assert not (journal / "dirty.quarantine").exists()


def test_a_nul_in_the_stderr_tail_never_blocks_the_end_event(ledger_url, tmp_path):
    journal = tmp_path / "journal"
    journal.mkdir()
    _write(journal / "nul.jsonl", [_start("nul"), _end("nul", error="Traceback ...\x00\x00 core dumped", exit_code=139)])
    assert _sync(ledger_url, journal) == {"nul": 2}
    run = run_row(ledger_url, "nul")
    assert (run.status, run.exit_code, run.error) == (RunStatus.succeeded, 139, "Traceback ... core dumped")


def test_a_poisoned_journal_never_stops_a_good_one(ledger_url, tmp_path):
    journal = tmp_path / "journal"
    journal.mkdir()
    _write(journal / "a-poison.jsonl", [
        _start("a-poison"),
        {"type": "heartbeat", "run_id": "a-poison", "ts": "yesterday"},  # not a time: poison
        {"type": "samples", "run_id": "a-poison", "rows": [["", -1, "loss", T0, 1.25]]},
        _start("a-poison", node_type="no-such-node-type"),  # poison: unknown node type
        _end("a-poison", tokens=300)], raw_lines={2: b'{"seq": 3, "type": "samp\n', 4: b"\xff\xfe not json\n"})
    _write(journal / "b-good.jsonl", [_start("b-good"), _end("b-good", tokens=42)])
    assert _sync(ledger_url, journal) == {"a-poison": 3, "b-good": 2}
    runs = {r.id: r for r in all_runs(ledger_url)}
    assert (runs["b-good"].status, runs["b-good"].tokens) == (RunStatus.succeeded, 42)
    assert (runs["a-poison"].status, runs["a-poison"].tokens) == (RunStatus.succeeded, 300)
    assert [v for _, _, v in samples_of(ledger_url, "a-poison", "loss")] == [1.25]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "sync", "--journal-dir", str(journal), "--db", ledger_url,
                          "--show-quarantine", "--json"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["quarantined"]
    assert [(r["journal"], r["seq"], r["type"]) for r in rows] == [
        ("a-poison.jsonl", None, None), ("a-poison.jsonl", None, None),
        ("a-poison.jsonl", 2, "heartbeat"), ("a-poison.jsonl", 4, "run")]
    assert "not a journal event" in rows[0]["reason"] and "Invalid isoformat string: 'yesterday'" in rows[2]["reason"]
    assert "unknown node_type 'no-such-node-type'" in rows[3]["reason"]
    # a second sync finds nothing pending and quarantines nothing twice
    assert _sync(ledger_url, journal) == {}
    again = subprocess.run([sys.executable, "-m", "trainledger.cli", "sync", "--journal-dir", str(journal), "--db",
                            ledger_url, "--json"], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert json.loads(again.stdout) == {"applied": {}, "quarantined": 4}


def test_sync_decides_what_is_pending_by_content_not_by_mtime(ledger_url, tmp_path):
    journal = tmp_path / "journal"
    journal.mkdir()
    path = journal / "coarse.jsonl"
    _write(path, [_start("coarse")])
    assert _sync(ledger_url, journal) == {"coarse": 1}
    stamp = os.stat(path).st_mtime_ns
    j = Journal(journal, "coarse")
    j.append([_end("coarse", tokens=9)])
    # a file system with 1-second timestamps: the journal's write and the last replay share one second
    second = stamp // 10**9 * 10**9
    for p in (path, journal / "coarse.applied"):
        os.utime(p, ns=(second, second))
    assert _sync(ledger_url, journal) == {"coarse": 1}
    assert (run_row(ledger_url, "coarse").status, run_row(ledger_url, "coarse").tokens) == (RunStatus.succeeded, 9)
