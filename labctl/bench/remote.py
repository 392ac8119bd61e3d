"""`bench` on a run of a remote host: labctl's own client runs on that host, in a container of labctl's
image with host networking (labctl/bench/on_host.py), so the network between this controller and the GPU
host never enters TTFT. Its level summaries come back as JSON lines and are stored here, beside the run's
record, with where the client ran."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from labctl.bench.client import Target
from labctl.bench.workloads import Workload
from labctl.errors import LabctlError
from labctl.host import docker as dk
from labctl.host.client_container import run_job
from labctl.host.hosts import HostEntry
from labctl.run.record import Record

MODULE = "labctl.bench.on_host"
DEFAULT_CLIENT_IMAGE = "127.0.0.1:5000/labctl/harness:dev"


def client_image() -> str:
    """labctl's own image (the harness image carries the bench client); LABCTL_CLIENT_IMAGE names another."""
    return os.environ.get("LABCTL_CLIENT_IMAGE") or DEFAULT_CLIENT_IMAGE


def engine_address(record: Record) -> str:
    """The engine's base URL as seen on its own host (it binds there; the client shares its network)."""
    bind = record.endpoint.host or "127.0.0.1"
    reach = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    return f"http://{reach}:{record.endpoint.port}/v1"


def job_for(target: Target, workload: Workload, request_timeout: float, deadline: float) -> bytes:
    """What the client on the host needs: the validated spec (random prompts: the host has no copy of this
    lab's dataset files), the target, and limits."""
    job: dict[str, Any] = {
        "workload": {"name": workload.name, "spec": workload.spec},
        "target": {"base_url": target.base_url, "model": target.model, "thinking": target.thinking},
        "api_key": target.api_key,
        "request_timeout": request_timeout,
        "deadline": deadline,
        "dataset_text": None,
    }
    return json.dumps(job).encode()


def run_on_host(
    host: HostEntry,
    endpoint: str,
    bench_id: str,
    target: Target,
    workload: Workload,
    request_timeout: float,
    deadline: float,
    on_level: Callable[[dict[str, Any]], None],
) -> tuple[dict[str, Any], str]:
    """Run every level on the host; returns (the client's environment, how it ended: done | timed_out)."""
    image = client_image()
    facts = dk.image_facts(image) or dk.pull(image, quiet=True)  # which image exactly runs the client
    environment: dict[str, Any] = {}
    ended = ""
    job = job_for(target, workload, request_timeout, deadline)
    for line in run_job(endpoint, image, f"labctl-bench-{bench_id}", MODULE, job, deadline + 300):
        try:
            event = json.loads(line)
        except ValueError:
            continue  # not ours (a warning printed by Python): the events are what count
        kind = event.get("event")
        if kind == "client":
            environment = {
                **event["environment"],
                "ran_on": host.name,
                "docker_endpoint": host.docker,
                "container_image": image,
                "container_image_digests": list(facts.repo_digests),
                "network": "host",
            }
        elif kind == "level":
            on_level(event["summary"])
        elif kind == "error":
            raise LabctlError(f"the bench client on {host.name} refused the job: {event.get('message')}")
        elif kind in ("done", "timed_out"):
            ended = kind
    if not ended:
        raise LabctlError(f"the bench client on {host.name} ended without saying it finished")
    return environment, ended
