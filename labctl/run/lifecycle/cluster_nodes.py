"""What each configured Slurm cluster has, read from Slurm itself: its partition's nodes, their state, GPUs
and free GPUs (`scontrol show node`). labctl reports; Slurm places."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from labctl.catalog.clusters_file import ClusterEntry, load_clusters
from labctl.catalog.lab import Lab
from labctl.errors import LabctlError
from labctl.host.slurm import commands as slurm


def describe_cluster(entry: ClusterEntry) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": entry.name,
        "slurm": entry.login or (f"SLURM_CONF={entry.slurm_conf}" if entry.slurm_conf else "local"),
        "partition": entry.partition or "(default)",
        "account": entry.account,
        "qos": entry.qos,
        "time_minutes": entry.time_minutes,
        "simulated": entry.simulated,
        "reachable": "yes",
        "error": None,
        "nodes": [],
    }
    try:
        nodes = slurm.nodes(entry)
    except LabctlError as exc:
        return {**row, "reachable": "no", "error": str(exc), "gpus": 0, "gpus_free": 0, "nodes_text": "-"}
    row["nodes"] = [{"name": n.name, "state": n.state.lower(), "gpus": n.gpus, "gpus_free": n.gpus_free} for n in nodes]
    row["gpus"] = sum(n.gpus for n in nodes)
    row["gpus_free"] = sum(n.gpus_free for n in nodes)
    row["nodes_text"] = ", ".join(f"{n.name} {n.state.lower()} {n.gpus_free}/{n.gpus} free" for n in nodes) or "-"
    return row


def describe_clusters(lab: Lab) -> list[dict[str, Any]]:
    entries = list(load_clusters(lab.root, test_labs=False).values())
    if not entries:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(describe_cluster, entries))
