"""Settings: offers (prices) and their history, the fleet, the Slurm mapping, exchange rates, carbon intensity,
currency and time zone. Saving needs the lead role; every save is recorded in the audit log (shown at the
bottom to admins and team-scope leads; docs/AUDIT.md).

Offers go through ``trainledger.store.catalog.presets`` (``parse_pricing`` + ``apply_pricing``),
the validation of ``trainledger pricing import``: a price edit adds a version from
a date (default now; a past date re-costs months and needs the "retroactive" box,
naming them, as ``--retroactive`` does); settings through
``trainledger.store.settings.set_setting``; fleets through :func:`trainledger.store.catalog.fleets.save_fleet`;
rates through :func:`trainledger.store.catalog.fx.set_rate`; intensities through
:func:`trainledger.store.catalog.carbon.set_intensity`. Every save checks the role on the
server (:func:`trainledger.app.views.access.require_lead`) right before it writes.
"""

from __future__ import annotations

from datetime import date
from zoneinfo import available_timezones

import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, offer_form, slurm_map, ui
from trainledger.errors import LedgerInputError
from trainledger.money.allocation.idle_share import POLICY_HELP, check_policy, set_fleet_policy
from trainledger.money.rates.pricing import confirm_versions
from trainledger.store.audit import change_text as audit_change
from trainledger.store.catalog.carbon import set_intensity
from trainledger.store.catalog.fleets import save_fleet
from trainledger.store.catalog.fx import set_rate
from trainledger.store.catalog.presets import apply_pricing, parse_pricing
from trainledger.store.catalog.prices import parse_valid_from
from trainledger.store.settings import display_timezone, set_setting

NEW = ""  # the "add" choice of the offer and fleet pickers: no offer or fleet has an empty name
KINDS = ["rent_elastic", "rent_reserved", "own"]
FIELD_LABELS = {
    "price_per_node_hour": "Price per node-hour", "price_per_node_month": "Price per node-month",
    "billing_granularity_hours": "Billing granularity (hours)", "minimum_hours": "Minimum billed hours",
    "capex_per_node": "Capex per node", "depreciation_months": "Depreciation (months)",
    "residual_value": "Residual value per node", "power_kw_load": "Power at load (kW)",
    "power_kw_idle": "Power when idle (kW)", "electricity_price_per_kwh": "Electricity per kWh (incl. PUE unless set)",
    "pue": "PUE", "operations_per_node_month": "Operations per node-month",
}
FLASH = "_settings_flash"
SHARE_FIELD = "Idle charged back"  # the fleet form's field, named in a bad policy's one-line error

ident = access.page_gate()
url = data.ledger_url()
st.title("Settings")
read_only = access.read_only(ident)  # viewers see the forms disabled; every save checks the role anyway
if read_only:
    st.info(f"Signed in as {ui.md(ident.user)} ({ident.role}): you can look, but only leads can save changes."
            if not ident.is_lead else
            f"Signed in as {ui.md(ident.user)} ({ident.role}, scoped to "
            f"{', '.join(ui.md(p) for p in sorted(ident.projects or ()))}): you can look, but only leads of the whole "
            "team can save changes (prices, fleets and settings are every project's).")
if FLASH in st.session_state:
    st.success(st.session_state.pop(FLASH))  # composed from escaped values (_saved)


def _saved(message: str) -> None:
    st.session_state[FLASH] = message
    st.rerun()


tab_offers, tab_history, tab_fleet, tab_slurm, tab_rates, tab_carbon, tab_general = st.tabs(
    ["Offers (prices)", "Price history", "Fleet", "Slurm mapping", "Exchange rates", "Carbon intensity", "Currency and time zone"])

# --- offers --------------------------------------------------------------------------------
with tab_offers:
    pricing = data.pricing(url)
    st.dataframe(ui.frame(pricing["offers"], ["name", "node_type", "kind", "currency", "hourly_rate", "full_month_cost", "source"],
                          {"node_type": "node type", "hourly_rate": "per node-hour", "full_month_cost": "full node-month"}),
                 hide_index=True)
    st.subheader("Add or replace an offer")
    offers = {o.name: (o, nt) for o, nt in data.offers(url)}
    nt_names = [n["name"] for n in pricing["node_types"]]
    c = st.columns(3)
    pick = c[0].selectbox("Offer", [NEW] + list(offers), key="set_offer_pick",
                          format_func=lambda n: "+ New offer" if n == NEW else n)
    current, current_nt = offers.get(pick, (None, None))
    kind = c[1].selectbox("Kind", KINDS, index=KINDS.index(current.kind.value) if current else 0, key=f"set_offer_kind_{pick}",
                          disabled=read_only)
    default_nt = current_nt or next(iter(nt for _, nt in offers.values()), None)
    node_type = c[2].selectbox("Node type", nt_names, index=nt_names.index(default_nt) if default_nt in nt_names else 0,
                               key=f"set_offer_nt_{pick}", disabled=read_only)
    defaults = offer_form.offer_form_defaults(current, current_nt or node_type)
    prefix = f"offer_{pick}_{kind}"
    with st.form(f"offer_form_{pick}_{kind}"):
        name = st.text_input("Name (a new name adds an offer)", value="" if current is None else current.name,
                             key=f"{prefix}_name", disabled=read_only)
        currency = st.text_input("Currency (ISO code)", value=defaults.get("currency", data.settings(url)["currency"]),
                                 key=f"{prefix}_currency", disabled=read_only)
        values = {}
        cols = st.columns(2)
        for i, field in enumerate(offer_form.OFFER_FIELDS[kind]):
            values[field] = cols[i % 2].text_input(FIELD_LABELS[field], value=defaults.get(field, ""), key=f"{prefix}_{field}",
                                                   disabled=read_only)
        notes = st.text_input("Notes", value=defaults.get("notes", ""), key=f"{prefix}_notes", disabled=read_only)
        v = st.columns(2)
        valid_from = v[0].date_input("New prices valid from (empty: now)", value=None, key=f"{prefix}_valid_from",
                                     disabled=read_only,
                                     help="A price change adds a version from this day (its start in the display time "
                                          "zone); months before it keep the prices they were used at.")
        retro = v[1].checkbox("Retroactive: re-cost the months since that day", key=f"{prefix}_retro", disabled=read_only,
                              help="Needed for a day in the past; the error names the months it would change.")
        st.caption("Exact decimals; leave a field empty when it does not apply. Validated as `trainledger pricing import`.")
        submitted = st.form_submit_button("Save offer", type="primary", disabled=read_only)
    if submitted and (actor := access.lead_writer("change prices")):
        form = {"name": name, "node_type": node_type, "kind": kind, "currency": currency, **values, "notes": notes}
        try:
            spec = parse_pricing(offer_form.offer_toml(form), where="offer form")
            plans: list = []
            with data.write_session(url, actor) as s:
                start = parse_valid_from(valid_from, display_timezone(s), "valid from")
                apply_pricing(s, spec, source="user", replace=True, valid_from=start, retroactive=True, plans=plans)
                added = confirm_versions(s, plans, retro)
        except LedgerInputError as exc:
            st.error(ui.md(str(exc).splitlines()[0].replace("--from:", "valid from:").replace(
                "pass --retroactive to confirm, or leave --from out", "tick “Retroactive” to confirm, or leave the day empty")))
        else:
            months = sorted({m for a in added for m in a["months_changed"]})
            _saved(f"Saved offer {ui.md(name.strip())}." + (f" Re-costed {', '.join(months)}." if months else ""))

    with st.expander("Import a pricing TOML (node types and offers)"):
        with st.form("pricing_import"):
            text = st.text_area("TOML with [[node_type]] and/or [[offer]] tables, keys as in data/pricing.toml",
                                height=200, key="pricing_toml", disabled=read_only)
            imported = st.form_submit_button("Import", disabled=read_only)
        if imported and (actor := access.lead_writer("change prices")):
            try:
                spec = parse_pricing(text, where="pasted TOML")
                with data.write_session(url, actor) as s:
                    counts = apply_pricing(s, spec, source="user", replace=True)
            except LedgerInputError as exc:
                st.error(ui.error_line(exc))
            else:
                _saved(f"Imported {counts['node_types']} node types and {counts['offers']} offers.")

# --- price history ------------------------------------------------------------------------------
with tab_history:
    names = sorted(offers)
    hpick = st.selectbox("Offer", names, key="set_history_offer") if names else None
    if hpick:
        hist = data.price_history(url, hpick)
        st.caption(f"{ui.md(hist['offer'])} ({hist['kind']}, prices in {ui.md(hist['currency'])}; times UTC). Each "
                   "version holds from its start until the next one's: months are costed at the versions in force when "
                   f"the node-hours were used (trainledger pricing history {ui.md(hpick)}).")
        fields = [f for f in offer_form.OFFER_FIELDS[hist["kind"]] if any(v.get(f) is not None for v in hist["versions"])]
        st.dataframe(ui.frame(hist["versions"], ["version", "valid_from", "valid_to", *fields, "note"],
                              {"valid_from": "valid from", "valid_to": "valid to", **FIELD_LABELS}), hide_index=True)

# --- fleet ------------------------------------------------------------------------------------
with tab_fleet:
    fleets = data.fleets(url)
    if fleets:
        st.dataframe(ui.frame(fleets, ["name", "offer", "kind", "node_count", "valid_from", "valid_to", "idle_share"],
                              {"node_count": "nodes", "valid_from": "valid from", "valid_to": "valid to (exclusive)",
                               "idle_share": "idle charged back"}),
                     hide_index=True)
    else:
        ui.empty("No fleet: runs are costed as rented. Add the cluster you own or reserve.")
    st.subheader("Add or edit a fleet")
    by_name = {f["name"]: f for f in fleets}
    fpick = st.selectbox("Fleet", [NEW] + list(by_name), key="set_fleet_pick",
                         format_func=lambda n: "+ New fleet" if n == NEW else n)
    f = by_name.get(fpick)
    fixed = [name for name, (o, _) in offers.items() if o.kind.value in ("own", "rent_reserved")]
    with st.form(f"fleet_form_{fpick}"):
        fname = st.text_input("Name", value=f["name"] if f else "", key=f"fleet_{fpick}_name", disabled=read_only)
        foffer = st.selectbox("Offer (own or reserved)", fixed, index=fixed.index(f["offer"]) if f and f["offer"] in fixed else 0,
                              key=f"fleet_{fpick}_offer", disabled=read_only)
        fnodes = st.number_input("Nodes", min_value=1, value=int(f["node_count"]) if f else 8, step=1, key=f"fleet_{fpick}_nodes",
                                 disabled=read_only)
        c = st.columns(2)
        ffrom = c[0].date_input("Valid from", value=f["valid_from"] if f else date.today().replace(day=1), key=f"fleet_{fpick}_from",
                                disabled=read_only)
        held = c[1].checkbox("Still held (no end date)", value=not (f and f["valid_to"]), key=f"fleet_{fpick}_held",
                             disabled=read_only)
        fto = c[1].date_input("Valid to (exclusive)", value=(f["valid_to"] if f and f["valid_to"] else date.today()),
                              key=f"fleet_{fpick}_to", disabled=read_only)
        fshare = st.text_input("Idle charged back", value=f["idle_share"] if f else "none", key=f"fleet_{fpick}_share",
                               disabled=read_only, help=f"How the fleet's idle is charged back to projects: {POLICY_HELP}. "
                               "none keeps idle its own line; the chargeback statements (Export) follow it. The same "
                               "as `trainledger fleet set NAME --idle-share POLICY`.")
        fsubmitted = st.form_submit_button("Save fleet", type="primary", disabled=read_only)
    if fsubmitted and (actor := access.lead_writer("edit the fleet")):
        try:
            with data.write_session(url, actor) as s:  # one transaction: a bad policy writes nothing
                check_policy(s, fshare, SHARE_FIELD)
                result = save_fleet(s, fname, foffer, int(fnodes), ffrom, None if held else fto,
                                            original=f["name"] if f else None)
                set_fleet_policy(s, fname.strip(), fshare, SHARE_FIELD)
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            _saved(f"Fleet {ui.md(fname.strip())} {result}.")

# --- exchange rates ----------------------------------------------------------------------------
with tab_rates:
    rates = data.rates(url)
    if rates:
        st.dataframe(ui.frame(rates, ["base", "quote", "rate", "valid_from", "valid_to", "source"],
                              {"rate": "1 base in quote", "valid_from": "from", "valid_to": "to (exclusive)"}),
                     hide_index=True)
    else:
        ui.empty("No exchange rates: every figure is shown in its offers' currency. Add one to present money in another.")
    with st.form("fx_form"):
        c = st.columns(5)
        base = c[0].text_input("From (ISO 4217)", value="CNY", key="fx_base", disabled=read_only)
        quote = c[1].text_input("To (ISO 4217)", value="USD", key="fx_quote", disabled=read_only)
        rate = c[2].text_input("Rate (units of To per 1 From)", key="fx_rate", disabled=read_only)
        rate_from = c[3].date_input("From day", value=date.today().replace(day=1), key="fx_from", disabled=read_only)
        source = c[4].text_input("Source", key="fx_source", disabled=read_only)
        fx_submitted = st.form_submit_button("Save rate", type="primary", disabled=read_only)
    if fx_submitted and (actor := access.lead_writer("change exchange rates")):
        try:
            with data.write_session(url, actor) as s:
                saved = set_rate(s, base.strip(), quote.strip(), rate.strip(), rate_from, source.strip())
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            _saved(f"Saved 1 {ui.md(saved['base'])} = {saved['rate'].normalize():f} {ui.md(saved['quote'])} from {saved['valid_from']}.")

# --- carbon intensity ---------------------------------------------------------------------------
with tab_carbon:
    st.dataframe(ui.frame(data.intensities(url), ["scope", "g_per_kwh", "location", "valid_from", "valid_to", "assumed", "source"],
                          {"g_per_kwh": "gCO2e/kWh", "valid_from": "from", "valid_to": "to (exclusive)"}), hide_index=True)
    st.caption("CO2e of a run = its energy (measured by `trainledger collect`, else the node type's nominal power × "
               "node-hours, labelled estimated) × the grid intensity in force. Without one, the default is an assumption.")
    with st.form("carbon_form"):
        c = st.columns(5)
        g = c[0].text_input("gCO2e per kWh", key="co2_g", disabled=read_only)
        scope = c[1].selectbox("Node type", ["(every node type)"] + nt_names, key="co2_nt", disabled=read_only)
        g_from = c[2].date_input("From day", value=date.today().replace(day=1), key="co2_from", disabled=read_only)
        location = c[3].text_input("Site or grid region", key="co2_location", disabled=read_only)
        g_source = c[4].text_input("Source", key="co2_source", disabled=read_only)
        co2_submitted = st.form_submit_button("Save intensity", type="primary", disabled=read_only)
    if co2_submitted and (actor := access.lead_writer("change carbon intensity")):
        try:
            with data.write_session(url, actor) as s:
                saved = set_intensity(s, g.strip(), g_from, None if scope.startswith("(") else scope, location.strip(),
                                      g_source.strip())
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            _saved(f"Saved {saved['g_per_kwh'].normalize():f} gCO2e/kWh for {ui.md(saved['scope'])} from {saved['valid_from']}.")

# --- Slurm mapping (app/views/slurm_map.py) ---------------------------------------------------------
with tab_slurm:
    slurm_map.section(url, nt_names, offers, _saved, read_only)

# --- currency and time zone -------------------------------------------------------------------
with tab_general:
    current_settings = data.settings(url)
    zones = sorted(available_timezones())
    with st.form("general_settings"):
        cur = st.text_input("Currency (ISO 4217): every report, export and page presents money in it by default; "
                            "offers priced in another currency are converted at the exchange rates",
                            value=current_settings["currency"], key="set_currency", disabled=read_only)
        tz = st.selectbox("Display time zone (months are calendar months in it)", zones,
                          index=zones.index(current_settings["timezone"]) if current_settings["timezone"] in zones else 0,
                          key="set_timezone", disabled=read_only)
        gsubmitted = st.form_submit_button("Save settings", type="primary", disabled=read_only)
    if gsubmitted and (actor := access.lead_writer("change settings")):
        try:
            with data.write_session(url, actor) as s:
                for key, value in (("currency", cur.strip()), ("timezone", tz)):
                    if value != current_settings[key]:
                        set_setting(s, key, value)
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            _saved("Settings saved.")

# --- audit log (docs/AUDIT.md) -------------------------------------------------------------------
AUDIT_ROWS = 200  # the newest entries shown; `trainledger audit --since WHEN` reads further back
st.subheader("Audit log")
if ident.team_scope and (ident.is_admin or ident.is_lead):  # it names every project
    entries = data.audit_log(url, AUDIT_ROWS)
    if entries:
        st.dataframe(ui.frame([{**e, "change": audit_change(e["before"], e["after"])} for e in entries],
                              ["at", "actor", "origin", "client", "action", "target", "change"],
                              {"at": "when", "actor": "who", "origin": "from", "client": "where", "action": "what",
                               "target": "changed", "change": "before → after"}),
                     hide_index=True)
        st.caption(f"The newest {AUDIT_ROWS} changes, newest first, times in the display time zone. Append-only: "
                   "the ledger refuses to change or delete them. All of it: `trainledger audit --since WHEN`.")
    else:
        ui.empty("No change recorded yet: every save on this page and every configuration command of the CLI "
                 "adds an entry (who, when, from where, before and after).")
else:
    st.caption("The audit log (who changed prices, budgets, the fleet, settings and users) is shown to admins and "
               "leads of the whole team.")
