"""Regenerate the shipped training corpus from what the Python installation contains.

    python data/corpus/build_corpus.py

Writes ``python_stdlib_docs.txt`` (docstrings of pure-Python standard-library
modules, their public classes and functions) and ``python_license.txt`` (the
PSF licence those docstrings are distributed under, as it requires). The
committed files were made with CPython 3.11.7; no network is used.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

MODULES = [
    "abc", "argparse", "ast", "base64", "bisect", "calendar", "cmd", "collections", "configparser",
    "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message",
    "enum", "fnmatch", "fractions", "functools", "getopt", "glob", "gzip", "heapq", "hmac",
    "html.parser", "http.client", "inspect", "ipaddress", "json", "logging", "mailbox", "numbers",
    "operator", "optparse", "pathlib", "pickle", "pprint", "queue", "random", "re", "sched",
    "secrets", "shlex", "shutil", "statistics", "string", "tarfile", "tempfile", "textwrap",
    "threading", "timeit", "tokenize", "trace", "typing", "unittest.case", "urllib.parse",
    "uuid", "warnings", "weakref", "zipfile",
]
MAX_BYTES = 220_000
HERE = Path(__file__).resolve().parent


def module_text(name: str) -> str:
    module = importlib.import_module(name)
    parts = [f"Module {name}\n\n{inspect.getdoc(module) or ''}"]
    for attr in sorted(getattr(module, "__all__", None) or dir(module)):
        if attr.startswith("_"):
            continue
        obj = getattr(module, attr, None)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        doc = inspect.getdoc(obj)
        if doc and len(doc) > 80:
            parts.append(f"{name}.{attr}\n\n{doc}")
    return "\n\n".join(parts)


def main() -> None:
    chunks, size = [], 0
    for name in MODULES:
        text = module_text(name).strip() + "\n"
        if size + len(text.encode()) > MAX_BYTES:
            break
        chunks.append(text)
        size += len(text.encode())
    (HERE / "python_stdlib_docs.txt").write_text("\n\n".join(chunks), encoding="utf-8")
    licence = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "LICENSE.txt"
    (HERE / "python_license.txt").write_text(licence.read_text(encoding="utf-8"), encoding="utf-8")


if __name__ == "__main__":
    main()
