"""What each host labctl knows has: whether its Docker answers, which version, its GPUs and which run
holds each. Hosts are asked in parallel, each with its own deadline."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from labctl.catalog.hosts_file import HostEntry, load_hosts
from labctl.catalog.lab import Lab
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.gpus import inventory as gpus_mod
from labctl.host.remote.hosts import endpoint_url
from labctl.run.records.store import Runs

HOST_TIMEOUT_S = 10.0
TIMEOUT_VARIABLE = "LABCTL_HOST_TIMEOUT_S"  # a lab whose hosts answer slowly (a long SSH link) sets more


def host_timeout() -> float:
    """Seconds a host's Docker may take to answer (status allows each host three times that for its runs)."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return HOST_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 1 <= seconds <= 600:  # nan fails too
        raise BadInput(f"{TIMEOUT_VARIABLE}={text[:40]!r}: give seconds from 1 to 600 (default {HOST_TIMEOUT_S:g}).")
    return seconds


def describe_host(entry: HostEntry) -> dict[str, Any]:
    url = endpoint_url(entry)
    version = dk.server_version(url, host_timeout())
    gpus: list[gpus_mod.Gpu] = []
    held: dict[str, str] = {}
    if version is not None:
        gpus = gpus_mod.list_gpus(entry.nvidia_smi_argv())
        held = holders_by_gpu(url, entry, gpus)
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
                "held_by": held.get(g.index),
            }
            for g in gpus
        ],
        "gpus_text": ", ".join(
            f"{g.index}: {g.name} ({g.memory_total_mib}, driver {g.driver}"
            + (f", held by run {held[g.index]})" if g.index in held else ")")
            for g in gpus
        )
        or "-",
    }


def holders_by_gpu(url: str, entry: HostEntry, gpus: list[gpus_mod.Gpu]) -> dict[str, str]:
    """GPU index -> the run holding it: running containers' labels, and on a remote host its on-host claims
    (which also cover an `up` that has not started its engine yet)."""
    from labctl.host.gpus import claims
    from labctl.run.lifecycle.preflight import current_holders

    held: dict[str, str] = {}
    try:
        with dk.on_endpoint(url):
            for holder in current_holders():
                held.update({gpu: holder.run_id for gpu in holder.gpus})
            if entry.is_remote:
                by_name = {claims.gpu_claim_name(g.uuid): g.index for g in gpus}
                held.update({by_name[c.name]: c.run_id for c in claims.claims() if c.name in by_name})
    except LabctlError:
        return held  # the daemon answered its version but not the listing: GPUs are still worth showing
    return held


def describe_hosts(lab: Lab) -> list[dict[str, Any]]:
    entries = load_hosts(lab.root).listed()
    with ThreadPoolExecutor(max_workers=min(8, len(entries))) as pool:
        return list(pool.map(describe_host, entries))


def status_hosts(lab: Lab, runs: Runs, chosen: str | None) -> list[HostEntry]:
    """The hosts `labctl status` asks: the one named, else every configured host and every host a live
    record of this home names (a test lab's host is known by name without being configured)."""
    hosts = load_hosts(lab.root)
    if chosen:
        return [hosts.get(chosen)]
    listed = hosts.listed()
    names = {e.name for e in listed}
    for run_id in runs.all_ids():
        record = runs.try_load(run_id)
        if record is None or record.status not in ("starting", "running") or record.host_entry in names:
            continue
        try:
            listed.append(hosts.get(record.host_entry))
        except BadInput:
            continue  # a host since removed from the hosts files: nothing to ask
        names.add(record.host_entry)
    return listed
