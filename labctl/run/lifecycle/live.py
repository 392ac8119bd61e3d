"""The runs labctl has on a host right now, read from the containers' own labels (plus the records of
this home), and where the controller reaches each: what `status` shows and `down` chooses among."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.compose.labels import RunLabels
from labctl.host.docker import daemon as dk
from labctl.host.engine.probes import probe_now
from labctl.host.remote.forward import temporary_forward
from labctl.run.records.record import Record
from labctl.run.records.store import Runs
from labctl.run.remote import ensure_forward
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.deployments import engine_counters


def base_url(host: str, port: int | str) -> str:
    reach = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    return f"http://{reach}:{port}"


def live_runs(runs: Runs, probe: bool = True, host: HostEntry = LOCAL_HOST) -> list[dict[str, Any]]:
    by_run: dict[str, list[Any]] = {}
    for container in dk.labctl_containers(all_states=True):
        by_run.setdefault(RunLabels.from_labels(dk.labels_of(container)).run_id or "?", []).append(container)
    out = []
    for run_id, containers in sorted(by_run.items()):
        serve = next((c for c in containers if dk.service_of(c) == "serve"), containers[0])
        labels = RunLabels.from_labels(dk.labels_of(serve))
        state = serve.state
        record, problem = runs.read(run_id)
        with _reach(runs, host, labels, record, probe and bool(state.running)) as url:
            health = (
                probe_now(url, record.probe, record.probe_timeout_s)
                if record
                else probe_now(url, "/health")
                if probe and state.running
                else str(state.status)
            )
            counters = (
                engine_counters(_counters_url(url, record, host), record.metrics_path if record else None)
                if probe and state.running
                else {}
            )
        started = state.started_at
        uptime = (dt.datetime.now(dt.UTC) - started).total_seconds() if started and state.running else None
        if probe and record is not None and record.resident is not None:
            if host.is_remote and record.resident.watcher:
                remote_watch.collect(runs, record)  # first: a restart the watcher saw is recorded as its
            watch.replay(runs, record)  # the fallback when no watcher ran: Docker's own events, de-duplicated
        recorded = watch.recorded_restarts(runs, run_id) if record is not None else None
        out.append(
            {
                "run_id": run_id,
                "engine": labels.engine,
                "profile": labels.profile,
                "status": record.status if record else str(state.status),
                "base_url": url + "/v1",
                "model": record.served_model_name if record else "",
                "gpus": list(labels.gpus.ids),
                "health": health,
                "owner": labels.owner,
                "record": str(runs.record_path(run_id)) if record else "",
                "container_state": str(state.status),
                "uptime_s": round(uptime, 1) if uptime is not None else None,
                "since": labels.created_at,
                "restarts": int(serve.restart_count or 0),
                "restarts_recorded": recorded.count if recorded else None,
                "last_restart": recorded.describe() if recorded and recorded.count else None,
                "resident": labels.resident,
                "environment_label": labels.environment_label,
                "home": labels.home,
                "controller": labels.controller,
                "host": host.name,
                "docker_endpoint": host.docker,
                "requests_served": counters.get("requests"),
                "tokens_served": counters.get("tokens"),
                "record_problem": problem,  # its record cannot be read: listed from its labels alone
            }
        )
    return out


@contextmanager
def _reach(runs: Runs, host: HostEntry, labels: RunLabels, record: Record | None, probe: bool) -> Iterator[str]:
    """Where the controller reaches a run: the engine's address on this machine; on a remote host the run's
    own SSH forward (reopened if it died), or for another controller's run a forward for this command only."""
    if not host.is_remote:
        yield base_url(labels.host or "127.0.0.1", labels.port)
    elif record is not None and record.forward is not None and (record.forward.alive or not probe):
        yield record.base_url.removesuffix("/v1")
    elif record is not None and record.forward is not None and record.status in ("starting", "running"):
        yield ensure_forward(runs, record.run_id, host, record.forward).base
    elif probe and labels.port.isdigit():
        log = runs.home / ".state" / "forwards" / f"{labels.run_id or 'unknown'}.log"
        with temporary_forward(host, labels.host or "127.0.0.1", int(labels.port), log) as forward:
            yield forward.base
    else:  # not probed (`down` choosing what to stop): the engine's own address on its host
        yield base_url(labels.host or "127.0.0.1", labels.port)


def _counters_url(url: str, record: Record | None, host: HostEntry) -> str:
    """Behind labctl's proxy /metrics needs a key, which `status` does not read: it asks the engine on its
    loopback port instead (the proxy runs on local hosts only)."""
    resident = record.resident if record else None
    if resident is None or resident.proxy_engine_port is None or host.is_remote:
        return url
    return f"http://127.0.0.1:{resident.proxy_engine_port}"
