"""Launching tracked runs from the dashboard: which configs may be launched, the form, start and cancel.

The Launch page starts a run the way ``trainledger launch CONFIG --detach``
does (``trainledger.runs.launch.prepare`` + ``start(detach=True)`` + ``record_process``):
torchrun on this machine, one node, the ledger URL in the environment. The
user picks a config from a list, never types a path or a command:

* the shipped configs (``trainer/configs/*.yaml``), and
* the ``*.yaml`` / ``*.yml`` files of the directories in ``$TRAINLEDGER_CONFIG_DIRS``
  (``os.pathsep``-separated; relative ones are taken from the dashboard's
  working directory).

:func:`resolve_config` checks the chosen path again on the server right
before the launch: no ``..``, and the real path (symlinks resolved) must lie
inside one of those directories. The role check (``access.require_lead``) is
the page's, right before it calls :func:`launch_run` or :func:`cancel_run`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from trainledger.errors import LedgerInputError
from trainledger.runs.launch import CONFIG_DIRS_ENV, allowed_config_dirs, shipped_config_dir  # noqa: F401  (re-exported)

CONFIG_SUFFIXES = (".yaml", ".yml")
MAX_STEPS = 1_000_000
MAX_PROCESSES = 16
CANCEL_GRACE_S = 15.0
LOG_TAIL_BYTES = 16_384
LOG_TAIL_LINES = 15
STEP_LINE = re.compile(r"\[trainer\] step (\d+)/(\d+) loss ([0-9.eE+-]+|nan|inf)")  # trainer/engine.py's log line


@dataclass(frozen=True)
class ConfigChoice:
    path: str  # absolute, as listed (the form's value)
    label: str  # "shipped: dp.yaml" or "<dir>: name.yaml"


def _inside(path: Path, dirs: list[Path]) -> bool:
    return any(path.is_relative_to(d) for d in dirs)


def config_choices() -> list[ConfigChoice]:
    """Every launchable config: YAML files directly in an allowed directory whose real path stays inside it."""
    shipped = shipped_config_dir()
    out = []
    for d in allowed_config_dirs():
        for f in sorted(d.iterdir(), key=lambda p: p.name):
            if f.suffix not in CONFIG_SUFFIXES or not f.is_file():
                continue
            if not f.resolve().is_relative_to(d):  # a symlink out of the directory
                continue
            out.append(ConfigChoice(str(f), f"shipped: {f.name}" if d == shipped else f"{d}: {f.name}"))
    return out


def resolve_config(path: str) -> Path:
    """The real path of a chosen config, re-checked on the server; LedgerInputError (one line) if not allowed."""
    text = (path or "").strip()
    if not text or "\0" in text:
        raise LedgerInputError("config: pick one of the listed configs")
    p = Path(text)
    if not p.is_absolute() or ".." in p.parts:
        raise LedgerInputError(f"config: {text} is not one of the listed configs (absolute paths without '..' only)")
    try:
        real = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise LedgerInputError(f"config: {text} does not exist (any more)") from None
    dirs = allowed_config_dirs()
    if not _inside(real, dirs):
        raise LedgerInputError(f"config: {text} is outside the allowed config directories "
                               f"(the shipped configs and ${CONFIG_DIRS_ENV})")
    if real.suffix not in CONFIG_SUFFIXES or not real.is_file():
        raise LedgerInputError(f"config: {text} is not a YAML file")
    return real


def config_defaults(path: str) -> dict[str, int]:
    """The config's own steps and the processes it needs here (as ``trainledger launch`` would pick)."""
    from trainledger.runs.launch import default_processes_per_node
    from trainledger.trainer.config import ConfigError, load_config

    try:
        cfg = load_config(path)
    except (ConfigError, OSError, ValueError):
        return {"steps": 100, "processes": 2}
    return {"steps": min(cfg.steps, MAX_STEPS), "processes": min(default_processes_per_node(cfg), MAX_PROCESSES)}


def trainer_missing() -> Optional[str]:
    """Why runs cannot start from this dashboard's machine, or None."""
    missing = [m for m in ("torch", "deepspeed") if importlib.util.find_spec(m) is None]
    if missing:
        return f"The trainer is not installed here ({', '.join(missing)} missing): pip install 'trainledger[train]'."
    return None


class LaunchForm(BaseModel):
    """The Launch form, validated before anything is registered or started."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    config: str = Field(min_length=1)
    node_type: str = Field(min_length=1, max_length=100)
    offer: Optional[str] = Field(default=None, max_length=100)
    project: Optional[str] = Field(default=None, max_length=100)
    name: Optional[str] = Field(default=None, max_length=200)
    steps: int = Field(ge=1, le=MAX_STEPS)
    processes_per_node: int = Field(ge=1, le=MAX_PROCESSES)

    @field_validator("offer", "project", "name", mode="before")
    @classmethod
    def _blank_is_none(cls, v):
        return None if isinstance(v, str) and not v.strip() else v


def form_error(exc: ValidationError) -> str:
    """A pydantic error as one line: ``launch form: steps: Input should be ... (got 0)``."""
    e = exc.errors()[0]
    where = ".".join(str(x) for x in e["loc"]) or "form"
    return f"launch form: {where}: {e['msg']} (got {e.get('input')!r})"


def launch_run(url: str, form: LaunchForm, user: Optional[str] = None) -> dict[str, Any]:
    """Register and start a tracked run in the background, as ``trainledger launch --detach``; returns its id.

    Raises LedgerInputError (one line) for a config outside the allowed
    directories or a plan the trainer refuses; nothing is written then.
    """
    from trainledger.runs.launch import LaunchRequest, prepare, record_process, start
    from trainledger.store.db import get_engine, session_scope

    config = resolve_config(form.config)
    req = LaunchRequest(config=config, nodes=1, gpus_per_node=form.processes_per_node, launcher="torchrun",
                        node_type=form.node_type, offer=form.offer, project=form.project, user=user,
                        name=form.name, steps=form.steps)
    with session_scope(get_engine(url)) as s:
        prep = prepare(s, req, url)
    proc = start(prep, url, detach=True)
    # the supervisor is our child: reap it when it exits (it lives in its own session, and outlives us if need be)
    threading.Thread(target=proc.wait, name=f"reap-{prep.run_id}", daemon=True).start()
    with session_scope(get_engine(url)) as s:
        record_process(s, prep.run_id, proc.pid)
    return {"run_id": prep.run_id, "pid": proc.pid, "log": str(prep.log_path)}


def cancel_run(url: str, run_id: str, grace_s: float = CANCEL_GRACE_S) -> dict[str, Any]:
    """``trainledger runs cancel``: SIGTERM to the run's supervisor, SIGKILL to its group after ``grace_s``."""
    from trainledger.runs.launch import cancel
    from trainledger.store.db import get_engine, session_scope

    with session_scope(get_engine(url)) as s:
        return cancel(s, run_id, grace_s)


# --- the run's own log (this host) -----------------------------------------------------------

def log_tail(run_id: str, log_path: Optional[str]) -> list[str]:
    """The last lines of a run's log, if it is this host's ``<run directory>/<run id>.log``; else [].

    The path comes from the ledger, so nothing else is ever read
    (``trainledger.runs.launch.run_log_file``): a viewer sees no file but a run's own log.
    """
    from trainledger.runs.launch import run_log_file

    path = run_log_file(run_id, log_path)
    if path is None:
        return []
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # no link swapped in since the check
        with os.fdopen(fd, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - LOG_TAIL_BYTES))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-LOG_TAIL_LINES:]


def with_log(progress: dict[str, Any]) -> dict[str, Any]:
    """``trainledger.runs.registry.run_progress`` plus the log's tail and the latest step and loss it printed.

    Rank 0 hands its samples to the ledger in batches, so between batches the
    log (a line every ``log_every`` steps) is ahead of the ledger; the newer of
    the two is shown.
    """
    from trainledger.runs.launch import run_log_file

    tail = log_tail(progress["id"], progress.get("log_path"))
    own_log = run_log_file(progress["id"], progress.get("log_path"))
    out = {**progress, "log_tail": tail, "log_path": str(own_log) if own_log else None}
    for line in reversed(tail):
        m = STEP_LINE.search(line)
        if m:
            step, loss = int(m.group(1)), float(m.group(3))
            if step > progress["steps_done"]:
                out["steps_done"], out["last_loss"] = step, loss
                out["steps_planned"] = progress["steps_planned"] or int(m.group(2))
            break
    return out
