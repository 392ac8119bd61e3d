"""Taking a run down: its logs saved beside the record first, its containers removed, its record
and events told who stopped it and why, its keys deleted."""

from __future__ import annotations

from typing import Any

from labctl import docker as dk
from labctl.keys import KeyStore
from labctl.records import Runs, now
from labctl.render import write_atomically


def project_name(run_id: str) -> str:
    return f"labctl-{run_id}"


def take_down(project: str) -> None:
    from python_on_whales import DockerClient

    with dk.docker_errors(f"docker compose down ({project})"):
        DockerClient(compose_project_name=project).compose.down(timeout=10, quiet=True, remove_orphans=True)


def save_logs(runs: Runs, run_id: str) -> None:
    """Keep the engine's logs beside the record before the container goes away."""
    for container in dk.labctl_containers(run_id=run_id):
        service = dk.service_of(container) or "serve"
        text = dk.logs_tail(container, 100_000)
        if text:
            write_atomically(runs.dir(run_id) / f"{service}.log", text)


def stop_run(runs: Runs, run_id: str, by: str, reason: str | None = None, replaced_by: str | None = None,
             forced: bool = False) -> None:
    containers = dk.labctl_containers(run_id=run_id)
    if containers:
        save_logs(runs, run_id)
        project = dk.labels_of(containers[0]).get("com.docker.compose.project", project_name(run_id))
        take_down(project)
    if runs.exists(run_id):
        changes: dict[str, Any] = {"status": "stopped", "stopped_at": now(), "stopped_by": by}
        if reason:
            changes["stop_reason"] = reason
        if replaced_by:
            changes["replaced_by"] = replaced_by
        if forced:
            changes["stop_forced"] = True
        runs.update(run_id, **changes)
        runs.event(run_id, "down", reason=reason, forced=forced)
    KeyStore(runs.home).remove(run_id)  # a stopped deployment's keys open nothing any more
