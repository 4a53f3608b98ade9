"""CLI habits (issue #35, part 3): --version, shell completion, ``-o -``, -q/-v/--no-progress, the config file.

In-process runs use Typer's CliRunner (the same ``main`` as the console script); the console script itself
runs where only a real process shows the behaviour (completion, a terminal on standard output, logging).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from trainledger.cli.commands import app
from typer.testing import CliRunner

MONTH = "2026-11"
CSV = ("id,name,project,user,node_type,offer,nodes,start,end,status\n"
       "hb-run-1,alpha,llm,alice,rtx4090-8x,rtx4090-rent,2,2026-11-02T00:00,2026-11-02T10:00,succeeded\n"
       "hb-run-2,beta,chat,bob,rtx4090-8x,rtx4090-own,4,2026-10-31T20:00,2026-11-01T04:00,failed\n")
SCRIPT = Path(sys.executable).with_name("trainledger")
ENV_KEYS = ("TRAINLEDGER_DB_URL", "TRAINLEDGER_CONFIG", "TRAINLEDGER_CURRENCY", "TRAINLEDGER_TIMEZONE",
            "TRAINLEDGER_NODE_TYPE")


@pytest.fixture(autouse=True)
def _clean(monkeypatch, tmp_path):
    """No configured value leaks in: no variables, a private config and data directory, fresh engines."""
    from trainledger.store.db import get_engine

    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.chdir(tmp_path)
    get_engine.cache_clear()
    yield
    get_engine.cache_clear()


def run(*args, env: dict | None = None):
    """``trainledger ARGS`` in this process; the click Result (stdout, stderr, stdout_bytes)."""
    from trainledger.store.db import get_engine

    get_engine.cache_clear()  # the ledger is resolved again, as in a new process
    return CliRunner().invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)


def real(*args, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """The console script ``trainledger ARGS`` in a new process."""
    full = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    streams = kw or {"capture_output": True}
    return subprocess.run([str(SCRIPT), *map(str, args)], env={**full, **(env or {})}, timeout=120, **streams)


@pytest.fixture
def ledger(tmp_path) -> str:
    """A SQLite ledger with two runs of November 2026."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "runs.csv").write_text(CSV)
    assert run("import", tmp_path / "runs.csv", "--db", url).exit_code == 0
    return url


def write_config(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- --version and completion -------------------------------------------------------------------------

def test_version_is_the_installed_version():
    r = run("--version")
    assert (r.exit_code, r.stdout, r.stderr) == (0, f"trainledger {version('trainledger')}\n", "")
    p = real("--version")
    assert (p.returncode, p.stdout.decode(), p.stderr.decode()) == (0, f"trainledger {version('trainledger')}\n", "")


def test_show_completion_prints_a_bash_script_for_trainledger():
    p = real("--show-completion", "bash", env={"SHELL": "/bin/bash"})
    out = p.stdout.decode()
    assert p.returncode == 0 and p.stderr == b""
    assert out.startswith("_trainledger_completion() {\n")
    assert "_TRAINLEDGER_COMPLETE=complete_bash $1 ) )\n" in out
    assert out.endswith("complete -o default -F _trainledger_completion trainledger\n")


def test_help_lists_the_global_options_and_usage_errors_stay_one_line():
    r = run("--help")
    for option in ("--version", "--config", "--quiet", "--verbose", "--no-progress", "--install-completion",
                   "--show-completion"):
        assert option in r.stdout
    r = run("-q", "report", "monthly", "--bogus")
    assert (r.exit_code, r.stderr) == (2, "error: No such option: --bogus (see `root report monthly --help`)\n")
    r = run("-q", "-v", "runs", "list")
    assert (r.exit_code, r.stderr) == (2, "error: --quiet and --verbose: choose one\n")


# --- -o - ------------------------------------------------------------------------------------------------

TO_STDOUT = {
    "monthly csv": ["report", "monthly", "--month", MONTH, "--format", "csv"],
    "monthly json": ["report", "monthly", "--month", MONTH, "--format", "json"],
    "monthly xlsx": ["report", "monthly", "--month", MONTH, "--format", "xlsx"],
    "focus csv": ["report", "focus", "--month", MONTH, "--format", "csv"],
    "focus parquet": ["report", "focus", "--month", MONTH, "--format", "parquet"],
    "db backup": ["db", "backup"],
}


@pytest.mark.parametrize("name", sorted(TO_STDOUT))
def test_dash_writes_the_file_bytes_to_stdout(ledger, tmp_path, name):
    args = [*TO_STDOUT[name], "--db", ledger]
    to_file = run(*args, "-o", tmp_path / "out.bin")
    assert to_file.exit_code == 0, to_file.stderr
    r = run(*args, "-o", "-")
    assert (r.exit_code, r.stderr) == (0, "")
    assert r.stdout_bytes == (tmp_path / "out.bin").read_bytes() and len(r.stdout_bytes) > 100
    assert not (tmp_path / "-").exists()


def test_dash_ignores_a_file_named_dash(ledger, tmp_path):
    (tmp_path / "-").write_text("keep me")
    r = run("report", "monthly", "--month", MONTH, "--format", "json", "-o", "-", "--db", ledger)
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["month"] == MONTH
    assert (tmp_path / "-").read_text() == "keep me"


def test_chargeback_to_stdout_is_refused(ledger, tmp_path):
    r = run("report", "chargeback", "--month", MONTH, "-o", "-", "--db", ledger)
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == ("error: --output: chargeback writes a folder of statements (XLSX and HTML per project, a "
                        "summary CSV), which cannot go to standard output; give a folder, e.g. -o statements\n")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("args,flag", [(["report", "focus", "--month", MONTH, "--format", "parquet", "-o", "-"], "--output"),
                                       (["report", "monthly", "--month", MONTH, "--format", "xlsx", "-o", "-"], "--output"),
                                       (["db", "backup", "-o", "-"], "--out")])
def test_binary_output_to_a_terminal_is_refused(ledger, tmp_path, args, flag):
    main, terminal = pty.openpty()
    try:
        p = real(*args, "--db", ledger, stdout=terminal, stderr=subprocess.PIPE)
    finally:
        os.close(terminal)
        os.close(main)
    assert p.returncode == 2
    assert p.stderr.decode() == (f"error: {flag}: the output is binary and standard output is a terminal; redirect "
                                 f"it (`{flag} - > FILE` or `| CMD`) or give a file name\n")


# --- the config file: precedence ----------------------------------------------------------------------

def test_db_flag_beats_env_beats_file_beats_default(tmp_path, monkeypatch):
    files = {k: tmp_path / f"{k}.db" for k in ("flag", "env", "file")}
    default = tmp_path / "xdg-data" / "trainledger" / "ledger.db"
    cfg = write_config(tmp_path, f'db = "sqlite:///{files["file"]}"\n')
    cases = [
        (["--db", f"sqlite:///{files['flag']}"], {"TRAINLEDGER_DB_URL": f"sqlite:///{files['env']}",
                                                   "TRAINLEDGER_CONFIG": str(cfg)}, files["flag"]),
        ([], {"TRAINLEDGER_DB_URL": f"sqlite:///{files['env']}", "TRAINLEDGER_CONFIG": str(cfg)}, files["env"]),
        ([], {"TRAINLEDGER_CONFIG": str(cfg)}, files["file"]),
        ([], {}, default),
    ]
    for flag, env, written in cases:
        r = run("db", "upgrade", "--json", *flag, env=env)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["ledger"] == f"sqlite:///{written}"
        assert written.exists()
    # and each case wrote only its own file
    assert sorted(p.name for p in tmp_path.glob("*.db")) == ["env.db", "file.db", "flag.db"]


def test_config_flag_names_the_file(tmp_path):
    cfg = write_config(tmp_path, f'db = "sqlite:///{tmp_path / "via-flag.db"}"\n', "other.toml")
    r = run("--config", cfg, "db", "upgrade")
    assert (r.exit_code, r.stdout) == (0, f"ledger sqlite:///{tmp_path / 'via-flag.db'} at revision 0022\n")


def test_currency_flag_beats_env_beats_file_beats_the_ledger(ledger, tmp_path):
    for quote, rate in (("USD", "0.14"), ("EUR", "0.13"), ("JPY", "21")):
        assert run("fx", "set", "CNY", quote, rate, "--from", "2026-01-01", "--db", ledger).exit_code == 0
    cfg = write_config(tmp_path, 'currency = "JPY"\n')
    base = ["report", "monthly", "--month", MONTH, "--format", "json", "--db", ledger]
    cases = [(["--currency", "EUR"], {"TRAINLEDGER_CURRENCY": "USD", "TRAINLEDGER_CONFIG": str(cfg)}, "EUR"),
             ([], {"TRAINLEDGER_CURRENCY": "USD", "TRAINLEDGER_CONFIG": str(cfg)}, "USD"),
             ([], {"TRAINLEDGER_CONFIG": str(cfg)}, "JPY"),
             ([], {}, "CNY")]
    for flag, env, currency in cases:
        r = run(*base, *flag, env=env)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["summary"]["currency"] == currency


def test_node_type_env_beats_file_and_config_show_names_the_flag(tmp_path, monkeypatch):
    from trainledger.store import config
    from trainledger.store.defaults import default_node_type

    cfg = write_config(tmp_path, 'node_type = "h100-8x"\n')
    assert (config.get("node_type"), default_node_type()) == (None, None)
    monkeypatch.setenv("TRAINLEDGER_CONFIG", str(cfg))
    assert (config.get("node_type"), default_node_type()) == ("h100-8x", "h100-8x")
    assert config.resolve("node_type") == config.Value("h100-8x", "file", f"{cfg}:1")
    monkeypatch.setenv("TRAINLEDGER_NODE_TYPE", "a100-8x")
    assert (config.get("node_type"), default_node_type()) == ("h100-8x", "a100-8x")
    assert config.resolve("node_type") == config.Value("a100-8x", "env", "TRAINLEDGER_NODE_TYPE")
    r = run("config", "show", "--json", "--node-type", "rtx4090-8x")
    assert json.loads(r.stdout)["values"]["node_type"] == {"value": "rtx4090-8x", "source": "flag",
                                                           "where": "--node-type"}


def test_config_show_redacts_the_password_and_says_where_each_value_comes_from(tmp_path, monkeypatch):
    cfg = write_config(tmp_path, '# team defaults\ndb = "postgresql+psycopg://alice:s3cret@ledger.example/tl"\n'
                                 'currency = "USD"\n')
    monkeypatch.setenv("TRAINLEDGER_CONFIG", str(cfg))
    monkeypatch.setenv("TRAINLEDGER_TIMEZONE", "Asia/Shanghai")
    r = run("config", "show", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == {
        "config_file": {"path": str(cfg), "chosen_by": "$TRAINLEDGER_CONFIG", "exists": True},
        "values": {"db": {"value": "postgresql+psycopg://alice:***@ledger.example/tl", "source": "file",
                          "where": f"{cfg}:2"},
                   "currency": {"value": "USD", "source": "file", "where": f"{cfg}:3"},
                   "timezone": {"value": "Asia/Shanghai", "source": "env", "where": "TRAINLEDGER_TIMEZONE"},
                   "node_type": {"value": None, "source": "default", "where": ""}}}
    assert "s3cret" not in run("config", "show").stdout
    r = run("config", "show", env={"TRAINLEDGER_CONFIG": None, "TRAINLEDGER_TIMEZONE": None})
    assert r.stdout.splitlines()[0] == f"config file: {tmp_path / 'xdg-config' / 'trainledger' / 'config.toml'} (default; not found)"


# --- the time zone --------------------------------------------------------------------------------------

def test_a_new_ledger_is_created_in_the_configured_time_zone(tmp_path):
    cfg = write_config(tmp_path, 'timezone = "Asia/Shanghai"\n')
    r = run("settings", "--json", "--db", f"sqlite:///{tmp_path / 'a.db'}", env={"TRAINLEDGER_CONFIG": str(cfg)})
    assert (r.exit_code, r.stderr) == (0, "")
    assert json.loads(r.stdout)["timezone"] == "Asia/Shanghai"
    r = run("settings", "--json", "--db", f"sqlite:///{tmp_path / 'b.db'}",
            env={"TRAINLEDGER_CONFIG": str(cfg), "TRAINLEDGER_TIMEZONE": "Europe/Berlin"})
    assert json.loads(r.stdout)["timezone"] == "Europe/Berlin"


def test_a_configured_zone_other_than_the_ledgers_warns_once_and_q_hides_it(ledger, tmp_path):
    cfg = write_config(tmp_path, 'timezone = "Asia/Shanghai"\n')
    args = ["report", "monthly", "--month", MONTH, "--format", "json", "--db", ledger]
    r = run(*args, env={"TRAINLEDGER_CONFIG": str(cfg)})
    assert r.exit_code == 0
    assert json.loads(r.stdout)["summary"]["timezone"] == "UTC"  # never silently another zone
    assert r.stderr == (f"warning: the config file ({cfg}:1) sets the time zone Asia/Shanghai, but this ledger's is "
                        "UTC, which the reports use; to change the ledger's: trainledger settings timezone "
                        "Asia/Shanghai\n")
    r = run(*args, env={"TRAINLEDGER_TIMEZONE": "Europe/Berlin"})
    assert r.stderr == ("warning: $TRAINLEDGER_TIMEZONE sets the time zone Europe/Berlin, but this ledger's is UTC, "
                        "which the reports use; to change the ledger's: trainledger settings timezone Europe/Berlin\n")
    r = run("-q", *args, env={"TRAINLEDGER_TIMEZONE": "Europe/Berlin"})
    assert (r.exit_code, r.stderr) == (0, "")
    assert json.loads(r.stdout)["summary"]["timezone"] == "UTC"


# --- a bad config file ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,reason", [
    ('db = "sqlite:///x.db"\ncurency = "USD"\n',
     "{cfg}:2: unknown key 'curency'; the valid keys are db, currency, timezone, node_type"),
    ('currency = "USD"\ntimezone = \n', "{cfg}:2: invalid TOML: Invalid value; write each key as key = \"value\""),
    ('\nnode_type = 8\n', "{cfg}:2: node_type: expected a string such as node_type = \"h100-8x\", got an integer 8"),
    ('[db]\nurl = "x"\n', "{cfg}:1: db: expected a string such as db = \"sqlite:///PATH\", got a table {{'url': 'x'}}"),
    ('currency = "usd"\n', "{cfg}:1: currency: expected a 3-letter ISO 4217 code such as CNY or USD, got 'usd'"),
    ('timezone = "Mars/Base"\n',
     "{cfg}:1: timezone: unknown time zone 'Mars/Base'; use an IANA name such as UTC or Asia/Shanghai"),
    ('db = "mysql://x@y/z"\n', "{cfg}:1: db: backend 'mysql' is not supported; use sqlite:///PATH or "
                               "postgresql+psycopg://USER@HOST/DB"),
    ("# " + "x" * 70_000 + "\n", "{cfg}: the config file is larger than 64 KiB; it holds at most the keys db, "
                                 "currency, timezone, node_type"),
])
def test_a_bad_config_file_is_one_line_naming_file_line_and_key(tmp_path, text, reason):
    cfg = write_config(tmp_path, text)
    r = run("--config", cfg, "report", "daily", "--date", "2026-11-02", "--currency", "CNY")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"error: {reason.format(cfg=cfg)}\n"


def test_a_missing_config_file_named_by_flag_or_variable(tmp_path):
    r = run("--config", tmp_path / "none.toml", "config", "show")
    assert (r.exit_code, r.stderr) == (2, f"error: --config: {tmp_path / 'none.toml'} does not exist; create it or "
                                          "drop --config\n")
    r = run("config", "show", env={"TRAINLEDGER_CONFIG": str(tmp_path / "none.toml")})
    assert (r.exit_code, r.stderr) == (2, f"error: TRAINLEDGER_CONFIG: {tmp_path / 'none.toml'} does not exist; "
                                          "create it or unset TRAINLEDGER_CONFIG\n")


def test_a_bad_env_value_names_the_variable(ledger):
    r = run("report", "daily", "--date", "2026-11-02", "--db", ledger, env={"TRAINLEDGER_CURRENCY": "usd"})
    assert (r.exit_code, r.stderr) == (2, "error: TRAINLEDGER_CURRENCY: expected a 3-letter ISO 4217 code such as "
                                          "CNY or USD, got 'usd'\n")


# --- logging and progress -------------------------------------------------------------------------------

def test_library_logging_is_silent_by_default_and_v_shows_info(tmp_path):
    r = run("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'a.db'}")
    assert (r.exit_code, r.stderr) == (0, "")
    r = run("-v", "db", "upgrade", "--db", f"sqlite:///{tmp_path / 'b.db'}")
    assert r.exit_code == 0
    assert "info: alembic.runtime.migration: Running upgrade  -> 0001, initial schema\n" in r.stderr
    r = run("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'c.db'}")  # the levels are reset for each command
    assert (r.exit_code, r.stderr) == (0, "")


def test_a_real_first_upgrade_prints_no_library_logging(tmp_path):
    p = real("db", "upgrade", "--db", f"sqlite:///{tmp_path / 'new.db'}")
    assert (p.returncode, p.stderr) == (0, b"")
    assert p.stdout.decode() == f"ledger sqlite:///{tmp_path / 'new.db'} at revision 0022\n"


def test_vv_shows_debug_of_trainledgers_loggers(tmp_path):
    import logging

    from trainledger.cli import logs

    logs.configure(2)
    try:
        assert logging.getLogger("trainledger.money").isEnabledFor(logging.DEBUG)
        logs.configure(0)
        assert not logging.getLogger("trainledger.money").isEnabledFor(logging.INFO)
        assert logging.getLogger("trainledger.money").isEnabledFor(logging.WARNING)
        logs.configure(-1)
        assert not logging.getLogger("trainledger.money").isEnabledFor(logging.WARNING)
    finally:
        logs.reset()


@pytest.mark.parametrize("flags,enabled", [([], True), (["-q"], False), (["--no-progress"], False)])
def test_quiet_and_no_progress_turn_the_bars_off(flags, enabled):
    from trainledger.cli import progress

    r = run(*flags, "config", "show")
    assert r.exit_code == 0 and progress.enabled() is enabled
    progress.set_enabled(True)
