"""The one rounding rule (docs/METRICS.md, "Rounding"; docs/MONEY.md, "Rounding").

Every figure is computed exactly (Decimal) and rounded only to be shown, here, once:

* each figure is its exact value rounded **half-up on its own** to its unit's places (money: the cent), so the
  same exact value reads the same on every surface and identical runs show identical cents;
* where lines are shown beside a total they must add up to, and their rounded values do not, the difference
  is an explicit **rounding** line (:func:`rounding_line`), the same way on every surface (the CLI's tables,
  JSON, CSV and XLSX exports, chargeback statements, the dashboard), never a cent moved between lines.

The FOCUS export is the one exception, by its own spec: it carries costs unrounded on its 10-decimal grid.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Iterable, Optional

CENT = Decimal("0.01")
ZERO = Decimal(0)
#: the name of the line that carries what rounded lines leave against their rounded total
ROUNDING = "rounding"


def cents(amount: Decimal) -> Decimal:
    """Money half-up to the cent: the one rule for every money figure shown (each figure on its own)."""
    return Decimal(amount).quantize(CENT, rounding=ROUND_HALF_UP)


def to_places(value: Decimal, places: Decimal) -> Decimal:
    """Any figure half-up to its unit's places (:data:`trainledger.money.metrics.definitions.UNITS`)."""
    return Decimal(value).quantize(places, rounding=ROUND_HALF_UP)


def rounding_line(lines: Iterable[Decimal], total: Decimal, quantum: Decimal = CENT) -> Decimal:
    """What the lines, each rounded on its own, leave against their exact ``total`` rounded once: the amount of
    the ``rounding`` line (0 when they add up). Σ rounded lines + rounding line == rounded total, exactly."""
    return to_places(total, quantum) - sum((to_places(x, quantum) for x in lines), ZERO)


def rounded_lines(lines: list[Decimal], total: Optional[Decimal] = None,
                  quantum: Decimal = CENT) -> tuple[list[Decimal], Decimal]:
    """The lines rounded each on its own and the rounding line against ``total`` (default: their exact sum)."""
    exact = sum(lines, ZERO) if total is None else total
    return [to_places(x, quantum) for x in lines], rounding_line(lines, exact, quantum)
