"""`trainledger import` under hostile files: our CSV and Slurm sacct --parsable2.

Properties, on SQLite and PostgreSQL:

* a valid file with one bad row anywhere (bad dates, negative, huge, NaN/inf,
  unicode, control characters, too long, unknown names, duplicates) is refused
  with exit 2 and one line ``FILE:LINE: FIELD: ...``, and the ledger keeps
  every row it had;
* randomly mutated files (delimiters, quotes, BOMs, NULs, line breaks, bytes)
  are imported whole (every run of the file, as many as reported) or refused
  whole: never a traceback, never a partial import;
* the edge cases listed in ``EDGE_FILES`` behave as named.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta

from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile.conftest import FUZZ, assert_clean, assert_refused, invoke, snapshot, unchanged

CSV_COLUMNS = ["id", "name", "project", "user", "node_type", "offer", "nodes", "gpus_per_node", "start", "end",
               "status", "strategy", "tokens", "gpu_util_mean", "mfu", "final_loss", "launcher"]
SACCT_COLUMNS = ["JobID", "JobName", "Account", "User", "Start", "End", "NNodes", "AllocTRES", "State"]
FINISHED = ["succeeded", "failed", "cancelled", "crashed"]
SLURM_FINISHED = ["COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "CANCELLED",
                  "PREEMPTED", "NODE_FAIL"]
SLURM_UNFINISHED = {"PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "REVOKED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "CONFIGURING", "COMPLETING"}
CONTROL = [chr(c) for c in range(32)] + ["\x7f"]

# --- valid rows -----------------------------------------------------------------------------

word = st.text(st.characters(categories=("L", "N")) | st.sampled_from("-_. /=+@"), min_size=1, max_size=24) \
    .map(str.strip).filter(bool)
times = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2026, 11, 30))  # ended runs: never in the future (refused)


@st.composite
def csv_row(draw, uid: str) -> dict[str, str]:
    start = draw(times)
    end = start + timedelta(minutes=draw(st.integers(0, 72 * 60)))
    opt = lambda s: draw(st.one_of(st.just(""), s))  # noqa: E731
    return {
        "id": uid, "name": draw(word), "project": opt(word), "user": opt(word),
        "node_type": draw(st.sampled_from(["", "rtx4090-8x"])),
        "offer": draw(st.sampled_from(["", "rtx4090-rent", "rtx4090-own", "rtx4090-reserved"])),
        "nodes": str(draw(st.integers(1, 64))), "gpus_per_node": opt(st.integers(1, 8).map(str)),
        "start": start.isoformat(timespec="minutes"), "end": end.isoformat(timespec="minutes"),
        "status": draw(st.sampled_from(FINISHED + ["SUCCEEDED", "Failed"])),
        "strategy": opt(st.sampled_from(["dp", "zero2", "3d"])), "tokens": opt(st.integers(0, 10**12).map(str)),
        "gpu_util_mean": opt(st.floats(0, 1).map(repr)), "mfu": opt(st.floats(0, 1).map(repr)),
        "final_loss": opt(st.floats(-1e6, 1e6).map(repr)), "launcher": opt(st.just("import")),
    }


@st.composite
def sacct_row(draw, uid: str) -> dict[str, str]:
    start = draw(times)
    end = start + timedelta(minutes=draw(st.integers(0, 72 * 60)))
    nodes, gpus = draw(st.integers(1, 16)), draw(st.integers(1, 8))
    gres = draw(st.sampled_from(["gres/gpu={n}", "gres/gpu:rtx4090={n}"])).format(n=nodes * gpus)
    state = draw(st.sampled_from(SLURM_FINISHED))
    return {"JobID": uid, "JobName": draw(word), "Account": draw(st.one_of(st.just(""), word)),
            "User": draw(st.one_of(st.just(""), word)), "Start": start.isoformat(timespec="seconds"),
            "End": end.isoformat(timespec="seconds"), "NNodes": str(nodes),
            "AllocTRES": f"billing={nodes * 32},cpu={nodes * 32},{gres},mem=100G,node={nodes}",
            "State": state + (" by 1000" if state == "CANCELLED" else "")}


def csv_text(rows: list[dict[str, str]], columns=CSV_COLUMNS) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def sacct_text(rows: list[dict[str, str]]) -> str:
    return "|".join(SACCT_COLUMNS) + "\n" + "".join("|".join(r[c] for c in SACCT_COLUMNS) + "\n" for r in rows)


# --- values a field must refuse ---------------------------------------------------------------

def _parses(fn, s: str) -> bool:
    try:
        fn(s.strip())
        return True
    except (ValueError, OverflowError):
        return False


def _ratio_ok(s: str) -> bool:
    try:
        return 0 <= float(s.strip()) <= 1
    except ValueError:
        return False


def _iso_ok(s: str) -> bool:
    try:
        return 1970 <= datetime.fromisoformat(s.strip().replace("Z", "+00:00")).year <= 2199
    except ValueError:
        return False


junk = st.text(min_size=1, max_size=40)
controlled = st.tuples(word, st.sampled_from(CONTROL), word).map("".join)  # a control character inside
huge_int = st.integers(min_value=2**63).map(str) | st.just("9" * 5000)
not_int = junk.filter(lambda s: s.strip() and not _parses(int, s))
not_iso = st.one_of(junk.filter(lambda s: s.strip() and not _iso_ok(s)),
                    st.sampled_from(["2026-13-01T00:00", "2026-11-31T00:00", "2026-11-01T24:00", "yesterday", "0000-01-01",
                                     "1969-12-31T23:59", "2200-01-01T00:00", "9999-12-31T23:59:59", "2026-11-01T00:00+25:00",
                                     "２０２６-１１-０１"]))
non_finite = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e999"])


def too_long(n: int):
    return st.text(st.characters(categories=("L",)), min_size=n + 1, max_size=n + 40)


BAD_CSV = {  # field: values that row must refuse (the error then names the field)
    "nodes": st.one_of(st.integers(max_value=0).map(str), st.integers(100_001, 10**30).map(str), huge_int, not_int,
                       st.sampled_from(["1.5", "nan", "inf", "1e3", "x"])),
    "gpus_per_node": st.one_of(st.integers(max_value=0).map(str), st.integers(9, 10**40).map(str), not_int),
    "start": not_iso,
    "end": not_iso,
    "status": junk.filter(lambda s: s.strip().lower() not in FINISHED and s.strip()),
    "name": st.one_of(st.just(""), too_long(200), controlled),
    "project": st.one_of(too_long(100), controlled),
    "user": st.one_of(too_long(100), controlled),
    "id": st.one_of(too_long(64), controlled),
    "strategy": st.one_of(too_long(20), controlled),
    "launcher": st.one_of(too_long(20), controlled),
    "tokens": st.one_of(st.integers(max_value=-1).map(str), huge_int, not_int),
    "gpu_util_mean": st.one_of(junk.filter(lambda s: s.strip() and not _ratio_ok(s)), non_finite,
                               st.floats(1.0001, 1e300).map(repr), st.just("85")),
    "mfu": st.one_of(junk.filter(lambda s: s.strip() and not _ratio_ok(s)), non_finite, st.floats(-1e9, -1e-9).map(repr)),
    "final_loss": st.one_of(junk.filter(lambda s: s.strip() and not _parses(float, s)), non_finite),
    "node_type": junk.filter(lambda s: s.strip() and s.strip() != "rtx4090-8x"),
    "offer": junk.filter(lambda s: s.strip() and s.strip() not in ("rtx4090-rent", "rtx4090-own", "rtx4090-reserved")),
}

BAD_SACCT = {
    "NNodes": st.one_of(st.integers(max_value=0).map(str), st.integers(100_001, 10**30).map(str), not_int),
    "Start": not_iso,
    "End": not_iso.filter(lambda s: s.strip() not in ("Unknown", "None")),
    "State": junk.filter(lambda s: (s.split() or [""])[0] not in SLURM_UNFINISHED | set(SLURM_FINISHED)),
    "JobName": st.one_of(too_long(200), controlled),
    "Account": st.one_of(too_long(100), controlled),
    "User": st.one_of(too_long(100), controlled),
}


def _no_pipe(s: str) -> bool:
    return "|" not in s and "\n" not in s and "\r" not in s and '"' not in s


@st.composite
def csv_file_with_one_bad_row(draw):
    uid = draw(st.uuids()).hex[:10]
    rows = [draw(csv_row(f"fz-{uid}-{i}")) for i in range(draw(st.integers(2, 6)))]
    at = draw(st.integers(0, len(rows)))
    bad = draw(csv_row(f"fz-{uid}-bad"))
    field = draw(st.sampled_from(sorted(BAD_CSV) + ["end<start", "duplicate id"]))
    if field == "end<start":
        s = datetime.fromisoformat(bad["start"])
        bad["end"] = (s - timedelta(minutes=draw(st.integers(1, 10**5)))).isoformat(timespec="minutes")
        field = "end"
    elif field == "duplicate id":
        bad["id"] = rows[0]["id"]
        field = "id"
        at = max(at, 1)
    else:
        bad[field] = draw(BAD_CSV[field])
    rows.insert(at, bad)
    return csv_text(rows), at + 2, field


@st.composite
def sacct_file_with_one_bad_row(draw):
    uid = draw(st.integers(1, 10**8))
    rows = [draw(sacct_row(f"{uid}{i}")) for i in range(draw(st.integers(2, 6)))]
    at = draw(st.integers(0, len(rows)))
    bad = draw(sacct_row(f"{uid}99"))
    field = draw(st.sampled_from(sorted(BAD_SACCT) + ["uneven GPUs", "GPUs per node", "huge gres", "duplicate JobID",
                                                       "long JobID", "missing field"]))
    needle = field
    if field in BAD_SACCT:
        bad[field] = draw(BAD_SACCT[field].filter(_no_pipe))
    elif field == "uneven GPUs":
        bad["NNodes"], bad["AllocTRES"], needle = "3", "cpu=96,gres/gpu=4,node=3", "AllocTRES"
    elif field == "GPUs per node":
        bad["NNodes"], bad["AllocTRES"], needle = "2", "gres/gpu=18,node=2", "gpus_per_node"
    elif field == "huge gres":
        bad["AllocTRES"], needle = f"gres/gpu={draw(huge_int)}", "AllocTRES"
    elif field == "duplicate JobID":  # the same job and start twice, with different records (not a requeue)
        bad = dict(rows[0], End=(datetime.fromisoformat(rows[0]["End"]) + timedelta(minutes=1)).isoformat())
        needle, at = "JobID", max(at, 1)
    elif field == "long JobID":
        bad["JobID"], needle = "7" * draw(st.integers(59, 200)), "JobID"
    rows.insert(at, bad)
    text = sacct_text(rows)
    if field == "missing field":
        lines = text.splitlines(keepends=True)
        lines[at + 1] = lines[at + 1].rsplit("|", 1)[0] + "\n"
        text, needle = "".join(lines), "fields"
    return text, at + 2, needle


@FUZZ
@given(case=csv_file_with_one_bad_row())
def test_csv_with_one_bad_row_is_refused_whole(ledger, tmp_path, case):
    text, line, field = case
    f = tmp_path / "runs.csv"
    f.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    out = invoke(["import", f, "--node-type", "rtx4090-8x"], ledger)
    assert_refused(out, f"runs.csv:{line}: {field}", context=(field, text))
    unchanged(ledger, before, context=(field, text))


@FUZZ
@given(case=sacct_file_with_one_bad_row())
def test_sacct_with_one_bad_row_is_refused_whole(ledger, tmp_path, case):
    """--strict: any bad row, malformed or merely not costable, refuses the file (the all-or-nothing import)."""
    text, line, needle = case
    f = tmp_path / "sacct.txt"
    f.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    out = invoke(["import", f, "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent", "--strict"], ledger)
    assert_refused(out, f"sacct.txt:{line}: {needle}", context=(needle, text))
    unchanged(ledger, before, context=(needle, text))


#: rows that are well formed but cannot be costed: skipped with their reason unless --strict
UNCOSTABLE = {"State": "unknown Slurm state", "AllocTRES": "uneven GPU spread",
              "gpus_per_node": "more GPUs per node than the node type has"}


@FUZZ
@given(case=sacct_file_with_one_bad_row())
def test_sacct_with_one_bad_row_skips_it_or_refuses_whole(ledger, tmp_path, case):
    """Tolerant (the default): a row that cannot be costed is skipped and named in the receipt, every other
    row is imported; a malformed row still refuses the whole file."""
    text, line, needle = case
    f = tmp_path / "sacct.txt"
    f.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    out = invoke(["import", f, "--node-type", "rtx4090-8x", "--offer", "rtx4090-rent", "--json"], ledger)
    bad_job = text.splitlines()[line - 1].split("|")[0]
    reason = UNCOSTABLE.get(needle)
    if reason is None or (needle == "AllocTRES" and "gres/gpu=4," not in text.splitlines()[line - 1]):
        assert_refused(out, f"sacct.txt:{line}: {needle}", context=(needle, text))
        unchanged(ledger, before, context=(needle, text))
        return
    assert_clean(out, context=(needle, text), codes=(0,))
    receipt = json.loads(out.stdout)
    assert receipt["skipped"][reason]["rows"] == 1 and receipt["skipped"][reason]["first"] == [bad_job], receipt
    good = {r.split("|")[0] for i, r in enumerate(text.splitlines()[1:], start=2) if i != line}
    assert receipt["imported"] + receipt["updated"] + receipt["already_present"] == len(good), receipt
    assert {f"slurm-{j}" for j in good} <= _run_ids(ledger)
    assert f"slurm-{bad_job}" not in _run_ids(ledger)


# --- random mutations: imported whole or refused whole ------------------------------------------

HOSTILE_CHARS = list(',|"\n\r;:-+.eE9 0T') + ["\ufeff", "\x00", "\t", "é", "𝔘", "\u2028", "nan", "1e400", "-", "||", ",,"]


@st.composite
def mutated_file(draw):
    uid = draw(st.uuids()).hex[:10]
    kind = draw(st.sampled_from(["csv", "sacct"]))
    n = draw(st.integers(1, 5))
    if kind == "csv":
        text = csv_text([draw(csv_row(f"mz-{uid}-{i}")) for i in range(n)])
    else:
        text = sacct_text([draw(sacct_row(f"{draw(st.integers(1, 10**9))}{i}")) for i in range(n)])
    chars = list(text)
    for _ in range(draw(st.integers(0, 6))):  # 0: the valid file itself
        op = draw(st.sampled_from(["insert", "replace", "delete"]))
        i = draw(st.integers(0, max(0, len(chars) - 1)))
        piece = draw(st.sampled_from(HOSTILE_CHARS) | st.text(max_size=3))
        if op == "insert":
            chars[i:i] = list(piece)
        elif op == "replace" and chars:
            chars[i:i + 1] = list(piece)
        elif chars:
            del chars[i]
    data = "".join(chars).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 3)) == 0:
        data = draw(st.sampled_from([b"\xef\xbb\xbf", b"", b"\xff", b"\x00"])) + data + draw(st.binary(max_size=4))
    return data


def _run_ids(url: str) -> set[str]:
    return {row[0] for row in snapshot(url).get("run", [])}


@FUZZ
@given(data=mutated_file())
def test_mutated_files_are_imported_whole_or_refused_whole(ledger, tmp_path, data):
    f = tmp_path / "mutated.txt"
    f.write_bytes(data)
    before = snapshot(ledger)
    out = invoke(["import", f, "--node-type", "rtx4090-8x", "--json"], ledger)
    event(f"exit {out.exit_code}")
    assert_clean(out, context=data)
    if out.exit_code == 2:
        unchanged(ledger, before, context=data)
    else:
        added = _run_ids(ledger) - {row[0] for row in before.get("run", [])}
        assert len(added) == json.loads(out.stdout)["imported"], data  # all of the file's new runs, as reported


# --- edge cases ------------------------------------------------------------------------------------

GOOD_ROW = "ok,rtx4090-8x,2,2026-11-02T00:00,2026-11-02T03:00,succeeded\n"
HEADER = "name,node_type,nodes,start,end,status\n"
EDGE_FILES = [  # (file bytes, exit code, needle in the error)
    (b"", 2, "header: the file is empty"),
    (b"\xef\xbb\xbf", 2, "header: the file is empty"),
    (b"\n\n\n", 2, "header"),
    (HEADER.encode(), 0, None),
    (b"\xef\xbb\xbf" + (HEADER + GOOD_ROW).encode(), 0, None),
    ((HEADER + GOOD_ROW).replace("\n", "\r\n").encode(), 0, None),
    (b"name,nodes,start,end\n", 2, "header: missing column 'status'"),
    (b"name,name,node_type,nodes,start,end,status\n", 2, "header: column 'name' appears twice"),
    ((HEADER + GOOD_ROW.replace("\n", ",extra\n")).encode(), 2, "x.csv:2: more fields than the header"),
    ((HEADER + GOOD_ROW + GOOD_ROW.replace("ok,", "ok2,").replace(",2,", ",,,")).encode(), 2, "x.csv:3:"),
    ((HEADER + GOOD_ROW).encode("utf-16"), 2, "FILE: cannot read"),
    ((HEADER + "é,rtx4090-8x,2,2026-11-02T00:00,2026-11-02T03:00,succeeded\n").encode("latin-1"), 2, "FILE: cannot read"),
    ((HEADER + "x" * 200_000 + ",rtx4090-8x,2,2026-11-02T00:00,2026-11-02T03:00,succeeded\n").encode(), 2, "not valid CSV"),
    ((HEADER + '"unterminated,rtx4090-8x,2\n').encode(), 2, "x.csv:"),
    (b"JobID|JobName\n1|x\n", 2, "x.csv:1: header: sacct output needs"),
    (b"JobID|JobName|Account|User|Start|End|NNodes|AllocTRES|State\n", 0, None),
    (b"JobID|JobName|Account|User|Start|End|NNodes|AllocTRES|State\n"
     b"5|j|a|u|2026-11-01T00:00:00|2026-11-01T01:00:00|1|cpu=4,gres/gpu=0|COMPLETED\n", 0, None),  # no GPUs: skipped
]


def test_edge_case_files(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger
    f = tmp_path / "x.csv"
    for data, code, needle in EDGE_FILES:
        f.write_bytes(data)
        before = snapshot(ledger)
        out = invoke(["import", f, "--node-type", "rtx4090-8x"], ledger)
        if code == 2:
            assert_refused(out, needle, context=data[:200])
            unchanged(ledger, before, context=data[:200])
        else:
            assert_clean(out, context=data[:200], codes=(0,))


def test_unreadable_paths_and_bad_flags(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger
    good = tmp_path / "good.csv"
    good.write_text(HEADER + GOOD_ROW)
    before = snapshot(ledger)
    for args, needle in [
        (["import", tmp_path], "FILE: cannot read"),
        (["import", tmp_path / "missing.csv"], "FILE: cannot read"),
        (["import", good, "--format", "xlsx"], "--format: expected auto or one of csv, sacct"),
        (["import", good, "--tz", "Mars/Olympus"], "timezone: unknown time zone"),
        (["import", good, "--tz", "x" * 5000], "timezone: unknown time zone"),
        (["import", good, "--tz", "../../etc/passwd"], "timezone: unknown time zone"),
        (["import", good, "--node-type", "tpu-v9"], "--node-type: unknown 'tpu-v9'"),
        (["import", good, "--offer", "h100-rent"], "--offer: unknown 'h100-rent'"),
        (["import", good, "--format", "sacct"], "header: sacct output needs"),
    ]:
        assert_refused(invoke(args, ledger), needle, context=args)
    unchanged(ledger, before)
