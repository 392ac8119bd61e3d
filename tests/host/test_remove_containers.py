"""Removing containers that vanished meanwhile (a watcher removing itself as `down` removes it) is not an error."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from helpers.lifecycle_helpers import IMAGE
from helpers.support import _missing, docker_available

from labctl.host.docker import daemon as dk

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]


def test_a_container_gone_before_its_removal_is_removed_without_an_error() -> None:
    if not docker_available():
        _missing("no Docker Engine answers")
    names = [f"labctl-test-vanish-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        subprocess.run(["docker", "create", "--name", name, IMAGE], check=True, capture_output=True)
    try:
        # Listed as labctl lists its watchers: by id, their names not yet asked for.
        found = dk.client().container.list(all=True, filters=[("name", "labctl-test-vanish-")])
        found = [container for container in found if str(container) in _ids(names)]
        subprocess.run(["docker", "rm", "-f", names[0]], check=True, capture_output=True)
        dk.remove_containers(found)  # names[0] is gone by now: its removal already happened
        left = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={names[1]}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", "the container still there was removed"
    finally:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True)


def _ids(names: list[str]) -> set[str]:
    done = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", *names], capture_output=True, text=True, check=True)
    return set(done.stdout.split())
