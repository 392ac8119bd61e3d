"""What labctl runs on this host right now, from the containers' own labels (plus records when the
run was started from this home)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from labctl.catalog.hosts_file import HostEntry
from labctl.errors import BadInput, LabctlError, describe_error
from labctl.host.docker import daemon as dk
from labctl.host.remote.hosts import endpoint_url
from labctl.run.lifecycle.host_inventory import TIMEOUT_VARIABLE
from labctl.run.lifecycle.live import live_runs
from labctl.run.lifecycle.reconcile import reconcile
from labctl.run.records.store import MAX_LOG_BYTES, Runs, read_tail
from labctl.run.resident.deployments import observe


@dataclass(frozen=True)
class HostSection:
    """One host's part of `labctl status`: its runs, or why it could not be asked."""

    host: HostEntry
    reachable: bool
    runs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem: str = ""
    unrecorded: list[str] = field(default_factory=list)  # found but not written: the command exits 1


def host_section(runs: Runs, host: HostEntry, timeout: float) -> HostSection:
    url = endpoint_url(host)
    if dk.server_version(url, timeout) is None:
        return HostSection(host, False, problem=f"unreachable: Docker at {host.docker} did not answer in {timeout:g} s")
    unrecorded: list[str] = []
    with dk.on_endpoint(url):
        notes = reconcile(runs, host, unrecorded)
        live = live_runs(runs, host=host)
    for run in live:
        try:
            observe(runs, run)
        except OSError as exc:
            unrecorded.append(f"run {run['run_id']}: what status saw could not be recorded ({describe_error(exc)})")
    return HostSection(host, True, live, notes, unrecorded=unrecorded)


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
        found.get(h.name)
        or HostSection(
            h, False, problem=f"unreachable: no answer within {3 * timeout:g} s ({TIMEOUT_VARIABLE}={timeout:g})"
        )
        for h in hosts
    ]


@dataclass(frozen=True)
class LogView:
    """What part of an engine's log to print: the last `tail` lines, those since `since` (UTC), then `follow`."""

    follow: bool = False
    tail: int | None = None
    since: dt.datetime | None = None


def engine_logs(runs: Runs, run_id: str, view: LogView, service: str = "serve") -> Iterator[str]:
    """A service's logs (the engine, or TensorRT-LLM's build step): live from its container, else the copy
    saved beside the record when it stopped."""
    runs.dir(run_id)  # a malformed run id is refused before Docker is asked
    if service not in ("serve", "build"):
        raise BadInput(f"--service {service!r}: serve or build.")
    containers = [c for c in dk.labctl_containers(run_id=run_id) if dk.service_of(c) == service]
    if containers:
        if view.follow:
            lines = dk.follow_logs(containers[0], view.tail, view.since)
            yield from (line.decode(errors="replace") for line in lines)
        else:
            yield dk.logs_part(containers[0], view.tail or 1_000_000, view.since)
        return
    saved = runs.dir(run_id) / f"{service}.log"
    if not saved.is_file():
        raise BadInput(f"no {service} container and no saved {service} logs for run {run_id}. See `labctl runs`.")
    if view.since is not None or view.follow:  # the copy saved at down holds no times, and grows no more
        raise BadInput(
            f"run {run_id} has stopped: its saved {service} log has no times and no new lines, so --since and "
            "--follow apply only to a live engine; use --tail N."
        )
    text = read_tail(saved, MAX_LOG_BYTES)
    yield "".join(text.splitlines(keepends=True)[-view.tail :]) if view.tail else text
