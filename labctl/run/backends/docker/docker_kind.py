"""Docker hosts (the hosts file's `hosts:`, this machine by default): every `--host` name no other kind of
backend claims, and every record without another kind's part."""

from __future__ import annotations

from pathlib import Path

from labctl.catalog.hosts_file import load_hosts
from labctl.catalog.lab import Lab
from labctl.run.backends.backend import StatusSection
from labctl.run.backends.docker.docker_host import DockerHost, status_section
from labctl.run.lifecycle.host_inventory import host_timeout, status_hosts
from labctl.run.lifecycle.status import host_sections
from labctl.run.records.record import Record
from labctl.run.records.store import Runs


class DockerKind:
    name = "docker"
    fallback = True  # asked last: a name or record no other kind claims is a Docker host's

    def find(self, lab_root: Path, name: str) -> DockerHost | None:
        return DockerHost(load_hosts(lab_root).get(name))

    def of_run(self, lab_root: Path, record: Record) -> DockerHost | None:
        return DockerHost(load_hosts(lab_root).get(record.host_entry))

    def status_all(self, lab: Lab, runs: Runs, only: str | None) -> list[StatusSection]:
        return [status_section(s) for s in host_sections(runs, status_hosts(lab, runs, only), host_timeout())]
