"""The Launch page under AppTest: real tracked runs on CPU, the lead role checked on the server,
and only configs from the allowed directories.

Runs start from this process (AppTest runs the page here) exactly as from
`trainledger dashboard`: trainledger.runs.launch.prepare + start(detach=True). The
`launched` fixture kills anything a failed test leaves behind and checks that
no process of a launched run is left.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlmodel import Session, func, select
from trainledger.app.queries import launch
from trainledger.app.serving.auth import make_entry
from trainledger.runs.launch import LaunchRequest, prepare
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import MetricSample, Run, RunStatus

from tests.app.helpers import REPO, make_app, metrics, plain, run_page, sign_in
from tests.tracking.conftest import kill_leftover_runs, processes_of_run, wait_for

SHIPPED = REPO / "trainer" / "configs"
DP = str(SHIPPED / "dp.yaml")
FAST = 1_000  # PBKDF2 iterations


@pytest.fixture
def ledger(sqlite_url, app_env, run_env):
    make_engine(sqlite_url).dispose()  # an empty ledger with the presets
    app_env(sqlite_url)
    return sqlite_url


@pytest.fixture
def launched(ledger):
    """Run ids a test started; afterwards none of their processes may be left (killed first if a test failed)."""
    ids: list[str] = []
    yield ids
    kill_leftover_runs(ledger, ids)


def _run(url: str, rid: str) -> Run:
    engine = make_engine(url)
    with Session(engine) as s:
        run = s.get(Run, rid)
    engine.dispose()
    return run


def _count(url: str, model=Run) -> int:
    engine = make_engine(url)
    with Session(engine) as s:
        n = s.exec(select(func.count()).select_from(model)).one()
    engine.dispose()
    return n


def _click(at, label: str):
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _launch(at, steps: int, project: str = ""):
    at.number_input(key="launch_steps").set_value(steps)
    if project:
        at.text_input(key="launch_project").input(project)
    return _click(at, "Launch")


# --- configs: listed only from the allowed directories, re-checked on the server ----------------

def test_configs_come_from_the_shipped_and_configured_dirs_only(tmp_path, monkeypatch):
    mine, outside = tmp_path / "mine", tmp_path / "outside"
    mine.mkdir()
    outside.mkdir()
    shutil.copy(DP, mine / "small.yaml")
    shutil.copy(DP, outside / "evil.yaml")
    (mine / "notes.txt").write_text("not a config")
    (mine / "escape.yaml").symlink_to(outside / "evil.yaml")
    monkeypatch.setenv(launch.CONFIG_DIRS_ENV, os.pathsep.join([str(mine), str(tmp_path / "missing")]))

    listed = {c.label: c.path for c in launch.config_choices()}
    shipped = sorted(p.name for p in SHIPPED.glob("*.yaml"))
    assert [k for k in listed if k.startswith("shipped: ")] == [f"shipped: {n}" for n in shipped]
    assert [k for k in listed if not k.startswith("shipped: ")] == [f"{mine.resolve()}: small.yaml"]
    assert launch.resolve_config(listed[f"{mine.resolve()}: small.yaml"]) == (mine / "small.yaml").resolve()
    assert launch.resolve_config(DP) == Path(DP).resolve()
    for bad, needle in [(str(outside / "evil.yaml"), "outside the allowed config directories"),
                        (str(mine / "escape.yaml"), "outside the allowed config directories"),  # symlink out
                        (f"{mine}/../outside/evil.yaml", "without '..'"),
                        (f"{SHIPPED}/../configs/dp.yaml", "without '..'"),
                        ("trainer/configs/dp.yaml", "absolute paths"),
                        (str(mine / "notes.txt"), "not a YAML file"),
                        (str(mine / "gone.yaml"), "does not exist"),
                        ("/etc/passwd", "outside the allowed config directories")]:
        with pytest.raises(Exception) as exc:
            launch.resolve_config(bad)
        assert needle in str(exc.value) and "\n" not in str(exc.value), (bad, str(exc.value))


def test_launch_form_bounds_are_one_line_errors():
    from pydantic import ValidationError

    ok = dict(config=DP, node_type="rtx4090-8x", steps=5, processes_per_node=2)
    form = launch.LaunchForm(**ok, project="  ", offer="")
    assert form.project is None and form.offer is None
    for field, value, needle in [("steps", 0, "launch form: steps: Input should be greater than or equal to 1 (got 0)"),
                                 ("steps", launch.MAX_STEPS + 1, "launch form: steps: Input should be less than or equal to"),
                                 ("processes_per_node", 17, "launch form: processes_per_node: Input should be less than or equal to 16"),
                                 ("project", "x" * 101, "launch form: project: String should have at most 100 characters")]:
        with pytest.raises(ValidationError) as exc:
            launch.LaunchForm(**{**ok, field: value})
        assert launch.form_error(exc.value).startswith(needle)
    with pytest.raises(ValidationError) as exc:
        launch.LaunchForm(**ok, command="rm -rf /")
    assert launch.form_error(exc.value).startswith("launch form: command: Extra inputs are not permitted")


def test_a_path_outside_the_allowed_dirs_is_refused_and_nothing_is_written(ledger, tmp_path, monkeypatch):
    mine, outside = tmp_path / "cfg", tmp_path / "outside"
    mine.mkdir()
    outside.mkdir()
    shutil.copy(DP, mine / "mine.yaml")
    shutil.copy(DP, outside / "evil.yaml")
    monkeypatch.setenv(launch.CONFIG_DIRS_ENV, str(mine))
    at = run_page(make_app(), "launch")
    listed = str(mine.resolve() / "mine.yaml")
    assert f"{mine.resolve()}: mine.yaml" in [at.selectbox(key="launch_config").format_func(o)
                                              for o in at.selectbox(key="launch_config").options]
    at.selectbox(key="launch_config").set_value(listed).run()
    # between the pick and the click the file becomes a symlink out of the allowed directory
    (mine / "mine.yaml").unlink()
    (mine / "mine.yaml").symlink_to(outside / "evil.yaml")
    _click(at, "Launch")
    assert [plain(e.value) for e in at.error] == [f"config: {listed} is outside the allowed config directories "
                                           f"(the shipped configs and ${launch.CONFIG_DIRS_ENV})"]
    # or its directory is no longer allowed when Launch is clicked
    (mine / "mine.yaml").unlink()
    shutil.copy(DP, mine / "mine.yaml")
    at = run_page(make_app(), "launch")
    at.selectbox(key="launch_config").set_value(listed).run()
    monkeypatch.setenv(launch.CONFIG_DIRS_ENV, "")
    _click(at, "Launch")
    assert [plain(e.value) for e in at.error] == [f"config: {listed} is outside the allowed config directories "
                                           f"(the shipped configs and ${launch.CONFIG_DIRS_ENV})"]
    assert at.selectbox(key="launch_config").value == listed and not at.success  # not swapped for another config
    assert _count(ledger) == 0


# --- the role ----------------------------------------------------------------------------------------

@pytest.fixture
def users_file(tmp_path, monkeypatch):
    path = tmp_path / "users.toml"
    path.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST)
                    + make_entry("bob", "viewer", "bob-pw", iterations=FAST))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(path))
    return path


def _launch_page_as(user: str, password: str):
    at = make_app()
    sign_in(at, user, password)
    at.switch_page("pages/launch.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _children() -> list[int]:
    pid = os.getpid()
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def test_a_viewer_cannot_launch_or_cancel(ledger, users_file):
    before = _children()
    at = _launch_page_as("bob", "bob-pw")
    assert any("only leads can launch or cancel them" in i.value for i in at.info)
    form = [at.selectbox(key="launch_config"), at.selectbox(key="launch_node_type"), at.text_input(key="launch_project"),
            at.number_input(key="launch_steps"), at.number_input(key="launch_procs"), at.text_input(key="launch_name"),
            at.button(key="launch_go")]
    assert all(w.disabled for w in form), [w.key for w in form if not w.disabled]  # read-only for a viewer
    assert not at.success and _count(ledger) == 0 and _children() == before

    # a queued run (registered, not started): the viewer sees it, and Cancel is drawn disabled
    with session_scope(make_engine(ledger)) as s:
        rid = prepare(s, LaunchRequest(config=Path(DP), steps=3), ledger).run_id
    at.run()
    assert at.selectbox(key="launch_watch").value == rid and metrics(at)["Status"] == "queued"
    assert next(b for b in at.button if b.label == "Cancel run").disabled
    assert _run(ledger, rid).status == RunStatus.queued

    lead = _launch_page_as("alice", "alice-pw")
    _click(lead, "Cancel run")
    assert [plain(s.value) for s in lead.success] == [f"Run {rid} cancelled."]
    assert _run(ledger, rid).status == RunStatus.cancelled and _children() == before


# --- real runs ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_lead_launches_a_tiny_run_and_watches_it_succeed(ledger, launched):
    at = run_page(make_app(), "launch")
    assert at.selectbox(key="launch_config").value == DP  # shipped dp.yaml: the tiny GPT, plain data parallel
    assert (at.number_input(key="launch_steps").value, at.number_input(key="launch_procs").value) == (100, 2)
    _launch(at, 4, project="dash")
    rid = at.session_state["_launch_mine"][-1]
    launched.append(rid)
    assert plain(at.success[0].value).startswith(f"Launched run {rid} (supervisor pid ")
    assert at.selectbox(key="launch_watch").value == rid
    assert metrics(at)["Status"] in ("queued", "running", "succeeded")

    wait_for(lambda: _run(ledger, rid).status not in (RunStatus.queued, RunStatus.running), 180, "the run to end")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = metrics(at)
    run = _run(ledger, rid)
    assert (shown["Status"], shown["Step"]) == ("succeeded", "4 of 4")
    assert shown["Loss"] == f"{run.final_loss:.4f}"
    assert plain(at.success[-1].value).startswith(f"Run {rid} succeeded: 4 steps, ")
    assert not [b for b in at.button if b.label == "Cancel run"]  # nothing to cancel any more
    assert (run.status, run.steps, run.world_size, run.launcher, run.strategy) == (RunStatus.succeeded, 4, 2, "torchrun", "dp")
    assert run.pgid == run.pid and run.exit_code == 0 and run.tokens == 4 * 16 * 128
    assert run.config["train"]["steps"] == 4
    engine = make_engine(ledger)
    with Session(engine) as s:
        assert s.exec(select(func.count()).select_from(MetricSample)
                      .where(MetricSample.run_id == rid, MetricSample.metric == "loss")).one() == 4
        from trainledger.store.models import Project

        assert s.get(Project, run.project_id).name == "dash"
    engine.dispose()
    wait_for(lambda: not processes_of_run(rid), 30, "no processes of the finished run")


@pytest.mark.slow
def test_lead_cancels_a_running_run_from_the_page(ledger, launched):
    at = run_page(make_app(), "launch")
    # one process: what is cancelled is the run's process group, whatever its size (two ranks are cancelled in
    # tests/tracking's SIGTERM test); a rank is ~4.5 CPU-s of start-up on two cores
    at.number_input(key="launch_procs").set_value(1)
    _launch(at, 100_000)
    rid = at.session_state["_launch_mine"][-1]
    launched.append(rid)
    engine = make_engine(ledger)

    def stepping():  # rank 0 logs a step line every 10 steps; the page follows the log between sample batches
        at.run()
        return metrics(at)["Status"] == "running" and not metrics(at)["Step"].startswith("0 ")

    wait_for(stepping, 180, "the page to show a running run past step 0", interval=1)
    shown = metrics(at)
    done = int(shown["Step"].split(" of ")[0])
    assert shown["Step"] == f"{done} of 100000" and done >= 1 and float(shown["Loss"]) > 0
    assert shown["Heartbeat"].endswith(" s ago")
    assert any(f"[trainer] step {done}/100000 loss {shown['Loss']}" in c.value for c in at.code)
    _click(at, "Cancel run")
    # on a loaded machine the ranks may outlive the SIGTERM grace period and be killed: still cancelled
    assert [plain(s.value) for s in at.success] in ([f"Run {rid} cancelled."],
                                             [f"Run {rid} cancelled. Its processes were killed after the grace period."])
    run = _run(ledger, rid)
    assert run.status == RunStatus.cancelled and run.error == "cancelled by signal" and run.ended_at is not None
    assert run.world_size == 1 and metrics(at)["Status"] == "cancelled"
    wait_for(lambda: not processes_of_run(rid), 30, "no processes of the cancelled run")
    engine.dispose()


def test_progress_follows_the_runs_own_log_and_reads_no_other_file(run_env):
    from trainledger.runs.launch import default_log_dir

    base = {"id": "abc123", "steps_done": 0, "steps_planned": 50, "last_loss": None}
    log = default_log_dir() / "abc123.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("[trainer] dp: dp 2 × tp 1 × pp 1\n[trainer] step 1/50 loss 5.5422 lr 3.00e-04 176 ms\n"
                   "[trainer] step 11/50 loss 4.1234 lr 3.00e-03 119 ms 17,231 tok/s\n")
    p = launch.with_log({**base, "log_path": str(log)})
    assert (p["steps_done"], p["steps_planned"], p["last_loss"]) == (11, 50, 4.1234) and len(p["log_tail"]) == 3
    # the ledger is ahead (run ended): it wins
    assert launch.with_log({**base, "steps_done": 50, "log_path": str(log)})["steps_done"] == 50
    # a log path that is not <runs log dir>/<run id>.log is never read (it comes from the ledger)
    for other in ("/etc/passwd", str(log.parent / "other.log"), f"{log.parent}/../runs/abc123.log.bak"):
        assert launch.with_log({**base, "log_path": other})["log_tail"] == []
    assert launch.with_log({**base, "id": "zzz", "log_path": str(log)})["log_tail"] == []
