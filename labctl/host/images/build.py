"""Building an image on the Docker host: `docker build` with the legacy builder (no buildx needed, and it works
with Debian 12's daemon), each build step reported as it starts, and a push to the image's registry when that
registry answers."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from labctl.catalog.image import ImageRef
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.images import registry

_STEP = re.compile(r"Step \d+/\d+ : ")
MAX_SHOWN = 160  # a step line as shown: a long RUN line is cut, not wrapped over the screen


@dataclass(frozen=True)
class Built:
    image_id: str
    seconds: float
    steps: int


def build_image(context: Path, tag: str, build_args: dict[str, str], step: Callable[[str], None]) -> Built:
    """Build `context` (its Dockerfile) as `tag`; `step` hears each "Step N/M : …" line as Docker starts it.
    A failed build raises with Docker's last lines and the command."""
    argv = [*dk.cli_argv(), "build", "--tag", tag]
    argv += [f"--build-arg={name}={value}" for name, value in sorted(build_args.items())]
    argv.append(str(context))
    start, steps, tail = time.monotonic(), 0, deque[str](maxlen=12)
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip()
                tail.append(line)
                if _STEP.match(line):
                    steps += 1
                    step(line[:MAX_SHOWN])
            code = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM: the build stops with labctl
            proc.kill()
            raise
    if code != 0:
        raise LabctlError(
            f"building {tag} failed (exit code {code}): {' | '.join(tail)} (command: DOCKER_BUILDKIT=0 "
            f"{' '.join(argv)})"
        )
    facts = dk.image_facts(tag)
    if facts is None:
        raise LabctlError(f"docker build reported success but Docker does not list {tag}")
    return Built(facts.image_id, round(time.monotonic() - start, 3), steps)


def registry_answers(ref: ImageRef, daemon: dk.DaemonFacts) -> str | None:
    """The API address of the lab registry `ref` names, when it answers; None for a Docker Hub name (labctl
    pushes only to a lab's own registry) or a registry that does not answer."""
    found = registry.locate(ref, daemon.insecure_registries, daemon.insecure_cidrs)
    if found.host.endswith("docker.io"):
        return None
    try:
        with httpx.Client(timeout=httpx.Timeout(3.0), trust_env=False) as client:
            status = client.get(f"{found.api}/v2/").status_code
    except httpx.HTTPError:
        return None
    return found.api if status in (200, 401) else None


def push_image(tag: str) -> None:
    with dk.docker_errors(f"pushing {tag}"):
        dk.client().image.push(tag, quiet=True)
