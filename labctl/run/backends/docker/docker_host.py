"""A Docker host as a backend (this machine, a simulated host, or an SSH host): labctl itself chooses the GPUs
(the on-host claims), starts the engine with `docker compose` and watches it through the host's Docker."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import parse_gpu_ids
from labctl.run.backends.backend import Leftover, Say, StatusSection, StopRequest
from labctl.run.lifecycle.down import Stopped, stop, stop_run
from labctl.run.lifecycle.host_inventory import host_timeout
from labctl.run.lifecycle.reproduce import ReproduceRequest
from labctl.run.lifecycle.reproduce import reproduce as rebuild
from labctl.run.lifecycle.status import HostSection, LogView, engine_logs, host_sections
from labctl.run.lifecycle.up import up
from labctl.run.lifecycle.up_plan import UpRequest
from labctl.run.records.prep_view import prep_rows
from labctl.run.records.record import Record
from labctl.run.records.store import Runs
from labctl.run.resident.lockdown import describe_engine_port, describe_open

HEADER = ("RUN", "ENGINE/PROFILE", "GPUS", "BASE URL", "HEALTH", "UP", "OWNER", "SINCE", "RESTARTS", "RESIDENT")
STATUS_HEADER = (*HEADER, "REQUESTS", "TOKENS")


@dataclass(frozen=True)
class DockerHost:
    host: HostEntry

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def queues(self) -> bool:
        return False

    def parse_gpus(self, text: str | None) -> list[str] | None:
        return parse_gpu_ids(text)

    def start(self, lab: Lab, runs: Runs, request: UpRequest, say: Say, progress: Say | None = None) -> Record:
        return up(lab, runs, dataclasses.replace(request, host=self.host), say=say, progress=progress)

    def ready_lines(self, record: Record) -> list[str]:
        t = record.timings
        identity = (
            f"digest {record.image.digest}" if record.image.digest else f"image id {record.image.image_id or '?'}"
        )
        lines = [
            f"ready: {record.engine}/{record.profile} run {record.run_id}",
            f"  OpenAI base URL  {record.base_url}  (model {record.served_model_name})",
            f"  image            {record.image.reference}  {identity}",
        ]
        if record.image.copied:
            lines.append(
                f"  image copy       runs as {record.image.image_id} on {record.host_entry}: {record.image.copied}"
            )
        if record.gpus.devices:
            names = ", ".join(f"{g.index} {g.name} {g.uuid}" for g in record.gpus.devices)
            simulated = "  (simulated GPU: harness-check)" if record.gpus.simulated else ""
            lines.append(f"  GPUs             {names}{simulated}")
        lines.append(f"  cold start       {t.cold_start_s} s (port open {t.port_open_s} s, ready {t.ready_s} s)")
        lines += [f"  {name:<16} {text}" for name, text in prep_rows(record.prep)]
        lines.append(f"  record           {record.record_path}")
        if record.resident:
            r = record.resident
            lines.append(
                f"  resident         restart {r.restart_policy}, {r.keys} API key(s); "
                f"share access with: labctl share {record.run_id}"
            )
            if r.keys:
                lines.append(f"  {'':<16} {describe_open(r.open_paths, r.open_model_paths, record.probe)}")
            engine_port = describe_engine_port(r, record.host_entry)
            if engine_port:
                lines.append(f"  {'':<16} {engine_port}")
        return [*lines, f"  stop it with     labctl down {record.run_id}"]

    def summary(self, record: Record) -> dict[str, Any]:
        return record.summary()

    def reproduce(
        self, lab: Lab, runs: Runs, request: ReproduceRequest, say: Say, progress: Say | None = None
    ) -> Record:
        return rebuild(lab, runs, dataclasses.replace(request, host=self.host), say=say, progress=progress)

    def stop(self, runs: Runs, request: StopRequest) -> list[Stopped]:
        """`labctl down`'s choice of runs and owner rule; a program stopping its own run (`by`) skips both."""
        if request.by is not None and request.target is not None:
            record = runs.try_load(request.target)
            problems = stop_run(runs, request.target, by=request.by, reason=request.reason)
            engine, profile = (record.engine, record.profile) if record is not None else ("", "")
            return [Stopped(request.target, engine, profile, tuple(problems))]
        return stop(
            runs, request.target, request.reason, request.force, request.all_runs, request.confirm, host=self.host
        )

    def status(self, runs: Runs) -> list[StatusSection]:
        return [status_section(s) for s in host_sections(runs, [self.host], host_timeout())]

    def logs(self, runs: Runs, run_id: str, view: LogView, service: str) -> Iterator[str]:
        return engine_logs(runs, run_id, view, service)

    def run_host(self, record: Record) -> HostEntry | None:
        return self.host

    def on_run_host(self, record: Record) -> AbstractContextManager[None]:
        return nullcontext()  # the host's Docker is the one this process drives already

    def placed_facts(self, record: Record) -> dict[str, Any]:
        return {"gpu_ids": list(record.gpus.ids)}  # where the claims placed it

    def leftovers(self, remove: bool) -> list[Leftover]:
        return []  # a host's containers are reconciled with their records by `status`


def status_section(section: HostSection) -> StatusSection:
    host = section.host
    notes = list(section.notes)
    # A host that did not answer leaves the listing incomplete: said, and the command exits 1 (never [] and 0).
    unreachable = [] if section.reachable else [f"host {host.name} ({host.docker}): {section.problem}"]
    skips = (
        unreachable
        + [
            f"run {run['run_id']} is listed from its container labels alone: {run['record_problem']}"
            for run in section.runs
            if run.get("record_problem")
        ]
        + list(section.unrecorded)
    )
    return StatusSection(
        title=f"host {host.name} ({host.docker})",
        header=STATUS_HEADER,
        rows=tuple(status_row(r) for r in section.runs),
        json_rows=tuple(section.runs),
        notes=tuple(notes),
        skips=tuple(skips),
        problem="" if section.reachable else section.problem,
        unreachable=None if section.reachable else (host.name, section.problem),
        empty="no labctl engine is running on this host",
    )


def status_row(r: dict[str, Any]) -> tuple[str, ...]:
    return (
        r["run_id"],
        f"{r['engine']}/{r['profile']}",
        ",".join(r["gpus"]) or "-",
        r["base_url"],
        r["health"],
        uptime_text(r["uptime_s"]),
        r["owner"],
        r["since"][:19],
        str(r["restarts_recorded"] if r["restarts_recorded"] is not None else r["restarts"]),
        "yes" if r["resident"] else "no",
        count_text(r["requests_served"]),
        count_text(r["tokens_served"]),
    )


def count_text(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def uptime_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
