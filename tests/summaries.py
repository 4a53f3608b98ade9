"""End-of-run lines built from counters that tests add to, in one pytest process or several (pytest-xdist).

A conftest registers a part: ``export()`` gives its figures as JSON-able data. Under
xdist each worker sends its parts to the controller (``workeroutput``), which merges
them; without xdist the one process merges its own. The mergers live here, not in
the conftests, because the xdist controller never loads a subfolder's conftest.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

EXPORTS: dict[str, Callable[[], Any]] = {}


def register(name: str, export: Callable[[], Any]) -> None:
    EXPORTS[name] = export


def exported() -> dict[str, Any]:
    return {name: export() for name, export in EXPORTS.items()}


def hostile_line(parts: list[dict]) -> Optional[str]:
    total = {k: sum(p.get(k, 0) for p in parts) for k in ("inputs", "tracebacks", "partial_writes")}
    if not total["inputs"]:
        return None
    return (f"hostile inputs: {total['inputs']} CLI invocations, tracebacks {total['tracebacks']}, "
            f"partial writes {total['partial_writes']}")


def faults_line(parts: list[list[dict]]) -> Optional[str]:
    """Merge the workers' fault cases, write ``test-artifacts/faults-summary.json``, return the line."""
    from tests.faults.tally import REPO, SUMMARY, Case, Tally

    tally = Tally()
    tally.cases = [Case(**c) for p in parts for c in p]
    if not tally.cases:
        return None
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(tally.summary(), indent=2, default=str) + "\n")
    return f"faults: {tally.summary()['line']} -> {SUMMARY.relative_to(REPO)}"


MERGERS: dict[str, Callable[[list[Any]], Optional[str]]] = {"hostile": hostile_line, "faults": faults_line}


def lines(parts: dict[str, list[Any]]) -> list[str]:
    return [line for name, merge in MERGERS.items() if parts.get(name) and (line := merge(parts[name]))]
