"""``trainledger settings``: the display time zone and the currency."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, session
from trainledger.errors import LedgerInputError


@command
def settings(key: Annotated[Optional[str], typer.Argument(help="timezone | currency")] = None,
             value: Annotated[Optional[str], typer.Argument(help="New value.")] = None,
             db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show or change ledger settings (display time zone, currency)."""
    from trainledger.reports.present import key_values
    from trainledger.store.settings import DEFAULTS, get_setting, set_setting

    with session(db) as s:
        if key is not None and key not in DEFAULTS:
            raise LedgerInputError(f"KEY: unknown setting {key!r}; use one of {', '.join(DEFAULTS)}")
        if value is not None:
            set_setting(s, key, value)
        data = {k: get_setting(s, k) for k in ([key] if key else DEFAULTS)}
    emit(data, as_json, key_values)


def register(root: typer.Typer) -> None:
    root.command("settings")(settings)
