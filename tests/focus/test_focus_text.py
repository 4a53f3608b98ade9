"""The FOCUS CSV quotes and neutralises text as the monthly CSV does (issue 24): a CR inside a name
stays inside its quoted cell (unquoted, a reader starts a new row there and a spreadsheet reads
what follows as a formula), and a cell that starts like a formula is prefixed with a quote."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

from sqlmodel import Session, select
from trainledger.reports.focus import COLUMNS
from trainledger.store.models import Run

from tests.focus.validate import problems
from tests.helpers import add_run

UTC = timezone.utc


def test_a_cr_inside_a_name_stays_in_its_quoted_cell_and_formulas_are_neutralised(cli, engine, tmp_path):
    with Session(engine) as s:
        add_run(s, "r1", datetime(2025, 11, 3, tzinfo=UTC), 10, nodes=1, offer_name="rtx4090-rent",
                project="=HYPERLINK(\"http://x\")")
        add_run(s, "r2", datetime(2025, 11, 4, tzinfo=UTC), 5, nodes=1, offer_name="rtx4090-rent")
        s.exec(select(Run).where(Run.id == "r1")).one().name = "safe\r=1+2"
        s.commit()
    focus, monthly = tmp_path / "focus.csv", tmp_path / "monthly.csv"
    assert cli("report", "focus", "--month", "2025-11", "-o", focus).exit_code == 0
    assert cli("report", "monthly", "--month", "2025-11", "--format", "csv", "-o", monthly).exit_code == 0
    raw = focus.read_bytes()
    assert b'"safe\r=1+2"' in raw and b"\rsafe" not in raw  # quoted, as in the monthly CSV
    assert b'"safe\r=1+2"' in monthly.read_bytes()
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))
    assert rows[0] == COLUMNS and len(rows) == 3 and all(len(r) == len(COLUMNS) for r in rows)
    r1 = dict(zip(COLUMNS, next(r for r in rows if "r1" in r)))
    assert r1["ResourceName"] == r1["x_RunName"] == "safe\r=1+2"
    assert r1["SubAccountName"] == "'=HYPERLINK(\"http://x\")"
    header, dict_rows = rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]
    assert problems(header, dict_rows) == []
