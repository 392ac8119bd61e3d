"""`bench` on a run of a remote host: labctl's own client runs on that host, in a container of labctl's
image with host networking (labctl/bench/bench_job.py), so the network between this controller and the GPU
host never enters TTFT. Each run of a level is one job: the controller makes its prompts (the workload's
dataset and the model's tokenizer are here), the client sends them and streams every measured request
back; the controller keeps everything else — repeats, intervals, the per-request file, telemetry, the
capacity search — exactly as for a local run.

Request times stay in the host's own monotonic clock (the clock the engine there stamps its tokens with);
only the measuring window is mapped onto this controller's clock, for telemetry, by the smallest observed
(receive - send) offset of the client's messages."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labctl.bench.level_job import (
    MODULE,
    PROTOCOL,
    LevelJob,
    event_of,
    outcome_of,
    protocol_refusal,
    request_of,
)
from labctl.bench.runner import LevelOutcome, LevelProgress
from labctl.catalog.hosts_file import HostEntry
from labctl.errors import LabctlError
from labctl.host.remote.client_container import client_image, ensure_client_image, run_job
from labctl.host.remote.hosts import endpoint_url
from labctl.run.records.record import Record

Progress = Callable[[str, int, int], None]


def engine_address(record: Record) -> str:
    """The engine's base URL as seen on its own host (it binds there; the client shares its network)."""
    bind = record.endpoint.host or "127.0.0.1"
    reach = "127.0.0.1" if bind in ("0.0.0.0", "::", "") else bind
    return f"http://{reach}:{record.endpoint.port}/v1"


@dataclass
class OnHost:
    """One host's client for a whole bench: which image runs it, where, and what it said about itself."""

    host: HostEntry
    bench_id: str
    image: str = ""
    image_digests: tuple[str, ...] = ()
    environment: dict[str, Any] = field(default_factory=dict)
    jobs: int = 0

    def prepare(self) -> None:
        """The protocol check in run_level guards a host that could not pull the current client image."""
        self.image = client_image()
        self.image_digests = ensure_client_image(self.image, self.host)

    def describe(self) -> dict[str, Any]:
        return {
            **self.environment,
            "ran_on": self.host.name,
            "docker_endpoint": self.host.docker,
            "container_image": self.image,
            "container_image_digests": list(self.image_digests),
            "network": "host",
            "clock": f"request times are the monotonic clock of {self.host.name}, where the client ran",
        }

    def run_level(self, job: LevelJob, progress: Progress, partial: LevelProgress) -> LevelOutcome:
        """One run of one level on the host. Fills `partial` as requests come back (so that Ctrl-C keeps
        them); raises TimeoutError when the client passed the deadline, as the local runner does."""
        if not self.image:
            self.prepare()
        self.jobs += 1
        name = f"labctl-bench-{self.bench_id}-{self.jobs}"
        clock = _Offset()
        final: dict[str, Any] | None = None
        partial.cpu_started = time.process_time()
        for line in run_job(endpoint_url(self.host), self.image, name, MODULE, job.encode(), job.deadline + 300):
            event = event_of(line, f"on {self.host.name}")
            if event is None:
                continue  # not ours (a warning printed by Python): the events are what count
            clock.saw(event.get("now"))
            kind = event.get("event")
            if kind == "client":
                if event.get("protocol") != PROTOCOL:
                    raise protocol_refusal(event.get("protocol", 1), self.image, self.host.name)
                if isinstance(event.get("environment"), dict):
                    self.environment = event["environment"]
            elif kind == "request":
                partial.results.append(request_of(event.get("line")))
                partial.started = clock.here(event.get("started"))
            elif kind == "progress":
                progress(str(event.get("phase", "")), int(event.get("done", 0)), int(event.get("total", 0)))
            elif kind == "error":
                raise LabctlError(f"the bench client on {self.host.name} refused the job: {event.get('message')}")
            elif kind in ("level", "timed_out"):
                final = event
        if final is None:
            raise LabctlError(f"the bench client on {self.host.name} ended without saying it finished")
        partial.started = clock.here(final.get("started"))
        if final["event"] == "timed_out":
            raise TimeoutError
        outcome = outcome_of(final, job, list(partial.results))
        outcome.started = partial.started
        return outcome


class _Offset:
    """This controller's clock minus the host's: the smallest (receive - send) seen, the least delayed."""

    def __init__(self) -> None:
        self.offset: float | None = None

    def saw(self, sent: Any) -> None:
        if isinstance(sent, int | float) and math.isfinite(sent):
            gap = time.perf_counter() - float(sent)
            self.offset = gap if self.offset is None else min(self.offset, gap)

    def here(self, host_time: Any) -> float | None:
        if not isinstance(host_time, int | float) or not math.isfinite(host_time) or self.offset is None:
            return None
        return float(host_time) + self.offset
