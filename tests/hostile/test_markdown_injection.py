"""Markdown injection: hostile names in the ledger load nothing, link nowhere and show as text, on every page.

The finding: run name, project, user and error text (anyone controls JobName and Account in
Slurm) were rendered as Markdown; an image in a run name loaded from an outside server in every
viewer's browser (a beacon), and a link "Session expired – sign in again" appeared in a run's
heading. Now every such value goes through ``trainledger.app.views.ui.md``.

A ledger (the demo history plus hand-built runs) gets hostile text in every user-controlled
name: run names, projects, users, errors, node host names, a sweep id, a node type, offers and a
fleet. Real Chromium (``attacker.test`` resolving to a local "attacker" server that counts hits)
opens every page by its URL, the run detail and the Launch page on the hostile run, and the
Strategies page on the hostile sweep. On every page: no request leaves the dashboard's origin,
the attacker's server sees nothing, no ``<img>`` and no ``<a>`` points anywhere but the dashboard,
and no link says "Session expired"; the hostile text itself is shown, literally.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

import pytest
from sqlmodel import Session
from trainledger.store.catalog.presets import apply_pricing, parse_pricing
from trainledger.store.db import make_engine
from trainledger.store.models import RunNode, RunStatus

from tests.app.helpers import MONTH, build_ledger
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle
from tests.helpers import add_fleet, add_run

pytestmark = pytest.mark.slow

HITS: list[str] = []


class _Attacker(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        HITS.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def payloads(port: int) -> dict[str, str]:
    evil = f"http://attacker.test:{port}"
    return {
        "image": f"![beacon]({evil}/beacon.png)",
        "link": f"[Session expired – sign in again]({evil}/login)",
        "html": f'<img src="{evil}/html.png"><a href="{evil}/a">click</a>',
        "auto": f"www.attacker.test:{port}/auto {evil}/bare",
        "reflink": f"[x][r]\n\n[r]: {evil}/ref",
        "directive": f":red[alert] :material/warning: $\\\\frac{{1}}{{2}}$ <{evil}/angle>",
    }


def hostile_ledger(url: str, port: int) -> dict[str, str]:
    """The dashboard tests' ledger plus hostile names everywhere a user can put text; returns the names."""
    p = payloads(port)
    names = {"run_name": p["image"] + " " + p["link"], "project": p["link"][:100], "user": p["html"][:100],
             "error": " ".join(p.values()), "host": p["image"][:200], "sweep": f"![s](http://attacker.test:{port}/s.png)",
             "node_type": p["image"][:100], "offer": p["link"][:100], "fleet": p["html"][:100]}
    build_ledger(url)
    pricing = (f'[[node_type]]\nname = {json.dumps(names["node_type"])}\ngpu_model = {json.dumps(p["auto"][:100])}\n'
               'gpus_per_node = 8\ngpu_memory_gb = 24\npeak_bf16_tflops = 165.2\n'
               f'[[offer]]\nname = {json.dumps(names["offer"])}\nnode_type = {json.dumps(names["node_type"])}\n'
               'kind = "rent_elastic"\nprice_per_node_month = "3600"\n'
               f'[[offer]]\nname = {json.dumps(p["directive"][:100])}\nnode_type = {json.dumps(names["node_type"])}\n'
               'kind = "own"\ncapex_per_node = "120000"\ndepreciation_months = 36\npower_kw_load = "4"\n'
               'electricity_price_per_kwh = "0.5"\noperations_per_node_month = "6.67"\n')
    engine = make_engine(url)
    with Session(engine) as s:
        apply_pricing(s, parse_pricing(pricing, where="hostile"), source="user", replace=True)
        s.commit()
        add_fleet(s, nodes=2, offer_name=p["directive"][:100], name=names["fleet"])
        start = datetime(2026, 11, 10, tzinfo=timezone.utc)
        run = add_run(s, "hostile-1", start, 5, nodes=2, offer_name=names["offer"], status=RunStatus.failed,
                      project=names["project"], user=names["user"], node_type_name=names["node_type"])
        run.name, run.error, run.strategy, run.sweep_id = names["run_name"], names["error"], "dp", names["sweep"]
        run.tokens_per_s, run.tokens = 1000.0, 18_000_000
        for i, host in enumerate((names["host"], "node-b")):
            s.add(RunNode(run_id="hostile-1", hostname=host, node_rank=i, gpu_util_mean=0.5, straggler=i == 0))
        live = add_run(s, "hostile-live", datetime.now(timezone.utc) - timedelta(minutes=5), 1, nodes=1,
                       offer_name=names["offer"], status=RunStatus.running, project=names["project"],
                       user=names["user"], node_type_name=names["node_type"])
        live.ended_at, live.heartbeat_at, live.name, live.error = None, datetime.now(timezone.utc), names["run_name"], None
        s.commit()
    engine.dispose()
    return names


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    need_chromium()
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    tmp = tmp_path_factory.mktemp("markdown")
    url = f"sqlite:///{tmp / 'ledger.db'}"
    names = hostile_ledger(url, attacker.server_address[1])
    try:
        with serve(tmp, url) as served:
            yield served, names
    finally:
        attacker.shutdown()


def pages(names: dict[str, str]) -> list[tuple[str, str]]:
    m = f"month={MONTH}"
    return [("/overview?" + m, "Overview"), (f"/runs?{m}&run=hostile-1", "Runs"), ("/rent-vs-own?" + m, "Rent vs own"),
            ("/roi?" + m, "Monthly ROI"), (f"/strategies?sweep={quote(names['sweep'], safe='')}", "Strategies"),
            ("/planner", "Planner"), ("/launch?run=hostile-1", "Launch"), ("/launch?run=hostile-live", "Launch"),
            ("/export?" + m, "Export"), ("/settings", "Settings"), ("/runs?run=hostile-live", "Runs")]


def test_every_page_with_hostile_names_loads_nothing_and_links_nowhere(hostile):
    from playwright.sync_api import expect, sync_playwright

    served, names = hostile
    outside: list[str] = []
    shown_somewhere: set[str] = set()
    with sync_playwright() as p:
        browser = chromium(p, "attacker.test")
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1200})
            page.set_default_timeout(WAIT_MS)
            page.on("request", lambda r: outside.append(r.url) if not r.url.startswith((served.base, "data:", "blob:"))
                    else None)
            for path, title in pages(names):
                page.goto(served.base + path)
                expect(page.get_by_role("heading", name=title, exact=True).first).to_be_visible()
                settle(page)
                page.wait_for_timeout(500)  # let images and fonts a page asked for start loading
                expect(page.get_by_test_id("stException")).to_have_count(0)
                assert not outside, (path, outside)
                assert page.locator("img[src*='attacker'], img[srcset*='attacker']").count() == 0, path
                hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
                assert all(h.startswith(served.base) for h in hrefs), (path, [h for h in hrefs if not h.startswith(served.base)])
                # no injected link: none whose name *starts* with the payload's text (a link of ours may quote a
                # hostile project name as text: "Runs of [Session expired – sign in again](…)", to /runs)
                assert page.get_by_role("link", name=re.compile(r"^\W*Session expired")).count() == 0, path
                text = page.inner_text("body").replace("\u2060", "")  # trainledger.app.views.ui.md's invisible word joiners
                for key in ("run_name", "error", "host", "project", "user"):
                    if names[key][:30] in text:
                        shown_somewhere.add(key)
        finally:
            browser.close()
    assert sorted(set(outside)) == [] and HITS == []
    assert {"run_name", "error", "host"} <= shown_somewhere  # the pages did show the hostile text, as text
