"""The Settings page's "Slurm mapping" section: the rules of ``trainledger slurm map``, listed, added, removed.

The rules go through :mod:`trainledger.store.mappings.slurm_map` (the same validation as the
CLI); saving needs the lead role, checked on the server right before the write.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, ui
from trainledger.errors import LedgerInputError
from trainledger.store.mappings.slurm_map import add_rule, list_rules, remove_rule

NO_OFFER = "(the fleet, else elastic rent)"


@data.cached()
def rules(url: str) -> list[dict[str, Any]]:
    with data.read_session(url) as s:
        return list_rules(s)


def section(url: str, node_types: list[str], offers: dict[str, tuple[Any, str]], saved: Callable[[str], None],
            read_only: bool = False) -> None:
    """Render the section; ``saved(message)`` reports a successful write (and reruns the page); ``read_only``: a
    viewer sees the forms disabled (every save checks the role anyway)."""
    current = rules(url)
    if current:
        st.dataframe(ui.frame(current, ["id", "cluster", "partition", "gpu_type", "node_pattern", "node_type", "offer", "by_node"],
                              {"gpu_type": "GPU type", "node_pattern": "nodes", "node_type": "node type", "by_node": "by node"}),
                     hide_index=True)
        st.caption("Tried top to bottom: the most specific matching rule wins (nodes, then GPU type, then partition).")
    else:
        ui.empty("No Slurm mapping: sacct imports need --node-type. Map partitions or GPU types to node types here.")
    st.subheader("Add or change a rule")
    c = st.columns(2)  # outside the form: the offers follow the node type picked
    node_type = c[0].selectbox("Node type", node_types, key="slurm_map_node_type", disabled=read_only)
    offer_names = [NO_OFFER] + sorted(n for n, (_, nt) in offers.items() if nt == node_type)
    offer = c[1].selectbox("Offer", offer_names, key="slurm_map_offer", disabled=read_only)
    with st.form("slurm_map_add"):
        c = st.columns(4)
        partition = c[0].text_input("Partition", key="slurm_map_partition", disabled=read_only)
        gpu_type = c[1].text_input("GPU type (gres/gpu:TYPE)", key="slurm_map_gpu_type", disabled=read_only)
        nodes = c[2].text_input("Nodes (glob, e.g. gpu-a*)", key="slurm_map_nodes", disabled=read_only)
        cluster = c[3].text_input("Cluster (empty: any)", key="slurm_map_cluster", disabled=read_only)
        by_node = st.checkbox("By node: jobs pay for every node they touch (exclusive nodes)", key="slurm_map_by_node", disabled=read_only)
        replace = st.checkbox("Replace the rule with the same partition / GPU type / nodes / cluster", key="slurm_map_replace", disabled=read_only)
        added = st.form_submit_button("Save rule", type="primary", disabled=read_only)
    if added and (actor := access.lead_writer("edit the Slurm mapping")):
        try:
            with data.write_session(url, actor) as s:
                rule, result = add_rule(s, node_type=node_type, offer=None if offer == NO_OFFER else offer,
                                        partition=partition, gpu_type=gpu_type, node_pattern=nodes, cluster=cluster,
                                        by_node=by_node, replace=replace)
            rules.clear()
        except LedgerInputError as exc:
            st.error(ui.error_line(exc))
        else:
            saved(f"Slurm mapping rule {rule.id} {result}.")
    if current:
        with st.form("slurm_map_remove"):
            rid = st.selectbox("Rule", [r["id"] for r in current], key="slurm_map_remove_id", disabled=read_only,
                               format_func=lambda i: f"{i}: " + next(_label(r) for r in current if r["id"] == i))
            removed = st.form_submit_button("Remove rule", disabled=read_only)
        if removed and (actor := access.lead_writer("edit the Slurm mapping")):
            try:
                with data.write_session(url, actor) as s:
                    remove_rule(s, int(rid))
                rules.clear()
            except LedgerInputError as exc:
                st.error(ui.error_line(exc))
            else:
                saved(f"Slurm mapping rule {rid} removed.")


def _label(r: dict[str, Any]) -> str:
    match = ", ".join(f"{k.replace('_', ' ')} {r[k]}" for k in ("cluster", "partition", "gpu_type", "node_pattern") if r[k])
    return f"{match} → {r['node_type']}"
