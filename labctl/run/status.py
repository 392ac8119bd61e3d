"""What labctl runs on this host right now, from the containers' own labels (plus records when the
run was started from this home)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from labctl.compose.labels import RunLabels
from labctl.errors import BadInput
from labctl.host import docker as dk
from labctl.host.probes import probe_now
from labctl.run import watch
from labctl.run.deployments import engine_counters
from labctl.run.store import MAX_LOG_BYTES, Runs, read_tail
from labctl.run.up import base_url


def live_runs(runs: Runs, probe: bool = True) -> list[dict[str, Any]]:
    by_run: dict[str, list[Any]] = {}
    for container in dk.labctl_containers(all_states=True):
        by_run.setdefault(RunLabels.from_labels(dk.labels_of(container)).run_id or "?", []).append(container)
    out = []
    for run_id, containers in sorted(by_run.items()):
        serve = next((c for c in containers if dk.service_of(c) == "serve"), containers[0])
        labels = RunLabels.from_labels(dk.labels_of(serve))
        state = serve.state
        record = runs.try_load(run_id)
        url = base_url(labels.host or "127.0.0.1", labels.port)
        health = (
            probe_now(url, record.probe, record.probe_timeout_s)
            if record
            else probe_now(url, "/health")
            if probe and state.running
            else str(state.status)
        )
        started = state.started_at
        uptime = (dt.datetime.now(dt.UTC) - started).total_seconds() if started and state.running else None
        counters = engine_counters(url, record.metrics_path if record else None) if probe and state.running else {}
        if probe and record is not None and record.resident is not None:
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
                "requests_served": counters.get("requests"),
                "tokens_served": counters.get("tokens"),
            }
        )
    return out


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


def reconcile(runs: Runs) -> list[str]:
    """Records left `starting` by a `labctl up` that is gone (SIGKILL, a crash, a lost machine): a healthy
    container is adopted, anything else is taken down, and the record says which. Returns what was done."""
    from labctl.host.identity import process_alive
    from labctl.run.down import project_name, save_logs
    from labctl.run.keys import KeyStore
    from labctl.run.store import now

    done = []
    for run_id in runs.all_ids():
        try:
            record = runs.load(run_id)
        except BadInput:
            continue  # a corrupt record is reported by `labctl runs`, never fatal here
        if record.status != "starting" or process_alive(record.up_process):
            continue
        serve = next(
            (c for c in dk.labctl_containers(run_id=run_id, all_states=False) if dk.service_of(c) == "serve"), None
        )
        healthy = (
            serve is not None
            and probe_now(record.base_url.removesuffix("/v1"), record.probe, record.probe_timeout_s) == "healthy"
        )
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
        done.append(f"aborted {run_id}: its labctl up was gone; whatever it started was taken down")
    return done + watch.reconcile_watchers(runs)
