"""``trainledger glossary``: every figure a user sees, defined once (the metrics layer; docs/METRICS.md).

Opens no ledger: the glossary is the code's (:mod:`trainledger.money.metrics`).
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from trainledger.cli.common import JsonOpt, command


@command
def glossary(key: Annotated[Optional[str], typer.Argument(help="One figure's key or alias (e.g. spend, "
                                                                "actual_cost, idle_cost); default: all.")] = None,
             as_json: JsonOpt = False) -> None:
    """Every figure: key, label, formula, unit, finality, rounding and the facts it reads. Markdown (the text of
    docs/METRICS.md, generated from the code), or one figure; --json for data."""
    from trainledger.errors import LedgerInputError
    from trainledger.money.metrics import glossary as g
    from trainledger.money.metrics.registry import BY_KEY, lookup

    if key is None:
        if as_json:
            typer.echo(json.dumps(g.as_json(), indent=2, ensure_ascii=False))
        else:
            typer.echo(g.render(), nl=False)  # the text of docs/METRICS.md, byte for byte
        return
    m = lookup(key)
    if m is None:
        raise LedgerInputError(f"KEY: no figure named {key!r}; `trainledger glossary` lists them "
                               f"({', '.join(sorted(k for k, v in BY_KEY.items() if k == v.key)[:6])}, ...)")
    one = next(f for f in g.as_json()["figures"] if f["key"] == m.key)
    if as_json:
        typer.echo(json.dumps(one, indent=2, ensure_ascii=False))
    else:
        typer.echo("\n".join(g.figure_lines(m)).rstrip())


def register(root: typer.Typer) -> None:
    root.command("glossary")(glossary)
