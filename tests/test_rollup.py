"""The pre-aggregated monthly rollup stays consistent with the run rows (SQLite and PostgreSQL).

Every test compares the rollup maintained incrementally (session events on
each commit) with one recomputed from the raw rows (``rollup.check``), and the
report's figures with sums computed here directly from the runs.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, update
from sqlmodel import Session, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_bounds
from trainledger.runs.registry import reap_stale
from trainledger.store.models import Offer, OfferKind, RollupSlice, Run, RunNode, RunStatus
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run, node_type, offer

D = Decimal
UTC = timezone.utc
BASE = datetime(2026, 9, 1, tzinfo=UTC)
MONTHS = ["2026-08", "2026-09", "2026-10", "2026-11", "2026-12"]


def _node_hours_by_hand(session: Session, month: str, now: datetime) -> Decimal:
    """Σ nodes × hours of every run clipped to the month, straight from the run rows."""
    from trainledger.store.settings import display_timezone

    ms, me = month_bounds(month, display_timezone(session))
    total = D(0)
    for r in session.exec(select(Run)).all():
        if r.started_at is None:
            continue
        end = r.ended_at or (now if r.status == RunStatus.running else r.heartbeat_at or r.started_at)
        a, b = max(r.started_at, ms), min(end, me)
        if b > a:
            total += costs.node_hours(r.nodes, costs.hours_between(a, b))
    return total


op_strategy = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 100 * 24), st.integers(0, 45 * 24), st.integers(1, 6),
              st.sampled_from(["rtx4090-own", "rtx4090-rent", "rtx4090-reserved", None]),
              st.sampled_from(["succeeded", "failed", "cancelled", "running"]), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("extend"), st.integers(0, 30), st.integers(1, 20 * 24)),
    st.tuples(st.just("finish"), st.integers(0, 30), st.sampled_from(["succeeded", "crashed"])),
    st.tuples(st.just("energy"), st.integers(0, 30), st.floats(0.1, 500)),
    st.tuples(st.just("reap"),),
    st.tuples(st.just("offer"), st.sampled_from(["0.25", "1", "0.5"]), st.sampled_from(["0", "2"])),
    st.tuples(st.just("tz"), st.sampled_from(["UTC", "Asia/Shanghai", "America/Los_Angeles"])),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_strategy, min_size=1, max_size=14), fleet=st.booleans())
def test_incremental_rollup_equals_a_rebuild_after_any_writes(engine, ops, fleet):
    """Random inserts, updates, reaps, energy figures, new billing rules and time-zone changes,
    each committed: the stored rollup always equals a recomputation from the run rows."""
    now = BASE + timedelta(days=75)
    with Session(engine, expire_on_commit=False) as session:
        _reset(session)
        if fleet:
            add_fleet(session, 6, name=f"f-{uuid.uuid4().hex[:6]}")
        session.commit()
        ids: list[str] = []
        for op in ops:
            if op[0] == "add":
                _, start_h, hours, nodes, offer_name, status, project = op
                rid = f"r{len(ids)}-{uuid.uuid4().hex[:6]}"
                run = add_run(session, rid, BASE + timedelta(hours=start_h), hours, nodes=nodes, offer_name=offer_name,
                              status=RunStatus(status), project=project, tokens=nodes * (hours + 1) * 1000,
                              gpu_util=0.5 + nodes / 20)
                if status == "running":
                    run.ended_at = None
                    run.heartbeat_at = now
                ids.append(rid)
            elif op[0] in ("extend", "finish", "energy") and ids:
                run = session.get(Run, ids[op[1] % len(ids)])
                if op[0] == "extend" and run.ended_at is not None:
                    run.ended_at = run.ended_at + timedelta(hours=op[2])
                    run.heartbeat_at = run.ended_at
                elif op[0] == "finish" and run.status == RunStatus.running:
                    run.status, run.ended_at = RunStatus(op[2]), run.started_at + timedelta(hours=30)
                elif op[0] == "energy" and run.ended_at is not None:
                    nodes = {n.hostname: n for n in session.exec(select(RunNode).where(RunNode.run_id == run.id))}
                    for n in range(run.nodes):
                        host = f"{run.id}-n{n}"
                        if host in nodes:
                            nodes[host].energy_kwh = op[2]
                        else:
                            session.add(RunNode(run_id=run.id, hostname=host, node_rank=n, energy_kwh=op[2]))
            elif op[0] == "reap":
                reap_stale(session, now=now + timedelta(hours=1))  # a Core UPDATE: rollup.touch keeps it in step
            elif op[0] == "offer":
                nt = node_type(session)
                session.add(Offer(name=f"rent-{uuid.uuid4().hex[:6]}", node_type_id=nt.id, kind=OfferKind.rent_elastic,
                                  price_per_node_hour=D("7.5"), billing_granularity_hours=D(op[1]),
                                  minimum_hours=D(op[2])))
            elif op[0] == "tz":
                set_setting(session, "timezone", op[1])
            session.commit()
            with Session(engine) as fresh:  # what another process sees: nothing left pending in this session
                assert rollup.check(fresh) == []
        for month in MONTHS:
            rep = monthly_report(session, month, now=now)
            assert abs(rep.summary["node_hours"] - _node_hours_by_hand(session, month, now)) < D("1e-18")
            assert abs(sum((r.node_hours for r in rep.runs), D(0)) - rep.summary["node_hours"]) < D("1e-18")
            assert abs(sum((r.cost for r in rep.runs), D(0)) + rep.summary["idle_cost"] - rep.summary["actual_cost"]) < D("1e-18")
        # running runs are never stored: they are added when read
        live = session.exec(select(Run.id).where(Run.status == RunStatus.running, Run.ended_at.is_(None))).all()
        if live:
            assert not session.exec(select(RollupSlice).where(RollupSlice.run_id.in_(live))).all()


def _reset(session: Session) -> None:
    for model in (RunNode, RollupSlice, Run):
        session.exec(model.__table__.delete())  # type: ignore[arg-type]
    from trainledger.store.models import Fleet, Setting

    session.exec(Fleet.__table__.delete())  # type: ignore[arg-type]
    session.exec(Offer.__table__.delete().where(Offer.name.like("rent-%")))  # type: ignore[arg-type]
    session.exec(Setting.__table__.delete().where(Setting.key == "timezone"))  # type: ignore[arg-type]
    session.commit()
    rollup.rebuild(session)
    session.commit()


def test_changes_committed_without_a_flush_reach_the_rollup(engine):
    with Session(engine) as s:
        add_run(s, "a", datetime(2026, 11, 3, tzinfo=UTC), 5, nodes=2)
        s.commit()
        run = s.get(Run, "a")
        run.nodes = 4  # no flush before commit: commit() flushes after its before_commit hook
        s.commit()
    with Session(engine) as s:
        assert rollup.check(s) == []
        assert s.exec(select(RollupSlice.node_us).where(RollupSlice.run_id == "a")).one() == 4 * 5 * 3_600_000_000


def test_live_run_counts_up_to_now_and_raises_the_peak(session):
    start = datetime(2026, 11, 10, tzinfo=UTC)
    add_run(session, "done", start, 10, nodes=3, offer_name="rtx4090-rent")
    live = add_run(session, "live", start + timedelta(hours=5), 1, nodes=4, offer_name="rtx4090-rent",
                   status=RunStatus.running)
    live.ended_at = None
    session.commit()
    now = start + timedelta(hours=8)
    rep = monthly_report(session, "2026-11", now=now)
    assert rep.summary["node_hours"] == D(3 * 10 + 4 * 3)
    assert rep.node_types[0].peak_nodes == 7  # 3 + 4 between 05:00 and 08:00
    later = monthly_report(session, "2026-11", now=now + timedelta(hours=2))
    assert later.summary["node_hours"] == D(3 * 10 + 4 * 5)
    assert session.exec(select(func.count()).select_from(RollupSlice).where(RollupSlice.run_id == "live")).one() == 0


def test_a_price_version_needs_no_rebuild_and_a_new_billing_rule_is_backfilled(session):
    """A price edit adds a version: from now it leaves November alone; from November 1 it re-costs November
    with no rebuild (the slices are price-free); a version with a new billing rule back-fills that rule."""
    from trainledger.store.catalog import prices

    add_run(session, "e", datetime(2026, 11, 3, tzinfo=UTC), 2.5, nodes=2, offer_name="rtx4090-rent")
    session.commit()
    before = monthly_report(session, "2026-11").summary["actual_cost"]
    assert before == 2 * 3 * D(3600) / D(730)  # 3 started hours
    rent = offer(session, "rtx4090-rent")
    values = {**prices.price_values(rent), "price_per_node_month": None, "price_per_node_hour": D("10")}
    prices.apply_version(session, prices.plan_version(session, rent, values, datetime(2026, 12, 20, tzinfo=UTC),
                                                      now=datetime(2026, 12, 20, tzinfo=UTC)))
    session.commit()
    assert monthly_report(session, "2026-11").summary["actual_cost"] == before
    nov = prices.plan_version(session, rent, values, datetime(2026, 11, 1, tzinfo=UTC))
    prices.apply_version(session, nov, retroactive=True)
    session.commit()
    assert monthly_report(session, "2026-11").summary["actual_cost"] == 2 * 3 * D(10)
    assert rollup.check(session) == []
    rule = {**values, "billing_granularity_hours": D("0.5"), "minimum_hours": None}  # 2.5 h billed as 2.5 h
    prices.apply_version(session, prices.plan_version(session, rent, rule, datetime(2026, 11, 2, tzinfo=UTC)),
                         retroactive=True)
    session.commit()
    assert monthly_report(session, "2026-11").summary["actual_cost"] == 2 * D("2.5") * D(10)
    assert rollup.check(session) == []


def test_report_without_lines_has_the_same_figures(session):
    add_fleet(session, 4)
    for k in range(6):
        add_run(session, f"x{k}", datetime(2026, 11, 1 + 3 * k, tzinfo=UTC), 30 + k, nodes=1 + k % 3,
                offer_name=["rtx4090-own", "rtx4090-rent", None][k % 3], tokens=10**6 * (k + 1), gpu_util=0.8)
    session.commit()
    full, bare = monthly_report(session, "2026-11"), monthly_report(session, "2026-11", lines=False)
    assert bare.runs == [] and len(full.runs) == 6
    assert full.summary == bare.summary and full.projects == bare.projects and full.node_types == bare.node_types
    one = monthly_report(session, "2026-11", lines={"x4"})
    assert [r.run_id for r in one.runs] == ["x4"] and one.runs[0].cost == {r.run_id: r for r in full.runs}["x4"].cost


def test_concurrent_writers_keep_the_rollup_exact(engine):
    """Eight threads finish runs in the same month and node type at once; every sum and the peak stay exact."""
    with Session(engine) as s:
        nt_id = node_type(s).id
        rent_id = offer(s, "rtx4090-rent").id
    start = datetime(2026, 11, 5, tzinfo=UTC)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for j in range(5):
                with Session(engine) as s:
                    s.add(Run(id=f"c{k}-{j}", node_type_id=nt_id, offer_id=rent_id, nodes=1, gpus_per_node=8,
                              status=RunStatus.succeeded, started_at=start + timedelta(minutes=j),
                              ended_at=start + timedelta(hours=2, minutes=j), heartbeat_at=start))
                    s.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Session(engine) as s:
        assert rollup.check(s) == []
        rep = monthly_report(s, "2026-11", lines=False)
        assert rep.summary["runs"] == 40
        assert rep.summary["node_hours"] == D(80)
        assert rep.node_types[0].peak_nodes == 40  # all 40 overlap between 00:04 and 02:00


def test_db_rollup_command_checks_and_rebuilds(cli, engine):
    with Session(engine) as s:
        add_run(s, "a", datetime(2026, 11, 3, tzinfo=UTC), 5, nodes=2)
        s.commit()
        monthly_report(s, "2026-11")
        s.commit()
        # a write behind the ledger's back (raw SQL, no session events): the check finds it
        s.exec(update(Run).where(Run.id == "a").values(nodes=5))
        s.commit()
    res = cli("db", "rollup")
    assert res.exit_code == 1 and "difference" in res.output
    res = cli("db", "rollup", "--rebuild")
    assert res.exit_code == 0 and "rebuilt from 1 runs" in res.output
    res = cli("db", "rollup")
    assert res.exit_code == 0 and "consistent" in res.output
    with Session(engine) as s:
        assert monthly_report(s, "2026-11").summary["node_hours"] == D(25)


def test_the_sql_peak_equals_the_sweep(session):
    """rollup.scope_peak_sql (a bulk import's peaks) gives sweep_peak's number: ties, nested and touching runs."""
    t0 = datetime(2026, 11, 3, tzinfo=timezone.utc)
    for i, (start_h, hours, nodes) in enumerate([(0, 5, 2), (1, 1, 3), (2, 1, 4), (3, 2, 1), (5, 1, 6), (5, 0, 9), (6, 3, 2)]):
        add_run(session, f"p{i}", t0 + timedelta(hours=start_h), hours, nodes=nodes, offer_name="rtx4090-rent")
    add_run(session, "other-offer", t0, 10, nodes=7, offer_name="rtx4090-own")
    session.commit()
    rollup.ensure(session)
    conn = session.connection()
    nt = node_type(session).id
    for ok in {s.offer_id or 0 for s in session.exec(select(RollupSlice)).all()} | {rollup.ALL}:
        scope = ("2026-11", nt, ok)
        assert rollup.scope_peak_sql(conn, scope) == rollup.sweep_peak(rollup._scope_rows(conn, *scope))
    # 0-1h: 2+7; 1-2h: 2+3+7 = 12; 2-3h: 2+4+7 = 13; at 5h the first ends as the 6-node run starts: 6+7 = 13
    assert rollup.scope_peak_sql(conn, ("2026-11", nt, rollup.ALL)) == 13
    assert rollup.scope_peak_sql(conn, ("2026-12", nt, rollup.ALL)) == 0


def test_a_month_s_slices_read_in_one_go_are_the_row_by_row_ones(session):
    """``month_slices`` parses its rows' facts in one call (``_slices_of_rows``): the same slices as one row at a time
    (``_slice_from_row``), every fact and text."""
    add_fleet(session, 4)
    for i in range(6):
        add_run(session, f"s{i}", datetime(2026, 11, 1 + 3 * i, tzinfo=timezone.utc), 30 + 7 * i, nodes=1 + i % 3,
                offer_name=("rtx4090-own", "rtx4090-rent")[i % 2], project=f"p{i % 2}")
    session.commit()
    rollup.ensure(session)
    st_ = RollupSlice.__table__
    rows = session.connection().execute(select(*rollup.SLICE_COLUMNS).where(st_.c.month == "2026-11")).all()
    assert len(rows) == 6
    assert repr(rollup._slices_of_rows(rows)) == repr([rollup._slice_from_row(r) for r in rows])
    assert [f.facts.values() for f in rollup._slices_of_rows(rows)] == \
        [rollup._slice_from_row(r).facts.values() for r in rows]
