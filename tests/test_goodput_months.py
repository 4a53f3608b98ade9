"""The goodput account across a month edge (issue #25): phases land in the month they happened in (the writer's
month-edge rows), and a recovery gap lands in each month it covers, whichever month the resumed run starts in.

The display time zone is Asia/Shanghai, so December starts at 2026-11-30 16:00 UTC. Expected figures are written out
from the timelines below, not read from the code.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from trainledger.money.goodput.account import Category, goodput_account, phase_timeline
from trainledger.money.rates import costs
from trainledger.sources.record import phases as ph
from trainledger.store.catalog.presets import import_pricing_file
from trainledger.store.models import Run, RunStatus
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run
from tests.month_helpers import FIXED_PER_NODE_MONTH, IDLE_KWH_PRICE

D = Decimal
UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
EDGE = datetime(2026, 11, 30, 16, tzinfo=UTC)  # 2026-12-01 00:00 in Shanghai
NOW = datetime(2027, 1, 10, tzinfo=UTC)
#: 36 CNY per node-hour: a node-second costs exactly 0.01
OFFER = """
[[offer]]
name = "rent36"
node_type = "rtx4090-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "36"
valid_from = 2025-01-01
"""


def _t(hh: int, mm: int) -> float:
    return datetime(2026, 11, 30, hh, mm, tzinfo=UTC).timestamp()


def _timeline() -> list[tuple]:
    """A run from 14:00 to 18:00 UTC: restore, start-up, steps with a data wait, a save across the edge, an eval."""
    return [(ph.BEGIN, "checkpoint_restore", _t(14, 10)), (ph.END, "checkpoint_restore", _t(14, 20)),
            (ph.STEP_BEGIN, None, _t(14, 30)), (ph.BEGIN, "data", _t(14, 30)), (ph.END, "data", _t(14, 36)),
            (ph.STEP_END, None, _t(15, 30)), (ph.STEP_BEGIN, None, _t(15, 30)), (ph.STEP_END, None, _t(15, 57)),
            (ph.SPAN, ("checkpoint_save", 360.0), _t(16, 3)), (ph.CHECKPOINT, None, _t(16, 3)),
            (ph.STEP_BEGIN, None, _t(16, 3)), (ph.STEP_END, None, _t(16, 45)),
            (ph.BEGIN, "eval", _t(16, 45)), (ph.END, "eval", _t(16, 51)),
            (ph.STEP_BEGIN, None, _t(16, 51)), (ph.STEP_END, None, _t(17, 51))]


def test_the_writer_cuts_phases_at_the_local_month_edge():
    agg = ph.PhaseAggregator(_t(14, 0), ph.month_edges(SHANGHAI))
    agg.feed(_timeline())
    rows = agg.rows()
    at = "@" + EDGE.isoformat()
    # up to 16:00: restore 600, start-up 30 min less the restore, data 360, steps 60 − 6 and 27 − 0, half the save;
    # the first step (60 − 6 min) ended before the edge
    assert {k: v[0] for k, v in rows.items() if k.endswith(at)} == {
        "checkpoint_restore" + at: 600.0, "startup" + at: 1200.0, "data" + at: 360.0, "step" + at: 3240.0 + 1620.0,
        "checkpoint_save" + at: 180.0, "first_step" + at: 3240.0}
    # the checkpoint came after the edge: everything before it was kept
    assert all(v[2] == v[0] for k, v in rows.items() if k.endswith(at))
    assert rows["step"][0] == 3240.0 + 1620.0 + 2520.0 + 3600.0 and rows["checkpoint_save"][0] == 360.0


def test_a_run_across_a_month_edge_is_attributed_at_the_time_its_phases_happened(session, tmp_path):
    set_setting(session, "timezone", "Asia/Shanghai")
    (tmp_path / "offer.toml").write_text(OFFER, encoding="utf-8")
    import_pricing_file(session, tmp_path / "offer.toml")
    add_run(session, "x", datetime(2026, 11, 30, 14, tzinfo=UTC), 4, nodes=1, offer_name="rent36")
    agg = ph.PhaseAggregator(_t(14, 0), ph.month_edges(SHANGHAI))
    agg.feed(_timeline())
    ph.apply_phases(session, "x", {"node": "h0", "rows": agg.rows()}, lambda s, rid: None,
                    lambda v: datetime.fromisoformat(v))
    session.commit()
    rep = goodput_account(session, run_id="x", now=NOW)
    nov, dec = rep.runs
    assert (nov.month, dec.month) == ("2026-11", "2026-12")
    # November (14:00-16:00 UTC, 7,200 s): restore 600, start-up 1,200, data 360, steps 4,860, save 180; the first
    # step is November's only whole one (the second is cut at the edge): no typical step to compare it with
    assert {c: v for c, v in nov.seconds.items() if v} == {
        Category.checkpoint_restore: D(600), Category.startup: D(1200), Category.data_wait: D(360),
        Category.productive: D(4860), Category.checkpoint_save: D(180)}
    # December (16:00-18:00, 7,200 s): save 180, steps 0 + 2,520 + 3,600, eval 360, 9 min after the last step
    assert {c: v for c, v in dec.seconds.items() if v} == {
        Category.checkpoint_save: D(180), Category.productive: D(6120), Category.eval: D(360),
        Category.unattributed: D(540)}
    for acct in (nov, dec):  # 0.01 CNY a node-second: each category's cost is its seconds / 100, exactly
        assert acct.run_cost == D(72)
        assert {c: v for c, v in acct.cost.items() if v} == {c: v / 100 for c, v in acct.seconds.items() if v}
    # evenly spread, November would have had 7,200 / 14,400 of 10,980 s of steps: 5,490 (not the 4,860 measured)
    assert nov.cost[Category.productive] == D("48.60") and dec.cost[Category.productive] == D("61.20")
    assert all("@" not in r["phase"] for r in phase_timeline(session, "x"))


def test_a_run_without_edge_rows_is_spread_evenly(session, tmp_path):
    set_setting(session, "timezone", "Asia/Shanghai")
    (tmp_path / "offer.toml").write_text(OFFER, encoding="utf-8")
    import_pricing_file(session, tmp_path / "offer.toml")
    add_run(session, "y", datetime(2026, 11, 30, 14, tzinfo=UTC), 4, nodes=1, offer_name="rent36")
    agg = ph.PhaseAggregator(_t(14, 0))  # no month edges (a writer of an older version, the demo)
    agg.feed(_timeline())
    ph.apply_phases(session, "y", {"node": "h0", "rows": agg.rows()}, lambda s, rid: None,
                    lambda v: datetime.fromisoformat(v))
    session.commit()
    nov, dec = goodput_account(session, run_id="y", now=NOW).runs
    # steps 3,240 (the first) + 1,620 + 2,520 + 3,600 = 10,980 s; the first exceeds the others' mean (7,740 / 3 =
    # 2,580) by 660 s of warm-up, start-up: 10,320 s of steps, half in each month
    assert nov.seconds[Category.productive] == dec.seconds[Category.productive] == D(10320) / 2
    assert nov.seconds[Category.startup] == dec.seconds[Category.startup] == (D(1200) + D(660)) / 2


def test_recovery_lands_in_each_month_its_gap_covers(session):
    set_setting(session, "timezone", "Asia/Shanghai")
    add_fleet(session, 8)
    a = add_run(session, "a", datetime(2026, 11, 30, 10, tzinfo=UTC), 4, nodes=2, status=RunStatus.failed)
    a.last_checkpoint_at = datetime(2026, 11, 30, 13, tzinfo=UTC)
    # b resumes a 4 h after it failed (2 h in November, 2 h in December, Shanghai time) and runs into January
    b = add_run(session, "b", datetime(2026, 11, 30, 18, tzinfo=UTC), 31 * 24 + 2, nodes=2)
    b.resume_of = "a"
    session.commit()
    months = {}
    for month in ("2026-11", "2026-12", "2027-01"):
        rep = goodput_account(session, month=month, now=NOW)
        months[month] = (rep.months[0], {r.run_id: r for r in rep.runs})
        m = rep.months[0]
        assert m.goodput + m.badput + m.idle == m.spend and abs(m.identity_residual) < D("1e-9")
    nov, dec, jan = (months[m][1] for m in ("2026-11", "2026-12", "2027-01"))
    assert nov["b"].seconds[Category.recovery] == D(2 * 3600 * 2) and nov["b"].run_cost == 0
    assert sum(nov["b"].seconds.values()) == D(14400) and nov["b"].chain == "a"
    assert dec["b"].seconds[Category.recovery] == D(2 * 3600 * 2) and jan["b"].seconds[Category.recovery] == 0
    assert nov["a"].seconds[Category.lost_work] == D(3600 * 2)
    # priced at the owned fleet's idle rate of each month: its fixed cost per hour plus idle power
    for month, hours, acct in (("2026-11", 720, nov["b"]), ("2026-12", 744, dec["b"])):
        rate = FIXED_PER_NODE_MONTH / hours + IDLE_KWH_PRICE
        assert costs.cents(acct.cost[Category.recovery]) == costs.cents(4 * rate), month
        assert acct.recovery_cost == acct.cost[Category.recovery]
    assert [months[m][0].runs for m in months] == [1, 1, 1]  # run lines: a; b; b (b's November part is a gap)
    assert session.get(Run, "b").started_at - session.get(Run, "a").ended_at == timedelta(hours=4)
