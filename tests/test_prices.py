"""Effective-dated prices: an edit adds a version, past months keep theirs, a run across a change is split there.

SQLite and PostgreSQL. The months are in 2025, so every ``--from`` in them is in the past
(a retroactive change) whatever day the tests run.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import month_charges, monthly_report, report_to_dict
from trainledger.money.facts import rollup
from trainledger.store.db import make_engine, upgrade_schema
from trainledger.store.models import Offer, OfferPrice, RollupSlice, Run
from trainledger.store.settings import set_setting

from tests.helpers import RENT_OFFER_TOML as OFFER
from tests.helpers import add_run

D = Decimal
UTC = timezone.utc


def _setup(cli, engine, tmp_path) -> None:
    f = tmp_path / "offer.toml"
    f.write_text(OFFER, encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0
    with Session(engine) as s:
        add_run(s, "nov", datetime(2025, 11, 5, tzinfo=UTC), 30, nodes=2, offer_name="gpu-rent")
        add_run(s, "nov-dec", datetime(2025, 11, 30, 12, tzinfo=UTC), 24, nodes=1, offer_name="gpu-rent")
        add_run(s, "across", datetime(2025, 12, 10, tzinfo=UTC), 240, nodes=2, offer_name="gpu-rent")
        s.commit()


def test_a_price_raised_in_december_leaves_november_byte_identical_and_splits_a_run_exactly(cli, engine, tmp_path):
    _setup(cli, engine, tmp_path)
    nov_before = cli("report", "monthly", "--month", "2025-11", "--format", "csv")
    dec_before = json.loads(cli("report", "monthly", "--month", "2025-12", "--format", "json").output)
    assert dec_before["summary"]["actual_cost"] == str(D(12 * 10 + 2 * 240 * 10) + D("0.00"))  # 4920.00

    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=13", "--from", "2025-12-15", "--retroactive", "--yes",
              "--note", "new contract")
    assert res.exit_code == 0, res.output
    assert "re-costed 2025-12, 2026-" in res.output  # from Dec 15 2025 up to now

    assert cli("report", "monthly", "--month", "2025-11", "--format", "csv").stdout == nov_before.stdout
    dec = json.loads(cli("report", "monthly", "--month", "2025-12", "--format", "json").output)
    runs = {r["run_id"]: r for r in dec["runs"]}
    # "across": 2 nodes from Dec 10 to Dec 20; 120 h at 10 before Dec 15, 120 h at 13 after
    assert runs["across"]["cost"] == "5520.00" == str(2 * 120 * D(10) + 2 * 120 * D(13)) + ".00"
    assert runs["across"]["node_hours"] == 480.0
    assert runs["nov-dec"]["cost"] == "120.00"  # its December half is before the change
    assert dec["summary"]["actual_cost"] == "5640.00"
    with Session(engine) as s:
        slices = s.exec(select(RollupSlice.charge_from, RollupSlice.node_us).where(RollupSlice.run_id == "across")
                        .order_by(RollupSlice.charge_from)).all()
        assert [(t, us) for t, us in slices] == [(datetime(2025, 12, 1, tzinfo=UTC), 2 * 120 * 3_600_000_000),
                                                 (datetime(2025, 12, 15, tzinfo=UTC), 2 * 120 * 3_600_000_000)]
        assert rollup.check(s) == []

    hist = json.loads(cli("pricing", "history", "gpu-rent", "--json").output)
    assert [(v["version"], v["valid_from"][:10], (v["valid_to"] or "")[:10], v["price_per_node_hour"], v["note"])
            for v in hist["versions"]] == [(1, "2025-01-01", "2025-12-15", "10.00", ""),
                                           (2, "2025-12-15", "", "13.00", "new contract")]
    shown = json.loads(cli("pricing", "show", "gpu-rent", "--json").output)
    assert shown["price_per_node_hour"] == "13.00"  # the offer's list price is its newest version


def test_a_price_from_now_changes_no_past_month(cli, engine, tmp_path):
    _setup(cli, engine, tmp_path)
    before = {m: cli("report", "monthly", "--month", m, "--format", "csv").stdout for m in ("2025-11", "2025-12")}
    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=99")  # no --from: from now, nothing to confirm
    assert res.exit_code == 0 and "re-costed" not in res.output, res.output
    assert {m: cli("report", "monthly", "--month", m, "--format", "csv").stdout for m in before} == before
    with Session(engine) as s:
        newest = s.exec(select(OfferPrice).join(Offer, Offer.id == OfferPrice.offer_id).where(Offer.name == "gpu-rent")
                        .order_by(OfferPrice.valid_from.desc())).first()
        assert newest.price_per_node_hour == D("99") and abs(newest.valid_from - datetime.now(UTC)) < timedelta(minutes=5)
        assert newest.valid_from.microsecond == 0


def test_bad_versions_are_one_line_errors_and_write_nothing(cli, engine, tmp_path):
    _setup(cli, engine, tmp_path)

    def versions():
        with Session(engine) as s:
            return s.exec(select(OfferPrice.version, OfferPrice.valid_from, OfferPrice.price_per_node_hour)
                          .join(Offer, Offer.id == OfferPrice.offer_id).where(Offer.name == "gpu-rent")
                          .order_by(OfferPrice.id)).all()

    start = versions()
    cases = [
        (("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "2024-06-01", "--retroactive", "--yes"),
         "before offer gpu-rent existed (its first price is valid from 2025-01-01"),
        (("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "2025-01-01", "--retroactive", "--yes"),
         "already has version 1 from 2025-01-01 00:00:00 UTC with other prices; versions cannot overlap"),
        (("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "2025-12-15"),
         "is in the past: the new price would rewrite 2025-12, 2026-01"),
        (("pricing", "set", "gpu-rent", "price_per_node_hour=-1", "--from", "2025-12-15", "--retroactive", "--yes"),
         "price_per_node_hour: Input should be greater than or equal to 0"),
        (("pricing", "set", "gpu-rent", "kind=own"), "FIELD=VALUE: expected one of price_per_node_hour"),
        (("pricing", "set", "no-such", "price_per_node_hour=1"), "NAME: unknown offer 'no-such'"),
        (("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "someday"), "--from: expected YYYY-MM-DD"),
    ]
    for args, needle in cases:
        res = cli(*args)
        assert res.exit_code == 2 and needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, (args, res.stderr)
    # confirmation asked, naming the months; "n" writes nothing, "y" adds the version
    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "2025-12-15", "--retroactive", input="n\n")
    assert res.exit_code == 2 and "re-cost 2025-12, 2026-01" in res.stderr and "nothing written" in res.stderr
    assert versions() == start
    two = tmp_path / "twice.toml"
    two.write_text(OFFER + OFFER.replace('"10"', '"11"'), encoding="utf-8")
    res = cli("pricing", "import", two, "--retroactive", "--yes")
    assert res.exit_code == 2 and "offer 'gpu-rent' is defined twice from 2025-01-01 (its versions would overlap)" in res.stderr
    changed = tmp_path / "currency.toml"
    changed.write_text(OFFER.replace('"CNY"', '"USD"'), encoding="utf-8")
    res = cli("pricing", "import", changed)
    assert res.exit_code == 2 and "currency: is CNY; an offer's kind, node type and currency cannot change" in res.stderr
    assert versions() == start
    res = cli("pricing", "set", "gpu-rent", "price_per_node_hour=12", "--from", "2025-12-15", "--retroactive", input="y\n")
    assert res.exit_code == 0 and [v[0] for v in versions()] == [1, 2], res.output


def test_an_import_with_a_history_adds_the_versions_in_order(cli, engine, tmp_path):
    f = tmp_path / "history.toml"
    f.write_text(OFFER + OFFER.replace('"10"', '"12"').replace("2025-01-01", "2025-06-01"), encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0  # a new offer: its history needs no confirmation
    with Session(engine) as s:
        add_run(s, "may-jun", datetime(2025, 5, 31, 12, tzinfo=UTC), 24, nodes=1, offer_name="gpu-rent")
        s.commit()
        assert monthly_report(s, "2025-05").summary["actual_cost"] == 12 * D(10)
        assert monthly_report(s, "2025-06").summary["actual_cost"] == 12 * D(12)
    assert cli("pricing", "import", f).exit_code == 0  # the same file again: the same prices, no new version
    with Session(engine) as s:
        versions = s.exec(select(OfferPrice.version, OfferPrice.price_per_node_hour).join(Offer, Offer.id == OfferPrice.offer_id)
                          .where(Offer.name == "gpu-rent").order_by(OfferPrice.valid_from)).all()
        assert versions == [(1, D(10)), (2, D(12))]


@pytest.mark.new_ledger  # migrates from an empty database
def test_migration_0009_gives_every_offer_version_1_from_the_earliest_run_and_keeps_the_rollup(ledger_url):
    """A ledger at 0003 with a run and its rollup (built in Asia/Shanghai): after 0009 every offer has version 1
    valid from the earliest run, the rollup rows carry their month's start as charge period, and nothing differs."""
    old = make_engine(ledger_url, upgrade=False)
    upgrade_schema(old, "0003")
    old.dispose()
    eng = create_engine(ledger_url)
    start = datetime(2025, 11, 3, 8, 0)
    us = 2 * 10 * 3_600_000_000
    with eng.begin() as c:
        nt = c.execute(text("SELECT id FROM node_type WHERE name = 'rtx4090-8x'")).scalar()
        rent = c.execute(text("SELECT id FROM offer WHERE name = 'rtx4090-rent'")).scalar()
        c.execute(text("INSERT INTO setting (key, value) VALUES ('timezone', 'Asia/Shanghai'), "
                       "('rollup:tz', 'Asia/Shanghai'), ('rollup:rules', :rules)"), {"rules": json.dumps({str(nt): ["1|1"]})})
        c.execute(text("INSERT INTO run (id, name, launcher, node_type_id, offer_id, nodes, gpus_per_node, strategy, "
                       "model_shape, status, created_at, started_at, ended_at, heartbeat_at, tokens) VALUES ('old', 'old', "
                       "'import', :nt, :o, 2, 8, '', '', 'succeeded', :s, :s, :e, :e, 1000)"), {"nt": nt, "o": rent, "s": start, "e": start + timedelta(hours=10)})
        facts = {"slices": 1, "node_us": us, "gpu_us": us * 8, "tokens": 1000, "util_slices": 0, "util_us": 0, "util_w": 0,
                 "mfu_us": 0, "mfu_w": 0, "kwh": "0", "kwh_slices": 0, "kwh_node_us": 0,
                 "billed": json.dumps({"1|1": "20.000000000000"}), "util_sources": "{}"}
        cols = ", ".join(facts)
        vals = ", ".join(f":{k}" for k in facts)
        c.execute(text(f"INSERT INTO rollup_slice (run_id, month, node_type_id, offer_id, project_id, status, start_at, "
                       f"end_at, nodes, gpus_per_node, split, {cols}) VALUES ('old', '2025-11', :nt, :o, NULL, 'succeeded', "
                       f":s, :e, 2, 8, false, {vals})"), {"nt": nt, "o": rent, "s": start, "e": start + timedelta(hours=10), **facts})
        c.execute(text(f"INSERT INTO rollup_month (month, node_type_id, offer_key, project_key, status, {cols}) "
                       f"VALUES ('2025-11', :nt, :o, 0, 'succeeded', {vals})"), {"nt": nt, "o": rent, **facts})
        c.execute(text("INSERT INTO rollup_peak (month, node_type_id, offer_key, peak) VALUES "
                       "('2025-11', :nt, :o, 2), ('2025-11', :nt, -1, 2)"), {"nt": nt, "o": rent})
    eng.dispose()
    engine = make_engine(ledger_url)
    with Session(engine) as s:
        got = s.exec(select(OfferPrice.version, OfferPrice.valid_from)).all()
        assert len(got) == 3 and set(got) == {(1, start.replace(tzinfo=UTC))}
        month_start = datetime(2025, 10, 31, 16, tzinfo=UTC)  # 2025-11-01 00:00 in Asia/Shanghai
        assert s.exec(select(RollupSlice.charge_from)).all() == [month_start]
        assert rollup.check(s) == []
        # 2 nodes × 10 started hours × 3,600/730 per node-hour
        assert monthly_report(s, "2025-11").summary["actual_cost"] == D(3600) / D(730) * 20
    engine.dispose()


def test_an_offer_never_versioned_keeps_its_past_when_its_price_changes(cli, engine):
    """An offer written without a version (raw ORM, as old scripts do) is priced at its fields at every instant;
    its first edit records those fields as version 1 (from the earliest run) before the new version."""
    with Session(engine) as s:
        nt = s.exec(select(Offer.node_type_id).where(Offer.name == "rtx4090-rent")).first()
        s.add(Offer(name="hand-rent", node_type_id=nt, kind="rent_elastic", price_per_node_hour=D("7")))
        s.commit()
        add_run(s, "hand", datetime(2025, 11, 5, tzinfo=UTC), 10, nodes=1, offer_name="hand-rent")
        s.commit()
        assert monthly_report(s, "2025-11").summary["actual_cost"] == 70
    assert cli("pricing", "set", "hand-rent", "price_per_node_hour=9").exit_code == 0
    with Session(engine) as s:
        assert monthly_report(s, "2025-11").summary["actual_cost"] == 70
    hist = json.loads(cli("pricing", "history", "hand-rent", "--json").output)["versions"]
    assert [(v["version"], v["valid_from"][:10], v["price_per_node_hour"]) for v in hist] == [
        (1, "2025-11-05", "7.00"), (2, datetime.now(UTC).date().isoformat(), "9.00")]


cut_ops = st.one_of(
    st.tuples(st.just("run"), st.integers(0, 60 * 24), st.integers(0, 30 * 24), st.integers(1, 4),
              st.sampled_from(["rtx4090-own", "rtx4090-rent", None]), st.booleans()),
    st.tuples(st.just("extend"), st.integers(0, 20), st.integers(1, 10 * 24)),
    st.tuples(st.just("price"), st.integers(1, 60 * 24), st.sampled_from(["3000", "4380", "5000"])),
    st.tuples(st.just("rate"), st.integers(0, 60), st.sampled_from(["0.14", "0.15"])),
    st.tuples(st.just("carbon"), st.integers(0, 60), st.sampled_from(["300", "600"])),
    st.tuples(st.just("drop"), st.sampled_from(["version", "rate", "carbon"])),
    st.tuples(st.just("tz"), st.sampled_from(["UTC", "Asia/Shanghai"])),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(cut_ops, min_size=1, max_size=10))
def test_the_rollup_stays_exact_as_prices_rates_and_intensities_cut_months(engine, ops):
    """Random runs, price versions, exchange rates and intensities (added and removed), each committed: the rollup
    kept in step by the session events always equals one recomputed from the rows, and a month's node-hours and
    cost add up over its charge periods."""
    from trainledger.store.catalog.carbon import set_intensity
    from trainledger.store.catalog.fx import set_rate
    from trainledger.store.catalog.prices import apply_version, plan_version, price_values
    from trainledger.store.models import CarbonIntensity, FxRate, RunStatus

    base = datetime(2025, 10, 1, tzinfo=UTC)
    with Session(engine, expire_on_commit=False) as s:
        _reset_cuts(s)
        ids: list[str] = []
        for op in ops:
            if op[0] == "run":
                _, start_h, hours, nodes, offer_name, failed = op
                rid = f"r{len(ids)}-{uuid.uuid4().hex[:6]}"
                add_run(s, rid, base + timedelta(hours=start_h), hours, nodes=nodes, offer_name=offer_name,
                        status=RunStatus.failed if failed else RunStatus.succeeded, tokens=1000 * (hours + 1))
                ids.append(rid)
            elif op[0] == "extend" and ids:
                run = s.get(Run, ids[op[1] % len(ids)])
                run.ended_at = run.heartbeat_at = run.ended_at + timedelta(hours=op[2])
            elif op[0] == "price":
                rent = s.exec(select(Offer).where(Offer.name == "rtx4090-rent")).one()
                values = {**price_values(rent), "price_per_node_month": D(op[2])}
                try:
                    apply_version(s, plan_version(s, rent, values, base + timedelta(hours=op[1])), retroactive=True)
                except LedgerInputError:
                    pass  # an overlapping instant: refused, as it should be
            elif op[0] == "rate":
                set_rate(s, "CNY", "USD", op[2], (base + timedelta(days=op[1])).date())
            elif op[0] == "carbon":
                set_intensity(s, op[2], (base + timedelta(days=op[1])).date(), "rtx4090-8x")
            elif op[0] == "drop":
                model = {"version": OfferPrice, "rate": FxRate, "carbon": CarbonIntensity}[op[1]]
                rows = s.exec(select(model).order_by(model.id.desc())).all()
                if rows and not (op[1] == "version" and rows[0].version == 1):
                    s.delete(rows[0])
            elif op[0] == "tz":
                set_setting(s, "timezone", op[1])
            s.commit()
            with Session(engine) as fresh:
                assert rollup.check(fresh) == []
        for month in ("2025-10", "2025-11", "2025-12"):
            rep = monthly_report(s, month)
            assert abs(sum((r.node_hours for r in rep.runs), D(0)) - rep.summary["node_hours"]) < D("1e-18")
            assert abs(sum((r.cost for r in rep.runs), D(0)) + rep.summary["idle_cost"] - rep.summary["actual_cost"]) < D("1e-15")
            # the chargeback's costing (lines per charge period, added per run): the same report, to the last digit
            mc = month_charges(s, month)
            assert [repr(r) for r in mc.report.runs] == [repr(r) for r in rep.runs]
            assert [r.intensities for r in mc.report.runs] == [r.intensities for r in rep.runs]
            assert repr(report_to_dict(mc.report)) == repr(report_to_dict(rep))


def _reset_cuts(s: Session) -> None:
    from trainledger.store.models import CarbonIntensity, FxRate, RunNode, Setting

    for model in (RunNode, RollupSlice, Run, FxRate, CarbonIntensity):
        s.exec(model.__table__.delete())  # type: ignore[arg-type]
    s.exec(OfferPrice.__table__.delete().where(OfferPrice.version > 1))  # type: ignore[arg-type]
    s.exec(Setting.__table__.delete().where(Setting.key == "timezone"))  # type: ignore[arg-type]
    s.commit()
    rollup.rebuild(s)
    s.commit()
