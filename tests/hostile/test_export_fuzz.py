"""Formula injection in the monthly export: names a spreadsheet would run, through import and report.

Project, run, user and strategy names beginning with ``= + - @`` (and, for
runs written by other paths than the importer, tab and CR) come out of
``report monthly --format csv|xlsx`` prefixed with a quote, unless they are
plain numbers; the XLSX, read back with openpyxl, has no formula cell, and
every other text cell is the name unchanged.
"""

from __future__ import annotations

import csv
import io
import itertools
from datetime import datetime, timezone
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from openpyxl import load_workbook
from sqlmodel import Session
from trainledger.reports.export import FORMULA_PREFIXES, XLSX_ILLEGAL, guard_formula

from tests.hostile.conftest import FUZZ, assert_clean, invoke

EXPORT_FUZZ = settings(FUZZ, max_examples=max(10, FUZZ.max_examples // 3))  # each example writes and reads an XLSX

MONTH = "2026-11"
SERIAL = itertools.count()  # run ids unique across examples (hypothesis repeats drawn values)
printable = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=20)
formula = st.tuples(st.sampled_from(["=", "+", "-", "@", "=cmd|' /C calc'!", "+1+", "-2-", "@SUM(", "=HYPERLINK("]),
                    printable).map("".join)
hostile_name = st.one_of(formula, printable, st.sampled_from(["-12.5", "+7", "-1e3", "=1+1", "@@", "-", "=", "+", "@"]))


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
        return True
    except ArithmeticError:
        return False


def _guarded(cell: str) -> bool:
    return not cell.startswith(FORMULA_PREFIXES) or _is_number(cell)


def _csv_cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]


def _xlsx_cells(path) -> list:
    wb = load_workbook(path)  # formulas kept as formulas (data_only=False)
    cells = [c for ws in wb.worksheets for row in ws.iter_rows() for c in row]
    assert not [c.coordinate for c in cells if c.data_type == "f"], "a formula cell"
    return [c.value for c in cells if isinstance(c.value, str)]


def _check_export(url: str, tmp_path, names: list[str]) -> None:
    out = invoke(["report", "monthly", "--month", MONTH, "--format", "csv"], url)
    assert_clean(out, codes=(0,))
    cells = _csv_cells(out.stdout)
    assert all(_guarded(c) for c in cells), [c for c in cells if not _guarded(c)]
    for n in names:  # each name is there, guarded and otherwise unchanged
        assert guard_formula(n) in cells, n
    xlsx = tmp_path / "report.xlsx"
    xlsx.unlink(missing_ok=True)
    out = invoke(["report", "monthly", "--month", MONTH, "--format", "xlsx", "-o", xlsx], url)
    assert_clean(out, codes=(0,))
    cells = _xlsx_cells(xlsx)
    assert all(_guarded(c) for c in cells), [c for c in cells if not _guarded(c)]
    for n in names:  # XML reads a CR in a cell back as LF (as Excel does)
        assert guard_formula(XLSX_ILLEGAL.sub("\ufffd", n)).replace("\r\n", "\n").replace("\r", "\n") in cells, n


@EXPORT_FUZZ
@given(rows=st.lists(st.tuples(hostile_name, hostile_name, hostile_name), min_size=1, max_size=3))
def test_imported_names_are_guarded_in_csv_and_xlsx(ledger, tmp_path, rows):
    """Through `trainledger import` (which strips surrounding white space and refuses control characters)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "name", "project", "user", "node_type", "offer", "nodes", "start", "end", "status"])
    names = []
    for i, (name, project, user) in enumerate(rows):
        name, project, user = name.strip() or "x", project.strip(), user.strip()
        names += [n for n in (name, project, user) if n]
        w.writerow([f"fx-{next(SERIAL)}", name, project, user, "rtx4090-8x", "rtx4090-rent", 2,
                    f"{MONTH}-03T0{i}:00", f"{MONTH}-03T1{i}:00", "succeeded"])
    f = tmp_path / "names.csv"
    f.write_text(buf.getvalue(), encoding="utf-8")
    out = invoke(["import", f], ledger)
    assert_clean(out, context=rows)
    if out.exit_code == 0:
        _check_export(ledger, tmp_path, names)


@EXPORT_FUZZ
@given(name=st.tuples(st.sampled_from(["\t", "\r", "\t=", "\r+", "\t\r@", "\x01=", "\x0b-"]), printable).map("".join),
       strategy=hostile_name.map(lambda s: s[:20]))
def test_names_written_by_other_paths_are_guarded(sqlite_url, tmp_path, name, strategy):
    """Tracked runs and the dashboard write names the importer would refuse (tab, CR, control characters)."""
    from trainledger.store.db import get_engine

    from tests.helpers import add_run

    with Session(get_engine(sqlite_url)) as s:
        run = add_run(s, f"fy-{next(SERIAL)}", datetime(2026, 11, 5, tzinfo=timezone.utc), 3, offer_name="rtx4090-rent",
                      project=name[:100], user=name[:100])
        run.name, run.strategy = name, strategy
        s.commit()
    _check_export(sqlite_url, tmp_path, [name, strategy] if strategy else [name])


def test_end_of_run_after_month_keeps_the_guard(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger
    """A run crossing into the next month is split; both months' exports guard its name."""
    f = tmp_path / "cross.csv"
    f.write_text("id,name,project,nodes,node_type,offer,start,end,status\n"
                 "fx-cross,=1+1,@team,2,rtx4090-8x,rtx4090-rent,2026-11-30T20:00,2026-12-01T04:00,succeeded\n")
    assert_clean(invoke(["import", f], ledger), codes=(0,))
    _check_export(ledger, tmp_path, ["=1+1", "@team"])
    out = invoke(["report", "monthly", "--month", "2026-12", "--format", "csv"], ledger)
    assert "'=1+1" in _csv_cells(out.stdout) and "=1+1" not in _csv_cells(out.stdout)
