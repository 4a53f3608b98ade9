"""The architecture as a test: no import circles, rooms that import only the rooms below them, short functions.

The import graph of ``app/``, ``ledger/`` and ``trainer/`` is built with ``ast``
(imports inside functions included, as they run too). A package's
``__init__`` re-exporting its own children is not an edge of the package.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "ledger", "trainer")
#: the rooms of ledger/, lowest first: a module may import its own room and the rooms before it
LEDGER_LAYERS = ("errors", "store", "money", "sources", "runs", "reports", "demo", "cli")
#: ledger rooms allowed to import trainer/ (validating a trainer config or plan, launching runs; cli registers `train`)
TRAINER_USERS = ("ledger.runs", "ledger.cli")
MAX_FUNCTION_LINES = 80


def module_files(root: Path) -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts)
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
    if parts[0] != "ledger" or len(parts) < 2:
        return None
    return LEDGER_LAYERS.index(parts[1]) if parts[1] in LEDGER_LAYERS else None


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            if mod.startswith("ledger") and dep.startswith("app") and not mod.startswith("ledger.cli"):
                bad.append(f"{mod} -> {dep} (ledger imports app outside the CLI)")
            if mod.startswith("ledger") and dep.startswith("trainer") and not mod.startswith(TRAINER_USERS):
                bad.append(f"{mod} -> {dep} (only {', '.join(TRAINER_USERS)} may import the trainer)")
            a, b = layer(mod), layer(dep)
            if a is not None and b is not None and b > a:
                bad.append(f"{mod} -> {dep} ({LEDGER_LAYERS[a]} imports {LEDGER_LAYERS[b]}, a room above it)")
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
    assert top == ["__init__.py", "demo.py", "errors.py"]


def test_no_function_over_80_lines():
    assert long_functions(REPO) == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_checks_find_a_cycle_an_upward_import_and_a_long_function(tmp_path):
    root = _tree(tmp_path, {
        "ledger/store/__init__.py": "",
        "ledger/store/db.py": "def f():\n    from ledger.money import rollup  # inside a function: still an edge\n",
        "ledger/money/__init__.py": "",
        "ledger/money/rollup.py": "from ledger.store.db import f\n",
        "ledger/reports/__init__.py": "",
        "ledger/reports/export.py": "import app.ui\n",
        "app/ui.py": "x = 1\n",
        "trainer/engine.py": "def run():\n" + "    x = 1\n" * 90,
    })
    graph = import_graph(root)
    assert cycles(graph) == [["ledger.money.rollup", "ledger.store.db"]]
    assert layering_violations(graph) == [
        "ledger.reports.export -> app.ui (ledger imports app outside the CLI)",
        "ledger.store.db -> ledger.money.rollup (store imports money, a room above it)",
    ]
    assert long_functions(root) == ["trainer.engine.run (91 lines)"]


@pytest.mark.parametrize("old, new, name", [
    ("ledger.db", "ledger.store.db", "get_engine"),
    ("ledger.accounting", "ledger.money.monthly", "monthly_report"),
    ("ledger.accounting", "ledger.money.months", "parse_month"),
    ("ledger.costs", "ledger.money.costs", "fleet_month"),
    ("ledger.strategies", "ledger.reports.weekly", "strategy_comparison"),
])
def test_old_module_names_still_import_with_a_deprecation_warning(old, new, name):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=old.replace(".", r"\.") + " moved to"):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_old_runs_module_names_resolve_to_the_registry():
    from ledger.runs import registry

    with pytest.warns(DeprecationWarning, match="ledger.runs.list_runs moved"):
        from ledger.runs import list_runs
    assert list_runs is registry.list_runs
