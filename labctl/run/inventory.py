"""What each host labctl knows has: whether its Docker answers, which version, its GPUs and which run
holds each. Hosts are asked in parallel, each with its own deadline."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from labctl.catalog.lab import Lab
from labctl.host import docker as dk
from labctl.host import gpu as gpus_mod
from labctl.host.hosts import HostEntry, load_hosts

HOST_TIMEOUT_S = 10.0


def describe_host(entry: HostEntry) -> dict[str, Any]:
    version = dk.server_version(entry.docker, HOST_TIMEOUT_S)
    gpus: list[gpus_mod.Gpu] = []
    if version is not None:
        gpus = gpus_mod.list_gpus(entry.nvidia_smi_argv())
    return {
        "name": entry.name,
        "docker": entry.docker,
        "reachable": "yes" if version else "no",
        "docker_version": version,
        "simulated": entry.simulated or any(g.simulated for g in gpus),
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "memory_total": g.memory_total_mib,
                "memory_used": g.memory_used_mib,
                "driver": g.driver,
            }
            for g in gpus
        ],
        "gpus_text": ", ".join(f"{g.index}: {g.name} ({g.memory_total_mib}, driver {g.driver})" for g in gpus) or "-",
    }


def describe_hosts(lab: Lab) -> list[dict[str, Any]]:
    hosts = load_hosts(lab.root)
    entries = [hosts.get(None)] + [e for name, e in sorted(hosts.entries.items()) if name != hosts.default]
    if all(e.name != "local" for e in entries):
        entries.append(hosts.get("local"))
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(describe_host, entries))
