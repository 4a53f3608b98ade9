"""Counts count runs (issue 26, item 3): a price change inside a month cuts a run into two charge-period
slices, and the monthly report still counts it once (summary, projects, CSV)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from sqlmodel import Session

from tests.helpers import RENT_OFFER_TOML as OFFER
from tests.helpers import add_run

UTC = timezone.utc


def test_a_run_cut_by_a_price_change_counts_once(cli, engine, tmp_path):
    f = tmp_path / "offer.toml"
    f.write_text(OFFER, encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0
    with Session(engine) as s:
        add_run(s, "nov-dec", datetime(2025, 11, 30, 12, tzinfo=UTC), 24, nodes=1, offer_name="gpu-rent")
        add_run(s, "across", datetime(2025, 12, 10, tzinfo=UTC), 240, nodes=2, offer_name="gpu-rent", project="p2")
        add_run(s, "late", datetime(2025, 12, 20, tzinfo=UTC), 10, nodes=1, offer_name="gpu-rent", project="p2")
        s.commit()
    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=13", "--from", "2025-12-15", "--retroactive", "--yes")
    assert res.exit_code == 0, res.output
    dec = json.loads(cli("report", "monthly", "--month", "2025-12", "--format", "json").output)
    assert dec["summary"]["runs"] == 3  # "across" lies on both sides of Dec 15: still one run
    assert {p["project"]: p["runs"] for p in dec["projects"]} == {"p1": 1, "p2": 2}
    assert len(dec["runs"]) == 3
    # the cost is still the sum of both charge periods: 2 × 120 h × 10 + 2 × 120 h × 13 + 12 h × 10 + 10 h × 13
    assert dec["summary"]["actual_cost"] == "5770.00"


A100_OFFER = """
[[offer]]
name = "a100-rent"
node_type = "a100-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "20"
valid_from = 2025-01-01
"""


def test_runs_per_group_from_the_month_facts_where_no_cut(cli, engine, tmp_path):
    """Issue 36 item 7: a node type with no cut inside the month counts its runs from the month facts (one slice
    per run there: no query); a node type cut inside it (a carbon intensity from Dec 15 on rtx4090-8x only) is
    counted from its stored slices. Both with a run from November, one across the cut, a live one across it:
    the same counts as ``count(distinct run_id)`` over every slice of the month."""
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from sqlalchemy import func, select
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.facts import counts, rollup
    from trainledger.store.catalog.carbon import set_intensity
    from trainledger.store.models import Project, RollupSlice, RunStatus

    from tests.helpers import node_type, offer

    f = tmp_path / "offers.toml"
    f.write_text(OFFER + A100_OFFER, encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0
    with Session(engine) as s:
        set_intensity(s, Decimal("500"), "2025-12-15", "rtx4090-8x")
        for nt, off in (("rtx4090-8x", "gpu-rent"), ("a100-8x", "a100-rent")):
            add_run(s, f"{nt}-nov-dec", datetime(2025, 11, 30, 12, tzinfo=UTC), 24, offer_name=off, node_type_name=nt)
            add_run(s, f"{nt}-across", datetime(2025, 12, 10, tzinfo=UTC), 240, offer_name=off, node_type_name=nt,
                    project="p2")
            add_run(s, f"{nt}-late", datetime(2025, 12, 20, tzinfo=UTC), 10, offer_name=off, node_type_name=nt,
                    project="p2", status=RunStatus.failed)
            live = add_run(s, f"{nt}-live", datetime(2025, 12, 14, tzinfo=UTC), 1, offer_name=off, node_type_name=nt,
                           project="p2")
            live.status, live.ended_at = RunStatus.running, None
        s.commit()
    now = datetime(2025, 12, 20, 6, tzinfo=UTC)
    with Session(engine) as s:
        rtx, a100 = node_type(s, "rtx4090-8x").id, node_type(s, "a100-8x").id
        facts = rollup.month_facts(s, "2025-12", ZoneInfo("UTC"), now)
        assert facts.cuts == {rtx: (datetime(2025, 12, 15, tzinfo=UTC),)}
        assert sum(1 for x in facts.live if x.node_type_id == rtx) == 2  # the live run, cut on the 15th
        got = counts.runs_per_group(s, facts)
        p1, p2 = (s.scalar(select(Project.id).where(Project.name == p)) for p in ("p1", "p2"))
        want = {(nt, off, p, status): 1 for nt, off in ((rtx, offer(s, "gpu-rent").id), (a100, offer(s, "a100-rent").id))
                for p, status in ((p1, "succeeded"), (p2, "succeeded"), (p2, "failed"), (p2, "running"))}
        assert got == want
        st = RollupSlice.__table__
        stored = s.connection().execute(
            select(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status, func.count(func.distinct(st.c.run_id)))
            .where(st.c.month == "2025-12").group_by(st.c.node_type_id, st.c.offer_id, st.c.project_id, st.c.status))
        reference = {(r[0], r[1], r[2], r[3]): r[4] for r in stored}
        for x in {x.run_id: x for x in facts.live}.values():
            reference[(x.node_type_id, x.offer_id, x.project_id, x.status)] = 1
        assert got == reference
        assert sum(got.values()) == 8
        assert monthly_report(s, "2025-12", now=now, lines=False).summary["runs"] == 8


def test_a_month_without_cuts_reads_no_slice(engine):
    """Issue 36 item 7: the report of a month with no charge-period cut takes its run counts (and every other
    figure) from the month facts: no statement reads ``rollup_slice`` (its counts were one ``count(distinct)``
    over every slice of the month, most of the report's time on a large ledger)."""
    from sqlalchemy import event
    from trainledger.money.account.monthly import monthly_report

    with Session(engine) as s:
        add_run(s, "a", datetime(2025, 12, 1, tzinfo=UTC), 5, nodes=1)
        add_run(s, "b", datetime(2025, 11, 30, 20, tzinfo=UTC), 10, nodes=2, project="p2")
        s.commit()
        monthly_report(s, "2025-12", lines=False)  # the first read may build the rollup: kept
        s.commit()
    statements: list[str] = []

    def seen(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        with Session(engine) as s:
            rep = monthly_report(s, "2025-12", lines=False)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert rep.summary["runs"] == 2
    assert {p["project"]: p["runs"] for p in rep.projects} == {"p1": 1, "p2": 1}
    assert any("rollup_month" in q for q in statements)
    assert [q for q in statements if "rollup_slice" in q] == []
