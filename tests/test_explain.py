"""How a run was costed, in words (trainledger.money.rates.explain): the offer and why, and why a what-if differs."""

from __future__ import annotations

from trainledger.money.rates.explain import BASIS, costed_under, differs


def test_a_run_with_its_own_offer():
    assert costed_under(["rtx4090-rent"], "rent_elastic", True) == (
        "Costed under rtx4090-rent: the offer recorded on the run. Rented elastic: price per node-hour × billed "
        "node-hours (rounded up to the billing granularity).")


def test_a_run_without_an_offer_uses_the_node_types_default():
    text = costed_under(["rtx4090-own"], "own", False)
    assert text.startswith("Costed under rtx4090-own: the node type's default offer: the run records none, so it "
                           "draws on the node type's owned or reserved fleet when one is held that month, else "
                           "elastic rent. Owned: amortized capex")
    assert costed_under([], None, False) == "Not costed yet: the run has not started."


def test_why_a_what_if_differs():
    assert differs("rent_elastic", "own") == ("rented: price per node-hour × billed node-hours; actual: owned "
                                              "fleet's month shared by node-hours")
    assert differs("own", "rent_elastic").startswith("owned: the run's node-hours × the full-use rate per node-hour")
    assert set(BASIS) == {"own", "rent_reserved", "rent_elastic"}
