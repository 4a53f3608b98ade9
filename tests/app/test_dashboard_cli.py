"""`trainledger dashboard`: loopback unless signed in, an argument list, the URL in the environment, a busy port
refused in one line before anything starts."""

from __future__ import annotations

import socket
import subprocess

import pytest
from trainledger.app.serving import cli as dashboard_cli
from trainledger.app.serving.auth import make_entry
from trainledger.cli.commands import app
from typer.testing import CliRunner

from tests.app.served import free_port, trainledger


def _invoke(*args):
    """The command in this process (Streamlit's start faked); on a free port unless ``args`` name one (the command
    checks that it can listen there, and 8501, the default, may be a real dashboard's)."""
    port = () if "--port" in args else ("--port", str(free_port()))
    return CliRunner().invoke(app, ["dashboard", *port, *args], catch_exceptions=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org"])
def test_public_bind_without_auth_is_refused(host, sqlite_url, fake_popen, monkeypatch):
    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    r = _invoke("--host", host, "--db", sqlite_url)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith(f"error: --host {host} is not a loopback address and no --auth-file is set")
    assert fake_popen == []


def test_loopback_starts_streamlit_as_an_argument_list(sqlite_url, fake_popen, monkeypatch):
    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    port = free_port()
    r = _invoke("--port", str(port), "--db", sqlite_url)
    assert r.exit_code == 0, r.output
    (argv, env, kw), = fake_popen
    assert isinstance(argv, list) and kw == {}
    assert argv[1:5] == ["-m", "trainledger.app.serving.serve", "run", str(dashboard_cli.ASGI_SCRIPT)]  # `streamlit run app/serving/asgi.py`
    opts = dict(zip(argv[5::2], argv[6::2]))
    assert opts["--server.address"] == "127.0.0.1" and opts["--server.port"] == str(port)
    assert opts["--server.headless"] == "true" and opts["--browser.gatherUsageStats"] == "false"
    assert opts["--client.showErrorDetails"] == "none"  # no message, type or trace of an error in the browser
    assert env["TRAINLEDGER_DB_URL"] == sqlite_url and sqlite_url not in argv
    assert env["STREAMLIT_BROWSER_GATHER_USAGE_STATS"] == "false"
    assert "TRAINLEDGER_AUTH_FILE" not in env and env["TRAINLEDGER_ALLOWED_HOSTS"] == ""


def test_allowed_hosts_travel_in_the_environment_and_need_sign_in(sqlite_url, fake_popen, monkeypatch, tmp_path):
    from trainledger.app.serving.auth import make_entry

    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    r = _invoke("--allowed-host", "dash.example.com", "--db", sqlite_url)
    assert r.exit_code == 2 and r.stderr.startswith("error: --allowed-host needs --auth-file") and fake_popen == []
    for bad in ("http://dash.example.com", "dash.example.com:443", "a/b", "*", "**.x.com", ""):
        r = _invoke("--allowed-host", bad, "--db", sqlite_url)
        assert r.exit_code == 2 and "--allowed-host" in r.stderr and r.stderr.count("\n") == 1, (bad, r.stderr)
    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "pw", iterations=1000))
    r = _invoke("--auth-file", str(users), "--allowed-host", "Dash.Example.com.", "--allowed-host", "*.corp.example",
                "--db", sqlite_url)
    assert r.exit_code == 0, r.output
    (_, env, _), = fake_popen
    assert env["TRAINLEDGER_ALLOWED_HOSTS"] == "dash.example.com,*.corp.example"


@pytest.mark.parametrize("host", ["localhost", "::1", "127.0.0.1"])
def test_every_loopback_spelling_is_accepted(host, sqlite_url, fake_popen):
    assert _invoke("--host", host, "--db", sqlite_url).exit_code == 0


def test_password_goes_to_the_environment_not_argv(fake_popen, monkeypatch):
    import trainledger.store.db

    url = "postgresql+psycopg://lead:s3cret@127.0.0.1:5432/ledger"
    monkeypatch.setattr(trainledger.store.db, "make_engine", lambda u: type("E", (), {"dispose": lambda self: None})())
    r = _invoke("--db", url)
    assert r.exit_code == 0, r.output
    (argv, env, _), = fake_popen
    assert not any("s3cret" in a for a in argv)
    assert env["TRAINLEDGER_DB_URL"] == url
    assert "s3cret" not in r.output and "***" in r.stderr


def test_public_bind_with_auth_file(sqlite_url, fake_popen, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "pw", iterations=1000))
    r = _invoke("--host", "0.0.0.0", "--auth-file", str(users), "--db", sqlite_url)
    assert r.exit_code == 0, r.output
    (argv, env, _), = fake_popen
    assert argv[argv.index("--server.address") + 1] == "0.0.0.0"
    assert env["TRAINLEDGER_AUTH_FILE"] == str(users.resolve())
    assert "sign-in required (1 users)" in r.stderr


def test_bad_auth_file_is_one_line_exit_2(sqlite_url, fake_popen, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.bob]\nrole = "boss"\npassword_hash = "x"\n')
    r = _invoke("--auth-file", str(users), "--db", sqlite_url)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "role must be viewer, lead or admin, got 'boss'" in r.stderr
    assert fake_popen == []


def test_unreachable_ledger_is_one_line_exit_1(fake_popen):
    r = _invoke("--db", "postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: cannot use the ledger at postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    assert fake_popen == []


def test_dashboard_upgrades_an_empty_ledger_before_serving(sqlite_url, fake_popen):
    from sqlalchemy import create_engine, inspect

    assert _invoke("--db", sqlite_url).exit_code == 0
    assert inspect(create_engine(sqlite_url)).has_table("run")


def test_help():
    r = _invoke("--help")
    assert r.exit_code == 0
    for flag in ("--host", "--port", "--db", "--auth-file"):
        assert flag in r.output


def _listening(family: int, host: str, *, reuse: bool = False) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    if reuse:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen()
    return sock


@pytest.mark.parametrize(("family", "host", "shown"), [(socket.AF_INET, "127.0.0.1", "127.0.0.1"),
                                                       (socket.AF_INET6, "::1", "[::1]")])
def test_a_busy_port_is_one_line_naming_port_and_nothing_starts(family, host, shown, sqlite_url, fake_popen):
    with _listening(family, host) as busy:
        port = busy.getsockname()[1]
        r = _invoke("--host", host, "--port", str(port), "--db", sqlite_url)
    assert r.exit_code == 2 and fake_popen == []
    assert r.stderr == f"error: --port {port}: {shown}:{port} is in use (another dashboard?); pass a free --port\n"


def test_a_port_a_stopped_server_left_in_time_wait_is_free(sqlite_url, fake_popen):
    """A dashboard just stopped leaves its port in TIME_WAIT (it closed its connections first); the server binds
    with SO_REUSEADDR, as the check does, so the port is taken again, and the check must not refuse it."""
    with _listening(socket.AF_INET, "127.0.0.1", reuse=True) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first: its end waits in TIME_WAIT
            assert client.recv(1) == b""
    with pytest.raises(OSError):  # a plain bind still sees the port as taken
        with socket.socket() as plain:
            plain.bind(("127.0.0.1", port))
    assert dashboard_cli.unusable_port("127.0.0.1", port) is None
    assert _invoke("--port", str(port), "--db", sqlite_url).exit_code == 0 and len(fake_popen) == 1


def test_the_console_script_refuses_a_busy_port_before_its_banner(sqlite_url):
    """The installed command, as a user runs it, while another server holds the port: one line, exit 2, no banner
    and no Streamlit (whose own message came after the banner before)."""
    with _listening(socket.AF_INET, "127.0.0.1") as busy:
        port = busy.getsockname()[1]
        done = subprocess.run([*trainledger(), "dashboard", "--port", str(port), "--db", sqlite_url],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: --port {port}: 127.0.0.1:{port} is in use (another dashboard?); pass a free --port\n"


def test_a_privileged_port_without_privileges_is_one_line():
    """A port under the first unprivileged one (1024 here; a container may set it to 0, and then no port is
    refused) cannot be bound by a user without privileges: checked in a forked child that drops to ``nobody`` when
    the tests run as root (root may bind any), with a port the kernel picks as the control."""
    import os

    first = dashboard_cli.first_unprivileged_port()
    port = max(first - 1, 80)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, only the check, then _exit
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.write(write, f"{dashboard_cli.unusable_port('127.0.0.1', port)}|{dashboard_cli.unusable_port('127.0.0.1', 0)}"
                     .encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as fh:
        said = fh.read()
    os.waitpid(pid, 0)
    assert said == (f"needs privileges to listen on (ports under {first})|None" if port < first else "None|None")
