"""No silent assumptions (issue #35, part 6): a run without a node type, or on a node type without an offer,
is recorded, warned about once, and shown as "not costed" with its node-hours in every report; never priced
as something else, never 0.00. The demo has a ledger of its own."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.store.models import Run

from tests.helpers import add_run

UTC = timezone.utc
MONTH = "2025-11"


def _mixed_ledger(engine) -> None:
    """One priced run (10 h on 1 node of rtx4090-rent), one without a node type (6 h × 2 nodes), one on
    h100-8x, which has no offer (4.5 h × 1 node)."""
    with Session(engine) as s:
        add_run(s, "priced", datetime(2025, 11, 3, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent")
        nont = add_run(s, "no-nt", datetime(2025, 11, 4, tzinfo=UTC), 6, nodes=2, offer_name=None)
        nont.node_type_id = None
        add_run(s, "no-offer", datetime(2025, 11, 5, tzinfo=UTC), 4.5, nodes=1, offer_name=None,
                node_type_name="h100-8x")
        s.commit()


def test_the_monthly_report_lists_runs_not_costed_with_their_node_hours(cli, engine):
    _mixed_ledger(engine)
    only = cli("report", "monthly", "--month", MONTH, "--format", "json")
    assert only.exit_code == 0, only.output
    d = json.loads(only.output)
    s = d["summary"]
    assert s["actual_cost"] == "49.32"  # the priced run alone, as in test_import_admission
    assert (s["runs"], s["unpriced_runs"], s["unpriced_node_types"], s["runs_without_node_type"]) == (1, 2, ["h100-8x"], 1)
    assert s["not_costed_node_hours"] == 16.5  # 6 × 2 + 4.5
    assert [r["run_id"] for r in d["runs"]] == ["priced"]
    assert [(r["run_id"], r["node_type"], r["reason"], r["cost"], r["node_hours"]) for r in d["not_costed"]] == [
        ("no-nt", "", "no node type", "not costed", 12.0),
        ("no-offer", "h100-8x", "no offer for node type h100-8x", "not costed", 4.5)]
    csv_text = cli("report", "monthly", "--month", MONTH).output
    assert "unpriced_runs,2\nunpriced_node_types,h100-8x\nruns_without_node_type,1\nnot_costed_node_hours,16.5\n" in csv_text
    assert csv_text.endswith(
        "\nrun_id,name,project,user,status,node_type,cost,reason,nodes,start,end,node_hours,gpu_hours\n"
        "no-nt,no-nt,p1,u1,succeeded,,not costed,no node type,2,2025-11-04T00:00:00+00:00,2025-11-04T06:00:00+00:00,12.0,96.0\n"
        "no-offer,no-offer,p1,u1,succeeded,h100-8x,not costed,no offer for node type h100-8x,1,"
        "2025-11-05T00:00:00+00:00,2025-11-05T04:30:00+00:00,4.5,36.0\n")


def test_the_monthly_report_in_exact_decimals(engine):
    from trainledger.money.account.monthly import monthly_report

    _mixed_ledger(engine)
    with Session(engine) as s:
        rep = monthly_report(s, MONTH, now=datetime(2026, 1, 1, tzinfo=UTC))
        alone = rep.summary["actual_cost"]
    assert alone == Decimal("49.32") or alone.quantize(Decimal("0.01")) == Decimal("49.32")
    assert [(r.run_id, r.reason, r.node_hours) for r in rep.not_costed] == [
        ("no-nt", "no node type", Decimal(12)), ("no-offer", "no offer for node type h100-8x", Decimal("4.5"))]
    assert rep.summary["not_costed_node_hours"] == Decimal("16.5")
    assert sum((r.cost for r in rep.runs), Decimal(0)) + rep.summary["idle_cost"] == rep.summary["actual_cost"]


NO_NT_WARNING = ("warning: run {} has no node type and is not costed; pass --node-type NAME, set "
                 "TRAINLEDGER_NODE_TYPE or node_type in the config file (`trainledger pricing list`)")


def test_daily_period_and_chargeback_show_them_as_not_costed(cli, engine, tmp_path):
    _mixed_ledger(engine)
    now = ["--now", "2025-12-10T00:00:00+00:00"]
    d = json.loads(cli("report", "daily", "--date", "2025-11-04", "--json", *now).output)
    assert (d["summary"]["spend"], d["summary"]["not_costed_runs"], d["summary"]["not_costed_node_hours"]) == ("0.00", 1, 12.0)
    assert [(r["run_id"], r["reason"], r["cost"], r["node_hours"]) for r in d["not_costed"]] == [
        ("no-nt", "no node type", "not costed", 12.0)]
    text = cli("report", "daily", "--date", "2025-11-05", *now).output
    assert "not costed" in text and "no offer for node type h100-8x" in text
    p = json.loads(cli("report", "period", "--from", "2025-11", "--to", "2025-11", "--format", "json", *now).output)
    assert (p["summary"]["actual_cost"], p["summary"]["not_costed_runs"], p["summary"]["not_costed_node_hours"]) == (
        "49.32", 2, 16.5)
    days = json.loads(cli("report", "period", "--from", "2025-11-01", "--to", "2025-11-06", "--format", "json", *now).output)
    assert (days["summary"]["actual_cost"], days["summary"]["not_costed_node_hours"]) == ("49.32", 16.5)
    r = cli("report", "chargeback", "--month", MONTH, "-o", tmp_path / "cb", *now)
    assert r.exit_code == 0, r.output
    assert "not costed, charged to no one: 2 runs, 16.500 node-hours" in r.output
    summary = (tmp_path / "cb" / f"{MONTH}-chargeback-summary.csv").read_text()
    assert "spend,,,,,49.32,\n" in summary
    assert ("p1,no-nt,no-nt,u1,succeeded,,2025-11-04T00:00:00+00:00,2025-11-04T06:00:00+00:00,12.000,96.000,"
            "not costed,no node type\n") in summary


def test_runs_list_and_show_say_not_costed(cli, engine):
    _mixed_ledger(engine)
    rows = {r["id"]: r for r in json.loads(cli("runs", "list", "--json").output)}
    assert set(rows) == {"priced", "no-nt", "no-offer"}  # the run without a node type is listed too
    assert (rows["no-nt"]["node_type"], rows["no-nt"]["not_costed"]) == (None, "no node type")
    assert rows["no-offer"]["not_costed"] == "no offer for node type h100-8x" and "not_costed" not in rows["priced"]
    assert "— (not costed: no node type)" in cli("runs", "list").output
    for rid, reason in (("no-nt", "no node type"), ("no-offer", "no offer for node type h100-8x")):
        d = json.loads(cli("runs", "show", rid, "--json", "--now", "2025-12-10T00:00:00+00:00").output)
        assert (d["cost_actual"], d["not_costed"], d["cost_by_month"]) == ("not costed", reason, [])
    d = json.loads(cli("runs", "show", "no-nt", "--json", "--now", "2025-12-10T00:00:00+00:00").output)
    assert (d["node_type"], d["node_hours"]) == (None, 12.0)
    assert "not_costed" not in json.loads(cli("runs", "show", "priced", "--json").output)


def test_the_rollup_keeps_a_run_without_a_node_type_consistent(engine):
    from trainledger.money.facts import rollup

    _mixed_ledger(engine)
    with Session(engine) as s:
        assert rollup.check(s) == []


def test_a_launch_without_a_node_type_is_recorded_and_warned_once(engine, ledger_url, monkeypatch, capsys):
    """`trainledger launch` (and so a sweep) with no --node-type and nothing configured: the run is registered
    with no node type; one warning per node type and process, naming the fix."""
    from trainledger.runs.launch import LaunchRequest, prepare, shipped_config_dir
    from trainledger.store import defaults

    monkeypatch.delenv("TRAINLEDGER_NODE_TYPE", raising=False)
    monkeypatch.setattr(defaults, "_WARNED", set())
    cfg = shipped_config_dir() / "dp.yaml"
    with Session(engine) as s:
        for i in (1, 2):
            prepare(s, LaunchRequest(config=cfg, gpus_per_node=2, run_id=f"bare-{i}"), ledger_url)
        for i in (1, 2):
            prepare(s, LaunchRequest(config=cfg, gpus_per_node=2, run_id=f"h100-{i}", node_type="h100-8x"),
                    ledger_url)
        prep = prepare(s, LaunchRequest(config=cfg, gpus_per_node=2, run_id="offer-only", offer="rtx4090-rent"),
                       ledger_url)
        s.commit()
        assert s.get(Run, "bare-1").node_type_id is None and s.get(Run, "bare-2").node_type_id is None
        assert s.get(Run, "offer-only").node_type_id is not None  # an offer names its node type
    assert "--node-type" in prep.command[prep.command.index("--track"):]
    err = capsys.readouterr().err.splitlines()
    assert err == [NO_NT_WARNING.format("bare-1"),
                   "warning: run h100-1 is on node type h100-8x, which has no offer, and is not costed; "
                   "add an offer with `trainledger pricing import` (`trainledger pricing list`)"]


def test_a_configured_default_node_type_is_used(engine, ledger_url, monkeypatch):
    from trainledger.runs.launch import LaunchRequest, prepare, shipped_config_dir
    from trainledger.store.defaults import default_node_type
    from trainledger.store.models import NodeType

    monkeypatch.setenv("TRAINLEDGER_NODE_TYPE", "a100-8x")
    assert default_node_type() == "a100-8x"
    with Session(engine) as s:
        prepare(s, LaunchRequest(config=shipped_config_dir() / "dp.yaml", gpus_per_node=2, run_id="cfg"), ledger_url)
        s.commit()
        assert s.get(NodeType, s.get(Run, "cfg").node_type_id).name == "a100-8x"
    monkeypatch.delenv("TRAINLEDGER_NODE_TYPE")
    assert default_node_type() is None


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_wrapper_without_a_node_type_records_the_run_and_warns(ledger_url, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.capture.conftest import run_row, wrap_cmd

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update({"TRAINLEDGER_JOURNAL_DIR": str(tmp_path / "journal"), "XDG_DATA_HOME": str(tmp_path / "xdg"),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    ok = subprocess.run(wrap_cmd(ledger_url, "--run-id", "bare-ok", command=["true"]), env=env, capture_output=True,
                        timeout=120, text=True)
    assert ok.returncode == 0, ok.stderr
    assert [ln for ln in ok.stderr.splitlines() if "warning" in ln] == ["[trainledger] " + NO_NT_WARNING.format("bare-ok")]
    bad = subprocess.run(wrap_cmd(ledger_url, "--run-id", "bare-bad", command=["false"]), env=env, capture_output=True,
                         timeout=120, text=True)
    assert bad.returncode == 1  # the job's exit status, recorded or not
    for rid, status in (("bare-ok", "succeeded"), ("bare-bad", "failed")):
        row = run_row(ledger_url, rid)
        assert (row.node_type_id, row.status.value) == (None, status)


def test_a_broken_config_file_never_stops_the_wrapped_job(ledger_url, tmp_path):
    """A config file the wrapper cannot read: the job runs, the run is recorded (not costed), one line says why."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.capture.conftest import run_row, wrap_cmd

    config = tmp_path / "config.toml"
    config.write_text('node_type = "h100-8x"\nbogus = 1\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_") and k != "CUDA_VISIBLE_DEVICES"}
    env.update({"TRAINLEDGER_JOURNAL_DIR": str(tmp_path / "journal"), "XDG_DATA_HOME": str(tmp_path / "xdg"),
                "TRAINLEDGER_CONFIG": str(config),
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    out = subprocess.run(wrap_cmd(ledger_url, "--run-id", "conf-bad", command=["sh", "-c", "echo ran; exit 3"]),
                         env=env, capture_output=True, timeout=120, text=True)
    assert (out.returncode, out.stdout) == (3, "ran\n"), out.stderr
    warnings = [ln for ln in out.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 2 and f"{config}:2: unknown key 'bogus'" in warnings[0], out.stderr
    assert warnings[0].endswith("; the config file is ignored")
    assert warnings[1] == "[trainledger] " + NO_NT_WARNING.format("conf-bad")
    row = run_row(ledger_url, "conf-bad")
    assert (row.node_type_id, row.status.value, row.exit_code) == (None, "failed", 3)


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_the_demo_has_a_ledger_of_its_own(cli, monkeypatch, tmp_path):
    from trainledger.store.db import default_sqlite_path
    from trainledger.store.defaults import demo_ledger_url

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRAINLEDGER_DB_URL", f"sqlite:///{tmp_path / 'mine.db'}")  # the user's ledger: untouched
    demo_db = tmp_path / "xdg" / "trainledger" / "demo.db"
    assert demo_ledger_url() == f"sqlite:///{demo_db}" and default_sqlite_path() == demo_db.with_name("ledger.db")
    r = cli("demo", "--no-sweep", "--end-month", "2026-11", "--json", db=False)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["ledger"] == f"sqlite:///{demo_db}"
    assert demo_db.is_file() and not (tmp_path / "mine.db").exists() and not default_sqlite_path().exists()
    again = cli("demo", "--no-sweep", db=False)
    assert again.exit_code == 0 and "already present" in again.output
    r = cli("dashboard", "--demo", "--db", "sqlite:///x.db", db=False)
    assert r.exit_code == 2


def test_the_warning_follows_the_quiet_flag(capsys):
    """``-q`` sets trainledger's logger to ERROR (trainledger.cli.logs): the not-costed warning is not printed."""
    import logging

    from trainledger.cli import logs
    from trainledger.store import defaults

    defaults._WARNED.discard("quiet-nt")
    logs.configure(-1)
    try:
        assert defaults.warn_not_costed("q1", "quiet-nt") is True  # said (once) as far as the run is concerned
    finally:
        logs.reset()
    assert capsys.readouterr().err == ""
    defaults._WARNED.discard("quiet-nt")
    assert logging.getLogger("trainledger").isEnabledFor(logging.WARNING)
    defaults.warn_not_costed("q2", "quiet-nt")
    assert capsys.readouterr().err == ("warning: run q2 is on node type quiet-nt, which has no offer, and is not costed; "
                                       "add an offer with `trainledger pricing import` (`trainledger pricing list`)\n")


def test_the_strategy_comparison_lists_a_run_it_cannot_cost(cli, engine):
    """``report weekly`` used to drop a sweep's run without a node type (an inner join); it is listed last,
    not costed, with its throughput, and the costed run keeps its exact cost per 1M tokens."""
    with Session(engine) as s:
        for rid, strategy in (("sw-dp", "dp"), ("sw-tp", "tp")):
            run = add_run(s, rid, datetime(2025, 11, 3, tzinfo=UTC), 1, nodes=1, offer_name=None)
            run.sweep_id, run.strategy, run.tokens_per_s = "sw1", strategy, 1000.0
        s.commit()
        s.get(Run, "sw-tp").node_type_id = None
        s.commit()
    data = json.loads(cli("report", "weekly", "--sweep", "sw1", "--json").output)
    rows = {r["run_id"]: r for r in data["rows"]}
    assert [r["run_id"] for r in data["rows"]] == ["sw-dp", "sw-tp"]
    assert (rows["sw-tp"]["not_costed"], rows["sw-tp"]["cost_per_1m_tokens"], rows["sw-tp"]["node_type"],
            rows["sw-tp"]["cheapest"]) == ("no node type", {}, None, False)
    assert rows["sw-dp"]["not_costed"] is None and rows["sw-dp"]["cheapest"] is True
    from sqlmodel import select
    from trainledger.money.rates import costs
    from trainledger.store.models import Offer

    with Session(engine) as s:
        offer = s.exec(select(Offer).where(Offer.name == "rtx4090-rent")).one()
        hourly = costs.hourly_rate(offer)
    # 1 node × the hourly rate ÷ (1,000 tokens/s × 3,600 s) × 10⁶, to 4 decimals as the JSON presents it
    exact = hourly / Decimal(3_600_000) * 1_000_000
    assert Decimal(rows["sw-dp"]["cost_per_1m_tokens"]["rtx4090-rent"]) == exact.quantize(Decimal("0.0001"),
                                                                                         rounding="ROUND_HALF_UP")
    text = cli("report", "weekly", "--sweep", "sw1").output
    assert "no node type" in text.splitlines()[-1]


def test_the_api_warns_once_when_its_node_type_has_no_offer(engine, ledger_url, tmp_path, monkeypatch, capfd):
    """``trainledger.track`` on a node type without an offer: the run is recorded with its node type, and the
    warning comes from the writer's own connection once the run reached the ledger (no second engine)."""
    import trainledger
    from trainledger.store import defaults

    monkeypatch.setattr(defaults, "_WARNED", set())
    for rid, node_type in (("api-h100", "h100-8x"), ("api-rtx", "rtx4090-8x")):
        with trainledger.track(project="api", run_id=rid, node_type=node_type, db=ledger_url,
                               journal_dir=tmp_path / "journal", env={"USER": "ada"}) as run:
            run.log(step=1, tokens=10)
    warned = [ln for ln in capfd.readouterr().err.splitlines() if "not costed" in ln]
    assert warned == ["[trainledger] warning: run api-h100 is on node type h100-8x, which has no offer, and is not "
                      "costed; add an offer with `trainledger pricing import` (`trainledger pricing list`)"]
    from trainledger.store.models import NodeType

    with Session(engine) as s:
        assert s.get(NodeType, s.get(Run, "api-h100").node_type_id).name == "h100-8x"
        assert s.get(Run, "api-rtx").status.value == "succeeded"
