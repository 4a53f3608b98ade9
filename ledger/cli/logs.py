"""The CLI's logging (the global ``-q``, ``-v``, ``-vv``), on standard error, through the stdlib ``logging``.

=============  ==============================  =====================================================
flag           trainledger's own loggers       libraries' loggers (alembic, sqlalchemy, httpx, ...)
=============  ==============================  =====================================================
``-q``         ERROR                           nothing
(none)         WARNING                         nothing
``-v``         INFO                            INFO (``sqlalchemy`` WARNING: its INFO is every SQL
                                               statement)
``-vv``        DEBUG                           DEBUG (``sqlalchemy`` INFO: the statements, no rows)
=============  ==============================  =====================================================

A line is ``LEVEL: MESSAGE`` for trainledger's loggers (``warning: ...``, as every CLI warning) and
``LEVEL: LOGGER: MESSAGE`` for a library's; a traceback only with ``-vv``. The CLI's own warnings go
through :func:`warn` (logger ``trainledger.cli``), so ``-q`` hides them. Imported only when a command runs.
"""

from __future__ import annotations

import logging
import sys

OWN = "trainledger"
#: above every level: nothing is shown
SILENT = logging.CRITICAL + 1
#: verbosity (-1 quiet .. 2) -> (level of trainledger's loggers, level shown of the libraries')
LEVELS = {-1: (logging.ERROR, SILENT), 0: (logging.WARNING, SILENT), 1: (logging.INFO, logging.INFO),
          2: (logging.DEBUG, logging.DEBUG)}
_ROOT_LEVEL: list[int] = []  # the root logger's level before the first configure()


class StderrHandler(logging.Handler):
    """One line per record on whatever ``sys.stderr`` is when it is written (Click's test runner swaps it);
    records below the level of their origin (trainledger or a library) are dropped."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.own, self.lib, self.verbosity = logging.WARNING, SILENT, 0

    def emit(self, record: logging.LogRecord) -> None:
        own = record.name == OWN or record.name.startswith(OWN + ".")
        if record.levelno < (self.own if own else self.lib):
            return
        try:
            text = record.getMessage()
            if record.exc_info and self.verbosity >= 2:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            sys.stderr.write(f"{record.levelname.lower()}: {'' if own else record.name + ': '}{text}\n")
            sys.stderr.flush()
        except (OSError, ValueError, TypeError):  # a closed or full stderr never fails a command
            pass


def handler() -> StderrHandler:
    """The root logger's :class:`StderrHandler` (added on first use, with the default levels)."""
    root = logging.getLogger()
    found = next((h for h in root.handlers if isinstance(h, StderrHandler)), None)
    if found is None:
        found = StderrHandler()
        root.addHandler(found)
        logging.getLogger(OWN).setLevel(logging.WARNING)
    return found


def configure(verbosity: int) -> None:
    """Set the levels for ``verbosity``: -1 (``-q``), 0 (default), 1 (``-v``), 2 or more (``-vv``)."""
    verbosity = max(-1, min(2, verbosity))
    own, lib = LEVELS[verbosity]
    h = handler()
    h.own, h.lib, h.verbosity = own, lib, verbosity
    root = logging.getLogger()
    if not _ROOT_LEVEL:
        _ROOT_LEVEL.append(root.level)
    root.setLevel(min(_ROOT_LEVEL[0], lib))  # library records below WARNING are made only with -v
    logging.getLogger(OWN).setLevel(own)
    logging.getLogger("sqlalchemy").setLevel(logging.INFO if verbosity >= 2 else logging.WARNING)


def reset() -> None:
    """Undo :func:`configure` when a command ends (the same process may run another: tests, embedding)."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, StderrHandler)]:
        root.removeHandler(h)
    if _ROOT_LEVEL:
        root.setLevel(_ROOT_LEVEL[0])
    logging.getLogger(OWN).setLevel(logging.NOTSET)
    logging.getLogger("sqlalchemy").setLevel(logging.WARNING)


def warn(message: str) -> None:
    """``warning: MESSAGE`` on standard error, unless ``-q``."""
    handler()
    logging.getLogger(f"{OWN}.cli").warning(message)
