"""trainledger: cost and resource accounting for distributed LLM training.

Installed, ``trainledger`` is the only import name. The repository's folders are
mapped into it (``[tool.setuptools.package-dir]`` in pyproject.toml):
``ledger/`` is the package itself, ``app/`` is :mod:`trainledger.app` (the
dashboard), ``trainer/`` is :mod:`trainledger.trainer` (the bundled DeepSpeed
trainer) and ``data/`` is :mod:`trainledger.data` (presets and the sample
corpus). The public API::

    import trainledger

    with trainledger.track(project="llm", node_type="h100-8x") as run:
        ...

The ledger is trainledger's system of record and its money.

Rooms, each importing only the rooms listed above it (the layering a test checks):

* ``store/``   the system of record: models, column types, engine and sessions,
  settings, presets, migrations (Alembic), backup, bulk ingest, fleets, price
  versions (``prices``), exchange rates (``fx``), carbon intensities (``carbon``);
* ``money/``   the cost engine: ``costs`` (every formula), ``months`` (calendar
  months, the part of a month elapsed, run intervals), the ``rollup``, the
  ``monthly`` report, ``compare``, ``pricing`` views, the month-end ``forecast``,
  ``budgets``, ``fx`` (the rate of a charge period) and ``carbon`` (CO2e);
* ``sources/`` what feeds the ledger: CSV and Slurm import, Prometheus collect,
  the run journal and writer, the run wrapper (``trainledger run``), the Python
  API (``trainledger.track``);
* ``integrations/`` the framework callbacks: ``trainledger.integrations.hf`` and
  ``trainledger.integrations.lightning`` (optional extras);
* ``runs/``    the run lifecycle: ``launch``, ``sweep``, the ``registry`` (list,
  show, reap);
* ``reports/`` the monthly export, the FOCUS export, the daily and weekly reports, presentation,
  the forecast's ``backtest``, the exporter's Prometheus ``metrics``;
* ``cli/``     one module per command group, registered by ``cli/commands.py``, in sub-rooms by concept: ``setup``
  (the ledger itself), ``capture`` (imports, Slurm, the wrapper, runs, invoices), ``prices`` (offers, FX,
  carbon, fleets, budgets, costs, forecasts, plans), ``reports``; ``common``, ``progress`` and ``logs`` serve them all;
* ``demo.py``  the demo history (it uses every room, so it belongs to none).
"""

from __future__ import annotations

import importlib


def _load_session_hooks() -> None:
    """Register the rollup's session events, which keep the monthly rollup in step with every write of runs.

    Called by :mod:`trainledger.store.models` once the tables are defined: every program that can write a
    run has loaded them, and ``import trainledger`` (the CLI's ``--help``, the run wrapper) stays free of
    SQLAlchemy.
    """
    importlib.import_module("trainledger.money.facts.session_hooks")


#: the Python API, loaded on first use (``import trainledger`` stays light: no torch, no sampler, no writer)
_LAZY = {"track": ("trainledger.sources.capture.track", "track"),
         "current_run": ("trainledger.sources.capture.track", "current_run")}


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trainledger")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":  # importlib.metadata on first use: ``import trainledger`` stays fast
        return _installed_version()
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'trainledger' has no attribute {name!r}")
