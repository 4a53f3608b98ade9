"""Final or provisional (issue 26, item 2; the rule in docs/MONEY.md).

A finished run drawn from an owned fleet can change cost while its month runs (measured energy is
shared by the node-hours the fleet held to date; a run imported late changes the shares): its cost is *provisional* until the month closes, and
says so everywhere it appears (run detail, the Runs table, ``runs show``, the exports); a finished
elastic run's bill is its own and *final*. The run detail is made at ``TRAINLEDGER_NOW``.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone

from sqlmodel import Session
from trainledger.money.rates.costs import cents
from trainledger.reports.focus import focus_export, to_csv
from trainledger.store.models import RunNode

from tests.helpers import add_fleet, add_run

UTC = timezone.utc
DAY5 = "2025-11-05T00:00:00+00:00"
CLOSED = "2025-12-02T00:00:00+00:00"


def _show(cli, run_id: str, *args: str) -> dict:
    r = cli("runs", "show", run_id, "--json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_a_fleet_run_is_provisional_until_its_month_closes_and_says_so(cli, engine, monkeypatch):
    with Session(engine) as s:
        add_fleet(s, 2)
        add_run(s, "early", datetime(2025, 11, 3, tzinfo=UTC), 24, nodes=2)  # ends on the 4th
        for n in range(2):  # measured energy: the fleet's power is shared by its node-hours held to date
            s.add(RunNode(run_id="early", hostname=f"n{n}", node_rank=n, energy_kwh=80.0))
        add_run(s, "rented", datetime(2025, 11, 3, tzinfo=UTC), 5, nodes=1, offer_name="rtx4090-rent")
        s.commit()
    on_day5 = _show(cli, "early", "--now", DAY5)
    assert on_day5["finality"] == "provisional" and [m["finality"] for m in on_day5["cost_by_month"]] == ["provisional"]
    assert _show(cli, "rented", "--now", DAY5)["finality"] == "final"  # an elastic bill does not move
    monkeypatch.setenv("TRAINLEDGER_NOW", DAY5)  # the run detail honours the reports' clock
    assert _show(cli, "early")["cost_actual"] == on_day5["cost_actual"]
    monkeypatch.delenv("TRAINLEDGER_NOW")
    with Session(engine) as s:  # later in the month, another run uses the fleet
        add_run(s, "later", datetime(2025, 11, 20, tzinfo=UTC), 100, nodes=2)
        s.commit()
    closed = _show(cli, "early", "--now", CLOSED)
    assert closed["finality"] == "final"
    assert cents(closed["cost_actual"]) != cents(on_day5["cost_actual"])  # why it was provisional
    # the exports carry the state of each run line
    month = json.loads(cli("report", "monthly", "--month", "2025-11", "--now", DAY5, "--format", "json").output)
    assert {r["run_id"]: r["finality"] for r in month["runs"]} == {"early": "provisional", "rented": "final",
                                                                    "later": "provisional"}
    month = json.loads(cli("report", "monthly", "--month", "2025-11", "--now", CLOSED, "--format", "json").output)
    assert {r["finality"] for r in month["runs"]} == {"final"}
    with Session(engine) as s:
        focus = to_csv(focus_export(s, "2025-11", now=datetime.fromisoformat(DAY5)))
    rows = list(csv.DictReader(io.StringIO(focus.decode("utf-8"))))
    assert {r["x_RunId"]: r["x_CostFinality"] for r in rows if r["x_RunId"]} == {
        "early": "provisional", "rented": "final", "later": "provisional"}
