"""Docker hosts: this machine, a simulated host or an SSH host; labctl places the run on the host's GPUs."""

from __future__ import annotations

from labctl.run.backends.backend import BackendKind
from labctl.run.backends.docker.docker_kind import DockerKind

KIND: BackendKind = DockerKind()
