"""Settings: offers (prices), the fleet, the Slurm mapping, currency and time zone. Saving needs the lead role.

Offers go through ``ledger.store.presets`` (``parse_pricing`` + ``apply_pricing``),
the validation of ``trainledger pricing import``; settings through
``ledger.store.settings.set_setting``; fleets through :func:`ledger.store.fleets.save_fleet`.
Every save checks the role on the server (:func:`app.access.require_lead`)
right before it writes.
"""

from __future__ import annotations

from datetime import date
from zoneinfo import available_timezones

import streamlit as st

from app import access, data, offer_form, slurm_map, ui
from ledger.errors import LedgerInputError
from ledger.store.fleets import save_fleet
from ledger.store.presets import apply_pricing, parse_pricing
from ledger.store.settings import set_setting

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

ident = access.page_gate()
url = data.ledger_url()
st.title("Settings")
if ident is not None and not ident.is_lead:
    st.info(f"Signed in as {ident.user} ({ident.role}): you can look, but only leads can save changes.")
if FLASH in st.session_state:
    st.success(st.session_state.pop(FLASH))


def _saved(message: str) -> None:
    st.session_state[FLASH] = message
    st.rerun()


tab_offers, tab_fleet, tab_slurm, tab_general = st.tabs(["Offers (prices)", "Fleet", "Slurm mapping", "Currency and time zone"])

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
    kind = c[1].selectbox("Kind", KINDS, index=KINDS.index(current.kind.value) if current else 0, key=f"set_offer_kind_{pick}")
    default_nt = current_nt or next(iter(nt for _, nt in offers.values()), None)
    node_type = c[2].selectbox("Node type", nt_names, index=nt_names.index(default_nt) if default_nt in nt_names else 0,
                               key=f"set_offer_nt_{pick}")
    defaults = offer_form.offer_form_defaults(current, current_nt or node_type)
    prefix = f"offer_{pick}_{kind}"
    with st.form(f"offer_form_{pick}_{kind}"):
        name = st.text_input("Name (a new name adds an offer)", value="" if current is None else current.name, key=f"{prefix}_name")
        currency = st.text_input("Currency (ISO code)", value=defaults.get("currency", data.settings(url)["currency"]),
                                 key=f"{prefix}_currency")
        values = {}
        cols = st.columns(2)
        for i, field in enumerate(offer_form.OFFER_FIELDS[kind]):
            values[field] = cols[i % 2].text_input(FIELD_LABELS[field], value=defaults.get(field, ""), key=f"{prefix}_{field}")
        notes = st.text_input("Notes", value=defaults.get("notes", ""), key=f"{prefix}_notes")
        st.caption("Exact decimals; leave a field empty when it does not apply. Validated as `trainledger pricing import`.")
        submitted = st.form_submit_button("Save offer", type="primary")
    if submitted and access.require_lead("change prices"):
        form = {"name": name, "node_type": node_type, "kind": kind, "currency": currency, **values, "notes": notes}
        try:
            spec = parse_pricing(offer_form.offer_toml(form), where="offer form")
            with data.write_session(url) as s:
                apply_pricing(s, spec, source="user", replace=True)
        except LedgerInputError as exc:
            st.error(str(exc).splitlines()[0])
        else:
            _saved(f"Saved offer {name.strip()}.")

    with st.expander("Import a pricing TOML (node types and offers)"):
        with st.form("pricing_import"):
            text = st.text_area("TOML with [[node_type]] and/or [[offer]] tables, keys as in data/pricing.toml",
                                height=200, key="pricing_toml")
            imported = st.form_submit_button("Import")
        if imported and access.require_lead("change prices"):
            try:
                spec = parse_pricing(text, where="pasted TOML")
                with data.write_session(url) as s:
                    counts = apply_pricing(s, spec, source="user", replace=True)
            except LedgerInputError as exc:
                st.error(str(exc).splitlines()[0])
            else:
                _saved(f"Imported {counts['node_types']} node types and {counts['offers']} offers.")

# --- fleet ------------------------------------------------------------------------------------
with tab_fleet:
    fleets = data.fleets(url)
    if fleets:
        st.dataframe(ui.frame(fleets, ["name", "offer", "kind", "node_count", "valid_from", "valid_to"],
                              {"node_count": "nodes", "valid_from": "valid from", "valid_to": "valid to (exclusive)"}),
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
        fname = st.text_input("Name", value=f["name"] if f else "", key=f"fleet_{fpick}_name")
        foffer = st.selectbox("Offer (own or reserved)", fixed, index=fixed.index(f["offer"]) if f and f["offer"] in fixed else 0,
                              key=f"fleet_{fpick}_offer")
        fnodes = st.number_input("Nodes", min_value=1, value=int(f["node_count"]) if f else 8, step=1, key=f"fleet_{fpick}_nodes")
        c = st.columns(2)
        ffrom = c[0].date_input("Valid from", value=f["valid_from"] if f else date.today().replace(day=1), key=f"fleet_{fpick}_from")
        held = c[1].checkbox("Still held (no end date)", value=not (f and f["valid_to"]), key=f"fleet_{fpick}_held")
        fto = c[1].date_input("Valid to (exclusive)", value=(f["valid_to"] if f and f["valid_to"] else date.today()),
                              key=f"fleet_{fpick}_to")
        fsubmitted = st.form_submit_button("Save fleet", type="primary")
    if fsubmitted and access.require_lead("edit the fleet"):
        try:
            with data.write_session(url) as s:
                result = save_fleet(s, fname, foffer, int(fnodes), ffrom, None if held else fto,
                                            original=f["name"] if f else None)
        except LedgerInputError as exc:
            st.error(str(exc).splitlines()[0])
        else:
            _saved(f"Fleet {fname.strip()} {result}.")

# --- Slurm mapping (app/slurm_map.py) ---------------------------------------------------------
with tab_slurm:
    slurm_map.section(url, nt_names, offers, _saved)

# --- currency and time zone -------------------------------------------------------------------
with tab_general:
    current_settings = data.settings(url)
    zones = sorted(available_timezones())
    with st.form("general_settings"):
        cur = st.text_input("Currency (3-letter ISO code; reports need the offers in use to share it)",
                            value=current_settings["currency"], key="set_currency")
        tz = st.selectbox("Display time zone (months are calendar months in it)", zones,
                          index=zones.index(current_settings["timezone"]) if current_settings["timezone"] in zones else 0,
                          key="set_timezone")
        gsubmitted = st.form_submit_button("Save settings", type="primary")
    if gsubmitted and access.require_lead("change settings"):
        try:
            with data.write_session(url) as s:
                for key, value in (("currency", cur.strip()), ("timezone", tz)):
                    if value != current_settings[key]:
                        set_setting(s, key, value)
        except LedgerInputError as exc:
            st.error(str(exc).splitlines()[0])
        else:
            _saved("Settings saved.")
