"""What a bench is asked (BenchRequest), and everything about the command itself that is refused before
anything is sent or written."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from labctl.bench.level_job import MAX_WORKERS
from labctl.bench.tokens import spelled_as_path
from labctl.bench.workloads import Workload
from labctl.catalog.batch_cap import BatchCap, CapRule
from labctl.catalog.engine_metrics import Telemetry
from labctl.catalog.hosts_file import HostEntry
from labctl.catalog.hub_names import is_repo_id
from labctl.catalog.limits import check_seconds
from labctl.catalog.profiles import printable
from labctl.errors import BadInput
from labctl.run.records.record import Record

# One request: a long answer from a busy engine finishes in a minute or two; ten minutes hid hangs.
REQUEST_TIMEOUT = 120.0

# The whole command: a long sweep takes hours; after this a hostile or stuck endpoint has had enough.
BENCH_DEADLINE = 6 * 3600.0

MAX_REPEAT = 100

# A level where more than this share of the requests failed is `partial`: its numbers are not the engine's.
MAX_ERROR_RATE = 0.10


@dataclass
class BenchRequest:
    workload: Workload | None
    run_id: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    force: bool = False
    request_timeout: float = REQUEST_TIMEOUT
    deadline: float = BENCH_DEADLINE
    environment_label: str = "external"
    thinking: str | None = None  # an external endpoint: "off" asks every chat request not to think
    find_max_rate: bool = False  # search the rates (labctl.bench.capacity) instead of sweeping the workload's
    tokenizer: str | None = None  # a model folder, or a Hub id with a cached tokenizer, counting lengths
    repeat: int = 1  # each level runs this many times; intervals then come from the per-run values
    telemetry: bool = True
    # The host this bench drives (labctl hosts): GPU samples come from its nvidia-smi; for a run on a remote
    # host the client itself runs there (bench/remote_client.py).
    host: HostEntry | None = None
    allow_shared_engine: bool = False  # measure even while another bench or eval holds the engine (recorded)
    wait_for_engine: float = 0.0  # seconds to wait for another bench or eval on the engine to finish
    max_error_rate: float = MAX_ERROR_RATE  # above this share of failed requests, a level is partial
    engines: Telemetry = field(default_factory=Telemetry)  # the lab's engines' metric names and routes
    batch_caps: Mapping[str, CapRule] = field(default_factory=dict)  # how each engine's batch cap is read
    # the first of the workload's prompts this bench sends: a study's later benches start past the earlier
    # ones' (labctl.bench.prompt_slots), so that no prompt reaches one engine twice
    prompt_start: int = 0
    # client processes that share each level's streams (labctl/bench/shards.py): one event loop on one core
    # cannot time over a thousand streams right; where the client runs (here or on the run's host)
    client_workers: int = 1


# (phase, done, total, whole-sweep ETA in seconds or None)
SweepProgress = Callable[[str, int, int, float | None], None]


def check_batch_limits(record: Record, workload: Workload, force: bool) -> int | None:
    build = (record.resolved_profile or {}).get("build") or None
    if not build:
        return None
    limit = int(build["max_batch_size"])
    over = [c for c in workload.concurrency if c > limit]
    if over and not force:
        raise BadInput(
            f"run {record.run_id}'s TensorRT engine was built with max_batch_size {limit}; concurrency "
            f"{', '.join(map(str, over))} would queue inside the engine and inflate TTFT. Drop those levels "
            "(--concurrency) or pass --allow-over-batch-limit (the levels are then marked)."
        )
    return limit


def run_batch_cap(record: Record, rules: Mapping[str, CapRule]) -> BatchCap:
    """The batch cap the run's engine has: read from the command line its container runs, else the defaults
    its engine folder states."""
    rule = rules.get(record.engine)
    if rule is None:
        return BatchCap(None, source=f"engine {record.engine!r} is not one of this lab's: its settings are unknown")
    argv = record.container.command_line if record.container is not None else ()
    if not argv:
        return BatchCap(None, source="the run's command line was not recorded")
    return rule.read(argv, "the run's command line")


def check_engine_wait(seconds: float) -> None:
    if not (math.isfinite(seconds) and 0 <= seconds <= BENCH_DEADLINE):
        raise BadInput(f"--wait-for-engine {seconds:g}: give seconds from 0 to {BENCH_DEADLINE:g}.")


def check_names(request: BenchRequest) -> None:
    """The names a bench or eval writes into a record or result, shown later on terminals and pages."""
    for flag, value in (("--environment-label", request.environment_label), ("--model", request.model)):
        if value is not None and not printable(value):
            raise BadInput(f"{flag} {value[:60]!r}: control characters (ESC, a newline, …) are refused in a name.")
    if not request.environment_label.strip():
        raise BadInput("--environment-label '': give a short label for the endpoint, e.g. staging-h100.")
    tokenizer = request.tokenizer
    a_folder = tokenizer is not None and (spelled_as_path(tokenizer) or Path(tokenizer).expanduser().is_dir())
    if tokenizer is not None and not (printable(tokenizer) and (is_repo_id(tokenizer) or a_folder)):
        raise BadInput(
            f"--tokenizer {tokenizer[:80]!r}: give a model folder holding tokenizer.json, or a Hub repository id "
            "(owner/name) whose tokenizer is in the HF cache, or leave it out for the run's model."
        )


def check_request(request: BenchRequest, workload: Workload) -> None:
    """Everything about the command itself that can be refused before anything is sent or written."""
    check_names(request)
    check_seconds("--request-timeout", request.request_timeout)
    check_seconds("--deadline", request.deadline)
    check_engine_wait(request.wait_for_engine)
    if not 0.0 <= request.max_error_rate <= 1.0:
        raise BadInput(f"--max-error-rate {request.max_error_rate:g}: give a share from 0 to 1 (0.1 is 10 %).")
    if not 1 <= request.repeat <= MAX_REPEAT:
        raise BadInput(f"--repeat {request.repeat}: give a whole number from 1 to {MAX_REPEAT}.")
    if not 1 <= request.client_workers <= MAX_WORKERS:
        raise BadInput(
            f"--client-workers {request.client_workers}: give a whole number from 1 to {MAX_WORKERS} (one process per "
            "core the client may use)."
        )
    if request.find_max_rate and not workload.slo:
        raise BadInput("--find-max-rate needs an SLO: give --slo ttft_ms=…,tpot_ms=… or an slo: in the workload.")
    if request.find_max_rate and workload.dataset_kind == "multi-turn":
        raise BadInput(
            "--find-max-rate searches arrival rates; multi-turn sessions run closed loop. Pick another workload."
        )
