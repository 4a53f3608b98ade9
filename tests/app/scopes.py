"""Helpers for the project-scope tests (tests/app/test_scopes.py, tests/hostile/test_scopes.py).

The demo ledger (tests/app/helpers.py: projects ``demo-pretrain``, ``demo-finetune`` and ``hand``) with an auth
file whose users are scoped: ``fin`` sees ``demo-finetune``, ``two`` sees ``demo-finetune`` and ``hand``, ``lead``
sees every project (team scope). :func:`rendered` is everything a page sent to the browser (every element's
protobuf, dataframes' Arrow bytes included), :func:`downloads` the bytes of its download buttons.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from tests.app.helpers import MONTH, make_app, sign_in

FAST = 1_000  # PBKDF2 iterations
A, B, C = "demo-finetune", "demo-pretrain", "hand"
USERS = {"fin": ("viewer", [A]), "two": ("viewer", [A, C]), "lead": ("lead", None), "finlead": ("lead", [A])}


def users_file(path: Path) -> Path:
    from trainledger.app.serving.auth import make_entry

    text = ""
    for name, (role, projects) in USERS.items():
        text += make_entry(name, role, f"{name}-pw", iterations=FAST)
        if projects is not None:
            text += f"projects = {json.dumps(projects)}\n"
    path.write_text(text)
    return path


def project_names(url: str) -> dict[str, set[str]]:
    """Each project's names (its runs' ids and names, its own name) of the ledger at ``url``: what no page of
    another scope may show."""
    return {p: names_of(url, p) for p in (A, B, C)}


def sign_in_scoped(url: str, app_env, tmp_path: Path, monkeypatch) -> str:
    """Point the app at ``url`` with the users file of :data:`USERS` (sign in with :func:`open_page`)."""
    app_env(url)
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file(tmp_path / "users.toml")))
    return url


def cli_report(url: str, month: str = MONTH) -> dict[str, Any]:
    """``trainledger report monthly --month M --format json``, parsed."""
    from trainledger.cli.commands import app
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["report", "monthly", "--month", month, "--format", "json", "--db", url])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def open_page(user: str, page: str, /, **query):
    """AppTest signed in as ``user``, on ``pages/<page>.py`` with ``?month=`` and ``query``."""
    at = make_app(**query)
    sign_in(at, user, f"{user}-pw")
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
        for k, v in {"month": MONTH, **query}.items():
            at.query_params[k] = v
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _protos(node) -> list[str]:
    from google.protobuf import text_format

    out = []
    proto = getattr(node, "proto", None)
    if proto is not None:
        out.append(text_format.MessageToString(proto, as_utf8=True))
    for child in getattr(node, "children", {}).values():
        out.extend(_protos(child))
    return out


def rendered(at, *, ids: bool = True) -> str:
    """Every element of the page as sent to the browser (protobuf text: labels, values, options, tables' bytes),
    Markdown's escapes and word joiners removed; ``ids=False``: without the widgets' ids (hashes of their options)."""
    text = re.sub(r"\\(.)", r"\1", "\n".join(_protos(at._tree)))  # the protobuf's escapes, then Markdown's
    text = re.sub(r"\\(.)", r"\1", text).replace("\u2060", "")
    if not ids:
        text = re.sub(r'(?m)^\s*(id|form_id|element_id|key): ".*"$', "", text)
    return text


class Captured(dict):
    """File id → the bytes handed to Streamlit's media storage; ``deferred``: each deferred download's id (made when
    clicked: ``st.download_button(data=callable)``) → the media file manager that makes it."""

    def __init__(self) -> None:
        super().__init__()
        self.deferred: dict[str, Any] = {}


def download_capture(monkeypatch) -> Captured:
    """Record every file a page hands to Streamlit's media storage, and each deferred download, to be made the way a
    click makes it (see :func:`downloads`)."""
    from streamlit.runtime.media_file_manager import MediaFileManager
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    files = Captured()
    original = MemoryMediaFileStorage.load_and_get_id
    original_deferred = MediaFileManager.add_deferred

    def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):
        file_id = original(self, path_or_data, mimetype, kind, filename)
        files[file_id] = path_or_data if isinstance(path_or_data, bytes) else Path(path_or_data).read_bytes()
        return file_id

    def add_deferred(self, *args, **kwargs):
        file_id = original_deferred(self, *args, **kwargs)
        files.deferred[file_id] = self
        return file_id

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", load_and_get_id)
    monkeypatch.setattr(MediaFileManager, "add_deferred", add_deferred)
    return files


def downloads(at, files: Captured) -> dict[str, bytes]:
    """The page's download buttons: label → the bytes a click downloads (a deferred one made as the click makes
    it: Streamlit's ``execute_deferred``, whose file URL is then read)."""
    out = {}
    for b in at.get("download_button"):
        url = b.proto.url
        if b.proto.deferred_file_id:
            url = files.deferred[b.proto.deferred_file_id].execute_deferred(b.proto.deferred_file_id)
        out[b.proto.label] = files[url.rsplit("/", 1)[1].split(".")[0]]
    return out


def readable(data: bytes) -> str:
    """A download's text: an XLSX's every part unzipped, else the bytes as UTF-8."""
    if data[:2] == b"PK":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return "\n".join(z.read(n).decode("utf-8", "replace") for n in z.namelist())
    return data.decode("utf-8")


def names_of(url: str, project: str) -> set[str]:
    """The strings that identify ``project`` in the ledger: its name (unless a common word), its runs' ids and names."""
    from sqlmodel import select
    from trainledger.store.models import Project, Run

    from tests.app.helpers import with_session

    def read(s):
        pid = s.exec(select(Project.id).where(Project.name == project)).one()
        return {x for rid, name in s.exec(select(Run.id, Run.name).where(Run.project_id == pid)).all()
                for x in (rid, name) if x}

    return read_names(with_session(url, read), project)


def read_names(runs: set[str], project: str) -> set[str]:
    return runs | ({project} if "-" in project else set())  # "hand" is a word of the page's prose too


def leaks(text: str, names: set[str]) -> list[str]:
    """The names found in ``text`` (plain substrings: a table's strings are stored back to back)."""
    return sorted(n for n in names if n in text)
