"""The built wheel, as a user installs it: one import name, clean metadata, and a ledger-only install that works.

The wheel is built from a copy of the files it is made of (the repository stays untouched), installed with
``pip install --no-deps`` into a fresh venv that sees the test venv's packages (its dependencies) through a
``.pth`` line, with torch and DeepSpeed blocked: a project lead's laptop has neither. The demo's monthly report
from that install must equal the one this checkout computes for the same ledger.
"""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: what the wheel is built from (pyproject.toml's packages and readme)
SOURCES = ("pyproject.toml", "README.md", "ledger", "app", "trainer", "data")
#: folder → import name, as pyproject.toml's package-dir maps them
MAPPED = {"ledger": "trainledger", "app": "trainledger/app", "trainer": "trainledger/trainer", "data": "trainledger/data"}
NOW = "2026-12-03T12:00:00Z"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLEDGER_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # setuptools warns that it cannot byte-compile under it
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """(the wheel, the build's combined output)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(src)],
                          env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("trainledger-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def fresh(built, tmp_path_factory) -> Path:
    """A new venv with only the wheel installed (``--no-deps``); dependencies from the test venv, torch blocked."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(built[0])], check=True, timeout=600, env=_env())
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # the test venv's packages, after the fresh venv's own; then torch and DeepSpeed made unimportable
    (site / "zz_test_venv_packages.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
        "import sys; sys.modules.update({'torch': None, 'deepspeed': None, 'webdataset': None})\n")
    return venv


def _run(venv: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=_env(**env))


def test_the_build_prints_no_warning(built):
    lines = [line for line in built[1].splitlines() if "warning" in line.lower()]
    assert lines == []


def test_the_wheel_holds_one_top_level_package_with_every_module(built):
    names = zipfile.ZipFile(built[0]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"trainledger", built[0].name.split("-py3")[0] + ".dist-info"}
    expected = {f"{MAPPED[p.relative_to(REPO).parts[0]]}/{'/'.join(p.relative_to(REPO).parts[1:])}"
                for folder in MAPPED for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts}
    assert expected - set(names) == set()  # every module of the four folders is in the wheel
    for data in ("trainledger/data/pricing.toml", "trainledger/data/mig_profiles.toml",
                 "trainledger/data/corpus/python_stdlib_docs.txt", "trainledger/trainer/configs/zero2.yaml",
                 "trainledger/store/migrations/script.py.mako"):
        assert data in names


def test_the_metadata_states_license_python_and_readme(built):
    wheel = zipfile.ZipFile(built[0])
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr(wheel.read(meta_name).decode())
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().startswith("# trainledger\n")
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it
    entry_points = wheel.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "trainledger = trainledger.cli:main" in entry_points


def test_only_trainledger_imports_and_torch_is_absent(fresh, tmp_path):
    code = ("import importlib, sys\n"
            "for name in ('trainledger', 'trainledger.app', 'trainledger.trainer', 'trainledger.data', "
            "'trainledger.integrations', 'ledger', 'app', 'trainer', 'trainledger_data', 'torch'):\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "        print(name, 'ok')\n"
            "    except ImportError:\n"
            "        print(name, 'missing')\n"
            "import trainledger\n"
            "print(trainledger.__file__.startswith(sys.prefix))\n")
    out = _run(fresh, "python", "-c", code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "trainledger ok", "trainledger.app ok", "trainledger.trainer ok", "trainledger.data ok",
        "trainledger.integrations ok", "ledger missing", "app missing", "trainer missing",
        "trainledger_data missing", "torch missing", "True"]


def test_version_of_the_installed_command(fresh, tmp_path):
    from importlib.metadata import version

    out = _run(fresh, "trainledger", "--version", cwd=tmp_path)
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, f"trainledger {version('trainledger')}", "")


def test_the_demo_and_its_monthly_report_on_a_ledger_only_install(fresh, tmp_path):
    """No torch: the demo writes its history (no sweep) and the report equals this checkout's for that ledger."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    demo = _run(fresh, "trainledger", "demo", "--db", url, "--end-month", "2026-11", "--json", cwd=tmp_path,
                TRAINLEDGER_NOW=NOW)
    assert demo.returncode == 0, demo.stderr
    assert json.loads(demo.stdout)["runs"] > 50
    args = ("report", "monthly", "--month", "2026-11", "--db", url, "--format", "json")
    installed = _run(fresh, "trainledger", *args, cwd=tmp_path, TRAINLEDGER_NOW=NOW)
    assert installed.returncode == 0, installed.stderr
    here = subprocess.run([sys.executable, "-m", "trainledger.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=_env(TRAINLEDGER_NOW=NOW))
    assert here.returncode == 0, here.stderr
    report = json.loads(installed.stdout)
    assert report == json.loads(here.stdout)
    assert report["summary"]["month"] == "2026-11" and len(report["runs"]) > 5
