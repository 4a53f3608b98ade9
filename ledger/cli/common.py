"""What every ``trainledger`` command shares: options, one-line errors, sessions, output, warnings.

Every command takes ``--db URL`` (else ``$TRAINLEDGER_DB_URL``, else the config
file's ``db``, else the embedded SQLite ledger in the user's data directory),
prints figures as a table or, with ``--json``, as the same dict in JSON. Exit
status: 0 on success, 2 with a one-line reason on bad input, 1 when the ledger
cannot be reached. Warnings go through :func:`warn` (hidden by ``-q``).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import re
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from typer.core import TyperGroup

try:  # typer vendors click (typer._click) in recent versions
    from typer._click import exceptions as _click_errors
except ImportError:  # pragma: no cover - older typer on plain click
    from click import exceptions as _click_errors

from trainledger.errors import LedgerInputError

try:  # typer ≥ 0.2x coerces each parameter with a pydantic TypeAdapter built on first use
    from typer._coercion import RuntimeParam as _RuntimeParam
    from typer._coercion import build_runtime_param as _build_runtime_param
except ImportError:  # pragma: no cover - older typer (click's own types): nothing to defer
    _RuntimeParam = None


if _RuntimeParam is not None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class _OnFirstValue(_RuntimeParam):
        """A parameter's coercion, built when it first gets a value: typer's ``RuntimeParam.coerce`` answers
        None (and ``()`` for a repeatable option) itself, so an option left out needs no TypeAdapter."""

        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            built = _build_runtime_param(self.descriptor)
            param._runtime_param = built  # the next value uses it directly
            return built._coerce_value(value, param=param, ctx=ctx)


def defer_coercion(cmd: Any) -> Any:
    """Build each parameter's coercion of ``cmd`` (and of its subcommands already loaded) only when the parameter
    gets a value. Typer builds a pydantic TypeAdapter for every parameter of a command that runs, given or not
    (``trainledger run`` has ~25: 50–70 ms of its start, issue #35); a value that is given is coerced, and its
    errors worded, by typer's own adapter as before. Returns ``cmd``."""
    if _RuntimeParam is None:
        return cmd
    for param in getattr(cmd, "params", ()):
        desc = getattr(param, "type_descriptor", None)
        if desc is not None and getattr(param, "_runtime_param", False) is None:
            param._runtime_param = _OnFirstValue(parameter_info=desc.parameter_info, annotation=desc.annotation,
                                                 descriptor=desc)
    for sub in (getattr(cmd, "commands", None) or {}).values():
        defer_coercion(sub)
    return cmd


class OneLineUsageErrors(TyperGroup):
    """Click's usage errors (bad option value, missing argument, unknown option) as one line + exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        defer_coercion(self)  # a group's own options (the root's global ones) and its commands
        return super().make_context(info_name, args, parent=parent, **extra)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)
        finally:  # the logging the root callback set up ends with the command
            logs = sys.modules.get("trainledger.cli.logs")
            if logs is not None:
                logs.reset()

    def _main(self, args, prog_name, complete_var, standalone_mode, **extra):
        """Click's ``main``, with its usage errors as one line (``error: ...``) and exit 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_errors.NoArgsIsHelpError as exc:
            exc.show()  # a bare group: its help, as before
            sys.exit(exc.exit_code)
        except _click_errors.ClickException as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) is not None else ""
            typer.echo(f"error: {' '.join(exc.format_message().split())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def group(help_text: str) -> typer.Typer:
    """A command group (``trainledger NAME ...``) with the shared conventions."""
    return typer.Typer(help=help_text, no_args_is_help=True)


DbOpt = Annotated[Optional[str], typer.Option("--db", help="Ledger URL (sqlite:///PATH or postgresql+psycopg://USER@HOST/DB). Default: $TRAINLEDGER_DB_URL, else the config file's db (`trainledger config show`), else the embedded SQLite file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
NowOpt = Annotated[Optional[str], typer.Option("--now", help="The reports' clock: an ISO 8601 time (UTC unless it names a zone). Default: $TRAINLEDGER_NOW, else the current time. A month not ended at this time is reported to date.", show_default=False)]


def warn(message: str) -> None:
    """``warning: MESSAGE`` on standard error (one line), unless the global ``-q`` (:mod:`trainledger.cli.logs`)."""
    from trainledger.cli.logs import warn as log_warning

    log_warning(message)


#: what a command checks once per invocation (reset by the root callback, :func:`start_invocation`)
_ONCE: dict[str, bool] = {"timezone": False}


def start_invocation() -> None:
    """A new command starts (the root callback): the once-per-command checks run again."""
    for key in _ONCE:
        _ONCE[key] = False


def check_timezone(engine: Any) -> None:
    """Warn once per command when the configured time zone (``$TRAINLEDGER_TIMEZONE``, else the config file's
    ``timezone``) differs from the ledger's ``timezone`` setting, which the reports and the monthly rollup use:
    a configured zone only sets the zone of a new ledger, and the ledger's own is never silently replaced."""
    if _ONCE["timezone"]:
        return
    _ONCE["timezone"] = True
    from trainledger.store import config

    zone = config.configured("timezone")
    if not zone.value:
        return
    from sqlmodel import Session
    from trainledger.store.settings import get_setting

    with Session(engine) as s:
        ledger = get_setting(s, "timezone")
    if ledger != zone.value:
        said = f"${zone.where}" if zone.source == "env" else f"the config file ({zone.where})"
        warn(f"{said} sets the time zone {zone.value}, but this ledger's is {ledger}, which the reports use; "
             f"to change the ledger's: trainledger settings timezone {zone.value}")


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def command(fn: Optional[Callable] = None, *, job: bool = False) -> Callable:
    """Turn user errors into one line + exit 2; an unreachable ledger or a write that lost a race with another
    writer (a unique violation) into one line + exit 1. A command that wraps no job (``job=False``: all but
    ``trainledger run``) reads the ``TRAINLEDGER_*`` variables strictly: a bad one is one line and exit 2
    (``trainledger.store.envsettings.strict_for``); the wrapper reads them as the job's side does."""
    if fn is None:
        return functools.partial(command, job=job)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from contextlib import nullcontext

        from trainledger.errors import LedgerURLError
        from trainledger.store.envsettings import strict_for

        try:
            _check_arguments(kwargs)
            with nullcontext() if job else strict_for():
                result = fn(*args, **kwargs)
            sys.stdout.flush()  # standard output on a full disk fails here, in one line, not at exit
            return result
        except (LedgerInputError, LedgerURLError) as exc:
            fail(str(exc).splitlines()[0])
        except OSError as exc:  # a full, read-only or forbidden place to write: one line, never a traceback
            if exc.errno not in WRITE_ERRNOS:
                raise
            if not exc.filename:  # standard output: what is still buffered goes nowhere, so exit stays quiet
                _drop_stdout()
            fail(write_error(exc))
        except Exception as exc:
            message = _database_failure(exc, kwargs.get("db"))
            if message is None:
                raise
            fail(*message)

    return wrapper


def _database_failure(exc: Exception, db: Optional[str]) -> Optional[tuple[str, int]]:
    """The one line (and exit status) for a database error of a command, None for any other exception.

    SQLAlchemy's errors are looked up, never imported: a command that has not loaded SQLAlchemy (``trainledger
    run`` before its command starts, every ``--help``) cannot have raised one."""
    sa = sys.modules.get("sqlalchemy.exc")
    if sa is None or not isinstance(exc, sa.DatabaseError):
        return None
    reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    if isinstance(exc, sa.DataError):  # a value the database refuses; the session rolled back, nothing was written
        return f"the ledger refused a value: {reason}", 2
    if isinstance(exc, sa.IntegrityError):  # a unique row another writer created first; the transaction rolled back
        return (f"another writer changed the ledger at the same time ({reason}); nothing was written: run the "
                "command again", 1)
    if not isinstance(exc, sa.OperationalError) and type(exc) is not sa.DatabaseError:
        return None
    from trainledger.store.db import redact_url, resolve_url

    # unreachable, or not a ledger at all (e.g. "file is not a database")
    return f"cannot use the ledger at {redact_url(resolve_url(db))}: {reason}", 1


#: the errors of a write that the user can fix (disk full, quota, read-only file system, permissions, file too large)
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def write_error(exc: OSError) -> str:
    """One line for a failed write: what could not be written and why."""
    where = exc.filename if exc.filename else "standard output"
    return f"cannot write {where}: {exc.strerror or exc}"


def _drop_stdout() -> None:
    try:
        import os

        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def _check_arguments(kwargs: dict[str, Any]) -> None:
    """Refuse what no command can use before any work: NUL characters, months outside ``months.MONTH_YEARS``."""
    for name, value in kwargs.items():
        if isinstance(value, (str, Path)) and "\0" in str(value):
            raise LedgerInputError(f"{name}: contains a NUL character")
    for name in ("month", "end_month", "date_"):
        value = kwargs.get(name)
        if isinstance(value, str) and value:
            from trainledger.money.rates.months import MONTH_YEARS, check_month  # the ledger's tables: only here

            flag = f"--{name.strip('_').replace('_', '-')}"
            if name != "date_":
                check_month(value, flag)
                continue
            if not re.fullmatch(r"\d{4}-\d\d-\d\d", value):
                continue  # today, yesterday, or an error of the command's own
            if not MONTH_YEARS[0] <= int(value[:4]) <= MONTH_YEARS[1]:
                raise LedgerInputError(f"{flag}: the year must be {MONTH_YEARS[0]} to {MONTH_YEARS[1]}, got {value!r}")


def clock(now: Optional[str]):
    """The instant a report is made at: ``--now``, else ``$TRAINLEDGER_NOW``, else the current time."""
    from trainledger.store.types import report_clock

    return report_clock(now)


@contextlib.contextmanager
def session(db: Optional[str]):
    """A session on the ledger (``--db``, else the configured one) that commits on success; warns once per
    command when the configured time zone is not the ledger's (:func:`check_timezone`). What it writes is
    recorded in the audit log as the OS user's at this host (``trainledger.store.audit.cli_actor``)."""
    from trainledger.store import audit
    from trainledger.store.db import get_engine, session_scope

    engine = get_engine(db)
    check_timezone(engine)
    with session_scope(engine) as s:
        yield audit.bind(s, audit.cli_actor())


def sync_quietly(db: Optional[str]) -> None:
    """Replay local run journals written while the ledger was unreachable (best effort)."""
    from sqlalchemy.exc import OperationalError
    from trainledger.sources.record.journal import sync_all
    from trainledger.store.db import get_engine

    engine = get_engine(db)  # an unreachable ledger is the command's error, not a warning
    try:
        applied = sync_all(engine)
    except OperationalError:
        raise
    except Exception as exc:  # a broken journal must not block reading the ledger
        warn(f"journal replay failed ({type(exc).__name__}); run `trainledger sync`")
        return
    if applied:
        typer.echo(f"replayed {sum(applied.values())} journal events of {len(applied)} runs", err=True)


def emit(data: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    from trainledger.reports.present import jsonable

    if as_json:
        typer.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))
    else:
        typer.echo(text(data))


def decimal_option(value: str, flag: str) -> Decimal:
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise LedgerInputError(f"{flag}: expected a number, got {value!r}") from None
    if not number.is_finite():
        raise LedgerInputError(f"{flag}: expected a finite number, got {value!r}")
    return number
