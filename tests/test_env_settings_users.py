"""The ``TRAINLEDGER_*`` settings where they are used (issue 37): the bundled trainer's tracker reads them
leniently (a bad value is one warning and the default, the run goes on); ``trainledger launch`` and
``trainledger sweep``, which start the trainer but wrap no job, refuse a bad one in one line, exit 2, before
anything starts."""

from __future__ import annotations

import argparse

import pytest
from trainledger.cli.commands import app
from trainledger.trainer.tracking import add_tracking_args, tracker_from_args, tracking_settings
from typer.testing import CliRunner


def test_the_trainers_tracker_uses_the_default_for_a_bad_value_with_one_warning_line(capsys):
    env = {"TRAINLEDGER_FLUSH_S": "fast-tracker", "TRAINLEDGER_HEARTBEAT_S": "nan", "TRAINLEDGER_LEDGER_WAIT_S": "-7"}
    assert tracking_settings(env) == {"flush_s": 2.0, "heartbeat_s": 5.0, "ledger_wait_s": 30.0}
    assert tracking_settings(env) == {"flush_s": 2.0, "heartbeat_s": 5.0, "ledger_wait_s": 30.0}  # said once
    assert capsys.readouterr().err.splitlines() == [
        "[trainledger] warning: TRAINLEDGER_FLUSH_S='fast-tracker' is not seconds from 0.01 to 3600; using the default 2",
        "[trainledger] warning: TRAINLEDGER_HEARTBEAT_S='nan' is not seconds from 0.01 to 3600; using the default 5",
        "[trainledger] warning: TRAINLEDGER_LEDGER_WAIT_S='-7' is not seconds from 0 to 86400; using the default 30",
    ]
    good = {"TRAINLEDGER_FLUSH_S": "0.5", "TRAINLEDGER_HEARTBEAT_S": "3", "TRAINLEDGER_LEDGER_WAIT_S": "0"}
    assert tracking_settings(good) == {"flush_s": 0.5, "heartbeat_s": 3.0, "ledger_wait_s": 0.0}


def test_a_tracked_trainer_run_starts_with_the_defaults_when_the_variables_are_bad(monkeypatch, capsys):
    """What used to be ``float(os.environ[...])`` in ``tracker_from_args`` (a ValueError before the first step)."""
    monkeypatch.setenv("TRAINLEDGER_FLUSH_S", "2s")
    monkeypatch.setenv("TRAINLEDGER_HEARTBEAT_S", "1e999")
    monkeypatch.setenv("TRAINLEDGER_LEDGER_WAIT_S", "")
    parser = argparse.ArgumentParser()
    add_tracking_args(parser)
    tracker = tracker_from_args(parser.parse_args(["--track", "--run-id", "bad-env-run"]), None)
    assert (tracker.run_id, tracker.o.flush_s, tracker.o.heartbeat_s, tracker.o.ledger_wait_s) == (
        "bad-env-run", 2.0, 5.0, 30.0)
    assert [line for line in capsys.readouterr().err.splitlines() if "TRAINLEDGER_" in line] == [
        "[trainledger] warning: TRAINLEDGER_FLUSH_S='2s' is not seconds from 0.01 to 3600; using the default 2",
        "[trainledger] warning: TRAINLEDGER_HEARTBEAT_S='1e999' is not seconds from 0.01 to 3600; using the default 5",
    ]


@pytest.mark.parametrize("command", [["launch", "trainer/configs/zero2.yaml"], ["sweep", "trainer/configs/zero2.yaml"]],
                         ids=["launch", "sweep"])
@pytest.mark.parametrize(("name", "raw", "line"), [
    ("TRAINLEDGER_FLUSH_S", "often", "error: TRAINLEDGER_FLUSH_S: expected seconds from 0.01 to 3600 such as 2, "
                                     "got 'often'"),
    ("TRAINLEDGER_LEDGER_WAIT_S", "inf", "error: TRAINLEDGER_LEDGER_WAIT_S: expected seconds from 0 to 86400 such "
                                         "as 30, got 'inf'"),
    ("TRAINLEDGER_UTIL_INTERVAL_S", "0", "error: TRAINLEDGER_UTIL_INTERVAL_S: expected seconds from 0.05 to 3600 "
                                         "such as 1, got '0'"),
    ("TRAINLEDGER_COMM_TIMEOUT_S", "-5", "error: TRAINLEDGER_COMM_TIMEOUT_S: expected seconds from 0.001 to 604800 "
                                         "such as 1800, got '-5'"),
    ("TRAINLEDGER_SQLITE_BUSY_S", "soon", "error: TRAINLEDGER_SQLITE_BUSY_S: expected seconds from 0.001 to 86400 "
                                          "such as 60, got 'soon'"),
])
def test_launch_and_sweep_refuse_a_bad_variable_in_one_line_before_anything_starts(tmp_path, command, name, raw,
                                                                                     line):
    db = tmp_path / "never.db"
    result = CliRunner().invoke(app, [*command, "--db", f"sqlite:///{db}"], env={name: raw})
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [line]
    assert not db.exists()  # nothing ran: not even the ledger was created


def test_the_trainers_comm_timeout_and_fault_step_never_stop_the_job(monkeypatch, capsys):
    """TRAINLEDGER_COMM_TIMEOUT_S and TRAINLEDGER_FAULT_STEP on the job's side: a good value is used, a bad one is
    said once and torch's default (no fault) is used; the run is never refused over them."""
    from datetime import timedelta

    from trainledger.store import envsettings
    from trainledger.trainer.distributed import comm_timeout

    monkeypatch.setattr(envsettings, "_said", set())
    for raw, want in (("", None), ("90", timedelta(seconds=90)), ("0.5", timedelta(seconds=0.5))):
        monkeypatch.setenv("TRAINLEDGER_COMM_TIMEOUT_S", raw)
        assert comm_timeout() == want
    for raw in ("soon", "0", "-1", "nan", "1e999"):
        monkeypatch.setenv("TRAINLEDGER_COMM_TIMEOUT_S", raw)
        assert comm_timeout() is None and comm_timeout() is None
    assert capsys.readouterr().err.splitlines() == [
        f"[trainledger] warning: TRAINLEDGER_COMM_TIMEOUT_S={raw!r} is not seconds from 0.001 to 604800; using the "
        "library's default" for raw in ("soon", "0", "-1", "nan", "1e999")]
    for raw, want in (("", None), ("7", 7), ("0", 0), ("3.5", None), ("-2", None), ("seven", None), ("٣", None)):
        assert envsettings.env_step({"TRAINLEDGER_FAULT_STEP": raw}) == want, raw
    assert capsys.readouterr().err.splitlines() == [
        f"[trainledger] warning: TRAINLEDGER_FAULT_STEP={raw!r} is not a step number; no fault is injected"
        for raw in ("3.5", "-2", "seven", "٣")]
