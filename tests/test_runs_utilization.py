"""Per-node utilization hour by hour (issue 39 item 3): ``trainledger.runs.utilization``, ``trainledger runs util``
and the dashboard's charts read one function; the means are the samples' own, an hour without samples is absent."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest
from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.runs.utilization import fleet_node_types, fleet_utilization, run_utilization
from trainledger.store.models import MetricSample, Setting

from tests.helpers import add_fleet, add_run

UTC = timezone.utc
T0 = datetime(2026, 11, 10, 8, 0, tzinfo=UTC)


def _samples(session: Session) -> None:
    add_fleet(session, nodes=2, valid_from=date(2026, 11, 1))
    add_run(session, "u-a", T0, 3, nodes=2)
    add_run(session, "u-b", T0 + timedelta(days=1), 1, nodes=1)
    add_run(session, "u-other", T0, 2, nodes=1, offer_name=None, node_type_name="h100-8x")
    at = lambda m: T0 + timedelta(minutes=m)  # noqa: E731
    session.add_all([
        # run a, node n1: two GPUs at 08:10 and one at 08:50 → hour 08: (0.2 + 0.4 + 0.9) / 3; hour 09: 0.6
        MetricSample(run_id="u-a", node="n1", gpu=0, metric="gpu_util", ts=at(10), value=0.2),
        MetricSample(run_id="u-a", node="n1", gpu=1, metric="gpu_util", ts=at(10), value=0.4),
        MetricSample(run_id="u-a", node="n1", gpu=0, metric="gpu_util", ts=at(50), value=0.9),
        MetricSample(run_id="u-a", node="n1", gpu=0, metric="gpu_util", ts=at(65), value=0.6),
        # node n2: hour 08 only (hour 09 absent, never 0); a missing value is not a sample
        MetricSample(run_id="u-a", node="n2", gpu=0, metric="gpu_util", ts=at(20), value=1.0),
        MetricSample(run_id="u-a", node="n2", gpu=0, metric="gpu_util", ts=at(80), value=None),
        MetricSample(run_id="u-a", node="n1", gpu=-1, metric="loss", ts=at(20), value=3.0),  # not a utilization
        # run b, a day later on n2; another node type's run on n9; a sample in December
        MetricSample(run_id="u-b", node="n2", gpu=0, metric="gpu_util", ts=at(24 * 60 + 5), value=0.5),
        MetricSample(run_id="u-other", node="n9", gpu=0, metric="gpu_util", ts=at(5), value=0.7),
        MetricSample(run_id="u-b", node="n2", gpu=0, metric="gpu_util", ts=datetime(2026, 12, 1, 0, 5, tzinfo=UTC),
                     value=0.1),
    ])
    session.commit()


def _points(d):
    return [(p["hour"].isoformat(), p["node"], round(p["util_mean"], 12), p["samples"]) for p in d["points"]]


def test_a_runs_nodes_hour_by_hour(session):
    _samples(session)
    d = run_utilization(session, "u-a")
    assert _points(d) == [("2026-11-10T08:00:00+00:00", "n1", round((0.2 + 0.4 + 0.9) / 3, 12), 3),
                          ("2026-11-10T08:00:00+00:00", "n2", 1.0, 1),
                          ("2026-11-10T09:00:00+00:00", "n1", 0.6, 1)]
    assert d["nodes"] == ["n1", "n2"] and d["metrics"] == ["gpu_util"] and d["timezone"] == "UTC"


def test_a_fleets_nodes_in_a_month(session):
    _samples(session)
    assert fleet_node_types(session, "2026-11") == ["rtx4090-8x"] and fleet_node_types(session, "2026-10") == []
    d = fleet_utilization(session, "rtx4090-8x", "2026-11")
    assert _points(d) == [("2026-11-10T08:00:00+00:00", "n1", round((0.2 + 0.4 + 0.9) / 3, 12), 3),
                          ("2026-11-10T08:00:00+00:00", "n2", 1.0, 1),
                          ("2026-11-10T09:00:00+00:00", "n1", 0.6, 1),
                          ("2026-11-11T08:00:00+00:00", "n2", 0.5, 1)]  # n9 is another node type; December's apart
    assert _points(fleet_utilization(session, "rtx4090-8x", "2026-12")) == [("2026-12-01T00:00:00+00:00", "n2", 0.1, 1)]
    with pytest.raises(LedgerInputError, match="^--node-type: no node type 'nope' in this ledger; known: "):
        fleet_utilization(session, "nope", "2026-11")


def test_hours_are_the_display_zones(session):
    """Asia/Kolkata is UTC+5:30: 08:10 and 08:50 UTC fall in two of its hours (13:00 and 14:00 local)."""
    _samples(session)
    session.add(Setting(key="timezone", value="Asia/Kolkata"))
    session.commit()
    d = run_utilization(session, "u-a")
    assert [(p["hour"].isoformat(), p["node"], p["samples"]) for p in d["points"]] == [
        ("2026-11-10T07:30:00+00:00", "n1", 2), ("2026-11-10T07:30:00+00:00", "n2", 1),
        ("2026-11-10T08:30:00+00:00", "n1", 2)]
    assert d["timezone"] == "Asia/Kolkata"


def test_the_cli_prints_the_same(cli, session):
    _samples(session)
    want = run_utilization(session, "u-a")
    session.commit()  # end the test's transaction before the CLI's
    out = cli("runs", "util", "u-a", "--json")
    assert out.exit_code == 0, out.output
    got = json.loads(out.stdout)
    assert [(p["node"], p["samples"]) for p in got["points"]] == [(p["node"], p["samples"]) for p in want["points"]]
    assert [p["util_mean"] for p in got["points"]] == pytest.approx([p["util_mean"] for p in want["points"]], abs=1e-4)
    fleet = cli("runs", "util", "--node-type", "rtx4090-8x", "--month", "2026-11")
    assert fleet.exit_code == 0 and "hours in UTC" in fleet.stdout and fleet.stdout.count(" n2 ") == 2
    bad = cli("runs", "util", "u-a", "--node-type", "rtx4090-8x")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: RUN_ID: give a run id, or --node-type with --month")
    bad = cli("runs", "util", "--node-type", "rtx4090-8x")
    assert bad.exit_code == 2 and bad.stderr == "error: --month: required with --node-type (YYYY-MM)\n"
