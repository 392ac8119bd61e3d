"""What labctl runs on this host right now, from the containers' own labels (plus records when the
run was started from this home)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from labctl.errors import BadInput, LabctlError
from labctl.host import docker as dk
from labctl.host.hosts import LOCAL_HOST, HostEntry, endpoint_url
from labctl.host.probes import probe_now
from labctl.run.lifecycle.down import project_name, save_logs
from labctl.run.lifecycle.live import live_runs
from labctl.run.records.record import Record
from labctl.run.records.store import MAX_LOG_BYTES, Runs, read_tail
from labctl.run.remote import close_run_forward, ensure_forward, release_claims, stale_claims, stale_run_volumes
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.deployments import observe
from labctl.run.resident.host_keys import remove_keys


@dataclass(frozen=True)
class HostSection:
    """One host's part of `labctl status`: its runs, or why it could not be asked."""

    host: HostEntry
    reachable: bool
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str = ""


def host_section(runs: Runs, host: HostEntry, timeout: float) -> HostSection:
    url = endpoint_url(host)
    if dk.server_version(url, timeout) is None:
        return HostSection(host, False, problem=f"unreachable: Docker at {host.docker} did not answer in {timeout:g} s")
    with dk.on_endpoint(url):
        notes = reconcile(runs, host)
        live = live_runs(runs, host=host)
    for run in live:
        observe(runs, run)
    return HostSection(host, True, live, notes)


def host_sections(runs: Runs, hosts: list[HostEntry], timeout: float) -> list[HostSection]:
    """Every host at once, each within `timeout` (twice that for listing its runs once Docker answered):
    a dead or hung host is reported unreachable and never holds up the others."""
    found: dict[str, HostSection] = {}

    def ask(host: HostEntry) -> None:
        try:
            found[host.name] = host_section(runs, host, timeout)
        except LabctlError as exc:
            found[host.name] = HostSection(host, False, problem=f"failed: {exc}")
        except Exception as exc:  # one host's surprise must not pass for a hung host, nor hide the others
            found[host.name] = HostSection(host, False, problem=f"failed: {type(exc).__name__}: {exc}")

    # Daemon threads: one that hangs past its deadline must not keep labctl from exiting either.
    threads = [threading.Thread(target=ask, args=(h,), daemon=True) for h in hosts]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 3 * timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [
        found.get(h.name) or HostSection(h, False, problem=f"unreachable: no answer within {3 * timeout:g} s")
        for h in hosts
    ]


def engine_logs(runs: Runs, run_id: str, follow: bool, service: str = "serve") -> Iterator[str]:
    """A service's logs (the engine, or TensorRT-LLM's build step): live from its container, else the copy
    saved beside the record when it stopped."""
    runs.dir(run_id)  # a malformed run id is refused before Docker is asked
    if service not in ("serve", "build"):
        raise BadInput(f"--service {service!r}: serve or build.")
    containers = [c for c in dk.labctl_containers(run_id=run_id) if dk.service_of(c) == service]
    if containers:
        if follow:
            yield from (line.decode(errors="replace") for line in dk.follow_logs(containers[0]))
        else:
            yield dk.logs_tail(containers[0], 1_000_000)
        return
    saved = runs.dir(run_id) / f"{service}.log"
    if not saved.is_file():
        raise BadInput(f"no {service} container and no saved {service} logs for run {run_id}. See `labctl runs`.")
    yield read_tail(saved, MAX_LOG_BYTES)


def reconcile(runs: Runs, host: HostEntry = LOCAL_HOST) -> list[str]:
    """Records of this host left `starting` by a `labctl up` that is gone (SIGKILL, a crash, a lost machine):
    a healthy container is adopted, anything else is taken down, and the record says which; on a remote
    host, claims of an `up` that is gone are removed too. Returns what was done."""
    from labctl.host.identity import process_alive
    from labctl.run.records.record import now
    from labctl.run.resident.keys import KeyStore

    done = []
    for run_id in runs.all_ids():
        try:
            record = runs.load(run_id)
        except BadInput:
            continue  # a corrupt record is reported by `labctl runs`, never fatal here
        if record.status != "starting" or process_alive(record.up_process) or record.host_entry != host.name:
            continue
        serve = next(
            (c for c in dk.labctl_containers(run_id=run_id, all_states=False) if dk.service_of(c) == "serve"), None
        )
        healthy = serve is not None and _probe_record(runs, host, record) == "healthy"
        if healthy:
            runs.update(run_id, status="running", reason="adopted: its labctl up was gone, the engine was healthy")
            runs.event(run_id, "adopted")
            done.append(f"adopted {run_id}: its labctl up was gone, the engine answers")
            continue
        watch.remove(run_id)
        if dk.labctl_containers(run_id=run_id):
            save_logs(runs, run_id)
            dk.compose_down(project_name(run_id))
        runs.update(
            run_id, status="aborted", reason="its labctl up was gone before the engine was ready", stopped_at=now()
        )
        runs.event(run_id, "aborted", reason="labctl up gone")
        KeyStore(runs.home).remove(run_id)
        if host.is_remote:
            remove_keys(run_id)
            remote_watch.remove_volume(run_id)
            release_claims(run_id)
            close_run_forward(record.forward)
        done.append(f"aborted {run_id}: its labctl up was gone; whatever it started was taken down")
    done += watch.reconcile_watchers(runs)  # before the volumes: a watcher's volume is in use until it goes
    return done + (stale_claims() + stale_run_volumes() if host.is_remote else [])


def _probe_record(runs: Runs, host: HostEntry, record: Record) -> str:
    if host.is_remote and record.forward is not None:
        base = ensure_forward(runs, record.run_id, host, record.forward).base
    else:
        base = record.base_url.removesuffix("/v1")
    return probe_now(base, record.probe, record.probe_timeout_s)
