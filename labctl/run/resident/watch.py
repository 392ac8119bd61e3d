"""Restart watchers of resident deployments: started by `up`, removed by `down`, orphans cleared by any
`status`, and a fallback that replays Docker's own events when no watcher ran (see host/watcher/program.py for
why a sidecar container, and what it records)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from labctl.catalog.specs import Readiness
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.watcher import program
from labctl.run.records.record import Record, now
from labctl.run.records.store import ENDED, Runs

# Any image with python3 runs the watcher (its code is copied into the run's folder): the lab's offline
# base image (the sandbox's too) where `make docker-lab` set it up, else the engine's own image.
DEFAULT_IMAGE = "labctl/base:bookworm"
RESTART_EVENTS = ("restart", "hung-restart", "daemon-restart")


def watcher_name(run_id: str) -> str:
    return f"labctl-watch-{run_id}"


def start(runs: Runs, record: Record, readiness: Readiness, serve_container: str) -> tuple[str, str | None]:
    """Start the run's watcher. Returns its name ('' when none) and, when none, why."""
    socket = dk.local_socket()
    if socket is None:
        return "", "no restart watcher on a host reached over ssh:// or tcp:// (restarts are recorded by `status`)"
    run_dir = runs.dir(record.run_id)
    shutil.copyfile(program.__file__, run_dir / "watcher.py")
    name = watcher_name(record.run_id)
    command = [
        "-I",
        "/labctl-run/watcher.py",
        f"--run-id={record.run_id}",
        f"--name={name}",
        f"--container={serve_container}",
        f"--probe-url={record.base_url.removesuffix('/v1')}{record.probe}",
        f"--probe-timeout={record.probe_timeout_s:g}",
        f"--interval={readiness.watch_interval_s:g}",
        f"--failures={readiness.hung_after_failures}",
    ]
    tried = []
    for image in watcher_images(record):
        if dk.image_facts(image) is None:
            tried.append(f"{image} is not on this host")
            continue
        spec = dk.WatcherSpec(
            name=name,
            image=image,
            run_id=record.run_id,
            home=str(runs.home),
            run_dir=str(run_dir),
            socket=str(socket),
            user=f"{os.geteuid()}:{socket.stat().st_gid}",  # the socket's group is the docker group
            command=command,
        )
        try:
            dk.start_watcher(spec)
            return name, None
        except LabctlError as exc:  # an image without python3
            remove(record.run_id)
            tried.append(f"{image}: {exc}")
    return "", f"no restart watcher ({'; '.join(tried)}); `labctl status` records restarts instead"


def watcher_images(record: Record) -> list[str]:
    """LABCTL_WATCH_IMAGE when set; else the lab's base image, else the engine's own image (already on the
    host; the Python engines' images all carry python3)."""
    chosen = os.environ.get("LABCTL_WATCH_IMAGE")
    if chosen:
        return [chosen]
    return [DEFAULT_IMAGE, *([record.image.image_id] if record.image.image_id else [])]


def remove(run_id: str) -> None:
    for container in dk.watchers(run_id):
        _remove(container)


def _remove(container: Any) -> None:
    try:
        dk.remove_containers([container])
    except LabctlError as exc:  # the watcher saw its run end and is removing itself
        if "already in progress" not in str(exc) and "No such container" not in str(exc):
            raise


def reconcile_watchers(runs: Runs) -> list[str]:
    """Watchers whose run has no serve container any more, or whose record says it ended (a SIGKILLed
    `up`, a `docker rm` by hand), are removed; a stopped watcher of a live run (`docker stop` by hand) is
    started again. Each is said."""
    done = []
    for container in dk.watchers():
        labels = dk.labels_of(container)
        run_id = labels.get(dk.WATCH_LABEL, "")
        home = Runs(Path(labels["labctl.home"])) if labels.get("labctl.home") else runs
        record = home.try_load(run_id) if run_id else None
        serving = any(dk.service_of(c) == "serve" for c in dk.labctl_containers(run_id=run_id)) if run_id else False
        if not serving or (record is not None and record.status in ENDED):
            _remove(container)
            done.append(f"removed the restart watcher of run {run_id}: its run is no longer up")
        elif dk.container_state(container)["status"] in ("exited", "created"):  # not while Docker restarts it
            dk.start_container(container)
            done.append(f"started the restart watcher of run {run_id} again (it was stopped)")
    return done


def replay(runs: Runs, record: Record) -> int:
    """Record restarts Docker still remembers that no watcher recorded (de-duplicated by Docker's event
    time): the fallback when a watcher could not run or was down. Returns how many were new."""
    since = record.created_at or now()
    events = dk.events_between(f"labctl.run_id={record.run_id}", since, now())
    try:
        return program.append_new(runs.dir(record.run_id), program.restart_entries(events, "labctl status"))
    except OSError as exc:
        raise LabctlError(f"could not record the restarts of run {record.run_id}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Restarts:
    count: int
    last_at: str | None
    last_event: str | None
    last_exit_code: int | None

    def describe(self) -> str:
        if not self.count:
            return "none recorded"
        code = f", exit code {self.last_exit_code}" if self.last_exit_code is not None else ""
        return f"{self.count} (last: {self.last_event} at {self.last_at}{code})"


def recorded_restarts(runs: Runs, run_id: str) -> Restarts:
    events = [e for e in program.read_events(runs.dir(run_id) / "events.jsonl") if e.get("event") in RESTART_EVENTS]
    last = events[-1] if events else {}
    code = last.get("exit_code")
    return Restarts(
        count=len(events),
        last_at=last.get("at"),
        last_event=last.get("event"),
        last_exit_code=code if isinstance(code, int) else None,
    )
