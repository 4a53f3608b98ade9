"""The architecture as a test: no import circles, rooms that import only the rooms below them, short functions.

The import graph of ``app/``, ``ledger/`` and ``trainer/`` is built with ``ast``
(imports inside functions included, as they run too). A package's
``__init__`` re-exporting its own children is not an edge of the package.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the folders of the repository → the import names they install as (one package: ``trainledger``)
PACKAGES = {"ledger": "trainledger", "app": "trainledger.app", "trainer": "trainledger.trainer"}
#: the rooms of ledger/, lowest first: a module may import its own room and the rooms before it
LEDGER_LAYERS = ("errors", "process", "store", "money", "sources", "integrations", "runs", "reports", "demo", "cli")
#: the sub-rooms of money/ by concept, lowest first (the same rule inside money: import only downward)
MONEY_ROOMS = ("metrics", "rates", "allocation", "facts", "account", "goodput", "outlook", "invoice")
#: the sub-rooms of sources/ by concept, lowest first: the run's record (journal, writer), imports (CSV, Slurm),
#: telemetry (sampling, collect, exporters), capture (the wrapper, track); imports and telemetry need no record
SOURCES_ROOMS = ("record", "imports", "telemetry", "capture")
#: the sub-rooms of app/ by concept, lowest first: what the pages read (queries), how the dashboard is served and who
#: signs in (serving), what the pages draw (views); app/main.py and app/pages/ sit above them all
APP_ROOMS = ("queries", "serving", "views")
#: the sub-rooms of cli/ by concept, lowest first: the ledger itself (setup), how jobs and bills get in (capture),
#: what things cost (prices), what the ledger says (reports); cli/commands.py registers them and cli/common.py,
#: progress.py and logs.py serve them all
CLI_ROOMS = ("setup", "capture", "prices", "reports")
#: rooms with sub-rooms by concept → those sub-rooms, lowest first (``app`` is the dashboard, trainledger.app)
#: the sub-rooms of store/ by concept, lowest first: what the ledger prices with (catalog), how outside records map
#: onto it (mappings); the store's own modules (engine, tables, types, settings, audit) stay at its root
STORE_ROOMS = ("catalog", "mappings")
SUB_ROOMS = {"money": MONEY_ROOMS, "sources": SOURCES_ROOMS, "app": APP_ROOMS, "cli": CLI_ROOMS, "store": STORE_ROOMS}
#: ledger rooms allowed to import trainer/ (validating a trainer config or plan, launching runs; cli registers `train`)
TRAINER_USERS = ("trainledger.runs", "trainledger.cli")
APP, TRAINER = PACKAGES["app"], PACKAGES["trainer"]
MAX_FUNCTION_LINES = 80


def module_files(root: Path) -> dict[str, Path]:
    mods = {}
    for folder, package in PACKAGES.items():
        for path in (root / folder).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join((package, *path.relative_to(root / folder).with_suffix("").parts))
            mods[name.removesuffix(".__init__")] = path
    return mods


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of app/, ledger/ and trainer/ it imports (anywhere in its body)."""
    mods = module_files(root)

    def resolve(name: str):
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_init = path.name == "__init__.py"
        pkg = mod if is_init else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]  # resolves to the module, or up to its package
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r and r != mod and not (is_init and r.startswith(mod + ".")):
                    graph[mod].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layer(mod: str) -> int | None:
    parts = mod.split(".")
    if parts[0] != "trainledger" or len(parts) < 2 or is_part(mod, APP) or is_part(mod, TRAINER):
        return None
    return LEDGER_LAYERS.index(parts[1]) if parts[1] in LEDGER_LAYERS else None


def sub_room(mod: str) -> tuple[str, int] | None:
    """(room, index of its sub-room) of a module in a room with sub-rooms (money, sources), else None."""
    parts = mod.split(".")
    if parts[0] != "trainledger" or len(parts) < 3 or parts[1] not in SUB_ROOMS:
        return None
    rooms = SUB_ROOMS[parts[1]]
    return (parts[1], rooms.index(parts[2])) if parts[2] in rooms else None


def is_part(mod: str, package: str) -> bool:
    return mod == package or mod.startswith(package + ".")


def in_ledger(mod: str) -> bool:
    return is_part(mod, "trainledger") and not (is_part(mod, APP) or is_part(mod, TRAINER))


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            if in_ledger(mod) and is_part(dep, APP) and not is_part(mod, "trainledger.cli"):
                bad.append(f"{mod} -> {dep} (ledger imports app outside the CLI)")
            if in_ledger(mod) and is_part(dep, TRAINER) and not mod.startswith(TRAINER_USERS):
                bad.append(f"{mod} -> {dep} (only {', '.join(TRAINER_USERS)} may import the trainer)")
            a, b = layer(mod), layer(dep)
            if a is not None and b is not None and b > a:
                bad.append(f"{mod} -> {dep} ({LEDGER_LAYERS[a]} imports {LEDGER_LAYERS[b]}, a room above it)")
            a, b = sub_room(mod), sub_room(dep)
            if a is not None and b is not None and a[0] == b[0] and b[1] > a[1]:
                rooms = SUB_ROOMS[a[0]]
                bad.append(f"{mod} -> {dep} ({a[0]}.{rooms[a[1]]} imports {a[0]}.{rooms[b[1]]}, a room above it)")
    return sorted(bad)


def long_functions(root: Path) -> list[str]:
    out = []
    for mod, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{mod}.{node.name} ({n} lines)")
    return sorted(out)


def test_no_import_cycles():
    assert cycles(import_graph(REPO)) == []


def test_ledger_rooms_import_only_rooms_below_them():
    assert layering_violations(import_graph(REPO)) == []


def test_every_ledger_module_lives_in_a_room():
    top = sorted(p.name for p in (REPO / "ledger").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "demo.py", "errors.py", "process.py"]
    for room, subs in SUB_ROOMS.items():  # a module lives in the sub-room of its concept, none loose in the room
        folder = REPO / "app" if room == "app" else REPO / "ledger" / room
        loose = {"app": ["__init__.py", "main.py"],  # app/main.py: the entry script
                 "cli": ["__init__.py", "__main__.py", "commands.py", "common.py", "logs.py", "progress.py"],
                 # store's foundations, read by every room (the engine and whether its database changed, the tables
                 # and their types, settings, ids, files, the audit log): the migrations name them, so they stay
                 # where the history finds them
                 "store": ["__init__.py", "append_only.py", "audit.py", "backup.py", "config.py", "db.py",
                           "defaults.py", "envsettings.py", "files.py", "ids.py", "ingest.py", "lookup.py",
                           "models.py", "settings.py", "types.py", "unchanged.py"]}.get(room, ["__init__.py"])
        assert sorted(p.name for p in folder.glob("*.py")) == loose, room
        assert sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name not in ("__pycache__", "pages")) \
            == sorted(subs + (("migrations",) if room == "store" else ())), room


def test_no_function_over_80_lines():
    assert long_functions(REPO) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for folder in PACKAGES:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_checks_find_a_cycle_an_upward_import_and_a_long_function(tmp_path):
    root = _tree(tmp_path, {
        "ledger/store/__init__.py": "",
        "ledger/store/db.py": "def f():\n    from trainledger.money.facts import rollup  # inside a function: still an edge\n",
        "ledger/money/rates/costs.py": "from trainledger.money.account import monthly\n",
        "ledger/money/account/monthly.py": "",
        "ledger/money/__init__.py": "",
        "ledger/money/facts/rollup.py": "from trainledger.store.db import f\n",
        "ledger/sources/record/writer.py": "from trainledger.sources.capture import track\n",
        "ledger/sources/capture/track.py": "from trainledger.sources.record import writer as w\n"
                                           "from trainledger.sources.telemetry import sampling\n",
        "ledger/sources/telemetry/sampling.py": "",
        "ledger/reports/__init__.py": "",
        "ledger/reports/export.py": "import trainledger.app.views.ui\n",
        "app/views/ui.py": "x = 1\n",
        "trainer/engine.py": "def run():\n" + "    x = 1\n" * 90,
    })
    graph = import_graph(root)
    assert cycles(graph) == [["trainledger.money.facts.rollup", "trainledger.store.db"],
                             ["trainledger.sources.capture.track", "trainledger.sources.record.writer"]]
    assert layering_violations(graph) == [
        "trainledger.money.rates.costs -> trainledger.money.account.monthly (money.rates imports money.account, a "
        "room above it)",
        "trainledger.reports.export -> trainledger.app.views.ui (ledger imports app outside the CLI)",
        "trainledger.sources.record.writer -> trainledger.sources.capture.track (sources.record imports "
        "sources.capture, a room above it)",
        "trainledger.store.db -> trainledger.money.facts.rollup (store imports money, a room above it)",
    ]
    assert long_functions(root) == ["trainledger.trainer.engine.run (91 lines)"]




OLD_NAMES = ("ledger", "app", "trainer", "trainledger_data")


def old_name_imports(root: Path) -> list[str]:
    """Imports of the folder names as top-level packages: installed, the only import name is ``trainledger``."""
    out = []
    for folder in (*PACKAGES, "tests", "bench", "data"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                out += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.split(".")[0] in OLD_NAMES]
    return sorted(out)


def test_nothing_imports_the_folders_by_their_old_names():
    assert old_name_imports(REPO) == []


def test_the_old_name_check_finds_one(tmp_path):
    root = _tree(tmp_path, {"tests/t.py": "import trainledger\nfrom ledger.store import db\n", "bench/b.py": "",
                            "data/d.py": "import app.ui as ui\n"})
    assert old_name_imports(root) == ["data/d.py:1 app.ui", "tests/t.py:2 ledger.store"]
