"""Bounded inputs (issue 37): every file a user names is read with a size limit and checked in linear time, and
bad bytes are one line ``FILE:LINE: …`` (``trainledger.store.files.read_bounded``, the one reader): the trainer's
YAML configs (``train``, ``launch``, ``sweep``), the invoice import's ``--mapping`` file, hostfiles, and the CLI's
own config file (``--config``, its own reader with the same rules). Oversized (``/dev/zero`` included: never read
on), a NUL byte, invalid UTF-8: exit 2, one line naming the file, nothing written to the ledger.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trainledger.runs.launch import CONFIG_DIRS_ENV

from tests.hostile.conftest import REPO, assert_refused, invoke, snapshot, unchanged

SHIPPED = REPO / "trainer" / "configs" / "dp.yaml"
#: (file name, bytes after a good first line, what the error says after FILE)
BAD_BYTES = [("nul", b"# ok\nmodel:\x00 x\n", ":2: a NUL byte; a {what} is text"),
             ("latin1", b"# ok\n# fine\nname: caf\xe9\n", ":3: not UTF-8 text (invalid continuation byte)"),
             ("lone", b"# ok\n\xff\n", ":2: not UTF-8 text (invalid start byte)")]


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    monkeypatch.setenv(CONFIG_DIRS_ENV, str(d))
    return d


def _big(path: Path, limit: int, first: bytes = b"") -> Path:
    path.write_bytes(first + b"#" * (limit + 1 - len(first)) + b"\n")
    return path


def test_trainer_configs_are_bounded_with_file_line_errors(sqlite_ledger, config_dir, run_env):
    before = snapshot(sqlite_ledger)
    assert_refused(invoke(["train", "/dev/zero", "--dry-run"]), "config /dev/zero is larger than 1024 KiB")
    huge = _big(config_dir / "huge.yaml", 1 << 20, SHIPPED.read_bytes())
    for name, data, said in BAD_BYTES:
        f = config_dir / f"{name}.yaml"
        f.write_bytes(data)
        message = f"{f}{said.format(what='config')}"
        assert_refused(invoke(["train", f, "--dry-run"]), message, context=name)
        assert_refused(invoke(["launch", f, "--detach"], sqlite_ledger), message, context=name)
        assert_refused(invoke(["sweep", f, "--strategies", "dp", "--steps", "1"], sqlite_ledger), message,
                       context=name)
    for cmd in (["train", huge, "--dry-run"], ["launch", huge, "--detach"], ["sweep", huge, "--strategies", "dp"]):
        assert_refused(invoke(cmd, None if cmd[0] == "train" else sqlite_ledger), f"config {huge} is larger than 1024 KiB",
                       context=cmd[0])
    unchanged(sqlite_ledger, before)
    sweeps = Path(run_env["XDG_DATA_HOME"]) / "trainledger" / "sweeps"
    assert not sweeps.exists() or list(sweeps.iterdir()) == []


def test_an_invoice_mapping_file_is_bounded_with_file_line_errors(sqlite_ledger, tmp_path):
    invoice = tmp_path / "gpuhub.csv"
    invoice.write_text("Billing month,Instance,Total,Cur\n2026-10,gpu-1,100,USD\n")
    before = snapshot(sqlite_ledger)

    def refused(mapping: Path, *needles: str) -> None:
        out = invoke(["invoice", "import", invoice, "--mapping", mapping, "--provider", "gpuhub"], sqlite_ledger)
        assert_refused(out, "--mapping: ", *needles, context=mapping.name)

    refused(Path("/dev/zero"), "mapping file /dev/zero is larger than 64 KiB")
    refused(_big(tmp_path / "big.toml", 64 * 1024, b'[columns]\namount = "Total"\n'),
            f"mapping file {tmp_path / 'big.toml'} is larger than 64 KiB")
    for name, data, said in BAD_BYTES:
        f = tmp_path / f"{name}.toml"
        f.write_bytes(data.replace(b"model:", b"amount =").replace(b"name: ", b"resource = "))
        refused(f, f"{f}{said.format(what='mapping file')}")
    refused(tmp_path / "none.toml", f"cannot read mapping file {tmp_path / 'none.toml'}")
    unchanged(sqlite_ledger, before)


def test_hostfiles_through_launch_are_bounded_with_file_line_errors(sqlite_ledger, config_dir, tmp_path):
    config = config_dir / "dp.yaml"
    config.write_bytes(SHIPPED.read_bytes())
    before = snapshot(sqlite_ledger)
    base = ["launch", config, "--nodes", "2", "--run-id", "bounded-1", "--detach", "--hostfile"]
    assert_refused(invoke(base + ["/dev/zero"], sqlite_ledger), "hostfile /dev/zero is larger than 8192 KiB")
    for name, data, said in BAD_BYTES:
        f = tmp_path / f"{name}.hosts"
        f.write_bytes(data.replace(b"model:", b"h1 slots=1").replace(b"name: ", b"h2 slots=1 "))
        assert_refused(invoke(base + [f], sqlite_ledger), f"{f}{said.format(what='hostfile')}", context=name)
    unchanged(sqlite_ledger, before)


def test_the_cli_config_file_is_bounded_with_file_line_errors(tmp_path):
    for name, data, said in BAD_BYTES[:1] + BAD_BYTES[2:]:
        f = tmp_path / f"{name}.toml"
        f.write_bytes(data)
        out = invoke(["--config", f, "config", "show"])
        expected = ":2: a NUL byte; the config file is text" if name == "nul" else ":2: the config file is not UTF-8 text"
        assert_refused(out, f"{f}{expected}", context=name)
    assert_refused(invoke(["--config", "/dev/zero", "config", "show"]), "/dev/zero: the config file is larger than 64 KiB")


def test_a_deepspeed_json_is_bounded_with_file_line_errors(tmp_path):
    from trainledger.trainer.parallel import PlanError, load_deepspeed_json

    with pytest.raises(PlanError, match="^DeepSpeed config /dev/zero is larger than 1024 KiB"):
        load_deepspeed_json("/dev/zero")
    for name, data, said in BAD_BYTES:
        f = tmp_path / f"{name}.json"
        f.write_bytes(data.replace(b"# ok\n", b"{\n"))
        with pytest.raises(PlanError, match=f"^{f}{said.format(what='DeepSpeed config')}".replace("(", r"\(")
                           .replace(")", r"\)")):
            load_deepspeed_json(f)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(PlanError, match="nested too deeply|not valid JSON"):
        load_deepspeed_json(deep)


def test_the_dashboards_users_file_and_oidc_files_are_bounded_with_file_line_errors(sqlite_ledger, tmp_path):
    """The users file (``dashboard --auth-file``, ``trainledger users``) and the OIDC configuration and secret file:
    /dev/zero and oversized files refused unread, NUL and bad UTF-8 as FILE:LINE, one line each, nothing written."""
    from trainledger.app.serving.auth import MAX_FILE_BYTES, AuthFileError, load_auth_file
    from trainledger.app.serving.oidc import OidcConfigError, load_config

    with pytest.raises(AuthFileError) as err:
        load_auth_file("/dev/zero")
    assert str(err.value) == "--auth-file: users file /dev/zero is larger than 1024 KiB; is it a users file?"
    huge = _big(tmp_path / "huge.toml", MAX_FILE_BYTES)
    before = snapshot(sqlite_ledger)
    for name, data, said in [*BAD_BYTES, ("huge", huge.read_bytes(), None)]:
        f = tmp_path / f"{name}.toml"
        f.write_bytes(data)
        message = (f"--auth-file: users file {f} is larger than 1024 KiB; is it a users file?" if said is None
                   else f"--auth-file: {f}{said.format(what='users file')}")
        with pytest.raises(AuthFileError) as err:
            load_auth_file(f)
        assert str(err.value) == message, name
        for cmd in (["users", "list", "--auth-file", f], ["users", "remove", "bob", "--auth-file", f]):
            assert_refused(invoke(cmd, sqlite_ledger), message, context=f"{name} {cmd[1]}")
        conf = tmp_path / f"oidc-{name}.toml"
        conf.write_bytes(data)
        with pytest.raises(OidcConfigError) as err:
            load_config(conf)
        assert "\n" not in str(err.value) and str(conf) in str(err.value), (name, str(err.value))
    unchanged(sqlite_ledger, before)
