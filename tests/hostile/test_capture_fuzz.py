"""Issue 37, property-based: whatever training code or the environment hands capture (any type, NaN, ±inf, huge,
negative, unicode, control characters, clock jumps), nothing raises into training, the run is recorded, and its
goodput categories add up to its time and its cost exactly.

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
