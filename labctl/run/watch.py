"""Restart watchers of resident deployments: started by `up`, removed by `down`, orphans cleared by any
`status`, and a fallback that replays Docker's own events when no watcher ran (see host/watcher.py for
why a sidecar container, and what it records)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

from labctl.errors import LabctlError
from labctl.host import docker as dk
from labctl.host import watcher as program
from labctl.run.record import Record
from labctl.run.store import ENDED, Runs, now

# Any image with python3 runs the watcher (its code is copied into the run's folder); the lab's offline
# base image is on every host `make docker-lab` set up, and the sandbox uses it too.
DEFAULT_IMAGE = "labctl/base:bookworm"
RESTART_EVENTS = ("restart", "hung-restart", "daemon-restart")


def watcher_name(run_id: str) -> str:
    return f"labctl-watch-{run_id}"


def start(runs: Runs, record: Record, readiness: dict[str, Any], serve_container: str) -> tuple[str, str | None]:
    """Start the run's watcher. Returns its name ('' when none) and, when none, why."""
    socket = dk.local_socket()
    if socket is None:
        return "", "no restart watcher on a host reached over ssh:// or tcp:// (restarts are recorded by `status`)"
    image = os.environ.get("LABCTL_WATCH_IMAGE", DEFAULT_IMAGE)
    if dk.image_facts(image) is None:
        return "", f"no restart watcher: its image {image} is missing here (make docker-lab); `status` records restarts"
    run_dir = runs.dir(record.run_id)
    shutil.copyfile(program.__file__, run_dir / "watcher.py")
    name = watcher_name(record.run_id)
    command = [
        "/labctl-run/watcher.py",
        f"--run-id={record.run_id}",
        f"--name={name}",
        f"--container={serve_container}",
        f"--probe-url={record.base_url.removesuffix('/v1')}{record.probe}",
        f"--probe-timeout={record.probe_timeout_s:g}",
        f"--interval={readiness['watch_interval_s']:g}",
        f"--failures={readiness['hung_after_failures']}",
    ]
    dk.start_watcher(
        dk.WatcherSpec(
            name=name,
            image=image,
            run_id=record.run_id,
            home=str(runs.home),
            run_dir=run_dir,
            socket=socket,
            user=f"{os.geteuid()}:{socket.stat().st_gid}",  # the socket's group is the docker group
            command=command,
        )
    )
    return name, None


def remove(run_id: str) -> None:
    dk.remove_containers(dk.watchers(run_id))


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
            dk.remove_containers([container])
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


def describe_resident(runs: Runs, record: Record) -> list[tuple[str, str]]:
    """`labctl show` rows for a resident run: its watcher and the restarts recorded (replayed first from
    Docker's events when the run is still up, so that `show` alone is enough)."""
    if record.resident is None:
        return []
    if record.status not in ENDED and dk.labctl_containers(run_id=record.run_id):
        replay(runs, record)
    watcher = record.resident.watcher or f"none ({record.resident.watcher_note or 'started before watchers'})"
    return [("watcher", watcher), ("restarts", recorded_restarts(runs, record.run_id).describe())]
