"""`trainledger pricing import FILE.toml` under hostile files.

* A good offer followed by one entry with one bad field (negative, huge, NaN/inf,
  wrong type, too long, control characters, unknown kind/key/node type, a name
  defined twice) is refused with exit 2 and one line naming the entry and the
  field; the good offer is not written either.
* Randomly mutated pricing files are applied whole or refused whole.
"""

from __future__ import annotations

import json
import math
import tomllib
from datetime import date

from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile.conftest import FUZZ, assert_clean, assert_refused, invoke, snapshot, unchanged


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, (int, date)):
        return v.isoformat() if isinstance(v, date) else str(v)
    if isinstance(v, str):
        # control characters as \\u escapes, valid TOML; JSON leaves DEL (U+007F) raw, which TOML refuses
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(v)


def toml_doc(tables: list[tuple[str, dict]]) -> str:
    return "".join(f"[[{kind}]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in t.items()) + "\n"
                   for kind, t in tables)


GOOD = ("offer", {"name": "fz-good-offer", "node_type": "rtx4090-8x", "kind": "rent_elastic", "price_per_node_hour": 20})
names = st.text(st.characters(categories=("L", "N")) | st.sampled_from("-_."), min_size=1, max_size=30)


@st.composite
def valid_entry(draw):
    uid = draw(st.uuids()).hex[:8]
    kind = draw(st.sampled_from(["node_type", "rent_elastic", "rent_reserved", "own"]))
    money = st.decimals(0, 10**6, places=2).map(float)
    if kind == "node_type":
        return "node_type", {"name": f"fz-nt-{uid}", "gpu_model": draw(names), "gpus_per_node": draw(st.integers(1, 1024)),
                             "gpu_memory_gb": draw(st.floats(1, 1000)), "peak_bf16_tflops": draw(st.floats(1, 10**4))}
    entry = {"name": f"fz-{kind}-{uid}", "node_type": "rtx4090-8x", "kind": kind}
    if kind == "rent_elastic":
        entry[draw(st.sampled_from(["price_per_node_hour", "price_per_node_month"]))] = draw(money)
    elif kind == "rent_reserved":
        entry["price_per_node_month"] = draw(money)
    else:
        entry.update(capex_per_node=draw(money), depreciation_months=draw(st.integers(1, 1200)), power_kw_load=draw(money),
                     electricity_price_per_kwh=draw(money), operations_per_node_month=draw(money))
    return "offer", entry


MONEY_FIELDS = ["price_per_node_hour", "price_per_node_month", "minimum_hours", "capex_per_node", "residual_value",
                "power_kw_load", "power_kw_idle", "electricity_price_per_kwh", "operations_per_node_month"]
control = st.tuples(names, st.sampled_from([chr(c) for c in range(32)]), names).map("".join)
bad_money = st.one_of(st.floats(max_value=-1e-6), st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                      st.floats(1e14, 1e300), st.integers(10**14, 10**40), st.booleans(), st.just([1]),
                      st.text(st.characters(categories=("L",)), min_size=1, max_size=8), st.just(date(2026, 1, 1)))
BAD_OFFER = {  # field: refused values
    **{f: bad_money for f in MONEY_FIELDS},
    "billing_granularity_hours": st.one_of(st.just(0), st.floats(-1e9, 9e-7), st.just(math.nan), st.floats(1e14, 1e300)),
    "pue": st.one_of(st.floats(-10, 0.999), st.just(math.inf), st.floats(1e14, 1e300)),
    "depreciation_months": st.one_of(st.integers(max_value=0), st.integers(1201, 10**20), st.just(1.5)),
    "currency": st.text(max_size=6).filter(lambda s: not (len(s) == 3 and s.isascii() and s.isalpha() and s.isupper())),
    "kind": st.text(max_size=15).filter(lambda s: s not in ("rent_elastic", "rent_reserved", "own")),
    "name": st.one_of(st.just(""), st.text(st.characters(categories=("L",)), min_size=101, max_size=140), control),
    "notes": st.text(st.characters(categories=("L",)), min_size=501, max_size=520),
    "node_type": st.text(st.characters(categories=("L",)), min_size=1, max_size=10).map(lambda s: "no-such-" + s),
    "colour": st.text(max_size=5),
}
BAD_NODE_TYPE = {
    "gpus_per_node": st.one_of(st.integers(max_value=0), st.integers(1025, 10**20)),
    "gpu_memory_gb": st.one_of(st.floats(max_value=0), st.just(math.nan), st.just(math.inf), st.floats(1e6 + 1, 1e300)),
    "peak_bf16_tflops": st.one_of(st.floats(max_value=0), st.just(math.nan), st.just(math.inf)),
    "name": st.one_of(st.just(""), st.text(st.characters(categories=("L",)), min_size=101, max_size=140), control),
    "gpu_model": st.one_of(st.just(""), control),
    "interconnect": st.text(st.characters(categories=("L",)), min_size=101, max_size=120),
    "network": control,
}


@st.composite
def file_with_one_bad_entry(draw):
    kind, entry = draw(valid_entry())
    table = BAD_NODE_TYPE if kind == "node_type" else BAD_OFFER
    field = draw(st.sampled_from(sorted(table) + ["twice"]))
    tables = [GOOD, (kind, entry)]
    if field == "twice":
        tables.append((kind, dict(entry)))
        needle = f"{kind} {entry['name']!r} is defined twice"
    else:
        entry[field] = draw(table[field])
        needle = f"{field}:" if field not in ("name", "kind") else field
    return toml_doc(tables), needle


@FUZZ
@given(case=file_with_one_bad_entry())
def test_one_bad_entry_refuses_the_whole_file(ledger, tmp_path, case):
    text, needle = case
    f = tmp_path / "prices.toml"
    f.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    out = invoke(["pricing", "import", f], ledger)
    assert_refused(out, "prices.toml", needle, context=text)
    unchanged(ledger, before, context=text)


@st.composite
def mutated_pricing(draw):
    text = toml_doc([draw(valid_entry()) for _ in range(draw(st.integers(1, 4)))])
    chars = list(text)
    for _ in range(draw(st.integers(0, 5))):
        i = draw(st.integers(0, max(0, len(chars) - 1)))
        chars[i:i + draw(st.integers(0, 2))] = list(draw(st.sampled_from(list('[]="#.-+,\n\'') + ["\x00", "\ufeff", "e9", "nan", "inf", "é"])))
    return "".join(chars)


@FUZZ
@given(text=mutated_pricing())
def test_mutated_pricing_files_apply_whole_or_not_at_all(ledger, tmp_path, text):
    f = tmp_path / "prices.toml"
    f.write_text(text, encoding="utf-8")
    before = snapshot(ledger)
    out = invoke(["pricing", "import", f, "--json"], ledger)
    event(f"exit {out.exit_code}")
    assert_clean(out, context=text)
    if out.exit_code == 2:
        unchanged(ledger, before, context=text)
    else:  # every entry of the file is in the ledger now, as the counts say
        doc = tomllib.loads(text)
        after = snapshot(ledger)
        for section, table in (("node_type", "node_type"), ("offer", "offer")):
            assert {e["name"] for e in doc.get(section, [])} <= {row[1] for row in after[table]}, text
        counts = json.loads(out.stdout)
        assert counts == {"node_types": len(doc.get("node_type", [])), "offers": len(doc.get("offer", []))}, text


def test_unreadable_pricing_files(sqlite_ledger, tmp_path):
    ledger = sqlite_ledger
    before = snapshot(ledger)
    f = tmp_path / "latin1.toml"
    f.write_bytes('[[offer]]\nname = "é"\n'.encode("latin-1"))
    assert_refused(invoke(["pricing", "import", f], ledger), "is not UTF-8 text", context="latin-1")
    assert_refused(invoke(["pricing", "import", tmp_path], ledger), "FILE: cannot read", context="a directory")
    assert_refused(invoke(["pricing", "import", tmp_path / "missing.toml"], ledger), "FILE: cannot read", context="missing")
    unchanged(ledger, before)
