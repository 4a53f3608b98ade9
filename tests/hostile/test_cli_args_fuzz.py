"""Random command-line arguments: --month, --node-type, --utilization, --format, run ids, --date, --db, ...

Every command either answers (exit 0), or refuses with exit 2 and one line
naming the flag; a ledger that cannot be opened is exit 1 with one line. Never
a traceback, and commands that only read never change the ledger, whatever
the arguments. Usage errors (a bad value for a typed option, an unknown
option, a missing argument) are one line too.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile.conftest import FUZZ, assert_clean, assert_refused, invoke, run_subprocess, snapshot, unchanged

text = st.text(max_size=24)
month = st.one_of(text, st.from_regex(r"-?\d{1,6}-\d{1,3}", fullmatch=True),
                  st.sampled_from(["2026-11", "0000-01", "0001-01", "9999-12", "1969-12", "10000-01", "2026-00", "2026-13",
                                   "２０２６-１１", "2026-11-01", " 2026-11", "2026-1"]))
number = st.one_of(text, st.floats().map(repr), st.integers(-10**30, 10**30).map(str),
                   st.sampled_from(["nan", "-inf", "1e999999", "sNaN", "0x10", "1_0", "٠.٥", "0.5", "1", "0", "-0"]))
name = st.one_of(text, st.sampled_from(["rtx4090-8x", "rtx4090-rent", "rtx4090-own", "rtx4090-reserved", "h100-8x",
                                        "' OR 1=1 --", "%", "_", "demo-*", "../../etc/passwd", "$(id)", "; DROP TABLE run;",
                                        "fz-run-1", "fz-run", "x" * 5000]))
day = st.one_of(text, st.dates().map(str), st.sampled_from(["today", "yesterday", "0001-01-01", "9999-12-31", "2026-02-29"]))
count = st.one_of(text, st.integers(-10**20, 10**20).map(str))

READ_ONLY = {  # command: a strategy of its arguments (option values as --flag=VALUE)
    "report monthly": st.tuples(month, st.sampled_from(["csv", "json", "xlsx", "pdf", "", "CSV"]) | text)
    .map(lambda a: ["report", "monthly", f"--month={a[0]}", f"--format={a[1]}"]),
    "runs list": st.tuples(month, text, name, count)
    .map(lambda a: ["runs", "list", f"--month={a[0]}", f"--status={a[1]}", f"--project={a[2]}", f"--limit={a[3]}"]),
    "runs show": name.map(lambda n: ["runs", "show", n]),
    "runs cancel": name.map(lambda n: ["runs", "cancel", n]),
    "cost compare node": st.tuples(name, number, name)
    .map(lambda a: ["cost", "compare", f"--node-type={a[0]}", f"--utilization={a[1]}", f"--rent={a[2]}"]),
    "cost compare month": st.tuples(month, name).map(lambda a: ["cost", "compare", f"--month={a[0]}", f"--own={a[1]}"]),
    "pricing show": name.map(lambda n: ["pricing", "show", n]),
    "report weekly": st.one_of(name.map(lambda s: ["report", "weekly", f"--sweep={s}"]),
                               count.map(lambda d: ["report", "weekly", f"--days={d}"])),
    "report daily": day.map(lambda d: ["report", "daily", f"--date={d}"]),
    "settings": name.map(lambda k: ["settings", k]),
    "db upgrade": st.one_of(text, st.sampled_from(["base", "0001", "-1", "+1", "heads", "head", "0002@head"]))
    .map(lambda r: ["db", "upgrade", f"--revision={r}"]),
    "runs reap": count.map(lambda n: ["runs", "reap", f"--stale-after={n}"]),
    "plan recommend": st.tuples(name | st.sampled_from(["llama-tiny", "tiny", "llama2-70b"]), number, count | text,
                                text, number, name)
    .map(lambda a: ["plan", "recommend", f"--model={a[0]}", f"--tokens={a[1]}", f"--nodes={a[2]}",
                    f"--deadline={a[3]}", f"--budget={a[4]}", f"--node-type={a[5]}"]),
    "forecast": st.tuples(month, count, name)
    .map(lambda a: ["forecast", f"--month={a[0]}", f"--window={a[1]}", f"--project={a[2]}"]),
    "forecast now": st.one_of(text, day).map(lambda t: ["forecast", f"--now={t}"]),
    "budget check": st.tuples(month, count).map(lambda a: ["budget", "check", f"--month={a[0]}", f"--window={a[1]}"]),
    "unknown option": st.tuples(st.sampled_from([["runs", "list"], ["report", "monthly"], ["import"], ["cost", "compare"]]), text)
    .map(lambda a: [*a[0], f"--{a[1]}"]),
}

CSV = ("id,name,project,user,node_type,offer,nodes,start,end,status\n"
       "fz-run-1,alpha,llm,alice,rtx4090-8x,rtx4090-rent,2,2026-11-02T00:00,2026-11-02T10:00,succeeded\n"
       "fz-run-2,beta,chat,bob,rtx4090-8x,rtx4090-own,4,2026-10-31T20:00,2026-11-01T04:00,failed\n")


def _with_runs(url: str, tmp_path) -> None:
    f = tmp_path / "runs.csv"
    f.write_text(CSV)
    assert invoke(["import", f], url).exit_code == 0
    # the first read builds the rollup (derived tables, not the record): before any snapshot
    assert invoke(["report", "monthly", "--month=2026-11"], url).exit_code == 0


@FUZZ
@given(data=st.data())
def test_random_arguments_of_read_only_commands(ledger, tmp_path, data):
    if snapshot(ledger).get("run") == []:
        _with_runs(ledger, tmp_path)
    command = data.draw(st.sampled_from(sorted(READ_ONLY)))
    args = data.draw(READ_ONLY[command])
    before = snapshot(ledger)
    out = invoke(args, ledger)
    event(f"{command}: exit {out.exit_code}")
    assert_clean(out, context=args)
    unchanged(ledger, before, context=args)


@FUZZ
@given(key=st.one_of(text, st.sampled_from(["timezone", "currency"])),
       value=st.one_of(text, st.sampled_from(["UTC", "Asia/Shanghai", "usd", "USD", "EURO", "../../etc/passwd",
                                              "x" * 2000, "Etc/GMT+99", "/etc/localtime", "posixrules"])))
def test_random_settings(ledger, key, value):
    before = snapshot(ledger)
    out = invoke(["settings", key, value], ledger)
    event(f"exit {out.exit_code}")
    assert_clean(out, context=(key, value))
    if out.exit_code == 2:
        unchanged(ledger, before, context=(key, value))


@FUZZ
@given(amount=number, project=st.one_of(st.none(), name, st.just("llm")), month_=st.one_of(st.none(), month),
       currency=st.one_of(st.none(), text, st.sampled_from(["CNY", "cny", "USD", "EUR"])))
def test_random_budgets(ledger, tmp_path, amount, project, month_, currency):
    """`budget set`: a budget is written exactly as asked, or refused in one line with nothing written."""
    if snapshot(ledger).get("run") == []:
        _with_runs(ledger, tmp_path)
    args = ["budget", "set", f"--monthly={amount}"] if month_ is None else ["budget", "set", f"--month={month_}", "--", amount]
    args[2:2] = [f"--project={project}"] * (project is not None) + [f"--currency={currency}"] * (currency is not None)
    before = snapshot(ledger)
    out = invoke(args, env={"TRAINLEDGER_DB_URL": ledger})  # the ledger from the environment: AMOUNT may follow `--`
    event(f"budget set: exit {out.exit_code}")
    assert_clean(out, context=args)
    if out.exit_code == 2:
        unchanged(ledger, before, context=args)
    else:
        from decimal import Decimal

        rows = [r for r in snapshot(ledger)["budget"] if r[2] == (month_ or "monthly")]
        assert any(Decimal(str(r[3])) == Decimal(amount.strip().replace("_", "")) for r in rows), (args, rows)


@FUZZ
@given(url=st.one_of(text.filter(lambda s: "sqlite" not in s.lower() and "postgres" not in s.lower()),
                     st.sampled_from(["mysql://x@y/z", "sqlite:////proc/nope/ledger.db", "sqlite:////etc/passwd",
                                      "postgresql://u:secretpw@127.0.0.1:1/x", "postgresql://u@127.0.0.1:99999/x",
                                      "postgresql+psycopg:///tl_fuzz_no_such_db", "sqlite://", "://", "sqlite:///" + "x/" * 3000])))
def test_random_ledger_urls(url):
    out = invoke(["runs", "list", f"--db={url}"])
    event(f"exit {out.exit_code}")
    assert_clean(out, context=url, codes=(0, 1, 2))
    if out.exit_code:
        assert out.stderr.count("\n") == 1 and "secretpw" not in out.stderr, (url, out.stderr)


def test_usage_errors_are_one_line(sqlite_ledger):
    ledger = sqlite_ledger
    for args, needle in [
        (["runs", "list", "--limit=0"], "--limit"),
        (["runs", "list", "--limit=many"], "--limit"),
        (["runs", "list", "--colour=red"], "--colour"),
        (["report", "weekly", "--days=99999999999"], "--days"),
        (["runs", "reap", "--stale-after=99999999999999"], "--stale-after"),
        (["settings", "timezone", "UTC", "extra"], "extra"),
        (["import"], "Missing argument 'file'"),
        (["report", "monthly"], "--month"),
        (["launch", "trainer/configs/dp.yaml", "--metrics-port=70000"], "--metrics-port"),
        (["collect", "--timeout=1e400"], "--timeout"),
        (["dashboard", "--port=0"], "--port"),
    ]:
        assert_refused(invoke(args, ledger), needle, context=args)


@pytest.mark.slow  # one real process per case: not in `tests/run.sh --fast`
def test_real_processes_show_the_same_one_line(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger
    """The console entry point, not the test runner: exit status and streams as a shell sees them."""
    bad = tmp_path / "bad.csv"
    bad.write_text(CSV + "oops,x,llm,alice,rtx4090-8x,rtx4090-rent,-2,2026-11-02T00:00,2026-11-02T10:00,succeeded\n")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("optimizer: {lr: .nan}\n")
    before = snapshot(ledger)
    for args, needle in [
        (["import", bad, "--db", ledger], "bad.csv:4: nodes: must be at least 1, got -2"),
        (["report", "monthly", "--month", "0000-01", "--db", ledger], "--month: the year must be 1970 to 9998"),
        (["cost", "compare", "--node-type", "rtx4090-8x", "--utilization", "nan", "--db", ledger], "--utilization: expected a finite number"),
        (["runs", "list", "--limit", "0", "--db", ledger], "--limit"),
        (["train", bad_yaml, "--dry-run"], "optimizer.lr must be a finite number"),
    ]:
        assert_refused(run_subprocess(args), needle, context=args)
    unchanged(ledger, before)
