"""Extract the column rules of a FOCUS release from the spec repository into focus-<version>-columns.json.

Run once when moving to a new FOCUS release (the JSON is committed; tests never need the repository):

    git clone https://github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec /tmp/FOCUS_Spec
    python tests/focus/extract_spec.py /tmp/FOCUS_Spec v1.2

For each specification/columns/*.md at the tag: the Column ID, the "Content Constraints" table
(column type, feature level, allows nulls, data type, value format, number range) and the first
column of its "Allowed values" table, plus the normative requirement bullets as text.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def parse_column(text: str) -> dict:
    col_id = re.search(r"## Column ID\s+(\S+)", text).group(1)
    constraints = {}
    for key, value in re.findall(r"^\|\s*([A-Za-z ]+?)\s*\|\s*(.+?)\s*\|\s*$", text, re.M):
        if key in ("Column type", "Feature level", "Allows nulls", "Data type", "Value format", "Number range"):
            value = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", value)  # [Text](#link) -> Text
            constraints[key.lower().replace(" ", "_")] = re.sub(r"\\?[<>]", "", value).strip()
    allowed = []
    m = re.search(r"Allowed values:\s*\n\s*\n((?:\|.*\n)+)", text)
    if m:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in m.group(1).splitlines()]
        col = next((i for i, h in enumerate(rows[0]) if "Subcategory" in h), 0)  # ServiceSubcategory: 2nd column
        allowed = [r[col] for r in rows[2:] if len(r) > col and r[col]]
    reqs = re.search(r"adheres to the following requirements:\s*\n((?:\s*\*.*\n)+)", text)
    return {"id": col_id, **constraints, "allowed_values": allowed,
            "requirements": [r.strip()[2:] for r in reqs.group(1).splitlines() if r.strip()] if reqs else []}


def main(repo: str, tag: str) -> None:
    names = [p for p in git(repo, "ls-tree", "--name-only", tag, "specification/columns/").split() if p.endswith(".md")]
    columns = [parse_column(git(repo, "show", f"{tag}:{p}")) for p in names]
    commit = git(repo, "rev-list", "-n", "1", tag).strip()
    out = {"focus_version": tag.lstrip("v"), "source": f"FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec@{tag} ({commit})",
           "columns": sorted(columns, key=lambda c: c["id"])}
    path = Path(__file__).with_name(f"focus-{tag.lstrip('v')}-columns.json")
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path} ({len(columns)} columns)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
