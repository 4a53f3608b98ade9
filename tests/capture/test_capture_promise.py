"""Issue 37: capture keeps its promise on every surface. Each case of the issue, reproduced: the job (a training
function or a tiny wrapped command) is unharmed and the run is recorded. In-process calls and one-line commands;
no DeepSpeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from trainledger.errors import LedgerInputError
from trainledger.store.models import RunStatus

from tests.capture.conftest import BIN, REPO, all_runs, run_row, wrap_cmd

TRUE = [sys.executable, "-c", "pass"]


def tracked(db: str, journal: Path, body, **kw):
    """Run ``body(run)`` inside ``trainledger.track`` (fast flushes); the run's id."""
    import trainledger

    with trainledger.track(project="p", db=db, journal_dir=journal, flush_s=0.05, heartbeat_s=0.1,
                           ledger_wait_s=5, **kw) as run:
        body(run)
    return run.run_id


# --- the API: phase and checkpoint lengths, argument types, arguments and variables -------------------------

@pytest.mark.parametrize("seconds", [float("inf"), 1e300, -1e300, float("nan")])
def test_a_huge_or_infinite_phase_or_checkpoint_length_leaves_the_run_recorded(ledger_url, tmp_path, seconds):
    def body(run):
        for step in range(3):
            run.log(step=step, tokens=10)
            run.phase_span("eval", seconds)
            run.checkpoint(step=step, seconds=seconds)
    rid = tracked(ledger_url, tmp_path / "j", body)
    row = run_row(ledger_url, rid)
    assert (row.status, row.steps, row.tokens, row.last_checkpoint_step) == (RunStatus.succeeded, 3, 30, 2)


def test_wrong_argument_types_to_phase_span_and_step_times_never_raise(ledger_url, tmp_path, capfd):
    class Hostile:
        def __str__(self):
            raise RuntimeError("no str")

        def __float__(self):
            raise RuntimeError("no float")

    def body(run):
        run.log(step=0, tokens=1)
        run.phase_span(Hostile(), "abc")
        run.phase_span(None, Hostile())
        run.step_times(5)
        run.step_times([Hostile(), None, "x", float("nan"), 1.0])
        run.step_times(Hostile())
        with run.phase(Hostile()):
            pass
        run.log(step=1, tokens=1)
    rid = tracked(ledger_url, tmp_path / "j", body)
    row = run_row(ledger_url, rid)
    assert (row.status, row.steps, row.tokens) == (RunStatus.succeeded, 2, 2)
    err = capfd.readouterr().err
    assert err.count("seconds_per_rank=") == 1 and err.count("seconds=") == 1, err


def test_bad_arguments_to_track_are_dropped_with_one_warning_each_and_recorded(ledger_url, tmp_path, capfd):
    rid = tracked(ledger_url, tmp_path / "j", lambda run: run.log(step=0, tokens=5), name=b"x", tags=[1],
                  run_id="../escape", resume_of="a\nb", flops_per_token="many", peak_tflops=-1, gpus=float("nan"),
                  metrics_port=10**6)
    row = run_row(ledger_url, rid)
    assert row.status == RunStatus.succeeded and row.tokens == 5 and "/" not in rid
    assert row.config["api"]["dropped"] == ["run_id", "name", "tags", "resume_of", "flops_per_token", "peak_tflops",
                                            "metrics_port", "gpus"]
    err = [line for line in capfd.readouterr().err.splitlines() if "dropped" in line]
    assert len(err) == 8, err


def test_malformed_trainledger_variables_never_raise_out_of_track(ledger_url, tmp_path, capfd):
    import trainledger

    env = {"TRAINLEDGER_FLUSH_S": "abc", "TRAINLEDGER_HEARTBEAT_S": "nan", "TRAINLEDGER_LEDGER_WAIT_S": "1e999",
           "TRAINLEDGER_RUN_ID": "../etc\npasswd", "WORLD_SIZE": "many", "RANK": "-1"}
    run = trainledger.track(project="p", db=ledger_url, journal_dir=tmp_path / "j", env=env)
    assert (run.flush_s, run.heartbeat_s, run.ledger_wait_s, run.run_id) == (2.0, 5.0, 30.0, None)
    with run:
        run.log(step=0, tokens=3)
    assert run_row(ledger_url, run.run_id).status == RunStatus.succeeded
    err = capfd.readouterr().err
    for name in ("TRAINLEDGER_FLUSH_S", "TRAINLEDGER_HEARTBEAT_S", "TRAINLEDGER_LEDGER_WAIT_S", "TRAINLEDGER_RUN_ID"):
        assert err.count(name) == 1, (name, err)


def test_a_clock_jump_of_decades_is_not_a_decades_long_step(monkeypatch):
    from trainledger.sources.record.phases import PhaseAggregator, PhaseRecorder

    rec = PhaseRecorder()
    agg = PhaseAggregator(rec.clock())
    rec.step_begin()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 40 * 365 * 86400)  # the system clock cannot be set here
    rec.step_end()
    rec.step_begin()
    rec.step_end()
    agg.feed(rec.drain())
    seconds, count = agg.rows()["step"][:2]
    assert count == 2 and 0 <= seconds < 60


# --- settings: one place, lenient on the job's side, strict elsewhere --------------------------------------

def test_each_setting_is_parsed_in_one_place_with_its_range():
    from trainledger.store.envsettings import FLUSH_S, UTIL_INTERVAL_S, env_setting

    said: list[str] = []
    for raw in ("abc", "nan", "inf", "0", "-1", "1e999"):
        assert env_setting(FLUSH_S, {"TRAINLEDGER_FLUSH_S": raw}, write=said.append) == 2.0
        with pytest.raises(LedgerInputError, match=r"^TRAINLEDGER_FLUSH_S: expected seconds from 0.01 to 3600"):
            env_setting(FLUSH_S, {"TRAINLEDGER_FLUSH_S": raw}, strict=True)
    assert len(said) == 6 and all(line.endswith("using the default 2") for line in said)
    assert env_setting(UTIL_INTERVAL_S, {"TRAINLEDGER_UTIL_INTERVAL_S": " 0.5 "}) == 0.5
    assert env_setting(UTIL_INTERVAL_S, {}) == 1.0


# --- the wrapper -------------------------------------------------------------------------------------------

def wrapped(url: str, env: dict, *args, command=TRUE) -> subprocess.CompletedProcess:
    return subprocess.run(wrap_cmd(url, *args, command=command), env=env, capture_output=True, timeout=120,
                          cwd=REPO, text=True)


@pytest.mark.parametrize("extra", [
    {"TRAINLEDGER_MIG_PROFILE": "bogus", "CUDA_VISIBLE_DEVICES": "MIG-a"},
    {"TRAINLEDGER_MIG_PROFILE": "", "CUDA_VISIBLE_DEVICES": "MIG-a,MIG-b"},
    {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(10)))},
], ids=["unknown-profile", "no-profile", "more-gpus-than-the-node"])
def test_a_wrong_mig_or_gpu_setting_runs_the_job_and_costs_the_whole_node(ledger_url, capture_env, extra):
    r = wrapped(ledger_url, {**capture_env, **extra}, "--run-id", "mig-1")
    assert r.returncode == 0, r.stderr
    row = run_row(ledger_url, "mig-1")
    assert (row.status, row.share, row.share_basis) == (RunStatus.succeeded, None, None)
    assert "the run is costed as the whole node" in row.config["wrapper"]["share_note"]
    assert [line for line in r.stderr.splitlines() if "whole node" in line] != []


@pytest.mark.parametrize("raw", ["inf", "nan", "0", "-1", "abc"])
def test_a_bad_interval_variable_never_stops_the_wrapper(ledger_url, capture_env, raw):
    env = {**capture_env, "TRAINLEDGER_UTIL_INTERVAL_S": raw, "TRAINLEDGER_FLUSH_S": raw, "TRAINLEDGER_RUN_ID": "a\nb"}
    r = wrapped(ledger_url, env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    ours = r.stderr.splitlines()
    assert sum("TRAINLEDGER_UTIL_INTERVAL_S" in line and "using the default 1" in line for line in ours) == 1
    assert sum("TRAINLEDGER_RUN_ID" in line for line in ours) == 1
    assert [run.status for run in all_runs(ledger_url)] == [RunStatus.succeeded]


def test_a_malformed_ledger_url_runs_the_job_and_sync_records_it(capture_env, tmp_path):
    good = f"sqlite:///{tmp_path / 'ledger.db'}"
    r = wrapped("postgres+nope://x/y", capture_env, "--run-id", "url-1")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert sum("not usable now" in line for line in r.stderr.splitlines()) == 1
    s = subprocess.run([str(BIN / "trainledger"), "sync", "--db", good], env=capture_env, capture_output=True,
                       text=True, timeout=120)
    assert s.returncode == 0, s.stderr
    assert run_row(good, "url-1").status == RunStatus.succeeded


def test_a_journal_folder_that_cannot_be_made_still_records_the_run(ledger_url, capture_env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**capture_env, "TRAINLEDGER_JOURNAL_DIR": str(blocker / "journal")}
    r = wrapped(ledger_url, env, "--run-id", "ro-1")
    assert r.returncode == 0, r.stderr
    assert run_row(ledger_url, "ro-1").status == RunStatus.succeeded
    assert sum("written straight to the ledger" in line for line in r.stderr.splitlines()) >= 1


def test_a_script_without_a_shebang_runs_under_sh_as_it_would_bare(ledger_url, capture_env, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text('echo "ran $1"\nexit 3\n')
    script.chmod(0o755)
    bare = subprocess.run(["/bin/sh", "-c", f"{script} x"], capture_output=True, text=True, timeout=60)
    r = wrapped(ledger_url, capture_env, "--run-id", "sh-1", command=[str(script), "x"])
    assert (r.returncode, r.stdout) == (bare.returncode, bare.stdout) == (3, "ran x\n")
    row = run_row(ledger_url, "sh-1")
    assert (row.status, row.exit_code) == (RunStatus.failed, 3)


def test_an_aws_access_key_id_is_never_stored(ledger_url, capture_env):
    key = "AKIAIOSFODNN7EXAMPLE"
    r = wrapped(ledger_url, capture_env, "--run-id", "aws-1",
                command=[*TRUE, "--aws-access-key-id", key, f"--aws-access-key-id={key}"])
    assert r.returncode == 0, r.stderr
    row = run_row(ledger_url, "aws-1")
    assert key not in json.dumps(row.config)
    assert row.config["wrapper"]["command"][-2:] == ["***", "--aws-access-key-id=***"]


# --- whole results or none ---------------------------------------------------------------------------------

def test_a_folder_of_files_is_written_whole_or_not_at_all(tmp_path):
    from trainledger.store.files import write_folder

    out = tmp_path / "statements"
    with pytest.raises(LedgerInputError, match="^--output: cannot write"):
        write_folder(out, {"a.csv": b"1", "missing/b.csv": b"2"})  # fails half-way: nothing is left
    assert sorted(os.listdir(tmp_path)) == []
    write_folder(out, {"a.csv": b"1", "b.csv": b"2"})
    (out / "mine.txt").write_text("kept")
    with pytest.raises(LedgerInputError, match="exists; pass --force"):
        write_folder(out, {"a.csv": b"9"})
    write_folder(out, {"a.csv": b"9", "b.csv": b"8"}, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {"a.csv": b"9", "b.csv": b"8", "mine.txt": b"kept"}
    assert sorted(os.listdir(tmp_path)) == ["statements"]


def test_a_rerun_cleans_what_a_killed_write_left(tmp_path):
    from trainledger.store.files import write_folder

    out = tmp_path / "statements"
    (tmp_path / ".statements.x1.part").mkdir()  # a kill while the new set was written
    (tmp_path / ".statements.x1.part" / "a.csv").write_bytes(b"half")
    aside = tmp_path / ".statements.x2.old"  # a kill between moving the old set aside and the new one in
    (aside / "set").mkdir(parents=True)
    (aside / "set" / "old.csv").write_bytes(b"old")
    write_folder(out, {"a.csv": b"1"})
    assert sorted(os.listdir(tmp_path)) == ["statements"]
    assert sorted(os.listdir(out)) == ["a.csv", "old.csv"]
    (out / ".a.csv.zz.part").write_bytes(b"torn")  # an older per-file write killed
    write_folder(out, {"a.csv": b"2"}, force=True)
    assert sorted(os.listdir(out)) == ["a.csv", "old.csv"]


def test_report_chargeback_is_killed_mid_write_and_the_rerun_with_force_is_clean(tmp_path):
    """The kill: a process that gets SIGKILL while it writes the set (it stops itself at the point a test
    controls: after the first file of the new set, before the rename)."""
    out = tmp_path / "cb"
    code = ("import os, signal, trainledger.store.files as f\n"
            "real = f._swap\n"
            "def swap(tmp, folder):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "f._swap = swap\n"
            f"f.write_folder({str(out)!r}, {{'a.csv': b'1', 'b.csv': b'2'}})\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == -9
    assert not out.exists() and len(list(tmp_path.iterdir())) == 1  # only the temporary folder
    from trainledger.store.files import write_folder

    write_folder(out, {"a.csv": b"1", "b.csv": b"2"}, force=True)
    assert sorted(os.listdir(tmp_path)) == ["cb"] and sorted(os.listdir(out)) == ["a.csv", "b.csv"]


# --- bounded inputs ------------------------------------------------------------------------------------------

def test_hostfiles_are_read_bounded_linear_and_with_file_line_errors(tmp_path):
    from trainledger.trainer.parallel import PlanError, parse_hostfile

    with pytest.raises(PlanError, match="is larger than 8192 KiB"):
        parse_hostfile("/dev/zero")
    big = tmp_path / "big"
    big.write_text("".join(f"h{i} slots=8\n" for i in range(100_000)))
    assert len(parse_hostfile(big)) == 100_000
    dup = tmp_path / "dup"
    dup.write_text("a slots=1\nb slots=1\na slots=1\n")
    with pytest.raises(PlanError, match=r"line 3: host 'a' is listed twice \(first on line 1\)"):
        parse_hostfile(dup)
    for name, data, msg in (("bad", b"a slots=1\nb\xff slots=2\n", ":2: not UTF-8 text"),
                            ("nul", b"a slots=1\n\nb\0 slots=2\n", ":3: a NUL byte")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(PlanError, match=f"{tmp_path / name}{msg}"):
            parse_hostfile(tmp_path / name)


@pytest.mark.parametrize("weight", ["1e999999999", "1e-999999999", "-1", "nan"])
def test_an_idle_share_weight_out_of_range_is_one_line(weight):
    from trainledger.money.allocation.idle_share import parse_policy

    with pytest.raises(LedgerInputError, match=r"^--idle-share: the weight of 'p' must be 0 or a number from 1e-12"):
        parse_policy(f"weights:p={weight}")
    assert parse_policy("weights:p=1e12,q=0").weights == (("p", Decimal("1E+12")), ("q", Decimal("0")))
