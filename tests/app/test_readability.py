"""Issue #18 item 4 under AppTest: the figures that matter first, human labels, compact counts, readable charts.

Strategies leads with the cost per 1M tokens under each offer (equal to ``strategy_comparison`` to the cent) and
says when CPU-only runs are priced as GPU nodes; the Export summary is labelled in the dashboard's words; every
chart on these pages is at least 250 px high with thousands separators, and money axes name the currency.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
from trainledger.app.views import ui
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.export import presented_report
from trainledger.reports.present import fmt_cell, kind_of, label
from trainledger.reports.weekly import strategy_comparison
from trainledger.store.db import make_engine, session_scope

from tests.app.helpers import MONTH, SWEEP, build_ledger, make_app, plain, run_page, with_session
from tests.helpers import presented_month


@pytest.mark.parametrize("value, scale, suffix", [(20_131_350_411, 10**9, "B"), (1_234_567, 10**6, "M"),
                                                  (12_345, 10**3, "k"), (3.2e12, 10**12, "T")])
def test_compact_counts(value, scale, suffix):
    assert ui.compact(value) == f"{value / scale:,.1f} {suffix}"


def test_compact_small_and_edge_values():
    assert ui.compact(None) == ui.DASH
    assert ui.compact(950) == "950" and ui.compact(12.5) == "12.5"
    assert ui.compact(999_960) == "1.0 M"  # rounds up into the next unit, never "1,000.0 k"
    assert ui.compact(-1_500) == "-1.5 k"


def test_strategies_leads_with_cost_per_1m_tokens(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(sweep=SWEEP), "strategies")
    expected = with_session(demo_url, lambda s: strategy_comparison(s, sweep_id=SWEEP))
    offers = sorted({o for r in expected["rows"] for o in r["cost_per_1m_tokens"]})
    currency = expected["currency"]
    table = at.dataframe[0].value
    cost_cols = [f"per 1M tokens, {o} ({currency})" for o in offers]
    assert list(table.columns[:2 + len(offers)]) == ["", "strategy", *cost_cols]  # seen first, without scrolling
    for o, col in zip(offers, cost_cols):
        assert list(table[col]) == [fmt_cell("cost_per_1m_tokens", r["cost_per_1m_tokens"][o]) for r in expected["rows"]]
    assert list(table["strategy"]) == [r["strategy"] for r in expected["rows"]]
    assert list(table["layout"]) == [f"dp {r['dp']}, tp {r['tp']}, pp {r['pp']}, ZeRO-{r['zero_stage']}" for r in expected["rows"]]
    chart = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    assert chart["encoding"]["y"]["title"] == f"{currency} per 1M tokens"
    assert chart["encoding"]["y"]["axis"]["format"] == ui.AXIS_FORMAT
    assert chart["encoding"]["color"]["legend"]["labelLimit"] == ui.LEGEND_LABEL_LIMIT  # offer names whole
    assert not any("ran on CPU only" in c.value for c in at.caption)  # these runs had GPUs


def test_strategies_says_when_cpu_runs_are_priced_as_gpu_nodes(sqlite_url, app_env):
    from tests.helpers import add_run

    build_ledger(sqlite_url)
    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        for i, strategy in enumerate(("dp", "zero2")):
            r = add_run(s, f"cpu-{strategy}", datetime(2026, 11, 28, 8 + i, tzinfo=timezone.utc), 0.1, nodes=1,
                        offer_name="rtx4090-rent", project="cpu", user="dana", tokens=360_000)
            r.strategy, r.sweep_id, r.util_source, r.gpu_util_mean, r.mfu = strategy, "sweep-cpu", "cpu", 0.95, None
            r.tokens_per_s = 1000.0 * (i + 1)
    engine.dispose()
    app_env(sqlite_url)
    at = run_page(make_app(sweep="sweep-cpu"), "strategies")
    note = next(plain(c.value) for c in at.caption if "ran on CPU only" in c.value)
    assert note.startswith("2 of 2 runs ran on CPU only, but are priced as the GPU nodes they were recorded on: "
                           "1 × rtx4090-8x (8 GPUs each).")
    assert list(at.dataframe[0].value["MFU"]) == ["n/a (CPU)", "n/a (CPU)"]


def test_export_summary_is_labelled_like_the_rest_of_the_app(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "export")
    s = with_session(demo_url, lambda x: presented_month(x, MONTH))["summary"]
    cur = s["currency"]
    summary = at.table[0].value["value"]
    assert not [name for name in summary.index if "_" in name]  # no snake_case key is shown
    for key, name in (("actual_cost", f"Spend ({cur})"), ("idle_cost", f"Idle cost ({cur})"),
                      ("waste_cost", f"Waste ({cur})"), ("own_cost", f"If owned ({cur})"),
                      ("elastic_cost", f"If rented elastic ({cur})"), ("reserved_cost", f"If rented reserved ({cur})"),
                      ("time_utilization", ui.TIME_UTIL), ("gpu_util_mean", ui.GPU_UTIL), ("mfu_mean", ui.MFU),
                      ("gpu_hours", "GPU-hours")):
        assert name == label(key) + (f" ({cur})" if kind_of(key) == "money" else "")
        shown = ui.pct(s[key]) if kind_of(key) == "ratio" else fmt_cell(key, s[key])  # as Overview shows them
        assert summary[name] == shown, key
    assert summary["Tokens"] == f"{s['tokens']:,}" and summary["Runs"] == str(s["runs"])
    for reason, amount in s["waste_by_reason"].items():
        assert summary[f"Waste by reason: {reason.replace('_', ' ')} ({cur})"] == fmt_cell("waste_by_reason", amount)
    projects = at.dataframe[0].value
    keys = list(with_session(demo_url, lambda x: presented_report(monthly_report(x, MONTH, lines=True)))["projects"][0])
    # a figure headed by the metrics layer with the currency; any other key by its words (money with the currency)
    heads = list(projects.columns)
    assert len(heads) == len(keys) and not [c for c in heads if "_" in c]
    assert [c for k, c in zip(keys, heads) if kind_of(k) == "money" and not c.endswith(f" ({cur})")] == []
    assert [c for k, c in zip(keys, heads) if k in ui.BY_KEY and k not in ui.GENERIC_KEYS] == [
        ui.column(k, cur) for k in keys if k in ui.BY_KEY and k not in ui.GENERIC_KEYS]  # the metrics layer's
    assert heads[:6] == ["project", "runs", "node-hours", "GPU-hours", "tokens", f"run cost ({cur})"], heads


def _heights(spec) -> list[int]:
    if isinstance(spec, dict):
        return ([spec["height"]] if isinstance(spec.get("height"), int) else []) + [h for v in spec.values() for h in _heights(v)]
    if isinstance(spec, list):
        return [h for v in spec for h in _heights(v)]
    return []


@pytest.mark.parametrize("page", ["strategies", "planner", "rent_vs_own", "overview", "roi"])
def test_charts_are_at_least_250_px_high(page, demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(sweep=SWEEP), page)
    charts = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert charts
    for chart in charts:
        heights = _heights(chart)
        assert heights and min(heights) >= ui.MIN_CHART_HEIGHT, heights


@pytest.mark.parametrize("page", ["overview", "runs", "rent_vs_own", "goodput", "export", "strategies"])
def test_no_code_span_shows_a_markdown_escape(page, demo_url, app_env):
    """A code span (`trainledger ... --own rtx4090-own`) shows its text as it is: a Markdown escape inside one
    (``rtx4090\\-own``) would be seen, so values go in shell-quoted (ui.code), never Markdown-escaped."""
    import re

    app_env(demo_url)
    at = run_page(make_app(), page)
    texts = [e.value for kind in ("caption", "markdown", "info", "warning", "success") for e in at.get(kind)]
    spans = [span for t in texts for span in re.findall(r"`([^`]+)`", t)]
    assert spans, page  # every page says which command prints its figures
    assert [s for s in spans if "\\" in s] == [], page


def test_export_shows_counted_to_in_minutes_and_the_display_zone(demo_url, app_env, monkeypatch):
    """A month to date: "Counted to" is the instant the figures run to, as people read it (no seconds, no µs)."""
    from zoneinfo import ZoneInfo

    from trainledger.store.settings import display_timezone

    app_env(demo_url)
    monkeypatch.setenv("TRAINLEDGER_NOW", "2026-11-15T12:30:15.123456+00:00")
    at = run_page(make_app(), "export")
    summary = at.table[0].value["value"]
    tz = ZoneInfo(str(with_session(demo_url, display_timezone)))
    local = datetime(2026, 11, 15, 12, 30, 15, tzinfo=timezone.utc).astimezone(tz)
    assert summary["Counted to"] == f"{local:%Y-%m-%d %H:%M} {tz.key}"


@pytest.mark.parametrize("page", ["overview", "runs", "rent_vs_own", "roi", "goodput", "export", "strategies",
                                  "planner", "settings"])
def test_no_table_is_headed_by_a_figures_key(page, demo_url, app_env):
    """A table's column that is a figure is headed by its label from the metrics layer (ui.column: "node-hours",
    "idle cost (CNY)"), never by its key ("node_hours", "idle_cost")."""
    from trainledger.money.metrics.registry import BY_KEY

    app_env(demo_url)
    at = run_page(make_app(run="hand-elastic-1") if page == "runs" else make_app(), page)
    headers = {str(c) for d in at.dataframe for c in d.value.columns} | {
        str(c) for t in at.table for c in t.value.columns}
    assert headers, page
    assert sorted(h for h in headers if h in BY_KEY and "_" in h) == [], page
    assert sorted(h for h in headers if re.search(r"[a-z]_[a-z]", h)) == [], page  # no other key either
    money = re.compile(r"\b(cost|spend|spent|price|savings|budget|waste|billed|amount)\b", re.IGNORECASE)
    not_money = re.compile(r"per 1,000 spent|^cost is$|reason|^why ")  # per money spent; finality; words
    unlabelled = sorted(str(c) for t in [*(d.value for d in at.dataframe), *(t.value for t in at.table)]
                        if "currency" not in [str(c) for c in t.columns]  # a table with a currency column says it
                        for c in t.columns if money.search(str(c)) and not not_money.search(str(c))
                        and not re.search(r"\b(CNY|USD)\b", str(c)))
    assert unlabelled == [], page  # money headed with its currency
