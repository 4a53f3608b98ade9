"""The run lifecycle: ``launch`` (tracked runs), ``sweep`` (strategy sweeps), ``registry`` (list, show, reap),
``plan`` (the cheapest plan that fits: ``trainledger plan recommend``).

``ledger.runs`` was one module before this package; its names (``list_runs``,
``show_run``, ``get_run``, ...) still resolve here, with a DeprecationWarning,
for one release.
"""


def __getattr__(name: str):
    import importlib
    import warnings

    if name.startswith("__") or name in ("launch", "sweep", "registry", "plan"):
        raise AttributeError(f"module 'ledger.runs' has no attribute {name!r}")
    registry = importlib.import_module("ledger.runs.registry")
    if not hasattr(registry, name):
        raise AttributeError(f"module 'ledger.runs' has no attribute {name!r}")
    warnings.warn(f"ledger.runs.{name} moved to ledger.runs.registry.{name}; the old name goes away in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(registry, name)
