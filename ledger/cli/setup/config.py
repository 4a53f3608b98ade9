"""``trainledger config show``: the config file's place and the effective defaults.

See :mod:`trainledger.store.config` for the file, its keys and the precedence (flag > environment > file >
default). ``show`` opens no ledger: the defaults of ``currency`` and ``timezone`` are the ledger's settings
(``trainledger settings``).
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group

app = group("The config file (TOML: db, currency, timezone, node_type) and the effective defaults.")

#: what each key's default is, when nothing sets it
DEFAULTS = {"db": "the embedded SQLite file",
            "currency": "the ledger's currency setting (`trainledger settings currency`), else the offers' own",
            "timezone": "new ledgers are UTC; the reports use the ledger's timezone setting (`trainledger settings`)",
            "node_type": "none: a run without --node-type is recorded but not costed"}


def _file() -> dict[str, Any]:
    from trainledger.store import config

    path, chosen_by = config.location()
    return {"path": str(path), "chosen_by": chosen_by, "exists": path.is_file()}


def _text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import table

    f = d["config_file"]
    head = f"config file: {f['path']} ({f['chosen_by']}{'' if f['exists'] else '; not found'})"
    rows = [{"key": k, "value": v["value"] if v["value"] is not None else "-",
             "source": v["source"] + (f" {v['where']}" if v["where"] else ""),
             **({"note": DEFAULTS[k]} if v["source"] == "default" or k == "timezone" else {"note": ""})}
            for k, v in d["values"].items()]
    return head + "\n" + table(rows, ["key", "value", "source", "note"])


@command
def config_show(db: DbOpt = None,
                currency: Annotated[Optional[str], typer.Option("--currency", help="As a report's --currency: shows it wins.")] = None,
                node_type: Annotated[Optional[str], typer.Option("--node-type", help="As a run's --node-type: shows it wins.")] = None,
                as_json: JsonOpt = False) -> None:
    """The effective ledger URL (password hidden), currency, time zone and node type, and where each comes
    from: flag, env (the variable), file (FILE:LINE) or default. Opens no ledger."""
    from trainledger.store import config
    from trainledger.store.catalog.fx import check_currency
    from trainledger.store.db import redact_url, resolve_url

    flags = {"db": db, "currency": check_currency(currency, "--currency") if currency else None,
             "node_type": node_type, "timezone": None}
    values = {}
    for key in config.KEYS:
        found = config.resolve(key, flags[key])
        if key == "db":  # the URL in use (the default too), checked wherever it came from, password hidden
            found = config.Value(redact_url(resolve_url(db)), found.source, found.where)
        values[key] = {"value": found.value, "source": found.source, "where": found.where}
    emit({"config_file": _file(), "values": values}, as_json, _text)


def register(root: typer.Typer) -> None:
    app.command("show")(config_show)
    root.add_typer(app, name="config")
