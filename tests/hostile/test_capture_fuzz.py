"""Issue 37, property-based: whatever training code or the environment hands capture (any type, NaN, ±inf, huge,
negative, unicode, control characters, clock jumps), nothing raises into training, the run is recorded, and its
goodput categories add up to its time and its cost exactly; end to end, a run recorded through ``trainledger.track``
and its phase methods (any phase lengths, orders and endings, on a clock the test moves) is costed by the monthly
report and its goodput account, which add up to each other to the cent, and each month's spend = goodput + badput +
idle exactly.

Example counts: ``TRAINLEDGER_FUZZ_EXAMPLES`` (CI default 50 per property, a few seconds in all); a nightly-style
run sets it higher (``TRAINLEDGER_FUZZ_EXAMPLES=2000``)."""

from __future__ import annotations

import math
import os
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.store.models import RunStatus

from tests.capture.conftest import run_row
from tests.helpers import add_fleet
from tests.hostile.conftest import FUZZ

EXAMPLES = int(os.environ.get("TRAINLEDGER_FUZZ_EXAMPLES", "50"))

#: anything training code might hand over
values = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20), st.binary(max_size=8),
    st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.none() | st.text(max_size=3), max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just(object()), st.decimals(allow_nan=True))
calls = st.lists(st.tuples(st.sampled_from(["log", "log_kw", "checkpoint", "span", "step_times", "phase",
                                            "step_begin"]), values, values), max_size=12)
#: environment values: numbers in and out of range, text, control characters
env_text = st.one_of(st.sampled_from(["", "0", "-1", "nan", "inf", "-inf", "1e999", "1e300", "0.5", "2", "../x",
                                      "a\nb", "\x00", "slurm-1"]), st.text(max_size=12))
ENV_NAMES = ["TRAINLEDGER_FLUSH_S", "TRAINLEDGER_HEARTBEAT_S", "TRAINLEDGER_LEDGER_WAIT_S",
             "TRAINLEDGER_UTIL_INTERVAL_S", "TRAINLEDGER_RUN_ID", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]


def call(run, what: str, a, b) -> None:
    if what == "log":
        run.log(a, b, a)
    elif what == "log_kw":
        run.log(step=a, tokens_total=b, lr=a, **{"x": b})
    elif what == "checkpoint":
        run.checkpoint(step=a, path=b, seconds=a)
    elif what == "span":
        run.phase_span(a, b)
    elif what == "step_times":
        run.step_times(a)
    elif what == "phase":
        with run.phase(a):
            pass
    else:
        run.step_begin()


def test_any_call_into_an_open_run_never_raises_and_the_run_is_recorded(tmp_path):
    import trainledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with trainledger.track(project="p", db=url, journal_dir=tmp_path / "j", flush_s=0.05, ledger_wait_s=10) as run:
        @settings(FUZZ, max_examples=EXAMPLES * 4)
        @given(calls)
        def feed(seq):
            for what, a, b in seq:
                call(run, what, a, b)
        feed()
        run.log(step=10**6, tokens=1)
    row = run_row(url, run.run_id)
    assert row.status == RunStatus.succeeded and row.steps is not None and row.ended_at is not None


@settings(FUZZ, max_examples=EXAMPLES)
@given(st.dictionaries(st.sampled_from(ENV_NAMES), env_text))
def test_any_environment_is_taken_by_track(env):
    import trainledger
    from trainledger.store.envsettings import FLUSH_S, HEARTBEAT_S, LEDGER_WAIT_S

    run = trainledger.track(project="p", db="sqlite:///:memory:", env=env)
    for setting, value in ((FLUSH_S, run.flush_s), (HEARTBEAT_S, run.heartbeat_s), (LEDGER_WAIT_S, run.ledger_wait_s)):
        assert setting.low <= value <= setting.high
    assert run.run_id is None or run.run_id == env.get("TRAINLEDGER_RUN_ID")


#: a phase event stream with arbitrary values and a clock that may jump either way by decades
events = st.lists(st.tuples(st.integers(min_value=0, max_value=6), values,
                            st.one_of(st.floats(min_value=-1e10, max_value=1e10), st.floats(allow_nan=True),
                                      st.sampled_from([1.26e9, -1.26e9]))), max_size=30)


@settings(FUZZ, max_examples=EXAMPLES * 4)
@given(events, st.decimals(min_value=0, max_value=10**9, places=6), st.integers(min_value=1, max_value=64))
def test_any_phase_stream_gives_an_account_that_adds_up_to_the_run_cost_to_the_cent(stream, cost, nodes):
    from trainledger.money.goodput.goodput_core import PHASES, PhaseTotal, account_seconds, on_grid, split_cost
    from trainledger.sources.record.phases import PhaseAggregator

    started = 1.7e9
    agg = PhaseAggregator(started)
    fed, t = [], started
    for kind, value, dt in stream:
        t += dt
        if kind == 6:  # a span: (name, seconds)
            value = (str(value)[:10], value if isinstance(value, float) else 1.0)
        fed.append((kind, value, t))
    agg.feed(fed)
    rows = agg.rows()
    elapsed = max(0.0, agg.last_t - started)
    for name, (secs, count, *_rest) in rows.items():
        assert math.isfinite(secs) and secs >= 0 and count >= 0
        if name in PHASES:
            assert secs <= elapsed + 1e-6, (name, secs, elapsed)
    wall = Decimal(str(round(elapsed, 6)))
    phases = {"n0": {k: PhaseTotal(v[0], v[1], v[2], v[3]) for k, v in rows.items()}}
    secs = account_seconds(wall, Decimal(0), nodes, phases, False)
    assert sum(secs.values()) == wall * nodes
    shares = split_cost(cost, Decimal(0), secs)
    assert sum(shares.values()) == on_grid(cost)


@settings(FUZZ, max_examples=EXAMPLES * 4)
@given(st.sampled_from(ENV_NAMES[:4]), env_text)
def test_each_setting_is_in_range_or_its_default_and_strict_mode_names_it(name, raw):
    import pytest
    from trainledger.errors import LedgerInputError
    from trainledger.store.envsettings import SETTINGS, env_setting

    setting = SETTINGS[name]
    said: list[str] = []
    value = env_setting(setting, {name: raw}, write=said.append)
    assert setting.low <= value <= setting.high
    assert len(said) == (0 if value != setting.default or setting.parse(raw) is not None or not raw.strip() else 1)
    if said:
        with pytest.raises(LedgerInputError, match=f"^{name}: expected seconds"):
            env_setting(setting, {name: raw}, strict=True)


# --- the goodput identity end to end: recorded through the public API, costed by the monthly report -----------

#: a phase's name: the account's own, aliases, anything
phase_names = st.one_of(st.sampled_from(["startup", "data", "data_wait", "checkpoint_save", "checkpoint_restore",
                                         "eval", "step", "straggler_wait", "warmup", "", "données 🚀"]),
                        st.text(max_size=8))
#: how long something takes on the (fake) clock: up to 2 h
lengths = st.floats(min_value=0, max_value=7200, allow_nan=False)
#: what training code says a span or a checkpoint took: a length, or nonsense
told = st.one_of(lengths, st.sampled_from([math.nan, math.inf, -math.inf, -5.0, 1e300, 0.0]))
ops = st.lists(st.tuples(st.sampled_from(["phase", "span", "checkpoint", "step", "wait"]), phase_names, lengths, told),
               max_size=8)
ENDINGS = {"ok": RunStatus.succeeded, "exit0": RunStatus.succeeded, "raise": RunStatus.failed,
           "exit3": RunStatus.failed, "cancel": RunStatus.cancelled}


class FakeClock:
    """The wall clock of the API (``utc_now``) and its phase clock, moved only by the test: a run of hours in ms."""

    def __init__(self) -> None:
        self.t = 0.0

    def utc(self):
        from datetime import datetime, timezone

        return datetime.fromtimestamp(self.t, timezone.utc)

    def steady(self):
        return lambda: self.t


def test_a_run_recorded_through_the_api_is_costed_with_an_account_that_adds_up(sqlite_url, tmp_path, monkeypatch):
    """Any phase lengths, orders and endings through ``trainledger.track`` and its phase methods; then the run's
    goodput account (``goodput_account(run_id=...)``) adds up to its cost exactly and to its monthly-report line to
    the cent, and each month of them all: spend = goodput + badput + idle exactly, every presented run line's cost
    the cents of its categories."""
    from datetime import datetime, timedelta, timezone

    import trainledger
    from sqlmodel import Session
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.account import goodput_account
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.money.rates.costs import cents
    from trainledger.money.rates.months import month_of
    from trainledger.reports.export import presented_report
    from trainledger.sources.capture import track as track_module
    from trainledger.sources.record import phases as phases_module
    from trainledger.sources.record import writer as writer_module
    from trainledger.store.db import make_engine
    from trainledger.store.models import Run
    from trainledger.store.settings import display_timezone

    clock = FakeClock()
    for module in (track_module, writer_module):
        monkeypatch.setattr(module, "utc_now", clock.utc)
    monkeypatch.setattr(phases_module, "steady_clock", clock.steady)
    engine = make_engine(sqlite_url)
    with Session(engine) as s:  # an owned fleet beside the elastic offer: its idle is in the month's identity
        add_fleet(s, 2)
        s.commit()
    october = datetime(2026, 10, 1, tzinfo=timezone.utc).timestamp()
    recorded: list[str] = []

    @settings(FUZZ, max_examples=max(10, EXAMPLES // 2))  # a run, its account and its report line: ~0.1 s each
    @given(ops, st.sampled_from(sorted(ENDINGS)), st.sampled_from(["rtx4090-rent", "rtx4090-own"]),
           st.integers(min_value=1, max_value=25), st.integers(min_value=0, max_value=86399))
    def record(seq, ending, offer, day, second):
        clock.t = october + day * 86400 + second  # every run in October, whatever the ledger's time zone
        run = trainledger.track(project="fuzz", node_type="rtx4090-8x", offer=offer, db=sqlite_url,
                                journal_dir=tmp_path / "journal", flush_s=0.05, heartbeat_s=3600, ledger_wait_s=30)
        try:
            with run:
                for i, (what, name, length, said) in enumerate(seq):
                    if what == "phase":
                        with run.phase(name):
                            clock.t += length
                    elif what == "span":
                        clock.t += length
                        run.phase_span(name, said)
                    elif what == "checkpoint":
                        clock.t += length
                        run.checkpoint(step=i, path=f"ckpt-{i}", seconds=said)
                    elif what == "step":
                        run.step_begin()
                        clock.t += length
                        run.log(step=i, tokens=1000)
                    else:
                        clock.t += length
                if ending == "raise":
                    raise RuntimeError("boom")
                if ending.startswith("exit"):
                    raise SystemExit(int(ending[4:]))
                if ending == "cancel":
                    raise KeyboardInterrupt
        except (RuntimeError, SystemExit, KeyboardInterrupt):
            pass
        recorded.append(run.run_id)
        with Session(engine) as s:
            row = s.get(Run, run.run_id)
            assert row.status == ENDINGS[ending] and row.ended_at is not None, (row.status, row.error)
            month = month_of(row.started_at, display_timezone(s))
            now = row.ended_at + timedelta(minutes=1)
            (acct,) = goodput_account(s, month=month, run_id=row.id, now=now).runs
            line = next(r for r in monthly_report(s, month, now=now, lines=[row.id]).runs if r.run_id == row.id)
        assert sum(acct.cost.values()) == acct.total_cost == acct.run_cost  # exactly
        assert cents(sum(acct.cost.values())) == cents(line.cost)  # to the cent of its monthly-report line
        assert line.cost > 0 or row.ended_at == row.started_at  # a run of any length is billed (per started hour)
        assert all(v >= 0 for v in acct.cost.values()) and all(v >= 0 for v in acct.seconds.values())

    record()
    with Session(engine) as s:
        rows = [s.get(Run, rid) for rid in recorded]
        tz = display_timezone(s)
        now = max(r.ended_at for r in rows) + timedelta(minutes=1)
        for month in sorted({month_of(r.started_at, tz) for r in rows}):
            rep = monthly_report(s, month, now=now)
            acc = report_account(s, rep, now)
            (m,) = acc.months
            assert m.goodput + m.badput + m.idle == m.spend  # exactly
            assert m.idle > 0 and m.goodput + m.badput > 0
            presented = {r["run_id"]: r for r in presented_report(rep, acc)["runs"]}
            for a in acc.runs:
                assert presented[a.run_id]["cost"] == str(cents(sum(a.cost.values()))), a.run_id
    engine.dispose()
