"""Progress bars for long work, on standard error, only on a terminal (``--no-progress``, ``NO_COLOR``).

(Interface placeholder: filled in by the progress work of issue #35.)
"""

from __future__ import annotations

_ENABLED = True


def set_enabled(flag: bool) -> None:
    """``--no-progress`` and ``--quiet`` turn every bar of this process off."""
    global _ENABLED
    _ENABLED = flag


def enabled() -> bool:
    return _ENABLED
