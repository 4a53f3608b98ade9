"""What trainledger's own processes set for themselves as they start: the console script (every command, the
``trainledger run`` wrapper, the launcher), a launched run's supervisor, a sweep's driver, a trainer rank, the
dashboard server, and the test processes.

Python's cyclic garbage collector passes over its youngest objects each time 700 more container objects are
allocated than freed. Starting one of these processes allocates a great many that live as long as it does (the
modules, classes and tables of SQLAlchemy, pandas, torch and DeepSpeed), so most of those passes find nothing,
and the older generations are walked over and over. Fewer passes: a young pass per 50,000 objects. Nothing
changes but when cycles are freed (reference counting frees everything else at once): a process keeps at most
that many more objects of garbage cycles between passes. Measured side by side (docs/PERFORMANCE.md, issue 38):
``trainledger report monthly`` 1.35 -> 1.16 CPU-s, a ZeRO-2 trainer rank ~10 % less, the in-process tests ~20 %.
"""

from __future__ import annotations

import gc

#: gc.set_threshold's (young, middle, old) for trainledger's processes (Python's own: 700, 10, 10)
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` for this process (each entry point calls it first)."""
    gc.set_threshold(*GC_THRESHOLDS)
