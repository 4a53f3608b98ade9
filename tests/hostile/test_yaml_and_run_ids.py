"""Configs and run ids as ways in: YAML alias bombs, run ids that are paths, log paths outside the run directory.

* A 600-byte config whose free-form ``deepspeed:`` section nests aliases (a "billion laughs")
  drove `train --dry-run` past 2.5 GB. Every config is now parsed by a loader that refuses
  aliases (and the merge keys built on them): `train --dry-run`, `launch`, `sweep` and the
  dashboard's Launch page refuse it with one line (exit 2 in the CLI), register nothing and
  write no sweep configs. Anchors alone still parse; a config over 1 MiB is refused unread.
* A run id names files (journal, log), so every way in outside the importer checks it with
  ``trainledger.store.ids.validate_run_id``: the trainer's ``--run-id`` / ``$TRAINLEDGER_RUN_ID`` and
  ``--sweep-id``, the run journal (its file names and its events), the dashboard's ``?run=``.
* A run's log is shown only when the ledger records exactly ``<run directory>/<run id>.log``
  and that is a file inside the run directory (symlinks resolved): with a run id such as
  ``../../../../etc/hostname`` (written by an older trainledger) the Launch page shows no file.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlmodel import Session
from trainledger.app.queries import launch as app_launch
from trainledger.errors import LedgerInputError
from trainledger.runs.launch import CONFIG_DIRS_ENV, default_log_dir, run_log_file
from trainledger.sources.record.journal import Journal, apply_events, sync_all
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.app.helpers import make_app
from tests.helpers import node_type
from tests.hostile.conftest import REPO, assert_refused, invoke, snapshot, unchanged

SHIPPED = REPO / "trainer" / "configs" / "dp.yaml"


def alias_bomb(levels: int = 6, width: int = 6) -> str:
    """The shipped dp config plus a ``deepspeed:`` section of nested aliases (width**levels leaves)."""
    lines = ["deepspeed:", "  a0: &a0 [\"lol\"]"]
    for i in range(1, levels + 1):
        refs = ", ".join(f"*a{i - 1}" for _ in range(width))
        lines.append(f"  a{i}: &a{i} [{refs}]")
    return SHIPPED.read_text() + "\n".join(lines) + "\n"


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "configs"
    d.mkdir()
    monkeypatch.setenv(CONFIG_DIRS_ENV, str(d))
    return d


def test_the_bomb_is_small(config_dir):
    assert len(alias_bomb().encode()) - len(SHIPPED.read_bytes()) < 600  # 6**6 = 46,656 leaves from a few lines


def test_train_dry_run_refuses_an_alias_bomb(config_dir):
    bomb = config_dir / "bomb.yaml"
    bomb.write_text(alias_bomb())
    out = invoke(["train", bomb, "--dry-run"])
    assert_refused(out, "bomb.yaml", "aliases (*name)")
    merge = config_dir / "merge.yaml"
    merge.write_text(SHIPPED.read_text() + "deepspeed:\n  base: &b {x: 1}\n  more:\n    <<: *b\n")
    assert_refused(invoke(["train", merge, "--dry-run"]), "merge.yaml", "aliases (*name)")
    anchor_only = config_dir / "anchor.yaml"
    anchor_only.write_text(SHIPPED.read_text().replace("model:", "model: &m", 1))
    assert invoke(["train", anchor_only, "--dry-run"]).exit_code == 0
    huge = config_dir / "huge.yaml"
    huge.write_text(SHIPPED.read_text() + "# " + "x" * (1 << 20) + "\n")
    assert_refused(invoke(["train", huge, "--dry-run"]), "huge.yaml", "larger than 1024 KiB")


def test_launch_sweep_and_the_launch_page_refuse_an_alias_bomb(sqlite_url, config_dir, run_env):
    bomb = config_dir / "bomb.yaml"
    bomb.write_text(alias_bomb())
    make_engine(sqlite_url).dispose()
    before = snapshot(sqlite_url)
    assert_refused(invoke(["launch", bomb, "--detach"], sqlite_url), "aliases (*name)")
    assert_refused(invoke(["sweep", bomb, "--strategies", "dp,zero1", "--steps", "1"], sqlite_url), "aliases (*name)")
    unchanged(sqlite_url, before)
    sweeps = Path(run_env["XDG_DATA_HOME"]) / "trainledger" / "sweeps"
    assert not sweeps.exists() or list(sweeps.iterdir()) == []
    # the Launch page: its defaults come from the shipped fallback, and launching it is one line
    assert app_launch.config_defaults(str(bomb)) == {"steps": 100, "processes": 2}
    form = app_launch.LaunchForm(config=str(bomb), node_type="rtx4090-8x", steps=1, processes_per_node=2)
    with pytest.raises(LedgerInputError, match=r"aliases \(\*name\)"):
        app_launch.launch_run(sqlite_url, form)
    unchanged(sqlite_url, before)


@pytest.mark.parametrize("bad", ["../../../../var/log/dpkg", "a/b", "..", ".hidden", "-rf", "x" * 65, "a b", "run\n1"])
def test_the_trainer_refuses_a_run_id_that_is_not_one(bad, monkeypatch, tmp_path, capsys):
    from trainledger.trainer.train import main

    monkeypatch.setenv("TRAINLEDGER_JOURNAL_DIR", str(tmp_path / "journal"))
    assert main(["--config", str(SHIPPED), "--track", f"--run-id={bad}", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --run-id:") and len(err.splitlines()) == 1, err
    monkeypatch.setenv("TRAINLEDGER_RUN_ID", bad)
    assert main(["--config", str(SHIPPED), "--dry-run"]) == 2
    assert "$TRAINLEDGER_RUN_ID" in capsys.readouterr().err
    monkeypatch.delenv("TRAINLEDGER_RUN_ID")
    assert main(["--config", str(SHIPPED), "--track", f"--sweep-id={bad}", "--dry-run"]) == 2
    assert "--sweep-id" in capsys.readouterr().err
    assert not (tmp_path / "journal").exists() or list((tmp_path / "journal").iterdir()) == []


def test_the_journal_takes_valid_run_ids_only(sqlite_url, tmp_path):
    journal_dir = tmp_path / "journal"
    with pytest.raises(LedgerInputError, match="run id"):
        Journal(journal_dir, "../escape")
    assert not (tmp_path / "escape.jsonl").exists()
    engine = make_engine(sqlite_url)
    with Session(engine) as s, pytest.raises(LedgerInputError, match="journal event run_id"):
        apply_events(s, [{"seq": 1, "type": "heartbeat", "run_id": "../../x", "ts": "2026-11-01T00:00:00+00:00"}])
    journal_dir.mkdir()
    (journal_dir / "not a run.jsonl").write_text('{"seq": 1, "type": "heartbeat", "run_id": "x", "ts": "2026-11-01"}\n')
    assert sync_all(engine, journal_dir) == {}  # a file trainledger never writes is skipped, not replayed
    engine.dispose()


def _add_run(url: str, run_id: str, log_path: str) -> None:
    """A running run as an older trainledger (free-text run ids) could have stored it."""
    engine = make_engine(url)
    with Session(engine) as s:
        nt = node_type(s)
        now = datetime.now(timezone.utc)
        s.add(Run(id=run_id, name="old", node_type_id=nt.id, nodes=1, gpus_per_node=8, status=RunStatus.running,
                  started_at=now, heartbeat_at=now, log_path=log_path, hostname="here"))
        s.commit()
    engine.dispose()


def test_log_files_outside_the_run_directory_are_never_shown(sqlite_url, run_env, app_env, tmp_path):
    outside = tmp_path / "secret.log"
    outside.write_text("[trainer] step 7/9 loss 1.0\nTOP SECRET host file\n")
    logs = default_log_dir()
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "linked.log").symlink_to(outside)
    (logs / "own.log").write_text("[trainer] step 3/9 loss 2.5\n")
    traversal = os.path.relpath(outside.with_suffix(""), logs)  # ../../…/secret: <logs>/<id>.log is the outside file
    cases = {traversal: str(outside), "linked": str(logs / "linked.log"), "pointing": str(outside),
             "own": str(logs / "own.log")}
    make_engine(sqlite_url).dispose()
    for rid, path in cases.items():
        _add_run(sqlite_url, rid, path)
    assert run_log_file("own", str(logs / "own.log")) == (logs / "own.log").resolve()
    for rid in ("linked", "pointing", traversal):
        assert run_log_file(rid, cases[rid]) is None, rid
        assert app_launch.log_tail(rid, cases[rid]) == []
    app_env(sqlite_url)
    for rid in cases:
        at = make_app(run=rid)
        at.run()
        at.switch_page("pages/launch.py").run()
        assert not at.exception, [e.value for e in at.exception]
        shown = " ".join([c.value for c in at.code] + [c.value for c in at.caption] + [m.value for m in at.markdown])
        assert "TOP SECRET" not in shown and str(outside) not in shown, rid
        if rid == "own":
            assert "[trainer] step 3/9 loss 2.5" in " ".join(c.value for c in at.code)
        if rid == traversal:
            assert [e.value for e in at.error] == [] and any("not a run id" in w.value for w in at.warning), rid


def test_launch_and_sweep_check_their_ids_and_keep_logs_in_the_run_directory(sqlite_url, run_env, tmp_path):
    from trainledger.runs.launch import LaunchRequest, prepare
    from trainledger.runs.sweep import write_configs
    from trainledger.store.db import session_scope

    make_engine(sqlite_url).dispose()
    before = snapshot(sqlite_url)
    engine = make_engine(sqlite_url)
    for req, needle in ((LaunchRequest(config=SHIPPED, sweep_id="../../escape"), "sweep id"),
                        (LaunchRequest(config=SHIPPED, log_dir=tmp_path / "elsewhere"), "log_dir")):
        with pytest.raises(LedgerInputError, match=needle), session_scope(engine) as s:
            prepare(s, req, sqlite_url)
    with pytest.raises(LedgerInputError, match="sweep id"):
        write_configs(SHIPPED, ["dp"], 2, "../../escape")
    engine.dispose()
    unchanged(sqlite_url, before)
    assert not (tmp_path / "elsewhere").exists() and not list(tmp_path.rglob("escape"))
