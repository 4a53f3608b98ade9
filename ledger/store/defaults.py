"""Defaults the ledger may assume only when they are configured, and the "not costed" state of a run.

A run's node type is never guessed: without ``--node-type`` (``node_type=`` in the Python API) and without
a configured default (:func:`default_node_type`), the run is still recorded, with no node type, and every
report shows it as *not costed* with its node-hours. So is a run on a node type that has no offer. Recording
such a run says so once per node type and process on stderr (:func:`warn_not_costed`).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

ENV_NODE_TYPE = "TRAINLEDGER_NODE_TYPE"
#: the reason a run without a node type is not costed
NO_NODE_TYPE = "no node type"
#: what the reports show in place of a cost that cannot be computed
NOT_COSTED = "not costed"

_WARNED: set[Optional[str]] = set()  # node types (None: no node type) warned about in this process
_WARNED_CONFIG: set[str] = set()  # a config file that could not be read, said once


def default_node_type() -> Optional[str]:
    """The configured default node type, or None when none is configured (the run is then not costed).

    The one place a default node type comes from: ``$TRAINLEDGER_NODE_TYPE``, else the config file's
    ``node_type`` (:func:`trainledger.store.config.get`); ``--node-type`` beats both (the caller's).

    A config file that cannot be read never stops a run from being recorded (the wrapper and the API call
    this before the job starts): its one-line error is said once on stderr and no default is used."""
    from trainledger.errors import LedgerInputError
    from trainledger.store import config

    env = os.environ.get(ENV_NODE_TYPE)
    if env:
        return env
    try:
        return config.get("node_type") or None
    except LedgerInputError as exc:
        if "config" not in _WARNED_CONFIG:
            _WARNED_CONFIG.add("config")
            _say(f"warning: {str(exc).splitlines()[0]}; no default node type is used")
        return None


def _say(line: str) -> None:
    """A warning on stderr, unless trainledger's logger is set above WARNING (the CLI's ``-q``, or the
    program's own logging configuration)."""
    import logging

    if not logging.getLogger("trainledger").isEnabledFor(logging.WARNING):
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a closed stderr is never a reason not to record
        pass


def not_costed_reason(node_type: Optional[str]) -> str:
    """Why a run is not costed: ``"no node type"``, or ``"no offer for node type NAME"``."""
    return NO_NODE_TYPE if not node_type else f"no offer for node type {node_type}"


def not_costed_warning(run_id: Optional[str], node_type: Optional[str]) -> str:
    """The one-line warning for a run recorded without a cost, naming the fix."""
    run = f"run {run_id}" if run_id else "the run"
    if not node_type:
        return (f"warning: {run} has no node type and is not costed; pass --node-type NAME, set "
                f"{ENV_NODE_TYPE} or node_type in the config file (`trainledger pricing list`)")
    return (f"warning: {run} is on node type {node_type}, which has no offer, and is not costed; "
            "add an offer with `trainledger pricing import` (`trainledger pricing list`)")


def warn_not_costed(run_id: Optional[str], node_type: Optional[str],
                    write: Optional[Callable[[str], Any]] = None) -> bool:
    """Say :func:`not_costed_warning` once per node type (and once for "no node type") in this process.

    ``write``: where the line goes (default: stderr). Returns whether it was said now."""
    key = node_type or None
    if key in _WARNED:
        return False
    _WARNED.add(key)
    line = not_costed_warning(run_id, node_type)
    (write or _say)(line)
    return True


def demo_ledger_url() -> str:
    """The demo's own ledger: ``demo.db`` next to the default ledger in the user data dir, so that
    ``trainledger demo`` never mixes demo rows into the user's ledger (``--db`` puts them elsewhere)."""
    from trainledger.store.config import default_sqlite_path

    return f"sqlite:///{default_sqlite_path().with_name('demo.db')}"


def has_offer(session: Any, node_type: str) -> bool:
    """Whether node type ``node_type`` (a name) has an offer to cost its runs; an unknown name has none."""
    from sqlmodel import select
    from trainledger.store.models import NodeType, Offer

    row = session.exec(select(Offer.id).join(NodeType, NodeType.id == Offer.node_type_id)
                       .where(NodeType.name == node_type).limit(1)).first()
    return row is not None
