"""The monthly export reconciles with the CLI in every format; cells are injection-safe."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from openpyxl import load_workbook
from trainledger.reports.export import guard_formula
from trainledger.store.models import RunStatus

from tests.helpers import add_fleet, add_run

D = Decimal
NOV = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _ledger(session):
    add_fleet(session, 8)
    add_run(session, "a", NOV + timedelta(days=1), 40.3, nodes=8, project="=HYPERLINK(\"http://x\")", tokens=5 * 10**9, gpu_util=0.9)
    add_run(session, "b", NOV + timedelta(days=3), 5.17, nodes=2, project="chat", status=RunStatus.crashed)
    add_run(session, "c", NOV + timedelta(days=4), 3.01, nodes=1, project="chat", offer_name="rtx4090-rent")
    add_run(session, "d", datetime(2026, 10, 30, 22, tzinfo=timezone.utc), 50, nodes=3, project="@sum")
    session.commit()


def _csv_blocks(text: str):
    blocks = [b for b in text.split("\n\n") if b.strip()]
    return [list(csv.DictReader(io.StringIO(b))) for b in blocks]


def test_csv_json_xlsx_and_cli_agree(cli, session, tmp_path):
    _ledger(session)
    js = json.loads(cli("report", "monthly", "--month", "2026-11", "--format", "json").output)
    csv_text = cli("report", "monthly", "--month", "2026-11", "--format", "csv").output
    summary, projects, runs = _csv_blocks(csv_text)
    s = {r["metric"]: r["value"] for r in summary}
    total = D(js["summary"]["actual_cost"])
    assert s["actual_cost"] == str(total)
    # lines add up to the total to the cent: runs + idle, projects + idle
    assert sum(D(r["cost"]) for r in runs) + D(s["idle_cost"]) == total
    assert sum(D(p["cost"]) for p in projects) + D(s["idle_cost"]) == total
    assert sum(D(r["cost_if_elastic"]) for r in runs) == D(s["elastic_cost"])
    assert [r["run_id"] for r in runs] == [r["run_id"] for r in js["runs"]]
    assert [r["cost"] for r in runs] == [r["cost"] for r in js["runs"]]
    # cost compare --month gives the same totals
    cmp = json.loads(cli("cost", "compare", "--month", "2026-11", "--json").output)
    assert cmp["total"]["actual_cost"] == s["actual_cost"] == js["summary"]["actual_cost"]
    assert cmp["total"]["elastic_cost"] == s["elastic_cost"]
    assert cmp["total"]["own_cost"] == s["own_cost"]
    # xlsx: same numbers, as numeric cells
    out = tmp_path / "r.xlsx"
    assert cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", out).exit_code == 0
    wb = load_workbook(out)
    xs = {r[0]: r[1] for r in wb["Summary"].iter_rows(min_row=2, values_only=True)}
    assert D(str(xs["actual_cost"])) == total
    xruns = list(wb["Runs"].iter_rows(min_row=2, values_only=True))
    cost_col = [c.value for c in wb["Runs"][1]].index("cost")
    assert sum(D(str(r[cost_col])) for r in xruns) + D(str(xs["idle_cost"])) == total
    # the October run is split: its November part only
    d_row = next(r for r in runs if r["run_id"] == "d")
    assert d_row["split"] == "true" and D(d_row["node_hours"]) == D(3 * 24)  # Oct 30 22:00 + 50 h: 24 h in November


def test_formula_injection_is_escaped_in_csv_and_xlsx(cli, session, tmp_path):
    _ledger(session)
    _, projects, runs = _csv_blocks(cli("report", "monthly", "--month", "2026-11", "--format", "csv").output)
    names = {p["project"] for p in projects}
    assert "'=HYPERLINK(\"http://x\")" in names and "'@sum" in names and "chat" in names
    out = tmp_path / "r.xlsx"
    cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", out)
    wb = load_workbook(out)
    cells = [c for row in wb["Projects"].iter_rows() for c in row]
    assert all(c.data_type != "f" for c in cells)
    assert "'=HYPERLINK(\"http://x\")" in [c.value for c in cells]
    # negative amounts stay numbers
    assert guard_formula("-16077.30") == "-16077.30"
    assert guard_formula("-1+1") == "'-1+1"
    assert guard_formula("+cmd|' /C calc'!A0") == "'+cmd|' /C calc'!A0"


def test_exports_are_byte_for_byte_repeatable(cli, session, tmp_path):
    _ledger(session)
    a, b = tmp_path / "a.xlsx", tmp_path / "b.xlsx"
    cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", a)
    import time

    time.sleep(2.1)  # zip and docProps timestamps have 2-second resolution
    cli("report", "monthly", "--month", "2026-11", "--format", "xlsx", "-o", b)
    assert a.read_bytes() == b.read_bytes()
    c1 = cli("report", "monthly", "--month", "2026-11", "--format", "csv").output
    assert c1 == cli("report", "monthly", "--month", "2026-11", "--format", "csv").output


def test_run_lines_present_only_their_columns_as_the_whole_line_would(session):
    """``presented_report`` presents a run line's export columns one by one (``_run_values``): each as ``jsonable`` of
    the whole line gives it."""
    from trainledger.money.account.monthly import monthly_report
    from trainledger.reports.export import _RUN_OWN, RUN_COLUMNS, _run_values
    from trainledger.reports.present import jsonable

    add_fleet(session, 4)
    for i in range(4):
        r = add_run(session, f"e{i}", datetime(2026, 11, 2 + 5 * i, tzinfo=timezone.utc), 40, nodes=1 + i % 2,
                    offer_name=("rtx4090-own", "rtx4090-rent")[i % 2], tokens=10**9 * (i + 1), gpu_util=0.5 + i / 10)
        r.mfu = 0.3 if i else None
    session.commit()
    rep = monthly_report(session, "2026-11", lines=True, now=datetime(2027, 1, 1, tzinfo=timezone.utc))
    assert len(rep.runs) == 4
    for line in rep.runs:
        whole = jsonable(line)
        assert json.dumps(_run_values(line)) == json.dumps({k: whole[k] for k in RUN_COLUMNS
                                                            if k in whole and k not in _RUN_OWN})
