"""One run of one level as a job for a bench client process (labctl/bench/bench_job.py) — on a remote host,
or one of the worker processes a sharded level uses (labctl/bench/shards.py) — and the events it writes
back, read as data: bounded, finite, typed, or refused in one line."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from labctl.bench.client import RequestResult, Target
from labctl.bench.request_lines import result_of
from labctl.bench.runner import LevelOutcome, LevelPrompts
from labctl.bench.workloads import Workload
from labctl.errors import LabctlError

# The job's shape. 3: a prompt may carry its trace arrival (at_s). 4: a job may ask for worker processes
# (client_workers) and, as one of them, wait after its warm-up for the common start (barrier). A controller
# and a client image that disagree say so instead of guessing.
PROTOCOL = 4
MODULE = "labctl.bench.bench_job"
MAX_WORKERS = 64
MAX_LINE = 16 * 1024 * 1024  # one request's line: its inter-token gaps


@dataclass(frozen=True)
class LevelJob:
    """One run of one level for a client process."""

    target: Target  # the engine's address where the client runs
    workload: Workload
    concurrency: int
    level: int
    repeat: int
    prompts: LevelPrompts
    request_timeout: float | None
    deadline: float  # seconds the client may take
    workers: int = 1  # client processes sharing the streams

    def encode(self, barrier: bool = False) -> bytes:
        job: dict[str, Any] = {
            "protocol": PROTOCOL,
            "workload": {"name": self.workload.name, "spec": self.workload.spec},
            "target": {"base_url": self.target.base_url, "model": self.target.model, "thinking": self.target.thinking},
            "api_key": self.target.api_key,  # stdin only, never argv
            "concurrency": self.concurrency,
            "level": self.level,
            "repeat": self.repeat,
            "prompts": {
                "warm": [dataclasses.asdict(p) for p in self.prompts.warm],
                "measured": [dataclasses.asdict(p) for p in self.prompts.measured],
            },
            "request_timeout": self.request_timeout,
            "deadline": self.deadline,
            "client_workers": self.workers,
            "barrier": barrier,
        }
        return json.dumps(job).encode()


def outcome_of(final: dict[str, Any], job: LevelJob, results: list[RequestResult]) -> LevelOutcome:
    """A client's last event (`level`) as its job's outcome; older client images say none of the optional parts."""
    outcome = LevelOutcome(
        job.concurrency,
        results,
        number(final.get("duration_s")),
        number(final.get("client_cpu_s")),
        job.workload.spec["request_rate"],
    )
    outcome.unsent = int(number(final.get("unsent") or 0))
    outcome.duration_limit_s = optional_number(final.get("duration_limit_s"))
    outcome.loop_late_p99_ms = optional_number(final.get("loop_late_p99_ms"))
    outcome.loop_late_max_ms = optional_number(final.get("loop_late_max_ms"))
    outcome.workers = max(1, int(number(final.get("client_workers") or 1)))
    outcome.busiest_cpu_share = optional_number(final.get("client_cpu_busiest_share"))
    return outcome


def event_of(line: str | bytes, who: str) -> dict[str, Any] | None:
    """One line a client wrote, as an event; None for a line that is not one (a warning printed by Python)."""
    if len(line) > MAX_LINE:
        raise LabctlError(f"the bench client {who} sent a line of {len(line)} bytes; refusing it")
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


def request_of(line: Any) -> RequestResult:
    try:
        result = result_of(line)
    except (KeyError, TypeError, ValueError) as exc:
        raise LabctlError(f"the bench client sent a malformed request line: {type(exc).__name__}: {exc}") from None
    times = [result.sent, result.scheduled, *(result.chunk_times or [])]
    if not all(isinstance(t, int | float) and math.isfinite(t) for t in times):
        raise LabctlError("the bench client sent a request with a time that is not a finite number")
    return result


def optional_number(value: Any) -> float | None:
    return None if value is None else number(value)


def number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise LabctlError(f"the bench client sent {value!r} where a duration belongs")
    return float(value)


def protocol_refusal(spoken: Any, image: str, where: str) -> LabctlError:
    return LabctlError(
        f"the bench client image {image} on {where} speaks protocol {spoken!r}, this labctl {PROTOCOL}: push this "
        "labctl's client image (make harness-image) or name a matching one with LABCTL_CLIENT_IMAGE."
    )
