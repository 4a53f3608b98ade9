"""Hostile cases of project scopes (issue 40 item 5; docs/SCOPES.md) and forced writes through the WebSocket.

* A user scoped to ``demo-finetune`` who guesses another project's run id, or edits a URL (``?run=``,
  ``?compare=``, ``?project=``, ``?goodput=``, ``?scope=``, ``?day=``) to name another project's run or project,
  gets exactly what a run or project that does not exist gets, with nothing of the other project shown; the
  export and chargeback downloads hold only their project whatever the URL or the widgets' state says.
* A viewer forcing a write (AppTest sets a disabled widget's value and clicks its disabled button, as a
  hand-made WebSocket message would) changes nothing, on every form that writes; a scoped lead forcing a
  button of a page they are not shown (Launch) starts nothing.
"""

from __future__ import annotations

import re

import pytest
from trainledger.store.models import RunStatus

from tests.app.helpers import MONTH, build_ledger, plain
from tests.app.scopes import (
    A,
    B,
    C,
    download_capture,
    downloads,
    leaks,
    open_page,
    project_names,
    readable,
    rendered,
    sign_in_scoped,
    users_file,
)
from tests.hostile.conftest import snapshot, unchanged

UNKNOWN = "demo-9999"  # a run id no run has, of the same shape as the demo's


@pytest.fixture(scope="module")
def hostile_url(tmp_path_factory) -> str:
    """The dashboard tests' demo ledger (tests/app/helpers.py), built for this module."""
    return build_ledger(f"sqlite:///{tmp_path_factory.mktemp('hostile-scoped') / 'ledger.db'}")


@pytest.fixture(scope="module")
def names(hostile_url) -> dict[str, set[str]]:
    return project_names(hostile_url)


@pytest.fixture
def scoped(hostile_url, app_env, tmp_path, monkeypatch):
    return sign_in_scoped(hostile_url, app_env, tmp_path, monkeypatch)


def same_page(guess: str, unknown: str, page: str = "runs", param: str = "run", *, within: str = "{}",
              **query) -> str:
    """The page opened by ``fin`` with ``?PARAM=guess`` and with ``?PARAM=unknown`` (each put into ``within``): the
    same, element for element, but for the value itself."""
    seen = [rendered(open_page("fin", page, **{param: within.format(value)}, **query), ids=False).replace(value, "⟨X⟩")
            for value in (guess, unknown)]
    assert seen[0] == seen[1], (guess, unknown)
    return seen[0]


def b_run(names: dict[str, set[str]]) -> str:
    return min(n for n in names[B] if re.fullmatch(r"demo-\d{4}", n))


def test_another_projects_run_id_reads_as_no_run(scoped, names):
    page = same_page(b_run(names), UNKNOWN)
    assert "RUN_ID: no run '⟨X⟩' in this ledger" in page
    assert leaks(page, names[B] | names[C]) == []
    assert "hand-elastic-1" in rendered(open_page("lead", "runs", run="hand-elastic-1"))  # the run exists: a lead sees it


def test_an_id_prefix_opens_no_run_outside_the_scope(scoped, names):
    lead = open_page("lead", "runs", run="hand-elastic")  # a unique prefix opens the run for a team-scoped user
    assert not lead.error and any("hand-elastic-1" in plain(s.value) for s in lead.subheader)
    fin = open_page("fin", "runs", run="hand-elastic")
    assert [plain(e.value) for e in fin.error] == ["RUN_ID: no run 'hand-elastic' in this ledger; see `trainledger runs list`"]
    assert leaks(rendered(fin), names[C] | names[B]) == []


def test_comparing_with_another_projects_run_reads_as_an_unknown_run(scoped, names):
    mine = min(n for n in names[A] if re.fullmatch(r"demo-\d{4}", n))
    page = same_page(b_run(names), UNKNOWN, param="compare", within=f"{mine},{{}}")
    assert "no run" in page and leaks(page, names[B] | names[C]) == []


@pytest.mark.parametrize("param,guess,unknown,query", [
    ("project", B, "no-such-project", {}),
    ("project", C, "nope", {"scope": "all", "order": "expensive"}),
    ("project", B, "no-such-project", {"goodput": "lost_work", "scope": "all"}),
    ("user", "dana", "nobody", {}),  # dana runs only the projects fin cannot see
])
def test_a_url_naming_another_project_is_an_unknown_one(scoped, names, param, guess, unknown, query):
    page = same_page(guess, unknown, param=param, **query)
    assert leaks(page, names[B] | names[C]) == []


def test_a_day_of_the_anomaly_links_lists_only_the_scopes_runs(scoped, names):
    at = open_page("fin", "runs", day=f"{MONTH}-10")
    assert leaks(rendered(at), names[B] | names[C]) == []


def test_another_projects_export_and_statement_are_never_sent(scoped, names, monkeypatch):
    files = download_capture(monkeypatch)
    at = open_page("fin", "export", project=B, chargeback_project=B, format="xlsx")
    assert leaks(rendered(at), names[B] | names[C]) == []
    with pytest.raises(Exception):  # the statement picker offers only the user's projects
        at.selectbox(key="chargeback_project").set_value(B).run()
    got = downloads(open_page("fin", "export", project=B), files)
    for label, data in got.items():
        assert leaks(readable(data), names[B] | names[C]) == [], label
    assert not any(B in readable(data) for data in files.values())  # nothing of B was even handed to the server's storage


# --- forced writes --------------------------------------------------------------------------------

FORMS = [  # (page, submit button, the widgets to force), each drawn disabled for a viewer
    ("overview", "Save budget", ("number_input", "text_input")),
    ("settings", "Save offer", ("text_input", "number_input")),
    ("settings", "Save fleet", ("text_input", "number_input")),
    ("settings", "Save rate", ("text_input", "number_input")),
    ("settings", "Save intensity", ("text_input", "number_input")),
    ("settings", "Save settings", ("text_input", "selectbox")),
    ("settings", "Import", ("text_area",)),
]


def forged(widget):
    """``widget`` as a hand-made WebSocket message treats it: AppTest refuses to touch a disabled widget (a browser
    cannot), a script talking to the socket is not stopped by the flag the browser honours."""
    widget.proto.disabled = False
    return widget


def _force(at, kinds: tuple[str, ...]) -> int:
    """Every disabled widget of these kinds given a value, as a forged WebSocket message would; how many."""
    n = 0
    for kind in kinds:
        for w in at.get(kind):
            if not w.disabled:
                continue
            forged(w)
            if kind == "selectbox":
                if len(w.options) > 1:
                    w.select_index(len(w.options) - 1)
                    n += 1
            elif kind == "checkbox":
                w.check()
                n += 1
            elif kind == "number_input":
                w.set_value((w.value or 0) + 1)
                n += 1
            else:
                w.input("1" if kind == "text_input" else '[[offer]]\nname = "x"\nnode_type = "rtx4090-8x"\n'
                        'kind = "rent_elastic"\nprice_per_node_hour = 0\n')
                n += 1
    return n


@pytest.mark.parametrize("page,button,kinds", FORMS)
def test_a_viewer_forcing_a_disabled_form_changes_nothing(scoped, page, button, kinds):
    for user in ("fin", "two"):  # viewers, scoped or not, cannot write
        at = open_page(user, page)
        before = snapshot(scoped)
        submit = [b for b in at.button if b.label == button]
        if page == "overview":  # a scoped user is not shown the team's budget form at all
            assert submit == []
            continue
        assert submit and all(b.disabled for b in submit)
        assert _force(at, kinds) > 0
        forged(submit[0]).click().run()
        assert not at.exception and not at.success, (page, button)
        unchanged(scoped, before, (user, page, button))


def test_a_team_viewer_forcing_the_budget_form_changes_nothing(scoped, tmp_path, monkeypatch):
    from trainledger.app.serving.auth import make_entry

    users = tmp_path / "team-viewer.toml"
    users.write_text(make_entry("viewer", "viewer", "viewer-pw", iterations=1_000))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users))
    at = open_page("viewer", "overview")
    before = snapshot(scoped)
    for button in ("Save budget", "Remove budget"):
        submit = [b for b in at.button if b.label == button]
        assert submit and all(b.disabled for b in submit), button
        _force(at, ("text_input", "checkbox"))
        forged(submit[0]).click().run()
        assert not at.exception and not [m for m in at.success if m.value.startswith(("Saved", "Removed"))], button
    unchanged(scoped, before)


def test_a_scoped_lead_forcing_launch_starts_nothing(scoped, fake_popen):
    at = open_page("finlead", "launch")
    assert not [b for b in at.button if b.key == "launch_go"]  # the page is not shown: team scope only
    before = snapshot(scoped)
    at.session_state["launch_go"] = True  # a click on a button the page never drew
    at.run()
    assert fake_popen == [] and not at.success
    unchanged(scoped, before)


def test_a_resume_chain_crossing_projects_shows_only_the_scopes_runs(sqlite_url, app_env, tmp_path, monkeypatch):
    """A run of the scope restarted from another project's run: its detail names nothing of the other run."""
    from datetime import datetime, timezone

    from trainledger.store.db import make_engine, session_scope

    from tests.helpers import add_run

    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        start = datetime(2026, 11, 2, tzinfo=timezone.utc)
        add_run(s, "their-first", start, 2, offer_name="rtx4090-rent", project="theirs", status=RunStatus.failed)
        for i, rid in enumerate(("mine-second", "mine-third")):
            run = add_run(s, rid, start.replace(hour=4 + 4 * i), 2, offer_name="rtx4090-rent", project=A)
            run.resume_of = "their-first" if i == 0 else "mine-second"
    engine.dispose()
    app_env(sqlite_url)
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file(tmp_path / "users.toml")))
    lead = open_page("lead", "runs", run="mine-third")
    assert "their-first" in rendered(lead)  # the team sees the whole chain
    fin = open_page("fin", "runs", run="mine-third")
    text = rendered(fin)
    assert "mine-second" in text and leaks(text, {"their-first", "theirs"}) == []
    assert any("resume chain of 2 runs" in plain(i.value) for i in fin.info)
