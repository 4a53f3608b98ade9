"""The cost engine: every formula (``costs``), calendar months, the rollup, the monthly report, comparisons, pricing views."""
