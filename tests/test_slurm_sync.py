"""`trainledger slurm sync`: its sacct command lines, the watermark, live jobs asked for by id, DST, failures.

The real Slurm (tests/slurm/test_slurm_live.py) cannot produce what these tests need: jobs in the past,
and local times that a DST change repeats or skips (its clock is today's). So ``--sacct`` points at a
small program that speaks sacct's protocol: it records the argument list and the ``TZ`` it was run
with, and prints recorded ``--parsable2 --noheader`` records in the ``slurm sync`` field order.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from decimal import Decimal

from sqlmodel import Session, select
from trainledger.store.models import Run, RunStatus, Setting

UTC = timezone.utc
FAKE = """#!{python}
import json, os, sys
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"argv": sys.argv[1:], "tz": os.environ.get("TZ")}}) + "\\n")
name = "jobs.txt" if "--jobs" in sys.argv else "window.txt"
sys.stdout.write(open(os.path.join({base!r}, name)).read())
code = int(open(os.path.join({base!r}, "exit")).read())
if code:
    sys.stderr.write("sacct: error: Problem talking to the database: Connection refused\\n")
sys.exit(code)
"""


def record(job: str, state: str, start: str, end: str, elapsed: str = "", name: str = "j") -> str:
    """One allocation record in the order of ``trainledger.sources.imports.slurm.SYNC_FIELDS``."""
    return (f"{job}|{name}|rtx|llm|bob|rtx-01|1|billing=32,cpu=32,gres/gpu:rtx4090=8,gres/gpu=8,node=1|{elapsed}|"
            f"{state}|0:0|{start}|{start}|{end}|gpu1||\n")


class FakeSacct:
    def __init__(self, tmp_path):
        self.base = tmp_path / "sacct"
        self.base.mkdir()
        self.log = self.base / "calls.jsonl"
        self.path = self.base / "sacct"
        self.path.write_text(FAKE.format(python=sys.executable, log=str(self.log), base=str(self.base)))
        self.path.chmod(0o755)
        self.set("", "", 0)

    def set(self, window: str, jobs: str = "", exit_code: int = 0) -> None:
        (self.base / "window.txt").write_text(window)
        (self.base / "jobs.txt").write_text(jobs)
        (self.base / "exit").write_text(str(exit_code))

    def calls(self) -> list[dict]:
        return [json.loads(x) for x in self.log.read_text().splitlines()] if self.log.exists() else []


def _sync(cli, fake, *args):
    return cli("slurm", "sync", "--sacct", fake.path, *args)


def _json(r):
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.output)


def _runs(engine):
    with Session(engine) as s:
        return {r.id: r for r in s.exec(select(Run)).all()}


def test_window_watermark_and_live_jobs(cli, engine, tmp_path):
    fake = FakeSacct(tmp_path)
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    fake.set(record("10", "COMPLETED", "2026-11-01T08:00:00", "2026-11-01T09:00:00", "3600")
             + record("11", "RUNNING", "2026-11-01T20:00:00", "Unknown", "14400"))
    first = _json(_sync(cli, fake, "--tz", "UTC", "--since", "2026-11-01T00:00:00", "--until", "2026-11-02T00:00:00", "--json"))
    assert (first["imported"], first["rechecked_jobs"]) == (2, 0)
    (call,) = fake.calls()
    assert call["tz"] == "UTC"
    assert call["argv"] == ["--parsable2", "--noheader", "--duplicates", "--allusers", "--format",
                            "JobID,JobName,Partition,Account,User,NodeList,NNodes,AllocTRES,ElapsedRaw,State,ExitCode,"
                            "Submit,Start,End,Cluster,TRESUsageInAve,TRESUsageInMax",
                            "--starttime", "2026-11-01T00:00:00", "--endtime", "2026-11-02T00:00:00"]
    with Session(engine) as s:
        assert s.get(Setting, "slurm:watermark:-").value == "2026-11-02T00:00:00+00:00"
    # next sync: from the watermark less the overlap; job 11 ended before that window (its end was written late),
    # so it is asked for by id
    fake.set("", jobs=record("11", "COMPLETED", "2026-11-01T20:00:00", "2026-11-01T23:45:00", "13500"))
    second = _json(_sync(cli, fake, "--tz", "UTC", "--until", "2026-11-03T00:00:00", "--json"))
    assert (second["imported"], second["updated"], second["rechecked_jobs"]) == (0, 1, 1)
    window, by_id = fake.calls()[1:]
    assert window["argv"][-4:] == ["--starttime", "2026-11-01T23:50:00", "--endtime", "2026-11-03T00:00:00"]
    assert by_id["argv"][-2:] == ["--jobs", "11"]
    run = _runs(engine)["slurm-11"]
    assert (run.status, run.ended_at) == (RunStatus.succeeded, datetime(2026, 11, 1, 23, 45, tzinfo=UTC))


def test_a_failed_sacct_changes_nothing(cli, engine, tmp_path):
    fake = FakeSacct(tmp_path)
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    fake.set(record("10", "COMPLETED", "2026-11-01T08:00:00", "2026-11-01T09:00:00", "3600"), exit_code=1)
    r = _sync(cli, fake, "--tz", "UTC", "--since", "2026-11-01T00:00:00")
    assert r.exit_code == 2 and r.stderr == ("error: sacct exited 1: sacct: error: Problem talking to the database: "
                                             "Connection refused\n")
    with Session(engine) as s:
        assert s.get(Setting, "slurm:watermark:-") is None
    assert _runs(engine) == {}  # the records it printed before failing are not imported either
    missing = cli("slurm", "sync", "--sacct", tmp_path / "no-such-sacct")
    assert missing.exit_code == 2 and missing.stderr.startswith("error: sacct: cannot run ")


def test_dst_ambiguous_times_are_reported_not_guessed(cli, engine, tmp_path):
    fake = FakeSacct(tmp_path)
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    fake.set(record("20", "COMPLETED", "2026-11-01T01:30:00", "2026-11-01T01:50:00", "")  # both times twice: ?
             + record("21", "COMPLETED", "2026-11-01T01:30:00", "2026-11-01T03:00:00", "9000")  # settled by ElapsedRaw
             + record("22", "COMPLETED", "2026-11-02T10:00:00", "2026-11-02T11:00:00", "3600"))
    args = ("--tz", "America/New_York", "--since", "2026-10-31T00:00:00", "--until", "2026-11-03T00:00:00", "--json")
    receipt = _json(_sync(cli, fake, *args))
    assert fake.calls()[0]["tz"] == "America/New_York"
    assert receipt["imported"] == 2
    assert {k: (v["rows"], v["first"]) for k, v in receipt["skipped"].items()} == {
        "local time skipped or repeated by a DST change": (1, ["20"])}
    runs = _runs(engine)
    assert set(runs) == {"slurm-21", "slurm-22"}
    assert runs["slurm-21"].started_at == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT, 9,000 s before 08:00 UTC
    receipt = _json(_sync(cli, fake, *args[:-1], "--dst", "latest", "--json"))
    assert receipt["imported"] == 1 and not receipt["skipped"]
    run = _runs(engine)["slurm-20"]
    assert (run.started_at, run.ended_at) == (datetime(2026, 11, 1, 6, 30, tzinfo=UTC), datetime(2026, 11, 1, 6, 50, tzinfo=UTC))


def test_the_deploy_examples_run_a_sync(cli, engine, tmp_path):
    """The commands of deploy/slurm/ (cron and systemd) are valid `slurm sync` invocations."""
    import shlex
    from pathlib import Path

    deploy = Path(__file__).resolve().parents[1] / "deploy" / "slurm"
    cron = next(x for x in (deploy / "trainledger-slurm-sync.cron").read_text().splitlines() if x.startswith("*/5"))
    service = next(x for x in (deploy / "trainledger-slurm-sync.service").read_text().splitlines() if x.startswith("ExecStart="))
    fake = FakeSacct(tmp_path)
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x").exit_code == 0
    fake.set(record("30", "COMPLETED", "2026-11-01T08:00:00", "2026-11-01T09:00:00", "3600"))
    for line in (cron.split("exec ", 1)[1].rstrip("'").split("'")[0], service.split("=", 1)[1]):
        argv = shlex.split(line)
        assert argv[0].endswith("/trainledger") and argv[1:3] == ["slurm", "sync"], argv
        r = cli(*argv[1:], "--sacct", fake.path, "--since", "2026-11-01T00:00:00", "--json")
        assert r.exit_code == 0, r.output + r.stderr
    assert set(_runs(engine)) == {"slurm-30"}


def _wrapper_registers(engine, run_id: str, resume_of, started: datetime, tokens: int) -> None:
    """What `srun trainledger run -- ...` writes when the attempt starts (its journal's start event, applied
    by the same code), then the tokens the command logged through trainledger.track."""
    from trainledger.sources.record.journal import apply_events

    fields = {"name": "pretrain", "status": "running", "node_type": "rtx4090-8x", "offer": "rtx4090-rent",
              "launcher": "torchrun", "nodes": 1, "gpus_per_node": 8, "resume_of": resume_of,
              "started_at": started.isoformat(), "heartbeat_at": started.isoformat(), "ended_at": None,
              "config": {"wrapper": {"run_id_from": "slurm"}, "tags": {}}}
    with Session(engine) as s:
        apply_events(s, [{"type": "run", "run_id": run_id, "fields": fields}])
        s.get(Run, run_id).tokens = tokens
        s.commit()


def test_a_requeued_wrapped_job_is_one_chain_across_syncs(cli, engine, tmp_path):
    """Attempt N of a requeued job is `slurm-<job>-rN` for the wrapper (SLURM_RESTART_COUNT) and for the sync,
    also when a window holds only the later attempt's record: one run per attempt, each costed once."""
    from trainledger.money.rates.costs import cents, elastic_run_cost, hours_between
    from trainledger.sources.telemetry.topology import Flags, resolve
    from trainledger.store.models import Offer

    fake = FakeSacct(tmp_path)
    assert cli("slurm", "map", "add", "--partition", "rtx", "--node-type", "rtx4090-8x", "--offer",
               "rtx4090-rent").exit_code == 0
    env = {"SLURM_JOB_ID": "7301", "SLURM_CLUSTER_NAME": "gpu1", "SLURM_JOB_NUM_NODES": "1", "SLURM_NODEID": "0"}
    first = resolve(Flags(), env, ["torchrun", "train.py"])
    again = resolve(Flags(), {**env, "SLURM_RESTART_COUNT": "1"}, ["torchrun", "train.py"])
    assert (first.run_id, again.run_id, again.resume_of) == ("slurm-7301", "slurm-7301-r1", "slurm-7301")
    t = lambda h, m=0, s=0: datetime(2026, 11, 7, h, m, s, tzinfo=UTC)  # noqa: E731
    _wrapper_registers(engine, first.run_id, first.resume_of, t(0, 0, 20), 1000)
    # the requeue: attempt 0 REQUEUED, the job pending again
    fake.set(record("7301", "REQUEUED", "2026-11-07T00:00:00", "2026-11-07T01:00:00", "3600")
             + record("7301", "PENDING", "Unknown", "Unknown"))
    args = ("--tz", "UTC", "--since", "2026-11-06T00:00:00", "--until", "2026-11-07T01:01:00", "--json")
    one = _json(_sync(cli, fake, *args))
    assert (one["imported"], one["updated"]) == (1, 1)
    runs = _runs(engine)
    assert set(runs) == {"slurm-7301", "slurm-7301-r1"}
    assert (runs["slurm-7301"].status, runs["slurm-7301"].tokens) == (RunStatus.cancelled, 1000)  # tracked, merged
    assert (runs["slurm-7301-r1"].status, runs["slurm-7301-r1"].resume_of) == (RunStatus.queued, "slurm-7301")
    # attempt 1 starts: its wrapper takes over the queued run; its record ends after a window that has no record
    # of the job, so the live attempt is asked for by job id and comes alone
    _wrapper_registers(engine, again.run_id, again.resume_of, t(1, 2, 5), 2000)
    fake.set("", jobs=record("7301", "COMPLETED", "2026-11-07T01:02:00", "2026-11-07T03:02:00", "7200"))
    two = _json(_sync(cli, fake, "--tz", "UTC", "--until", "2026-11-07T04:00:00", "--json"))
    assert (two["imported"], two["updated"], two["rechecked_jobs"]) == (0, 1, 1)
    assert fake.calls()[-1]["argv"][-2:] == ["--jobs", "7301"]
    runs = _runs(engine)
    assert set(runs) == {"slurm-7301", "slurm-7301-r1"}
    a0, a1 = runs["slurm-7301"], runs["slurm-7301-r1"]
    assert (a0.started_at, a0.ended_at, a0.resume_of, a0.tokens) == (t(0), t(1), None, 1000)
    assert (a1.started_at, a1.ended_at, a1.resume_of) == (t(1, 2), t(3, 2), "slurm-7301")
    assert (a1.status, a1.launcher, a1.name, a1.tokens) == (RunStatus.succeeded, "torchrun", "pretrain", 2000)
    # each attempt's allocation billed once, at the offer's rate
    with Session(engine) as s:
        offer = s.exec(select(Offer).where(Offer.name == "rtx4090-rent")).one()
        want = {r.id: cents(elastic_run_cost(offer, 1, hours_between(r.started_at, r.ended_at))) for r in (a0, a1)}
    rep = _json(cli("report", "monthly", "--month", "2026-11", "--format", "json"))
    assert {r["run_id"]: Decimal(r["cost"]) for r in rep["runs"]} == want
    # the same records again (overlapping windows, both attempts or the last alone) change nothing
    for window in (record("7301", "REQUEUED", "2026-11-07T00:00:00", "2026-11-07T01:00:00", "3600")
                   + record("7301", "COMPLETED", "2026-11-07T01:02:00", "2026-11-07T03:02:00", "7200"),
                   record("7301", "COMPLETED", "2026-11-07T01:02:00", "2026-11-07T03:02:00", "7200")):
        fake.set(window)
        same = _json(_sync(cli, fake, "--tz", "UTC", "--since", "2026-11-06T00:00:00", "--until", "2026-11-08T00:00:00",
                           "--json"))
        assert (same["imported"], same["updated"]) == (0, 0)
    assert {rid: (r.started_at, r.ended_at, r.resume_of) for rid, r in _runs(engine).items()} == {
        "slurm-7301": (t(0), t(1), None), "slurm-7301-r1": (t(1, 2), t(3, 2), "slurm-7301")}
