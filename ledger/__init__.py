"""The ledger: trainledger's system of record and its money.

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
  API (``ledger.track``) and the framework callbacks (``sources/integrations``);
* ``runs/``    the run lifecycle: ``launch``, ``sweep``, the ``registry`` (list,
  show, reap);
* ``reports/`` the monthly export, the FOCUS export, the daily and weekly reports, presentation,
  the forecast's ``backtest``, the exporter's Prometheus ``metrics``;
* ``cli/``     one module per command group, registered by ``cli/main.py``;
* ``demo.py``  the demo history (it uses every room, so it belongs to none).

Modules that lived at the top of ``ledger/`` before this layout (``ledger.db``,
``ledger.accounting``, ...) still import, with a DeprecationWarning, for one
release: see :data:`MOVED`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

# The rollup's session events keep the monthly rollup in step with every write of
# runs, whatever part of the ledger a program imports first.
from ledger.money import rollup as _rollup  # noqa: F401

#: old module name → the module(s) its names moved to (removed in the next release)
MOVED: dict[str, tuple[str, ...]] = {
    "ledger.models": ("ledger.store.models",),
    "ledger.types": ("ledger.store.types",),
    "ledger.db": ("ledger.store.db",),
    "ledger.settings": ("ledger.store.settings",),
    "ledger.presets": ("ledger.store.presets",),
    "ledger.backup": ("ledger.store.backup",),
    "ledger.ingest": ("ledger.store.ingest",),
    "ledger.costs": ("ledger.money.costs",),
    "ledger.accounting": ("ledger.money.monthly", "ledger.money.months"),
    "ledger.rollup": ("ledger.money.rollup",),
    "ledger.compare": ("ledger.money.compare",),
    "ledger.pricing_views": ("ledger.money.pricing",),
    "ledger.importer": ("ledger.sources.importer",),
    "ledger.collect": ("ledger.sources.collect",),
    "ledger.journal": ("ledger.sources.journal",),
    "ledger.launch": ("ledger.runs.launch",),
    "ledger.sweep": ("ledger.runs.sweep",),
    "ledger.export": ("ledger.reports.export",),
    "ledger.daily": ("ledger.reports.daily",),
    "ledger.strategies": ("ledger.reports.weekly",),
    "ledger.present": ("ledger.reports.present",),
    "ledger.cli_metrics": ("ledger.cli.metrics",),
}


class _Merged(types.ModuleType):
    """An old module whose names now live in several modules: each name is looked up in turn."""

    def __init__(self, name: str, targets: tuple[str, ...]):
        super().__init__(name, f"Moved to {', '.join(targets)}.")
        self._targets = targets

    def __getattr__(self, attr: str):
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module name to its new home, with a DeprecationWarning."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        targets = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {' and '.join(targets)}; the old name goes away in the next release",
                      DeprecationWarning, stacklevel=3)
        if len(targets) == 1:  # the module itself, so that patching the old name patches the real one
            return importlib.import_module(targets[0])
        return _Merged(spec.name, targets)

    def exec_module(self, module):
        pass


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


#: the Python API, loaded on first use (``import ledger`` stays light: no torch, no sampler, no writer)
_LAZY = {"track": ("ledger.sources.track", "track"), "current_run": ("ledger.sources.track", "current_run")}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'ledger' has no attribute {name!r}")
