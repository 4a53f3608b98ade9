"""The user's config file (TOML): defaults for the ledger URL, the currency, the time zone and the node type.

Where it is: ``--config PATH`` (the global flag, :func:`set_path`), else ``$TRAINLEDGER_CONFIG``, else
``config.toml`` in the user's config directory (``platformdirs.user_config_dir("trainledger")``, e.g.
``~/.config/trainledger/config.toml``) when that file exists. A file named by the flag or the variable must
exist. Four keys, each a string; each is optional::

    db = "postgresql+psycopg://alice@ledger.example/trainledger"   # the ledger URL
    currency = "USD"          # the presentation currency of reports (ISO 4217)
    timezone = "Asia/Shanghai"  # the display time zone a NEW ledger is created with
    node_type = "h100-8x"     # the node type of runs recorded without --node-type

Every key is resolved the same way (:func:`resolve`): the command's flag, else the environment variable
(:data:`ENV`), else the file, else the default. The file is read once per process (again only if it changes),
at most :data:`MAX_BYTES` of it; an unknown key, a value of the wrong type, invalid TOML, a bad currency or
time zone is a one-line :class:`~trainledger.errors.LedgerInputError` naming ``FILE:LINE`` and the key.
A file's values are all checked when it is read (a currency check imports ``trainledger.store.catalog.fx``, and so
SQLAlchemy), but ``db``, which is checked where it is used (``trainledger.store.db.resolve_url``); an
environment variable's value when it is used.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from trainledger.errors import LedgerInputError

ENV_CONFIG = "TRAINLEDGER_CONFIG"
ENV_URL = "TRAINLEDGER_DB_URL"
#: each key and the environment variable that overrides the file's value
ENV = {"db": "TRAINLEDGER_DB_URL", "currency": "TRAINLEDGER_CURRENCY", "timezone": "TRAINLEDGER_TIMEZONE",
       "node_type": "TRAINLEDGER_NODE_TYPE"}
KEYS = tuple(ENV)
EXAMPLES = {"db": '"sqlite:///PATH"', "currency": '"USD"', "timezone": '"Asia/Shanghai"', "node_type": '"h100-8x"'}
#: the largest config file read (bytes); four keys fit in far less
MAX_BYTES = 64 * 1024

_flag_path: Optional[Path] = None  # --config
_lenient = False  # a job's side (the run wrapper, the Python API): a broken file is said once and ignored
_said: set[str] = set()
_cache: dict[tuple[str, int, int], dict[str, "Value"]] = {}  # (path, mtime_ns, size): the file's checked values


@dataclass(frozen=True)
class Value:
    """A configured value and where it came from: ``source`` is flag, env, file or default; ``where`` names
    the flag, the environment variable or ``FILE:LINE`` (empty for a default)."""

    value: Optional[str]
    source: str
    where: str = ""


def set_path(path: Optional[os.PathLike | str]) -> None:
    """``--config PATH`` (None: no flag): the file every later lookup in this process reads."""
    global _flag_path
    _flag_path = Path(path) if path else None


def default_sqlite_path() -> Path:
    """The embedded ledger file: ``<user data dir>/trainledger/ledger.db``."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("trainledger", appauthor=False)) / "ledger.db"


def configured_url() -> tuple[str, str]:
    """The ledger URL without ``--db``: ``$TRAINLEDGER_DB_URL``, else the config file's ``db``, else the
    embedded SQLite file; and the name an error gives it. (:func:`trainledger.store.db.resolve_url` checks it.)"""
    if os.environ.get(ENV_URL):
        return os.environ[ENV_URL], "--db"
    found = configured("db")
    if found.value:
        return found.value, f"{found.where}: db"
    return f"sqlite:///{default_sqlite_path()}", "--db"


def with_driver(url: str) -> str:
    """A PostgreSQL URL with the driver the ledger uses (``postgresql://`` → ``postgresql+psycopg://``); any other
    URL as it is."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def default_path() -> Path:
    """``config.toml`` in the user's config directory (read only when it exists)."""
    from platformdirs import user_config_dir

    return Path(user_config_dir("trainledger", appauthor=False)) / "config.toml"


def location() -> tuple[Path, str]:
    """The config file's path and what chose it: ``--config``, ``$TRAINLEDGER_CONFIG`` or ``default``."""
    if _flag_path is not None:
        return _flag_path, "--config"
    env = os.environ.get(ENV_CONFIG, "").strip()
    if env:
        return Path(env).expanduser(), f"${ENV_CONFIG}"
    return default_path(), "default"


def _read(path: Path, chose: str) -> Optional[bytes]:
    """The file's bytes (None: the default file does not exist); one line for a file that cannot be read."""
    flag = "--config" if chose == "--config" else ENV_CONFIG
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        if chose == "default":
            return None
        fix = "drop --config" if chose == "--config" else f"unset {ENV_CONFIG}"
        raise LedgerInputError(f"{flag}: {path} does not exist; create it or {fix}") from None
    except IsADirectoryError:
        where = f"{flag}: {path}" if chose != "default" else str(path)
        raise LedgerInputError(f"{where} is a directory; give a TOML file") from None
    except OSError as exc:
        raise LedgerInputError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise LedgerInputError(f"{path}: the config file is larger than {MAX_BYTES // 1024} KiB; it holds at most "
                               f"the keys {', '.join(KEYS)}")
    return raw


def _line_of(text: str, key: str) -> int:
    """The line (1-based) where ``key`` is assigned or opens a table; 1 when not found."""
    pattern = re.compile(r"^\s*(\[+\s*)?([\"']?)" + re.escape(key) + r"\2\s*(=|\]|\.)")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return 1


def _parse(path: Path, raw: bytes) -> dict[str, Value]:
    """The file's keys, checked for names and types (their values: :func:`_checked`)."""
    import tomllib

    from trainledger.store.files import line_of

    nul = raw.find(b"\0")
    if nul >= 0:
        raise LedgerInputError(f"{path}:{line_of(raw, nul)}: a NUL byte; the config file is text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"{path}:{line_of(raw, exc.start)}: the config file is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column \d+\)|\(at end of document\)", str(exc))
        line = found.group(1) if found and found.group(1) else str(text.count("\n") + 1)
        reason = str(exc)[:found.start()].strip() if found else str(exc)
        raise LedgerInputError(f"{path}:{line}: invalid TOML: {reason}; write each key as key = \"value\"") from None
    out: dict[str, Value] = {}
    for key, value in data.items():
        line = _line_of(text, key)
        if key not in ENV:
            raise LedgerInputError(f"{path}:{line}: unknown key {key!r}; the valid keys are {', '.join(KEYS)}")
        if not isinstance(value, str) or not value.strip():
            got = "an empty string" if isinstance(value, str) else f"{_toml_type(value)} {value!r}"[:80]
            raise LedgerInputError(f"{path}:{line}: {key}: expected a string such as {key} = {EXAMPLES[key]}, got {got}")
        out[key] = Value(value.strip(), "file", f"{path}:{line}")
    return out


def _toml_type(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a float", list: "an array", dict: "a table"}
    return next((name for kind, name in names.items() if isinstance(value, kind)), "a date or time")


def never_refuse() -> None:
    """From now on in this process a config file that cannot be read is said once on stderr and ignored.

    Called on the job's side (``trainledger run``, ``trainledger.track``): accounting never stops or changes
    the job, so a broken config file leaves the run recorded with the other sources' values. Commands that
    wrap no job keep the strict rule: one line, exit 2."""
    global _lenient
    _lenient = True


def file_values() -> dict[str, Value]:
    """The config file's keys (empty: no file), parsed once per process and file version."""
    if not _lenient:
        return _file_values()
    try:
        return _file_values()
    except LedgerInputError as exc:
        line = str(exc).splitlines()[0]
        if line not in _said:
            _said.add(line)
            try:
                print(f"warning: {line}; the config file is ignored", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
        return {}


def _file_values() -> dict[str, Value]:
    path, chose = location()
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _cache:
        return _cache[key]
    raw = _read(path, chose)
    if raw is None:
        return {}
    values = _parse(path, raw)
    for name, found in values.items():  # every value, used by this command or not
        _checked(name, found)
    if key is not None:
        _cache.clear()  # one file per process at a time
        _cache[key] = values
    return values


def _checked(key: str, found: Value) -> Value:
    """``found`` after the check of its key's value: an ISO 4217 currency (``trainledger.store.catalog.fx.check_currency``),
    an IANA time zone, a node type name. A ledger URL is checked where it is used (``resolve_url``)."""
    where = found.where if found.source != "file" else f"{found.where}: {key}"
    value = found.value or ""
    if key == "currency":
        from trainledger.store.catalog.fx import check_currency

        check_currency(value, where)
    elif key == "timezone":
        _check_timezone(value, where)
    elif key == "node_type" and (len(value) > 100 or not value.isprintable()):
        raise LedgerInputError(f"{where}: expected a node type name (at most 100 printable characters) such as "
                               f"h100-8x, got {value[:40]!r}; see `trainledger pricing list`")
    return found


def _check_timezone(name: str, where: str) -> None:
    """An IANA time zone, as ``trainledger.store.settings.parse_timezone`` checks it (the same line; settings
    reads this module, so it cannot be imported here)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise LedgerInputError(f"{where}: unknown time zone {name!r}; use an IANA name such as UTC or "
                               "Asia/Shanghai") from None


def resolve(key: str, flag: Optional[str] = None, flag_name: str = "") -> Value:
    """The value of ``key``: ``flag`` (the command's option, already checked by the command), else the
    environment variable, else the config file, else ``Value(None, "default")``."""
    if key not in ENV:
        raise KeyError(key)
    if flag:
        return Value(flag, "flag", flag_name or f"--{key.replace('_', '-')}")
    env = os.environ.get(ENV[key], "").strip()
    if env:
        return _checked(key, Value(env, "env", ENV[key]))
    found = file_values().get(key)
    return found if found is not None else Value(None, "default")


def configured(key: str) -> Value:
    """``key`` from the environment or the config file (no flag): :func:`resolve` without a flag."""
    return resolve(key)


def get(key: str) -> Optional[str]:
    """The config file's value of ``key`` (checked), or None: what callers consult after the environment
    variable, e.g. :func:`trainledger.store.defaults.default_node_type`."""
    if key not in ENV:
        raise KeyError(key)
    found = file_values().get(key)
    return found.value if found is not None else None
