"""`trainledger slurm sync` and `launch --launcher slurm` against a real Slurm (tests/slurm/cluster.py).

All jobs are submitted at once when the module starts (they run side by side while the tests wait):
completed (on the ``batch`` partition with a typed GPU), failed with exit 3, cancelled with scancel,
timed out (``--time=1``), requeued with ``scontrol requeue``, one still running at the first sync, the
sbatch script of ``trainledger launch --launcher slurm``, and three that run the real run wrapper
(``srun python -m trainledger.cli run ... -- python -c TRAIN``, tokens through ``trainledger.track``): one the
wrapper registers before the first sync sees it running, one whose batch script waits until after
that sync (so the sync creates the run and the wrapper takes it over), and one requeued while its
wrapper runs (attempts ``slurm-<job>`` and ``slurm-<job>-r1`` for both). Every duration is checked
against the ``ElapsedRaw`` that sacct reports for the job, read separately.

Mapping: ``debug`` → rtx4090-8x on rtx4090-rent, by node (the jobs here hold whole nodes, and some no
GPU); ``batch`` with GPU type ``fake`` → a100-8x on a100-rent (20 per node-hour, per started hour).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Optional

import pytest
from sqlmodel import Session, select
from trainledger.store.db import make_engine
from trainledger.store.ids import slurm_attempt_id, slurm_run_id
from trainledger.store.models import Run, RunStatus
from typer.testing import CliRunner

from tests.helpers import node_type

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
A100_OFFER = ('[[offer]]\nname = "a100-rent"\nnode_type = "a100-8x"\nkind = "rent_elastic"\ncurrency = "CNY"\n'
              'price_per_node_hour = "20"\nbilling_granularity_hours = "1"\nminimum_hours = "1"\n')
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
WAIT_S = 420  # generous: the machine is shared
SRUN = Path(__file__).with_name("srun.sh")
#: the wrapped command: tokens through the Python API (the first attempt of a job logs TOKENS, a restart
#: N × more), then it waits for the release file, except in a requeued attempt
TRAIN = """import os, sys, time
import trainledger
tokens, release = int(sys.argv[1]), sys.argv[2]
restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
with trainledger.track() as run:
    run.log(step=0, tokens=tokens * (1 + restart))
deadline = time.monotonic() + 600
while restart == 0 and not os.path.exists(release) and time.monotonic() < deadline:
    time.sleep(0.1)
"""
LONG_MIN_S = 5  # the "long" job runs at least this long, then until the release
TOKENS = {"wrapped": 4242, "late": 1717, "wrq": 999}


def cli(url: str, slurm, *args: str) -> dict:
    from trainledger.cli.commands import app
    from trainledger.store.db import get_engine

    r = CliRunner().invoke(app, [*map(str, args), "--db", url], env={"SLURM_CONF": str(slurm.conf)},
                           catch_exceptions=False)
    get_engine.cache_clear()
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.output) if "--json" in args else r.output


def sync(url: str, slurm) -> dict:
    return cli(url, slurm, "slurm", "sync", "--tz", "UTC", "--json")


def runs(url: str) -> dict[str, Run]:
    engine = make_engine(url)
    with Session(engine) as s:
        out = {r.id: r for r in s.exec(select(Run)).all()}
    engine.dispose()
    return out


def acct(slurm, job: str, fields: tuple[str, ...] = ("JobID", "State", "ElapsedRaw", "NNodes", "Start", "End")
         ) -> list[dict[str, str]]:
    """sacct's own records of a job (every attempt), read apart from the code under test."""
    out = slurm.run("sacct", "-n", "-P", "-X", "--duplicates", "-j", job, "-o", ",".join(fields)).stdout
    return [dict(zip(fields, line.split("|"))) for line in out.splitlines() if line.strip()]


def state(slurm, job: str) -> str:
    return slurm.job_state(job).split()[0] if slurm.job_state(job) else ""


def wait_state(slurm, job: str, states: set[str], timeout: float = WAIT_S) -> str:
    return slurm.wait_for(f"job {job} in {sorted(states)}", lambda: (s := state(slurm, job)) in states and s, timeout)


def wait_recorded(slurm, job: str, states: set[str], timeout: float = WAIT_S) -> str:
    """Wait until the accounting (sacct, what `slurm sync` reads) has the job's last record in ``states``, whole.

    slurmctld (``scontrol``) knows a job has ended before slurmdbd has its record, and slurmdbd completes the
    record (its eligible time, by which a window is selected, and its partition) up to seconds after that: a
    sync before then leaves the job to the next sync (tests/slurm/test_slurm_shares.py).
    """
    def recorded():
        records = acct(slurm, job, ("State", "Eligible", "Partition"))
        last = records[-1] if records else {"State": "", "Eligible": "", "Partition": ""}
        state = last["State"].split()[0] if last["State"] else ""
        return state in states and last["Eligible"] not in ("", "Unknown") and last["Partition"] and state
    return slurm.wait_for(f"job {job} recorded whole in {sorted(states)}", recorded, timeout)


def seconds(run: Run) -> float:
    return (run.ended_at - run.started_at).total_seconds()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('slurm-ledger') / 'ledger.db'}"
    make_engine(url).dispose()
    return url


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """The file the wrapped commands (and the late job's batch script) wait for: made after the first sync."""
    return tmp_path_factory.mktemp("release") / "go"


def _until(path: Path) -> str:
    """A shell loop that waits until ``path`` exists (the paths here are pytest temp dirs: no quoting needed)."""
    return f"while [ ! -e {path} ]; do sleep 0.2; done"


def _wrapped(slurm, url: str, name: str, release: Path, journal: Path, *, wait: bool = False) -> str:
    """A job whose batch script runs `srun <python> -m trainledger.cli run ... -- <python> -c TRAIN` (argument lists
    throughout: sbatch passes the script its arguments as they are)."""
    env = f"--export=ALL,TRAINLEDGER_JOURNAL_DIR={journal},TRAINLEDGER_FLUSH_S=0.5,TRAINLEDGER_HEARTBEAT_S=1"
    wrapper = [sys.executable, "-m", "trainledger.cli", "run", "--project", "wrapped", "--name", f"{name}-run",
               "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent", "--grace", "1", "--db", url, "--",
               sys.executable, "-c", TRAIN, str(TOKENS[name]), str(release)]
    first = ["--wait-for", str(release)] if wait else []
    return slurm.sbatch("-p", "debug", "-J", name, env, str(SRUN), *first, *wrapper)


@pytest.fixture(scope="module")
def jobs(slurm, ledger, release, tmp_path_factory) -> dict[str, str]:
    """Every job of the module, submitted now; the mapping in the ledger."""
    offer = tmp_path_factory.mktemp("offer") / "a100.toml"
    offer.write_text(A100_OFFER)
    cli(ledger, slurm, "pricing", "import", offer)
    cli(ledger, slurm, "slurm", "map", "add", "--partition", "debug", "--node-type", "rtx4090-8x", "--offer",
        "rtx4090-rent", "--by-node")
    cli(ledger, slurm, "slurm", "map", "add", "--partition", "batch", "--gpu-type", "fake", "--node-type", "a100-8x",
        "--offer", "a100-rent")
    j = {
        "launch": _launch(slurm, ledger, tmp_path_factory.mktemp("launch")),
        # held, not timed: the first attempt of "rq" runs until it is requeued (its restart then works 8 s), "long"
        # runs at least 5 s and until the release after the first sync, so both are running when the test needs it
        "rq": slurm.sbatch("-p", "debug", "--gpus=1", "-J", "rq", "--wrap",
                           f'if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then sleep 8; else {_until(release)}; fi'),
        "timeout": slurm.sbatch("-p", "debug", "-J", "timeout", "--time=1", "--wrap", "sleep 600"),
        "ok": slurm.sbatch("-p", "batch", "--gpus=1", "-J", "ok", "--wrap", "sleep 2"),
        "fail3": slurm.sbatch("-p", "debug", "-J", "fail3", "--wrap", "exit 3"),
        "cancel": slurm.sbatch("-p", "debug", "-J", "cancel", "--wrap", "sleep 600"),
        "long": slurm.sbatch("-p", "debug", "-J", "long", "--wrap", f"sleep {LONG_MIN_S}; {_until(release)}"),
    }
    journal = tmp_path_factory.mktemp("journal")
    j["wrapped"] = _wrapped(slurm, ledger, "wrapped", release, journal)
    j["late"] = _wrapped(slurm, ledger, "late", release, journal, wait=True)
    j["wrq"] = _wrapped(slurm, ledger, "wrq", release.with_name("never"), journal)
    return j


def wrapper_run(slurm, url: str, run_id: str, tokens: int) -> Run:
    """Poll the ledger until the wrapper in the job has registered ``run_id`` and the tokens its command logged."""
    def probe() -> Optional[Run]:
        run = runs(url).get(run_id)
        return run if run is not None and "wrapper" in (run.config or {}) and run.tokens == tokens else None

    return slurm.wait_for(f"the wrapper's run {run_id} with {tokens} tokens", probe, timeout=WAIT_S)


def job_output(slurm, job: str) -> str:
    path = slurm.dir / f"job-{job}.out"
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no output)"


def _launch(slurm, url: str, base: Path) -> dict:
    """`trainledger launch trainer/configs/dp.yaml --launcher slurm`: the real command submits its sbatch script."""
    env = {**os.environ, "SLURM_CONF": str(slurm.conf), "XDG_DATA_HOME": str(base / "xdg"),
           "TRAINLEDGER_JOURNAL_DIR": str(base / "journal"), "TRAINLEDGER_CACHE_DIR": str(base / "cache"),
           "TRAINLEDGER_HEARTBEAT_S": "1", "TRAINLEDGER_FLUSH_S": "0.5", "OMP_NUM_THREADS": "1"}
    env.pop("TRAINLEDGER_DB_URL", None)
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "launch", str(REPO / "trainer/configs/dp.yaml"),
                          "--launcher", "slurm", "--steps", "3", "--name", "via-sbatch", "--db", url, "--json"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["submitted"] is True and d["job_id"].isdigit(), d
    return d


def test_a_running_job_appears_as_running(slurm, ledger, jobs, release):
    for name in ("long", "cancel", "rq", "wrapped", "late", "wrq"):
        wait_state(slurm, jobs[name], {"RUNNING"})
    for name in ("wrapped", "wrq"):  # their wrappers registered the jobs' runs, and the commands logged tokens
        wrapper_run(slurm, ledger, slurm_run_id(jobs[name]), TOKENS[name])
    slurm.requeue(jobs["rq"])
    slurm.requeue(jobs["wrq"])
    slurm.run("scancel", jobs["cancel"])
    first = sync(ledger, slurm)
    assert first["imported"] >= 1 and first["window"]["end"] == first["watermark"]
    got = runs(ledger)
    run = got[slurm_run_id(jobs["long"])]
    sacct = acct(slurm, jobs["long"])[-1]
    assert (run.status, run.ended_at, run.heartbeat_at, run.nodes) == (RunStatus.running, None, None, 1)
    assert run.started_at == datetime.fromisoformat(sacct["Start"] + "+00:00")
    # the wrapper's run, still running: the sync gave it the allocation's start and kept what the wrapper recorded
    wrapped = got[slurm_run_id(jobs["wrapped"])]
    start = datetime.fromisoformat(acct(slurm, jobs["wrapped"])[-1]["Start"] + "+00:00")
    assert (wrapped.status, wrapped.started_at, wrapped.ended_at) == (RunStatus.running, start, None)
    assert (wrapped.launcher, wrapped.name, wrapped.tokens) == ("python", "wrapped-run", TOKENS["wrapped"])
    assert wrapped.config["slurm"]["job_id"] == jobs["wrapped"] and "wrapper" in wrapped.config
    # the late job's batch script has not started its wrapper yet: the sync records the job from sacct
    late = got[slurm_run_id(jobs["late"])]
    assert (late.status, late.launcher, late.config["source"]) == (RunStatus.running, "slurm", "sacct")
    release.touch()


def test_finished_jobs_have_status_nodes_and_duration(slurm, ledger, jobs):
    want = {"ok": "COMPLETED", "fail3": "FAILED", "cancel": "CANCELLED", "timeout": "TIMEOUT", "rq": "COMPLETED",
            "long": "COMPLETED", "wrapped": "COMPLETED", "late": "COMPLETED", "wrq": "COMPLETED"}
    for name, final in want.items():
        assert wait_recorded(slurm, jobs[name], FINAL) == final, (name, job_output(slurm, jobs[name]))
    receipt = sync(ledger, slurm)
    assert receipt["updated"] >= 1  # the running job, now finished
    got = runs(ledger)
    r = {name: got[slurm_run_id(jobs[name])] for name in ("ok", "fail3", "cancel", "timeout", "long")}
    assert {n: x.status for n, x in r.items()} == {"ok": RunStatus.succeeded, "fail3": RunStatus.failed,
                                                    "cancel": RunStatus.cancelled, "timeout": RunStatus.failed,
                                                    "long": RunStatus.succeeded}
    assert (r["fail3"].exit_code, r["fail3"].error) == (3, "Slurm: FAILED (exit 3)")
    assert r["cancel"].error == "Slurm: CANCELLED by 0" and r["timeout"].error == "Slurm: TIMEOUT"
    for name, run in r.items():
        record = acct(slurm, jobs[name])[-1]
        assert run.nodes == int(record["NNodes"]) == 1, name
        assert seconds(run) == int(record["ElapsedRaw"]), (name, record)
    assert seconds(r["timeout"]) >= 60 and seconds(r["long"]) >= LONG_MIN_S
    with Session(make_engine(ledger)) as s:
        a100, rtx = node_type(s, "a100-8x").id, node_type(s, "rtx4090-8x").id
    # a typed GPU on `batch`: the GPU-type rule; no GPU on `debug`: costed by node (gpus_per_node 0)
    assert (r["ok"].node_type_id, r["ok"].gpus_per_node, r["ok"].world_size) == (a100, 1, 1)
    assert (r["fail3"].node_type_id, r["fail3"].gpus_per_node) == (rtx, 0)
    assert r["ok"].gpu_util_mean is None  # no gres/gpuutil from this Slurm: missing, never zero
    month = r["ok"].started_at.strftime("%Y-%m")
    report = cli(ledger, slurm, "report", "monthly", "--month", month, "--format", "json")
    report = json.loads(report)
    costs = {x["run_id"]: Decimal(x["cost"]) for x in report["runs"]}
    assert costs[slurm_run_id(jobs["ok"])] == Decimal("2.50")  # 1 of the node's 8 GPUs: 1/8 node, billed 1 h × 20
    assert (r["ok"].share, r["ok"].share_basis) == ("1/8", "gpus")
    rtx_runs = [x for x in report["runs"] if x["node_type"] == "rtx4090-8x"]
    assert all(x["node_hours"] <= 1 for x in rtx_runs)
    # billed: a run of 1 s or more (ElapsedRaw, whole seconds; `exit 3` may end within its first second: 0 s, not
    # billed). Not the report's node_hours, which are rounded: a job of a few seconds reads 0.00 and is still billed
    billed = sum(1 for x in rtx_runs if (run := got[x["run_id"]]).started_at and run.ended_at and seconds(run) > 0)
    assert billed >= 4  # at least timeout, long, cancel and the requeued job ran for seconds
    # each billed run: 1 node-hour at 3,600/730 per node-hour, half-up to the cent on its own (issue 36)
    one = (Decimal(3600) / 730).quantize(Decimal("0.01"))
    assert sum(Decimal(x["cost"]) for x in rtx_runs) == one * billed


def test_a_requeued_job_reads_as_one_chain(slurm, ledger, jobs):
    job = jobs["rq"]
    records = acct(slurm, job)
    assert [x["State"] for x in records] == ["REQUEUED", "COMPLETED"]
    got = runs(ledger)
    base = slurm_run_id(job)
    assert sorted(rid for rid in got if rid.startswith(base)) == [base, base + "-r1"]  # Slurm's restart count
    attempt, final = got[base], got[slurm_attempt_id(base, 1)]
    assert final.resume_of == attempt.id and attempt.resume_of is None
    assert (attempt.status, attempt.error, final.status) == (RunStatus.cancelled, "Slurm: REQUEUED", RunStatus.succeeded)
    assert [seconds(attempt), seconds(final)] == [int(x["ElapsedRaw"]) for x in records]
    assert attempt.ended_at <= final.started_at


@pytest.mark.parametrize("name", ["wrapped", "late"])
def test_a_wrapped_job_is_one_run_whichever_came_first(slurm, ledger, jobs, name):
    """`srun trainledger run -- ...` in the job and its sacct record: one run, the wrapper's name and tokens,
    the allocation's status, nodes and times (wrapper first, or the sync while the job ran)."""
    got = runs(ledger)
    base = slurm_run_id(jobs[name])
    run = got[base]
    record = acct(slurm, jobs[name])[-1]
    assert (run.launcher, run.name, run.tokens, run.steps) == ("python", f"{name}-run", TOKENS[name], 1)
    assert (run.status, run.exit_code, run.nodes) == (RunStatus.succeeded, 0, 1)
    assert (run.started_at, run.ended_at) == (datetime.fromisoformat(record["Start"] + "+00:00"),
                                              datetime.fromisoformat(record["End"] + "+00:00"))
    assert seconds(run) == int(record["ElapsedRaw"])
    assert "source" not in run.config and run.config["slurm"]["job_id"] == jobs[name]
    assert [rid for rid in got if rid.startswith(base)] == [base]  # never a second run for the job


def test_a_requeued_wrapped_job_is_one_chain_each_attempt_once(slurm, ledger, jobs):
    """The wrapper names the attempts slurm-<job> and slurm-<job>-r1 (SLURM_RESTART_COUNT); so does the sync."""
    job = jobs["wrq"]
    records = acct(slurm, job)
    assert [x["State"] for x in records] == ["REQUEUED", "COMPLETED"]
    got = runs(ledger)
    base = slurm_run_id(job)
    assert sorted(rid for rid in got if rid.startswith(base)) == [base, base + "-r1"]
    first, again = got[base], got[slurm_attempt_id(base, 1)]
    assert (first.resume_of, again.resume_of) == (None, base)
    assert (first.launcher, first.tokens, first.status) == ("python", TOKENS["wrq"], RunStatus.cancelled)
    assert (again.launcher, again.tokens, again.status) == ("python", 2 * TOKENS["wrq"], RunStatus.succeeded)
    for run, record in zip((first, again), records):
        assert (run.started_at, seconds(run)) == (datetime.fromisoformat(record["Start"] + "+00:00"),
                                                  int(record["ElapsedRaw"]))
    assert first.ended_at <= again.started_at
    # each attempt costed once, for the time it ran
    month = first.started_at.strftime("%Y-%m")
    report = json.loads(cli(ledger, slurm, "report", "monthly", "--month", month, "--format", "json"))
    billed = [x for x in report["runs"] if x["run_id"].startswith(base)]
    assert sorted(x["run_id"] for x in billed) == [base, base + "-r1"]


def test_launch_slurm_end_to_end(slurm, ledger, jobs):
    launched = jobs["launch"]
    job = launched["job_id"]
    assert wait_recorded(slurm, job, FINAL, timeout=600) == "COMPLETED", slurm.log_tail("slurmd")
    run = runs(ledger)[launched["run_id"]]
    assert (run.status, run.steps, run.launcher) == (RunStatus.succeeded, 3, "slurm")  # recorded by the trainer in the job
    receipt = sync(ledger, slurm)
    got = runs(ledger)
    assert slurm_run_id(job) not in got  # the job's record went to the launched run
    run = got[launched["run_id"]]
    record = acct(slurm, job)[-1]
    assert run.config["slurm"]["job_id"] == job and run.config["train"]  # the tracked config is kept
    assert run.started_at == datetime.fromisoformat(record["Start"] + "+00:00") and run.nodes == 1
    assert seconds(run) == int(record["ElapsedRaw"]) and run.steps == 3
    assert receipt["imported"] == 0


def test_a_second_sync_changes_nothing(slurm, ledger, jobs):
    before = {rid: r.model_dump() for rid, r in runs(ledger).items()}
    again = sync(ledger, slurm)
    assert (again["imported"], again["updated"]) == (0, 0) and again["already_present"] >= len(jobs) - 1
    assert {rid: r.model_dump() for rid, r in runs(ledger).items()} == before
    assert cli(ledger, slurm, "db", "rollup").strip() == "rollup consistent with the run rows"


def test_postgresql_ledger_gets_the_same_runs(slurm, ledger, jobs):
    import uuid

    from sqlalchemy import create_engine, text

    from tests.conftest import PG_ADMIN

    name = f"tl_test_slurm_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}"
    try:
        make_engine(url).dispose()
        cli(url, slurm, "slurm", "map", "add", "--partition", "debug", "--node-type", "rtx4090-8x", "--by-node")
        cli(url, slurm, "slurm", "map", "add", "--partition", "batch", "--gpu-type", "fake", "--node-type", "a100-8x")
        first = sync(url, slurm)
        sqlite_runs = {rid: (r.status, r.started_at, r.ended_at, r.nodes, r.resume_of)
                       for rid, r in runs(ledger).items() if rid.startswith("slurm-")}
        pg_runs = {rid: (r.status, r.started_at, r.ended_at, r.nodes, r.resume_of)
                   for rid, r in runs(url).items() if rid.startswith("slurm-")}
        assert pg_runs.keys() - sqlite_runs.keys() == {slurm_run_id(jobs["launch"]["job_id"])}  # no launched run here
        assert {k: v for k, v in pg_runs.items() if k in sqlite_runs} == sqlite_runs
        again = sync(url, slurm)
        assert (again["imported"], again["updated"], again["already_present"]) == (0, 0, first["imported"])
    finally:
        from trainledger.store.db import get_engine

        get_engine.cache_clear()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_a_job_sbatch_refuses_fails_its_run(slurm, ledger, tmp_path):
    """Two fake GPUs on the only node: 4 per node cannot be met; sbatch says so and the run is failed, not left queued."""
    env = {**os.environ, "SLURM_CONF": str(slurm.conf), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("TRAINLEDGER_DB_URL", None)
    out = subprocess.run([sys.executable, "-m", "trainledger.cli", "launch", str(REPO / "trainer/configs/dp.yaml"),
                          "--launcher", "slurm", "--gpus-per-node", "4", "--name", "too-big", "--node-type", "rtx4090-8x",
                          "--db", ledger],
                         env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 2 and out.stderr.startswith("error: sbatch: ") and out.stderr.count("\n") == 1, out.stderr
    run = next(r for r in runs(ledger).values() if r.name == "too-big")
    assert run.status == RunStatus.failed and run.error.startswith("sbatch refused the job: ")
    assert run.started_at is None  # it never ran: nothing to cost
