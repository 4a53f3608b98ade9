"""Capacity over-use (trainledger.money.allocation.capacity): the pure sweep, the ledger's months, and `report monthly`."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

from trainledger.money.allocation.capacity import Interval, capacity_warnings, over_capacity
from trainledger.store.models import Run

from tests.helpers import add_fleet, add_run

UTC = timezone.utc
T0 = datetime(2026, 11, 10, tzinfo=UTC)
NOV_END = datetime(2026, 12, 1, tzinfo=UTC)


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_a_run_ending_as_another_starts_does_not_overlap():
    runs = [Interval("a", h(0), h(10), 4), Interval("b", h(10), h(20), 6)]
    assert over_capacity(runs, 8) is None  # peak 6: a's 4 nodes are free at 10:00 when b takes 6
    assert over_capacity(runs, 5) == {"peak_nodes": 6, "fleet_nodes": 5, "runs": ["b"]}


def test_over_use_names_the_runs_in_use_while_over():
    runs = [Interval("a", h(0), h(10), 4), Interval("b", h(10), h(20), 6), Interval("c", h(5), h(12), 3),
            Interval("d", h(30), h(31), 8)]
    # 0-5: 4; 5-10: 4 + 3 = 7; 10-12: 3 + 6 = 9 (a has ended); 12-20: 6; 30-31: 8
    assert over_capacity(runs, 8) == {"peak_nodes": 9, "fleet_nodes": 8, "runs": ["b", "c"]}
    assert over_capacity(runs, 9) is None
    assert over_capacity([], 0) is None


def _over_used(session) -> None:
    """An 8-node fleet: r1 (8 nodes) then r2 (2 nodes) from the instant r1 ends, r3 (2 nodes) inside r1, and an
    elastic run at the same time (rented nodes are not the fleet's)."""
    add_fleet(session, 8)
    add_run(session, "r1", h(0), 10, nodes=8)
    add_run(session, "r2", h(10), 5, nodes=2)
    add_run(session, "e1", h(1), 3, nodes=4, offer_name="rtx4090-rent")


def test_capacity_warnings_of_a_month(session):
    _over_used(session)
    assert capacity_warnings(session, "2026-11", now=NOV_END) == []
    r3 = add_run(session, "r3", h(5), 2, nodes=2, offer_name=None)  # no offer: it draws on the fleet
    assert r3.offer_id is None
    assert capacity_warnings(session, "2026-11", now=NOV_END) == [
        {"node_type": "rtx4090-8x", "peak_nodes": 10, "fleet_nodes": 8, "runs": ["r1", "r3"]}]
    assert capacity_warnings(session, "2026-10", now=NOV_END) == []


def _export(session, fmt: str) -> bytes:
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.reports.export import presented_report, render

    session.expire_all()
    rep = monthly_report(session, "2026-11")
    data = render(presented_report(rep, report_account(session, rep)), fmt)  # as `report monthly` writes it
    session.commit()  # end the read, so the CLI can write (SQLite)
    return data


def test_report_monthly_lists_the_over_use_in_text_json_and_csv(cli, session, tmp_path):
    _over_used(session)
    session.commit()
    plain = cli("report", "monthly", "--month", "2026-11", "--format", "csv")
    assert plain.exit_code == 0 and "warning" not in plain.output
    assert plain.stdout.encode() == _export(session, "csv")  # within capacity: the export as it always was
    r = cli("report", "monthly", "--month", "2026-11", "--format", "json")
    assert r.exit_code == 0, r.output
    plain_json = json.loads(r.stdout)
    assert "data_quality" not in plain_json

    session.add(Run(**{**session.get(Run, "r2").model_dump(exclude={"id", "name"}), "id": "r3", "name": "r3",
                       "started_at": h(5), "ended_at": h(7), "heartbeat_at": h(7)}))
    session.commit()
    expected = {"warning": "capacity_over_use", "node_type": "rtx4090-8x", "peak_nodes": 10, "fleet_nodes": 8,
                "runs": ["r1", "r3"]}
    line = ("warning: capacity over-use: node type rtx4090-8x: peak 10 nodes in use > fleet of 8 nodes (runs r1, r3); "
            "check the runs' node counts, times or the fleet size")

    r = cli("report", "monthly", "--month", "2026-11", "--format", "json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["data_quality"] == [expected]
    assert line in r.stderr

    r = cli("report", "monthly", "--month", "2026-11", "--format", "csv")
    assert r.exit_code == 0
    blocks = r.stdout.split("\n\n")
    assert len(blocks) == 4 and "\n\n".join(blocks[:3]).encode() + b"\n" == _export(session, "csv")
    assert list(csv.reader(io.StringIO(blocks[-1]))) == [
        ["data_quality", "node_type", "peak_nodes", "fleet_nodes", "runs"],
        ["capacity_over_use", "rtx4090-8x", "10", "8", "r1;r3"]]

    out = tmp_path / "report.csv"
    r = cli("report", "monthly", "--month", "2026-11", "-o", str(out))
    assert r.exit_code == 0 and line in r.stdout.splitlines()
    assert out.read_text().endswith("capacity_over_use,rtx4090-8x,10,8,r1;r3\n")
    r = cli("report", "monthly", "--month", "2026-11", "--format", "json", "-o", str(tmp_path / "r.json"), "--json")
    assert json.loads(r.stdout)["data_quality"] == [expected]
