"""``trainledger run`` can never hurt the job: it always runs, unchanged, gets every signal it would get
unwrapped, keeps the terminal and its exit code, whatever happens to the ledger, the journal's disk or our
stderr (issue 24). Real wrappers around real jobs (tests/capture/hostile_job.py), on tmpfs mounts that
fill up, with ledgers locked by a real second process, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from trainledger.store.models import RunStatus

from tests.capture.conftest import BIN, HERE, REPO, all_runs, nodes_of, run_id_of, run_row, wrap_cmd
from tests.tracking.conftest import wait_for

pytestmark = pytest.mark.slow
JOB = HERE / "hostile_job.py"


def hostile(*args) -> list[str]:
    return [sys.executable, str(JOB), *map(str, args)]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def ours(stderr: bytes | str) -> list[str]:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    return [line for line in text.splitlines() if line.startswith("[trainledger]")]


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(name, size, ro)``: a tmpfs of ``size`` under the test's folder, unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs that fills up needs root (mount -t tmpfs)")
    mounted: list[Path] = []

    def mount(name: str, size: str = "256k", ro: bool = False) -> Path:
        where = tmp_path / name
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""), "tmpfs", str(where)],
                       check=True)
        mounted.append(where)
        return where
    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill_up(folder: Path) -> None:
    """Write into ``folder`` until its file system is full."""
    try:
        with open(folder / "filler", "wb", buffering=0) as fh:
            while True:
                fh.write(b"x" * 4096)
    except OSError:
        pass


class Locker:
    """A real second process that holds the ledger's write lock until :meth:`release`: an open
    ``BEGIN IMMEDIATE`` on SQLite, ``LOCK TABLE run IN ACCESS EXCLUSIVE MODE`` on PostgreSQL."""

    CODE = r"""
import sys
from sqlalchemy import create_engine, text
url = sys.argv[1]
if url.startswith("sqlite"):
    import sqlite3
    con = sqlite3.connect(url.split(":///", 1)[1], isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
else:
    con = create_engine(url).connect()
    con.execute(text("LOCK TABLE run IN ACCESS EXCLUSIVE MODE"))
print("locked", flush=True)
sys.stdin.readline()
"""

    def __init__(self, url: str):
        from trainledger.store.db import make_engine

        make_engine(url).dispose()  # the schema exists: the lock is a writer's, not a migration's
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture
def locker():
    held: list[Locker] = []

    def lock(url: str) -> Locker:
        held.append(Locker(url))
        return held[-1]
    yield lock
    for lk in held:
        lk.release()


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_leftovers():
    """A failed test leaves no wrapper running (its keeper then ends the job)."""
    yield
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait(timeout=60)


#: what a login shell's commands start with. pytest may not: started by `cmd &` from a script (or a CI runner
#: that does so) it runs with SIGINT and SIGQUIT ignored, under nohup with SIGHUP ignored too, and a wrapper
#: passes what it inherited on to its job, as an unwrapped job would inherit it
LOGIN_DEFAULTS = ("SIGINT", "SIGQUIT", "SIGHUP", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGALRM", "SIGCONT",
                  "SIGTSTP", "SIGTTIN", "SIGTTOU")


def login_signals() -> None:
    """A ``preexec_fn``: every signal the tests send or read at its default disposition."""
    for name in LOGIN_DEFAULTS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def own_terminal() -> None:
    """A ``preexec_fn``: like a login shell, a session whose controlling terminal is the pty on stdin."""
    import fcntl
    import termios

    login_signals()
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def start(url: str, env: dict, *args, command: list[str], **kw) -> subprocess.Popen:
    kw.setdefault("preexec_fn", login_signals)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    STARTED.append(subprocess.Popen(wrap_cmd(url, *args, command=command), env=env, cwd=REPO, **kw))
    return STARTED[-1]


# --- 1. `trainledger run -- CMD` runs CMD ------------------------------------------------------

def test_no_option_before_the_dashdash_runs_the_command(ledger_url, capture_env, tmp_path):
    env = {**capture_env, "TRAINLEDGER_DB_URL": ledger_url}
    out = subprocess.run([str(BIN / "trainledger"), "run", "--", *hostile("--count", tmp_path / "n", "--out", "ran",
                                                                          "--exit", 3)],
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert (out.returncode, out.stdout) == (3, b"ran"), out.stderr.decode()
    assert len(lines(tmp_path / "n")) == 1
    (run,) = all_runs(ledger_url)
    assert (run.status, run.exit_code) == (RunStatus.failed, 3)
    help_ = subprocess.run([str(BIN / "trainledger"), "run"], env=env, capture_output=True, cwd=REPO, timeout=60)
    assert help_.returncode == 0 and b"-- COMMAND" in help_.stdout


# --- 2. every signal reaches the job; nohup's HUP stays ignored -------------------------------

def test_usr1_usr2_hup_winch_quit_alrm_reach_the_job_and_the_run_goes_on(ledger_url, capture_env, tmp_path):
    started, got, done = tmp_path / "started", tmp_path / "signals", tmp_path / "done"
    p = start(ledger_url, capture_env, command=hostile("--started", started, "--signals", got, "--wait-for", done,
                                                       "--exit", 0))
    wait_for(started.exists, 60, "the job to start")
    sent = ["SIGUSR1", "SIGUSR2", "SIGHUP", "SIGWINCH", "SIGQUIT", "SIGALRM", "SIGUSR1"]
    for i, name in enumerate(sent, 1):
        p.send_signal(getattr(signal, name))
        wait_for(lambda: len(lines(got)) >= i, 60, f"the job to get {name}")
    done.touch()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()
    assert lines(got) == sent  # each exactly once, in order: forwarded, never a cancel
    run = run_row(ledger_url, run_id_of(err))
    assert (run.status, run.exit_code, run.error) == (RunStatus.succeeded, 0, None)


def test_under_nohup_hup_stays_ignored_and_kills_neither_the_wrapper_nor_the_job(ledger_url, capture_env, tmp_path):
    started, ignored, done = tmp_path / "started", tmp_path / "ignored", tmp_path / "done"

    def nohup() -> None:
        login_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    p = start(ledger_url, capture_env, command=hostile("--started", started, "--report-ignored", ignored,
                                                       "--wait-for", done), preexec_fn=nohup)
    wait_for(started.exists, 60, "the job to start")
    assert lines(ignored) == ["SIGHUP"]  # inherited ignored, as unwrapped (the wrapper no longer resets it)
    os.kill(p.pid, signal.SIGHUP)
    os.kill(int(lines(started)[0]), signal.SIGHUP)
    done.touch()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()
    assert run_row(ledger_url, run_id_of(err)).status == RunStatus.succeeded


def _signal_state(pid: int) -> dict[str, str]:
    """The blocked mask and ignored set of a process, as the kernel has them."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in status) if k in ("SigBlk", "SigIgn")}


@pytest.mark.parametrize("parent", ["login", "nohup_and_a_blocked_winch"])
def test_the_job_starts_with_the_mask_and_ignored_signals_it_would_have_bare(ledger_url, capture_env, tmp_path,
                                                                             parent):
    """The wrapper blocks the signals it forwards (one thread takes them with their sender): neither the keeper
    nor the command may inherit that mask, nor a disposition they would not have bare (issue 37)."""
    def setup() -> None:
        login_signals()
        if parent != "login":
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})
    states = {}
    for how in ("bare", "wrapped"):
        started, done = tmp_path / f"{how}.started", tmp_path / f"{how}.done"
        job = hostile("--started", started, "--wait-for", done)
        if how == "bare":
            p = subprocess.Popen(job, env=capture_env, cwd=REPO, preexec_fn=setup)
            STARTED.append(p)
        else:
            p = start(ledger_url, capture_env, command=job, preexec_fn=setup)
        wait_for(started.exists, 60, f"the {how} job to start")
        states[how] = _signal_state(int(lines(started)[0]))
        done.touch()
        p.communicate(timeout=120)
        assert p.returncode == 0
    assert states["wrapped"] == states["bare"]
    if parent != "login":
        assert int(states["bare"]["SigBlk"], 16) & (1 << (signal.SIGWINCH - 1))
        assert int(states["bare"]["SigIgn"], 16) & (1 << (signal.SIGHUP - 1))


# --- 3. the terminal: the job is its foreground process group ---------------------------------

def test_a_job_that_reads_the_terminal_gets_its_line_and_ctrl_c_cancels_it(ledger_url, capture_env, tmp_path):
    master, slave = os.openpty()
    read, started = tmp_path / "line", tmp_path / "started"
    p = subprocess.Popen(wrap_cmd(ledger_url, command=hostile("--read-line", read, "--started", started,
                                                              "--wait-for", tmp_path / "never")),
                         env=capture_env, cwd=REPO, stdin=slave, stdout=slave, stderr=slave,
                         preexec_fn=own_terminal)
    STARTED.append(p)
    os.close(slave)
    try:
        os.write(master, b"typed at the terminal\n")
        wait_for(lambda: lines(read), 60, "the job to read its line (unwrapped it would; stopped on SIGTTIN it cannot)")
        assert lines(read) == ["typed at the terminal"]
        wait_for(started.exists, 60, "the job to go on")
        os.write(master, b"\x03")  # Ctrl-C: the terminal's foreground group is the job's
        output = _drain(master, p)
    finally:
        os.close(master)
    assert p.returncode == 128 + signal.SIGINT, output
    run = run_row(ledger_url, run_id_of(output.encode()))
    assert (run.status, run.exit_code) == (RunStatus.cancelled, 130)


def _session_processes(sid: int) -> list[str]:
    """``pid comm state`` of every live process in session ``sid`` (read from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        comm_end = stat.rindex(")")
        fields = stat[comm_end + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6 of stat: the session id
            out.append(f"{d.name} {stat[stat.index('(') + 1:comm_end]} {fields[0]}")
    return out


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "wrapped"])
def test_a_job_that_reads_its_terminal_and_ends_leaves_nothing_behind(ledger_url, capture_env, tmp_path, wrapped):
    """The round-3 case: a job that reads a line from its terminal and finishes. Bare and wrapped alike it gets the
    line, exits 0, and leaves no process of its session behind (stopped on SIGTTIN, or orphaned); wrapped, the run
    is recorded succeeded."""
    master, slave = os.openpty()
    read = tmp_path / "line"
    job = ["sh", "-c", 'read line; printf "%s\\n" "$line" > "$0"; "$@"', read, *hostile("--count", tmp_path / "ran")]
    p = subprocess.Popen(wrap_cmd(ledger_url, command=job) if wrapped else job, env=capture_env, cwd=REPO,
                         stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal)
    STARTED.append(p)
    os.close(slave)
    try:
        os.write(master, b"typed at the terminal\n")
        output = _drain(master, p)
    finally:
        os.close(master)
    assert p.returncode == 0, output
    assert lines(read) == ["typed at the terminal"] and len(lines(tmp_path / "ran")) == 1
    assert _session_processes(p.pid) == []  # the session (own_terminal: its id is p's pid) has no process left
    if wrapped:
        run = run_row(ledger_url, run_id_of(output.encode()))
        assert (run.status, run.exit_code) == (RunStatus.succeeded, 0)


def _drain(master: int, p: subprocess.Popen, bound_s: float = 600) -> str:
    """Everything the terminal showed until the wrapper exits (the pty must be read, or writers block); after
    ``bound_s`` (an upper bound a healthy wrapper never comes near: it exits within seconds) the test fails."""
    import select
    import time

    out, deadline = b"", time.monotonic() + bound_s
    while True:
        if time.monotonic() > deadline:
            p.kill()
            raise AssertionError(f"the wrapper did not exit within {bound_s:g} s; its terminal showed: "
                                 + out.decode(errors="replace")[-2000:])
        ready, _, _ = select.select([master], [], [], 0.5)
        chunk = b""
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal is closed
                chunk = b""
            out += chunk
        if not chunk and p.poll() is not None:
            break
    p.wait(timeout=60)
    return out.decode(errors="replace").replace("\r\n", "\n")


# --- 4. recording impossible: said once, the job runs anyway ----------------------------------

def test_a_full_journal_disk_at_the_start_runs_the_job_and_the_end_goes_straight_to_the_ledger(
        ledger_url, capture_env, tmp_path, tmpfs):
    disk = tmpfs("journal", "128k")
    (disk / "journal").mkdir()
    fill_up(disk)
    env = {**capture_env, "TRAINLEDGER_JOURNAL_DIR": str(disk / "journal")}
    out = subprocess.run(wrap_cmd(ledger_url, command=hostile("--count", tmp_path / "n", "--out", "ran", "--exit", 3)),
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert (out.returncode, out.stdout) == (3, b"ran"), out.stderr.decode()
    assert len(lines(tmp_path / "n")) == 1
    assert "Traceback" not in out.stderr.decode()
    assert len([line for line in ours(out.stderr) if "error" in line]) == 1  # said once
    run = run_row(ledger_url, run_id_of(out.stderr))
    assert (run.status, run.exit_code) == (RunStatus.failed, 3)


def test_a_journal_disk_that_fills_while_the_job_runs_never_stops_it(ledger_url, capture_env, tmp_path, tmpfs):
    disk = tmpfs("journal", "512k")
    env = {**capture_env, "TRAINLEDGER_JOURNAL_DIR": str(disk / "journal")}
    filled, done, finished = tmp_path / "filled", tmp_path / "done", tmp_path / "finished"
    err_path = tmp_path / "wrapper.err"
    with open(err_path, "wb") as err_file:
        p = start(ledger_url, env, command=hostile("--fill", disk / "big", "--filled", filled, "--wait-for", done,
                                                   "--count", finished), stderr=err_file)
        wait_for(filled.exists, 60, "the job to fill the journal's disk")
        wait_for(lambda: any("error" in line for line in ours(err_path.read_bytes())), 60,
                 "the wrapper's journal to fail")
        done.touch()
        out, _ = p.communicate(timeout=120)
    err = err_path.read_bytes()
    assert p.returncode == 0, err.decode()
    assert len(lines(finished)) == 1  # the job ran to its end
    run = run_row(ledger_url, run_id_of(err))
    assert (run.status, run.exit_code) == (RunStatus.succeeded, 0)  # the end went straight to the ledger


def test_a_read_only_journal_folder_runs_the_job_and_records_it_straight_to_the_ledger(ledger_url, capture_env,
                                                                                       tmp_path, tmpfs):
    """Issue 37: it used to run unrecorded, a silently lost record; the run now goes straight to the ledger."""
    ro = tmpfs("ro", "64k", ro=True)
    env = {**capture_env, "TRAINLEDGER_JOURNAL_DIR": str(ro / "journal")}
    out = subprocess.run(wrap_cmd(ledger_url, command=hostile("--count", tmp_path / "n", "--out", "ran", "--exit", 4)),
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert (out.returncode, out.stdout) == (4, b"ran"), out.stderr.decode()
    assert len(lines(tmp_path / "n")) == 1
    (error,) = [line for line in ours(out.stderr) if "error:" in line]
    assert error.startswith("[trainledger] error: cannot write the run journal ") and "straight to the ledger" in error
    row = run_row(ledger_url, run_id_of(out.stderr))
    assert (row.status, row.exit_code) == (RunStatus.failed, 4)
    # --require-ledger: the opposite, the job never starts
    out = subprocess.run(wrap_cmd(ledger_url, "--require-ledger", command=hostile("--count", tmp_path / "m")),
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 75 and not (tmp_path / "m").exists()
    assert out.stderr.decode().count("\n") == 1 and "--require-ledger" in out.stderr.decode()


def test_an_uncreatable_sqlite_folder_still_runs_the_job_and_keeps_its_events(capture_env, tmp_path, tmpfs):
    ro = tmpfs("ro", "64k", ro=True)
    url = f"sqlite:///{ro / 'sub' / 'ledger.db'}"
    env = {**capture_env, "TRAINLEDGER_LEDGER_WAIT_S": "1"}
    out = subprocess.run(wrap_cmd(url, command=hostile("--count", tmp_path / "n", "--exit", 0)),
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    assert len(lines(tmp_path / "n")) == 1
    warnings = [line for line in ours(out.stderr) if "warning" in line]
    assert len(warnings) == 1 and "cannot create the folder" in warnings[0]
    journal = Path(capture_env["TRAINLEDGER_JOURNAL_DIR"]) / f"{run_id_of(out.stderr)}.jsonl"
    assert [ev["type"] for ev in map(__import__("json").loads, journal.read_text().splitlines())][0] == "run"


def test_a_ledger_locked_by_another_writer_does_not_delay_the_start(ledger_url, capture_env, tmp_path, locker):
    lock = locker(ledger_url)
    started, done = tmp_path / "started", tmp_path / "done"
    # The lock is held until the job has started. A wrapper that waited on it before the start would wait the
    # writers' busy timeout (SQLite, made 2 hours here) or for ever (PostgreSQL has no lock timeout), far past
    # the 600 s upper bound; the wrapper's own check gives up after 200 ms. No race against the clock: a slow
    # machine only makes the healthy start slower (it took over 30 s at a load average of 28).
    env = {**capture_env, "TRAINLEDGER_SQLITE_BUSY_S": "7200"}
    p = start(ledger_url, env, command=hostile("--started", started, "--wait-for", done))
    wait_for(started.exists, 600, "the job to start while the ledger is locked")
    assert lock.proc.poll() is None
    lock.release()
    done.touch()
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err.decode()
    assert len([line for line in ours(err) if "warning" in line]) == 1
    run = run_row(ledger_url, run_id_of(err))
    assert (run.status, run.exit_code) == (RunStatus.succeeded, 0)
    (node,) = nodes_of(ledger_url, run.id)
    assert node.status == "succeeded"


def test_require_ledger_with_a_locked_ledger_does_not_start_the_job(ledger_url, capture_env, tmp_path, locker):
    locker(ledger_url)
    out = subprocess.run(wrap_cmd(ledger_url, "--require-ledger", command=hostile("--count", tmp_path / "n")),
                         env=capture_env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 75 and not (tmp_path / "n").exists()
    assert [line for line in out.stderr.decode().splitlines() if "error" in line][-1].endswith(
        "the command was not started (--require-ledger)")


def test_require_ledger_with_a_free_ledger_registers_before_the_start(ledger_url, capture_env, tmp_path):
    out = subprocess.run(wrap_cmd(ledger_url, "--require-ledger", command=hostile("--count", tmp_path / "n")),
                         env=capture_env, capture_output=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and len(lines(tmp_path / "n")) == 1
    assert run_row(ledger_url, run_id_of(out.stderr)).status == RunStatus.succeeded


@pytest.mark.parametrize("how", ["closed", "broken"])
def test_a_closed_or_broken_stderr_still_runs_the_job_with_its_exit_code(ledger_url, capture_env, tmp_path, how):
    if how == "closed":
        p = subprocess.Popen(wrap_cmd(ledger_url, command=hostile("--count", tmp_path / "n", "--err-lines", 20000,
                                                                  "--out", "ran", "--exit", 4)),
                             env=capture_env, cwd=REPO, stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2))
    else:
        r, w = os.pipe()
        os.close(r)  # nobody reads our stderr: every write is EPIPE
        p = subprocess.Popen(wrap_cmd(ledger_url, command=hostile("--count", tmp_path / "n", "--err-lines", 20000,
                                                                  "--out", "ran", "--exit", 4)),
                             env=capture_env, cwd=REPO, stdout=subprocess.PIPE, stderr=w)
        os.close(w)
    out, _ = p.communicate(timeout=180)
    assert (p.returncode, out) == (4, b"ran")  # 20,000 stderr lines: never blocked on a pipe nobody drains
    assert len(lines(tmp_path / "n")) == 1
    (run,) = all_runs(ledger_url)
    assert (run.status, run.exit_code) == (RunStatus.failed, 4)


# --- 5. the last resort: a bug of ours runs the command bare ----------------------------------

@pytest.mark.parametrize("target", ["trainledger.sources.telemetry.topology.resolve", "trainledger.sources.capture.keeper.spawn",
                                    "trainledger.sources.telemetry.sampling.UtilSampler.start"])
def test_an_unexpected_error_inside_the_wrapper_runs_the_command_once_with_its_exit_code(
        ledger_url, capture_env, tmp_path, target):
    site = tmp_path / "site"
    site.mkdir()
    module, _, attr = target.rpartition(".")
    cls = ""
    if attr == "start":
        module, _, cls = module.rpartition(".")
    (site / "sitecustomize.py").write_text(
        "import os, importlib\n"
        "if os.environ.pop('BREAK_WRAPPER', None):\n"
        f"    owner = importlib.import_module({module!r})\n"
        f"    owner = getattr(owner, {cls!r}) if {cls!r} else owner\n"
        "    def broken(*a, **k):\n"
        "        raise RuntimeError('a bug of ours')\n"
        f"    setattr(owner, {attr!r}, broken)\n")
    env = {**capture_env, "BREAK_WRAPPER": "1", "PYTHONPATH": f"{site}{os.pathsep}{capture_env.get('PYTHONPATH', REPO)}"}
    out = subprocess.run(wrap_cmd(ledger_url, command=hostile("--count", tmp_path / "n", "--out", "ran", "--exit", 5)),
                         env=env, capture_output=True, cwd=REPO, timeout=120)
    assert (out.returncode, out.stdout) == (5, b"ran"), out.stderr.decode()
    assert len(lines(tmp_path / "n")) == 1  # exactly once, never twice
    assert "Traceback" not in out.stderr.decode()
    assert len([line for line in ours(out.stderr) if "internal error (RuntimeError: a bug of ours)" in line]) == 1


def test_ctrl_z_stops_the_job_and_the_wrapper_and_sigcont_resumes_both(ledger_url, capture_env, tmp_path):
    master, slave = os.openpty()
    started, done = tmp_path / "started", tmp_path / "done"
    p = subprocess.Popen(wrap_cmd(ledger_url, command=hostile("--started", started, "--wait-for", done)),
                         env=capture_env, cwd=REPO, stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal)
    STARTED.append(p)
    os.close(slave)
    try:
        wait_for(started.exists, 60, "the job to start")
        job = int(lines(started)[0])
        os.write(master, b"\x1a")  # Ctrl-Z: the job stops, then the wrapper (so that a shell would see it stopped)
        wait_for(lambda: _state(job) == "T" and _state(p.pid) == "T", 60, "the job and the wrapper to stop")
        os.killpg(p.pid, signal.SIGCONT)  # what the shell's `fg` sends to the wrapper's group
        wait_for(lambda: _state(job) in ("S", "R") and _state(p.pid) in ("S", "R"), 60, "both to go on")
        done.touch()
        output = _drain(master, p)
    finally:
        os.close(master)
    assert p.returncode == 0, output
    assert run_row(ledger_url, run_id_of(output.encode())).status == RunStatus.succeeded


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""
