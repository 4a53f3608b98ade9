"""The cost engine's formulas: seed figures exactly, other offers, and identities."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trainledger.money.rates import costs
from trainledger.store.catalog.presets import parse_pricing, preset_text

D = Decimal


def preset_offer(name: str, text: str | None = None):
    spec = parse_pricing(text or preset_text())
    for o in spec.offer:
        if o.name == name:
            return SimpleNamespace(**o.to_row(0, "preset"))
    raise KeyError(name)


def example_offer(name: str):
    from importlib import resources

    return preset_offer(name, resources.files("trainledger.data").joinpath("examples/h100-offers.toml").read_text())


OWN = preset_offer("rtx4090-own")
RENT = preset_offer("rtx4090-rent")
RESERVED = preset_offer("rtx4090-reserved")


def test_seed_own_cost_per_node_month_is_4800_at_full_load():
    # 120,000/36 + 6.67 + 4.0 kW × 730 h × 0.5 = 3,333.333… + 6.67 + 1,460
    exact = costs.own_cost_per_node_month(OWN)
    assert exact == D(120000) / 36 + D("6.67") + D("1460")
    assert costs.cents(exact) == D("4800.00")


def test_seed_own_cost_uses_idle_power_when_idle():
    # at u = 0.5: fixed 3,340.00333 + (0.5 × 4.0 + 0.5 × 0.8) kW × 730 h × 0.5 = 876
    assert costs.cents(costs.own_cost_per_node_month(OWN, D("0.5"))) == D("4216.00")
    assert costs.cents(costs.own_cost_per_node_month(OWN, D(0))) == D("3632.00")


def test_seed_rent_and_break_even():
    assert costs.hourly_rate(RENT) == D(3600) / 730
    assert costs.cents(costs.elastic_full_month(RENT)) == D("3600.00")
    u = costs.break_even_utilization(costs.own_cost_per_node_month(OWN), costs.elastic_full_month(RENT))
    assert u.quantize(D("0.0001")) == D("1.3333")
    cheaper, saving, pct = costs.savings(costs.own_cost_per_node_month(OWN), costs.elastic_full_month(RENT))
    assert cheaper == "b" and costs.cents(saving) == D("1200.00")
    assert pct.quantize(D("0.1")) == D("25.0")


def test_owning_wins_above_break_even_for_the_h100_example():
    own, rent = example_offer("h100-own"), example_offer("h100-rent")
    full_own = costs.own_cost_per_node_month(own)
    assert costs.cents(full_own) == D("45456.80")  # (2e6 − 2e5)/48 + 10.2 × 730 × 0.8 + 2,000
    assert costs.elastic_full_month(rent) == D(105850)
    u_star = costs.break_even_utilization(full_own, costs.elastic_full_month(rent))
    assert u_star.quantize(D("0.0001")) == D("0.4294")
    # the power-adjusted crossover is where own(u) really equals rent(u)
    u_exact = costs.break_even_utilization_power_adjusted(own, costs.elastic_full_month(rent))
    assert abs(costs.own_cost_per_node_month(own, u_exact) - u_exact * costs.elastic_full_month(rent)) < D("1e-15")
    above, below = u_exact + D("0.01"), u_exact - D("0.01")
    assert costs.own_cost_per_node_month(own, above) < above * costs.elastic_full_month(rent)
    assert costs.own_cost_per_node_month(own, below) > below * costs.elastic_full_month(rent)


def test_power_adjusted_break_even_is_none_when_renting_always_wins():
    assert costs.break_even_utilization_power_adjusted(OWN, costs.elastic_full_month(RENT)).quantize(D("0.0001")) == D("1.4934")
    cheap_rent = SimpleNamespace(**{**vars(RENT), "price_per_node_month": D(100)})
    # rent below the load-minus-idle power cost: own(u) > rent(u) everywhere, no crossover
    assert costs.break_even_utilization_power_adjusted(OWN, costs.elastic_full_month(cheap_rent)) is None


def test_payback_uses_cash_running_costs():
    # rent 3,600 − (power 1,460 + ops 6.67) = 2,133.33 saved a month → 120,000 ÷ 2,133.33 = 56.25 months
    p = costs.payback_months(D(120000), D(3600), D(1460) + D("6.67"))
    assert p.quantize(D("0.01")) == D("56.25")
    assert costs.payback_months(D(120000), D(1000), D(1466.67)) is None


def test_elastic_billing_granularity_and_minimum():
    assert costs.billed_hours(D("0.2"), D(1), D(1)) == D(1)            # minimum
    assert costs.billed_hours(D("2.01"), D(1), D(1)) == D(3)           # started hours
    assert costs.billed_hours(D("2.01"), D("0.25"), D(1)) == D("2.25")
    assert costs.billed_hours(D("2.01"), None, None) == D("2.01")
    assert costs.billed_hours(D(0), D(1), D(1)) == D(0)                # never started: not billed
    # 2 nodes × 3 billed hours × 3600/730
    assert costs.elastic_run_cost(RENT, 2, D("2.5")) == 2 * D(3) * D(3600) / 730
    assert costs.cents(costs.elastic_run_cost(RENT, 2, D("2.5"))) == D("29.59")


def test_reserved_is_paid_used_or_not():
    assert costs.reserved_month_cost(RESERVED, 8) == D(25920)
    assert costs.fixed_cost_per_node_month(RESERVED) == D(3240)
    assert costs.busy_rate_per_node_hour(RESERVED) == costs.idle_rate_per_node_hour(RESERVED)


def test_fleet_month_seed_full_and_idle():
    # 8 nodes, a 30-day month (720 h), half the node-hours used
    fm = costs.fleet_month(OWN, D(8 * 720), [D(8 * 360)], D(720))
    fixed = (D(120000) / 36 + D("6.67")) * 8
    power = (D(4) * 8 * 360 + D("0.8") * 8 * 360) * D("0.5")
    assert fm.total == fixed + power
    assert costs.cents(fm.total) == D("33632.03")
    assert costs.cents(fm.idle) == D("14512.01")  # 2,880 idle node-hours × (3,340.0033/720 + 0.4)
    assert costs.cents(fm.allocated[0] + fm.idle) == costs.cents(fm.total)


def test_fleet_month_over_capacity_shares_pro_rata():
    fm = costs.fleet_month(OWN, D(10), [D(10), D(30)], D(720))
    assert fm.over_capacity and fm.idle == 0
    assert (fm.allocated[1] - 3 * fm.allocated[0]).copy_abs() < D("1e-20")
    assert costs.cents(sum(fm.allocated)) == costs.cents(fm.total) == D("66.39")


def test_measured_energy_replaces_nominal_power():
    nominal = costs.fleet_month(OWN, D(720), [D(360)], D(720))
    measured = costs.fleet_month(OWN, D(720), [D(360)], D(720), energy_kwh=D(1000))
    fixed = D(120000) / 36 + D("6.67")
    assert measured.total == fixed + D(1000) * D("0.5")
    assert measured.total != nominal.total
    assert costs.cents(sum(measured.allocated) + measured.idle) == costs.cents(measured.total)


money = st.decimals(min_value=0, max_value=10**7, places=2, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(nodes=st.integers(1, 64), month_hours=st.sampled_from([672, 696, 720, 743, 744, 745]),
       runs=st.lists(st.decimals(min_value=0, max_value=2000, places=6), max_size=40),
       capex=money, ops=money, kw_load=st.decimals(0, 20, places=3), kw_idle=st.decimals(0, 20, places=3),
       price=st.decimals(0, 5, places=4), dep=st.integers(1, 120))
def test_allocation_identity_to_the_cent(nodes, month_hours, runs, capex, ops, kw_load, kw_idle, price, dep):
    """Σ run allocated cost + idle cost = fleet cost, to the cent (OpenCost identity)."""
    offer = SimpleNamespace(kind="own", capex_per_node=capex, residual_value=D(0), depreciation_months=dep,
                            operations_per_node_month=ops, power_kw_load=kw_load, power_kw_idle=kw_idle,
                            electricity_price_per_kwh=price, pue=D(1))
    fm = costs.fleet_month(offer, D(nodes * month_hours), runs, D(month_hours))
    # exact up to Decimal's 28 digits (rounding each part separately could split a half cent) ...
    assert abs(sum(fm.allocated, D(0)) + fm.idle - fm.total) < D("1e-18")
    # ... and to the cent as presented: the rounded lines add up to the rounded total
    presented = costs.round_preserving_sum(list(fm.allocated) + [fm.idle], total=costs.cents(fm.total))
    assert sum(presented, D(0)) == costs.cents(fm.total)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.decimals(min_value=-10**6, max_value=10**6, places=6), min_size=1, max_size=50))
def test_round_preserving_sum(parts):
    rounded = costs.round_preserving_sum(parts)
    assert sum(rounded, D(0)) == costs.cents(sum(parts, D(0)))
    assert all(abs(r - p) < D("0.01") for r, p in zip(rounded, parts))


def test_hours_between_is_exact_to_the_microsecond():
    t0 = datetime(2026, 1, 31, 23, 0, tzinfo=timezone.utc)
    assert costs.hours_between(t0, t0 + timedelta(hours=1, microseconds=36)) == D(1) + D(36) / D(3_600_000_000)
    assert costs.hours_between(t0, t0 - timedelta(hours=1)) == 0


def test_mfu_palm_formula_and_null_without_peak():
    # 1,000 tokens/s × 6e9 FLOPs/token ÷ (100 TFLOP/s × 2 GPUs) = 3%
    assert costs.mfu(1000, 6e9, 100, 2) == 0.03
    assert costs.mfu(1000, 6e9, 0, 2) is None
    # 6e12 FLOPs/s achieved on 2 GPUs of 10 TFLOPs each = 30 %
    assert costs.mfu(1e6, 6_000_000, 10.0, 2) == pytest.approx(0.3)


def test_unknown_peak_gives_null_mfu_and_one_warning_line(caplog):
    """Never a fallback peak: MFU is None, and one line per device name says why (once per process)."""
    import logging

    costs._WARNED_NO_PEAK.discard("Tesla T4")
    with caplog.at_level(logging.WARNING, logger="trainledger"):
        assert costs.mfu(1000, 6e9, None, 8, hardware="Tesla T4") is None
        assert costs.mfu(2000, 6e9, None, 8, hardware="Tesla T4") is None
        assert costs.mfu(1000, 6e9, None, 1) is None  # a CPU: nothing to warn about
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["MFU not reported: no peak bf16 TFLOPs known for Tesla T4; add it to the node type "
                     "(trainledger pricing import) or set peak_tflops in the trainer config"]


def test_reserved_term_is_whole_months():
    class Reserved:
        kind = "rent_reserved"
        price_per_node_month = D(3240)
        price_per_node_hour = None

    assert costs.reserved_months(D(1)) == 1 and costs.reserved_months(D(730)) == 1
    assert costs.reserved_months(D("730.000001")) == 2
    assert costs.planned_run_cost(Reserved(), 8, D(1000)) == 8 * 2 * D(3240)
    assert costs.reserved_term_cost(Reserved(), 3, D(10)) == costs.reserved_month_cost(Reserved(), 3) == 3 * D(3240)
