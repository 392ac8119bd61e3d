"""The restart watcher of a resident run on a remote (ssh://) host (see host/watcher/on_remote.py): the same
program as on a local host (host/watcher/program.py), with its files in a volume on that host instead of the run's
folder; what it records is read back into the run's events log here at `status` and `down`."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.specs import Readiness
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.watcher import on_remote as on_host
from labctl.host.watcher import program
from labctl.run.records.record import Record
from labctl.run.records.store import Runs
from labctl.run.resident.watch import RESTART_EVENTS, remove, watcher_images, watcher_name


def start(
    runs: Runs, record: Record, readiness: Readiness, serve_container: str, host: HostEntry, daemon_id: str
) -> tuple[str, str | None]:
    """Start the run's watcher on its host. Returns its name ('' when none) and, when none, why."""
    name = watcher_name(record.run_id)
    bind = record.endpoint.host or "127.0.0.1"
    reach = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    probe_url = f"http://{f'[{reach}]' if ':' in reach else reach}:{record.endpoint.port}{record.probe}"
    command = [
        "-I",
        "/labctl-run/watcher.py",
        f"--run-id={record.run_id}",
        f"--name={name}",
        f"--container={serve_container}",
        f"--probe-url={probe_url}",  # the engine's own address on its host: the watcher runs there
        f"--probe-timeout={record.probe_timeout_s:g}",
        f"--interval={readiness.watch_interval_s:g}",
        f"--failures={readiness.hung_after_failures}",
    ]
    source = Path(program.__file__).read_text(encoding="utf-8")
    tried = []
    for image in watcher_images(record):
        if dk.image_facts(image) is None:
            tried.append(f"{image} is not on host {host.name}")
            continue
        try:
            volume = on_host.install(record.run_id, dk.WATCH_LABEL, source, image, host.socket, daemon_id)
            spec = dk.WatcherSpec(
                name=name,
                image=image,
                run_id=record.run_id,
                home=str(runs.home),
                run_dir=volume,
                socket=host.socket,
                user="0:0",  # without capabilities: the socket (root's) and the volume (root's) are all it opens
                command=command,
            )
            dk.start_watcher(spec)
            return name, None
        except LabctlError as exc:
            remove(record.run_id)
            tried.append(f"{image}: {exc}")
    with contextlib.suppress(LabctlError):
        on_host.remove(record.run_id)
    return "", (
        f"no restart watcher on host {host.name} ({'; '.join(tried)}; its socket there: {host.socket}, the host "
        "entry's `socket:`); `labctl status` records restarts instead"
    )


def collect(runs: Runs, record: Record) -> int:
    """Append what the run's watcher recorded on its host to the run's events log here (de-duplicated by
    Docker's event time, like the fallback replay). Returns how many were new."""
    text = on_host.read_file(watcher_name(record.run_id), "events.jsonl")
    entries = []
    for line in (text or "").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") in RESTART_EVENTS and entry.get("docker_time_nano"):
            entries.append(entry)
    try:
        return program.append_new(runs.dir(record.run_id), entries)
    except OSError as exc:
        raise LabctlError(f"could not record the restarts of run {record.run_id}: {exc}") from None


def remove_volume(run_id: str) -> bool:
    return on_host.remove(run_id)
