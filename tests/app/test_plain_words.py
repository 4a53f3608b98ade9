"""Plain words (app/views/plain_words.py): compact numbers and "never breaks even", as the pages show them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from trainledger.app.views.plain_words import NEVER, break_even, compact, payback, payback_sentence


@pytest.mark.parametrize("value,shown", [
    ("23132713824.923", "23.1 B"), (12345, "12.3 k"), (999_499, "999 k"), (999_999, "1.00 M"), (1_000_000, "1 M"),
    ("-2500000", "-2.5 M"), ("1234567890123", "1.23 T"), (99_999, "100 k"), ("9999.5", "9,999.5"), (None, "—")])
def test_compact(value, shown):
    assert compact(value, "tokens_per_1000") == shown


def _r(payback_months, within, always_rent, u="0.9"):
    return {"payback_months": None if payback_months is None else Decimal(payback_months), "depreciation_months": 36,
            "pays_back_within_depreciation": within, "renting_always_cheaper": always_rent,
            "break_even_utilization": Decimal(u)}


def test_never_breaks_even_instead_of_a_percentage_above_100_or_a_payback_past_the_depreciation():
    assert (break_even(Decimal("1.3333")), break_even(Decimal(1)), break_even(None), break_even(Decimal("0.96"))) == (
        NEVER, NEVER, NEVER, "96.00%")
    assert payback(_r("70.773", False, True)) == NEVER
    assert payback(_r(None, False, False)) == NEVER
    assert payback(_r("20.5", True, False)) == "20.5 months"
    assert payback_sentence(_r("70.773", False, True)) == (
        " At this utilization buying **never breaks even**: it would pay back only after 70.773 months, beyond the "
        "36-month depreciation.")
    assert payback_sentence(_r("20.5", True, False)) == (
        " Buying pays back in 20.5 months at this utilization, within the 36-month depreciation.")
