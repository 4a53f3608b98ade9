"""Access control and command safety beyond tests/app/test_dashboard_access.py and test_dashboard_launch.py.

* Any non-loopback --host without --auth-file is refused (exit 2, one line) and nothing is served.
* Roles are checked on the server: a viewer whose session claims the lead role, or who imports a
  pricing TOML, changes nothing.
* Configs: whatever path the Launch form is sent, the server accepts only a real YAML file inside
  the shipped configs or $TRAINLEDGER_CONFIG_DIRS (symlinks and '..' cannot escape).
* No free-form command reaches a shell: config names and run names full of shell syntax travel as
  single arguments (launch, the sbatch script, the dashboard), and create nothing.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import stat
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlmodel import Session, select
from trainledger.app.queries import launch as app_launch
from trainledger.app.serving.auth import make_entry
from trainledger.app.serving.cli import is_loopback
from trainledger.app.views.access import IDENTITY_KEY, TOKEN_KEY, Identity
from trainledger.errors import LedgerInputError
from trainledger.store.db import make_engine
from trainledger.store.models import Run

from tests.app.helpers import make_app, plain, set_role
from tests.app.helpers import sign_in as sign_in_with
from tests.helpers import offer_price
from tests.hostile.conftest import FUZZ, REPO, assert_clean, assert_refused, invoke, snapshot, unchanged

FAST = 1_000  # PBKDF2 iterations
SHIPPED = REPO / "trainer" / "configs"
SHELL_NAMES = ["$(touch PWNED).yaml", "a;touch PWNED;b.yaml", "`touch PWNED`.yaml", "x|touch PWNED.yaml",
               "x && touch PWNED.yaml", "x' ; touch PWNED ; '.yaml", 'x" ; touch PWNED ; ".yaml', "-rf.yaml",
               "$HOME.yaml", "x\ntouch PWNED.yaml"]


def _assert_no_pwned(*dirs: Path) -> None:
    for d in (*dirs, REPO, Path.cwd(), Path("/tmp")):
        assert not (d / "PWNED").exists(), d


# --- binding ------------------------------------------------------------------------------------

hosts = st.one_of(st.ip_addresses().map(str), st.ip_addresses(v=6).map(lambda a: f"[{a}]"),
                  st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True),
                  st.sampled_from(["0.0.0.0", "::", "", "127.0.0.1.evil.com", "localhost.", "0x7f000001", "127.1",
                                   "2130706433", "::ffff:127.0.0.1", "LOCALHOST", "[::1]", "127.0.0.1", "localhost", "::1"]))


@FUZZ
@given(host=hosts)
def test_only_loopback_is_served_without_auth(sqlite_url, fake_popen, monkeypatch, host):
    monkeypatch.delenv("TRAINLEDGER_AUTH_FILE", raising=False)
    fake_popen.clear()
    out = invoke(["dashboard", f"--host={host}", "--db", sqlite_url])
    try:
        loopback = host.lower() == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        assert out.exit_code == 0 and len(fake_popen) == 1, (host, out.stderr)
    else:
        assert not is_loopback(host), host
        assert_refused(out, f"--host {host} is not a loopback address", context=host)
        assert fake_popen == []


# --- roles ----------------------------------------------------------------------------------------

@pytest.fixture
def signed_in(sqlite_url, app_env, tmp_path, monkeypatch):
    make_engine(sqlite_url).dispose()
    app_env(sqlite_url)
    users = tmp_path / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST)
                     + make_entry("bob", "viewer", "bob-pw", iterations=FAST))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users))

    def sign_in(user: str, password: str, page: str = "settings"):
        at = make_app()
        sign_in_with(at, user, password)
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return sign_in




def test_a_viewer_claiming_the_lead_role_in_the_session_changes_nothing(signed_in, sqlite_url, tmp_path):
    at = signed_in("bob", "bob-pw")
    at.session_state[IDENTITY_KEY] = Identity(user="bob", role="lead", signed_in=True)  # forged: never read
    at.run()
    assert any("Signed in as bob (viewer)" in plain(i.value) for i in at.info)
    assert all(b.disabled for b in at.button if b.label in ("Save offer", "Import", "Save fleet", "Save settings"))
    at.session_state[TOKEN_KEY] = "forged-token"  # a made-up session: signed out, nothing shown
    at.run()
    assert at.title[0].value == "Sign in to trainledger" and not at.button


def test_a_lead_demoted_to_viewer_changes_nothing(signed_in, sqlite_url):
    """The form was drawn for a lead: after the demotion the server draws it disabled and discards the click."""
    at = signed_in("alice", "alice-pw")
    before = snapshot(sqlite_url)
    at.selectbox(key="set_offer_pick").set_value("rtx4090-rent").run()
    at.text_input(key="offer_rtx4090-rent_rent_elastic_price_per_node_month").input("1")
    set_role(Path(os.environ["TRAINLEDGER_AUTH_FILE"]), "alice", "viewer")
    next(b for b in at.button if b.label == "Save offer").click().run()
    assert not at.success and next(b for b in at.button if b.label == "Save offer").disabled
    assert offer_price(sqlite_url) == Decimal("3600")
    unchanged(sqlite_url, before)


def test_a_lead_demoted_to_viewer_cannot_launch(signed_in, sqlite_url, fake_popen, run_env):
    at = signed_in("alice", "alice-pw", page="launch")
    before = snapshot(sqlite_url)
    set_role(Path(os.environ["TRAINLEDGER_AUTH_FILE"]), "alice", "viewer")
    next(b for b in at.button if b.label == "Launch").click().run()
    assert not at.success and at.button(key="launch_go").disabled
    assert any("Signed in as alice (viewer)" in plain(i.value) for i in at.info)
    assert fake_popen == []
    unchanged(sqlite_url, before)


def test_a_viewer_cannot_import_pricing_toml(signed_in, sqlite_url):
    at = signed_in("bob", "bob-pw")
    assert at.text_area(key="pricing_toml").disabled
    assert next(b for b in at.button if b.label == "Import").disabled
    lead = signed_in("alice", "alice-pw")
    before = snapshot(sqlite_url)
    lead.text_area(key="pricing_toml").input('[[offer]]\nname = "rtx4090-rent"\nnode_type = "rtx4090-8x"\n'
                                             'kind = "rent_elastic"\nprice_per_node_hour = 0\n')
    set_role(Path(os.environ["TRAINLEDGER_AUTH_FILE"]), "alice", "viewer")
    next(b for b in lead.button if b.label == "Import").click().run()
    assert not lead.success
    unchanged(sqlite_url, before)


def test_without_signing_in_no_page_is_served(signed_in, sqlite_url):
    from streamlit.testing.v1 import AppTest

    at = make_app()
    at.run()
    for page in ("settings", "launch"):  # every URL answers with the sign-in prompt, not the page
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and at.title[0].value == "Sign in to trainledger", page
        assert not at.button and not at.metric, page
    for page in ("settings", "launch"):  # a page script run on its own (no main.py) gates itself
        at = AppTest.from_file(str(REPO / "app" / "pages" / f"{page}.py"), default_timeout=60)
        at.run()
        assert not at.exception and at.title[0].value == "Sign in to trainledger", page
        assert not [b for b in at.button if b.label in ("Save offer", "Launch")], page


# --- configs: only real YAML files inside the allowed directories --------------------------------

@pytest.fixture
def config_tree(tmp_path, monkeypatch):
    mine, outside = tmp_path / "mine", tmp_path / "outside"
    (mine / "sub").mkdir(parents=True)
    outside.mkdir()
    for d in (mine, outside, mine / "sub"):
        shutil.copy(SHIPPED / "dp.yaml", d / "c.yaml")
    (mine / "out-link.yaml").symlink_to(outside / "c.yaml")
    (mine / "in-link.yaml").symlink_to(mine / "c.yaml")
    (mine / "dir-link").symlink_to(outside, target_is_directory=True)
    (mine / "notes.txt").write_text("x")
    (mine / "dir.yaml").mkdir()
    monkeypatch.setenv(app_launch.CONFIG_DIRS_ENV, os.pathsep.join([str(mine), str(tmp_path / "absent")]))
    return mine, outside


def _pieces(mine: Path, outside: Path):
    roots = st.sampled_from([str(mine), str(outside), str(SHIPPED), str(SHIPPED.parent), "/etc", "", ".", "~", "/"])
    parts = st.sampled_from(["c.yaml", "out-link.yaml", "in-link.yaml", "dir-link", "sub", "..", ".", "notes.txt",
                             "dir.yaml", "dp.yaml", "passwd", "", "x.yaml\0", "configs", "mine", "outside"])
    return st.tuples(roots, st.lists(parts, max_size=4), st.sampled_from(["/", "//", "/./"])).map(
        lambda t: t[0] + t[2] + t[2].join(t[1]) if t[1] else t[0])


@FUZZ
@given(data=st.data())
def test_the_server_accepts_only_yaml_files_inside_allowed_dirs(config_tree, data):
    mine, outside = config_tree
    path = data.draw(st.one_of(_pieces(mine, outside), st.text(max_size=30)))
    allowed = [SHIPPED.resolve(), mine.resolve()]
    try:
        real = app_launch.resolve_config(path)
    except LedgerInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("config: "), (path, str(exc))
        return
    assert real.is_file() and real.suffix in (".yaml", ".yml"), path
    assert real == real.resolve() and any(real.is_relative_to(d) for d in allowed), (path, real)
    assert ".." not in Path(path).parts, path


# --- no shell ----------------------------------------------------------------------------------------

def test_no_shell_strings_in_the_code():
    hits = []
    for root in ("ledger", "trainer", "app"):
        for f in (REPO / root).rglob("*.py"):
            src = f.read_text(encoding="utf-8")
            for pattern in (r"shell\s*=\s*True", r"os\.system\(", r"os\.popen\(", r"getstatusoutput\(", r"getoutput\("):
                hits += [f"{f.relative_to(REPO)}: {pattern}" for _ in re.finditer(pattern, src)]
    assert hits == []


def test_shell_syntax_as_a_config_argument_is_just_a_missing_file(sqlite_ledger, tmp_path, monkeypatch):
    ledger = sqlite_ledger
    monkeypatch.chdir(tmp_path)
    before = snapshot(ledger)
    for name in ["x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "x | touch PWNED", "$(id)", "-h; touch PWNED"]:
        option = name.startswith("-")  # taken for an unknown option: a usage error
        assert_refused(invoke(["launch", name, "--launcher", "slurm"], ledger),
                       *(["No such option"] if option else ["CONFIG:", "does not exist"]), context=name)
        assert_refused(invoke(["train", name, "--dry-run"]), "No such option" if option else "cannot read config", context=name)
        assert_refused(invoke(["sweep", name, "--strategies", "dp"], ledger), context=name)
    unchanged(ledger, before)
    _assert_no_pwned(tmp_path)


@pytest.fixture
def hostile_configs(tmp_path, monkeypatch):
    d = tmp_path / "cfgs"
    d.mkdir()
    for name in SHELL_NAMES:
        shutil.copy(SHIPPED / "dp.yaml", d / name)
    monkeypatch.setenv(app_launch.CONFIG_DIRS_ENV, str(d))
    monkeypatch.chdir(tmp_path)
    return d


def test_hostile_config_names_reach_the_launcher_as_one_argument(sqlite_ledger, hostile_configs, fake_popen, tmp_path):
    ledger = sqlite_ledger
    for name in SHELL_NAMES:
        fake_popen.clear()
        cfg = hostile_configs / name
        out = invoke(["launch", cfg, "--detach", "--name", "$(touch PWNED)", "--project", "; touch PWNED",
                      "--steps", "2"], ledger)
        assert_clean(out, context=name, codes=(0,))
        (argv, _, kwargs), = fake_popen
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv) and "positional" not in kwargs
        assert not kwargs.get("shell") and not kwargs.get("executable")
        assert str(cfg.resolve()) in argv and "$(touch PWNED)" in argv and "; touch PWNED" in argv, argv
    _assert_no_pwned(tmp_path, hostile_configs)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Stand-ins for scontrol and srun (srun writes its arguments, NUL-separated); no sbatch here."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text("#!/bin/sh\necho node0\n")
    (fake_bin / "srun").write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$SRUN_ARGS"\n')
    for f in fake_bin.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IXUSR)
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n == "sbatch" else which(n, *a, **k))

    def run_script(script: Path, record: Path) -> list[str]:
        env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node0",
               "SLURM_JOB_ID": "1", "SRUN_ARGS": str(record)}
        subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, check=True, timeout=30)
        return record.read_bytes().decode().split("\0")[:-1]

    return run_script


def _sbatch(ledger: str, cfg: Path, *extra: str) -> Path:
    out = invoke(["launch", cfg, "--launcher", "slurm", "--nodes", "2", "--gpus-per-node", "2", *extra, "--json"], ledger)
    assert_clean(out, context=(cfg, extra), codes=(0,))
    return Path(json.loads(out.stdout)["script"])


def test_the_sbatch_script_quotes_every_argument(sqlite_ledger, hostile_configs, tmp_path, fake_slurm):
    ledger = sqlite_ledger
    """Run the generated script with stand-ins for scontrol and srun: srun gets the arguments, nothing else runs."""
    for i, name in enumerate(SHELL_NAMES):
        cfg = hostile_configs / name
        script = _sbatch(ledger, cfg, "--name", "x; touch PWNED", "--project", "x'; touch PWNED; '", "--user", "`touch PWNED`")
        srun_argv = fake_slurm(script, tmp_path / f"srun-{i}.args")
        assert str(cfg.resolve()) in srun_argv, (name, srun_argv)
        assert {"x; touch PWNED", "x'; touch PWNED; '", "`touch PWNED`"} <= set(srun_argv), srun_argv
        assert "TRAINLEDGER_DB_URL=" not in script.read_text()
    _assert_no_pwned(tmp_path, hostile_configs)


def test_a_run_name_starting_with_a_dollar_is_not_run_by_the_sbatch_script(sqlite_ledger, tmp_path, fake_slurm):
    script = _sbatch(sqlite_ledger, SHIPPED / "dp.yaml", "--name", "$(touch PWNED)", "--project", "$HOME")
    srun_argv = fake_slurm(script, tmp_path / "srun.args")
    assert not (tmp_path / "PWNED").exists()
    assert "$(touch PWNED)" in srun_argv and "$HOME" in srun_argv, srun_argv


def test_the_launch_page_passes_a_hostile_config_name_as_one_argument(signed_in, sqlite_url, hostile_configs, fake_popen,
                                                                       tmp_path, run_env):
    name = "$(touch PWNED).yaml"
    at = signed_in("alice", "alice-pw", page="launch")
    listed = str((hostile_configs / name).resolve())
    at.selectbox(key="launch_config").set_value(listed).run()
    at.text_input(key="launch_name").input("`touch PWNED`")
    next(b for b in at.button if b.label == "Launch").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    (argv, _, kwargs), = fake_popen
    assert isinstance(argv, list) and "positional" not in kwargs and not kwargs.get("shell")
    assert listed in argv and "`touch PWNED`" in argv, argv
    engine = make_engine(sqlite_url)
    with Session(engine) as s:
        (run,) = s.exec(select(Run)).all()
        assert run.name == "`touch PWNED`" and run.config["path"] == listed
    engine.dispose()
    _assert_no_pwned(tmp_path, hostile_configs)


def test_trainledger_launch_and_sweep_accept_only_configs_from_the_allowed_directories(sqlite_ledger, tmp_path,
                                                                                     monkeypatch, fake_popen):
    """A config outside trainer/configs and $TRAINLEDGER_CONFIG_DIRS is refused (one line, exit 2, nothing
    registered or started), also through a symlink or '..' out of an allowed directory."""
    from trainledger.runs.launch import CONFIG_DIRS_ENV

    outside = tmp_path / "outside"
    outside.mkdir()
    cfg = outside / "dp.yaml"
    shutil.copy(SHIPPED / "dp.yaml", cfg)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "link.yaml").symlink_to(cfg)
    monkeypatch.setenv(CONFIG_DIRS_ENV, str(allowed))
    before = snapshot(sqlite_ledger)
    for path in (cfg, allowed / "link.yaml", allowed / ".." / "outside" / "dp.yaml"):
        for cmd in (["launch", path, "--detach", "--steps", "2"], ["sweep", path, "--strategies", "dp", "--steps", "2"]):
            out = invoke(cmd, sqlite_ledger)
            assert_refused(out, "CONFIG", "outside the allowed config directories", context=cmd)
    unchanged(sqlite_ledger, before)
    assert fake_popen == []
    shutil.copy(SHIPPED / "dp.yaml", allowed / "mine.yaml")  # inside an allowed directory: launched
    out = invoke(["launch", allowed / "mine.yaml", "--detach", "--steps", "2"], sqlite_ledger)
    assert out.exit_code == 0 and len(fake_popen) == 1, out.stderr
