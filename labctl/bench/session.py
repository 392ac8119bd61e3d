"""labctl bench: resolve the target (a labctl run, or any OpenAI-compatible URL), check it answers,
run every level of the workload, and store the result beside the run's record."""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from labctl.bench import capacity
from labctl.bench.client import Target
from labctl.bench.environment import client_environment
from labctl.bench.intervals import RESAMPLES, SEED, combine_repeats, request_intervals
from labctl.bench.metrics import clean
from labctl.bench.remote_client import LevelJob, OnHost, engine_address
from labctl.bench.request_file import append_requests
from labctl.bench.results import find_result as find_typed_result
from labctl.bench.results import load_results
from labctl.bench.runner import (
    LevelOutcome,
    LevelProgress,
    Progress,
    check_open_files,
    client_failures,
    level_prompts,
    outcome_of,
    run_level,
)
from labctl.bench.sweep_plan import PlannedLevel, SweepClock, plan_levels, plan_line
from labctl.bench.telemetry import Window, peak_in_flight, summarise_engine, summarise_gpus
from labctl.bench.tokens import counter_for, spelled_as_path, tokenizer_counter
from labctl.bench.workloads import Workload, make_prompts
from labctl.catalog.engine_metrics import Telemetry
from labctl.catalog.hub_names import is_repo_id
from labctl.catalog.limits import check_seconds
from labctl.catalog.profiles import printable
from labctl.errors import BadInput, LabctlError
from labctl.host.engine.info import probe_engine_version, unauthorized
from labctl.host.engine.sampler import Sampler, plan_for
from labctl.host.gpus.lock import EngineHold, endpoint_key, engine_lock
from labctl.host.identity import writer, writer_gone
from labctl.host.remote.hosts import HostEntry
from labctl.run.records.record import Endpoint, Record, new_record, now
from labctl.run.records.store import (
    Runs,
    new_run_id,
    write_run_file,
)
from labctl.run.resident.keys import KeyStore

RESULT_SCHEMA = 1
# One request: a long answer from a busy engine finishes in a minute or two; ten minutes hid hangs.
REQUEST_TIMEOUT = 120.0
# The whole command: a long sweep takes hours; after this a hostile or stuck endpoint has had enough.
BENCH_DEADLINE = 6 * 3600.0
# GET /models: an honest list is a few KiB even with hundreds of models (a 240 MB answer took 4.4 GB).
MAX_MODELS_BYTES = 8 * 1024 * 1024
PREFLIGHT_SECONDS = 30.0
MAX_REPEAT = 100
# A level where more than this share of the requests failed is `partial`: its numbers are not the engine's.
MAX_ERROR_RATE = 0.10
# How many requests more than this client sent the engine may show in flight (a sample can catch a request
# the client has finished but the engine not yet) before the level is marked as shared.
IN_FLIGHT_SLACK = 1
SHARED_WARNING = "ENGINE SHARED"
BUSIER_WARNING = "ENGINE BUSIER THAN THIS CLIENT"
PARTIAL_WARNING = "PARTIAL"


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


# (phase, done, total, whole-sweep ETA in seconds or None)
SweepProgress = Callable[[str, int, int, float | None], None]


def new_bench_id() -> str:
    return "b" + new_run_id()


def resolve_target(runs: Runs, request: BenchRequest) -> tuple[Target, Record]:
    if request.run_id and (request.base_url or request.model):
        raise BadInput("give either RUN_ID or --base-url/--model, not both.")
    key, key_from = None, None
    if request.api_key_env:
        key, key_from = os.environ.get(request.api_key_env), f"from ${request.api_key_env}"
        if not key:
            raise BadInput(f"--api-key-env {request.api_key_env}: that variable is not set or empty.")
    if request.run_id:
        record = runs.load(request.run_id)
        if record.status != "running":
            raise BadInput(f"run {request.run_id} is {record.status}, not running: start it (or reproduce it) first.")
        if key is None and record.resident and record.resident.keys:
            key, key_from = KeyStore(runs.home).read(request.run_id)[0], f"run {request.run_id}'s stored key"
        thinking = record.engine_setup.thinking if record.engine_setup else None
        base = record.base_url
        host = request.host
        if host is not None and host.is_remote and record.host_entry == host.name and record.forward is not None:
            from labctl.run.remote import ensure_forward  # the forward may have died (a reboot, a killed ssh)

            base = ensure_forward(runs, record.run_id, host, record.forward).base + "/v1"
        return Target(base, record.served_model_name, key, thinking, key_from), record
    if not request.base_url or not request.model:
        raise BadInput("give a RUN_ID, or both --base-url URL and --model NAME.")
    base = request.base_url.rstrip("/")
    try:
        target = Target(base, request.model, key, request.thinking, key_from)
        target.parts  # noqa: B018 - validates the URL
    except ValueError as exc:
        raise BadInput(f"--base-url: {exc}, e.g. http://127.0.0.1:8000/v1.") from None
    return target, external_record(runs, target, request.environment_label)


def external_record(runs: Runs, target: Target, label: str) -> Record:
    """An endpoint labctl did not start still gets a run record, so its results are stored alike."""
    run_id = new_run_id()
    return new_record(
        run_id,
        "external",
        "-",
        target.model,
        Endpoint(base_url=target.base_url),
        None,
        label,
        status="external",
        record_path=str(runs.record_path(run_id)),
        accelerator="unknown",  # what serves an endpoint labctl did not start, it cannot know
    )


def engine_root(target: Target) -> str:
    """The server's own root, where engines answer /version and /server_info (the base URL ends in /v1)."""
    return target.base_url.rstrip("/").removesuffix("/v1")


def preflight(target: Target) -> dict[str, Any]:
    """The endpoint must answer, know the model and accept the key, before any load is sent."""
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        response, body = _get_bounded(f"{target.base_url}/models", headers)
    except httpx.HTTPError as exc:
        raise BadInput(
            f"{target.base_url} does not answer ({type(exc).__name__}: {exc}). Check the URL and that "
            "the engine is up (labctl status)."
        ) from None
    if response.status_code == 401:
        raise BadInput(unauthorized(target.base_url, target.key_from if target.api_key else None))
    if response.status_code != 200:
        text = body[:200].decode("utf-8", "replace")
        raise BadInput(f"GET {target.base_url}/models answered {response.status_code}: {text}")
    try:
        listed = [m.get("id") for m in json.loads(body).get("data", [])]
    except (ValueError, AttributeError, RecursionError):
        raise BadInput(
            f"GET {target.base_url}/models did not answer OpenAI's JSON: is this an OpenAI-compatible API?"
        ) from None
    if target.model not in listed:
        raise BadInput(
            f"model {target.model!r} is not served at {target.base_url} (it serves: {', '.join(map(str, listed))})."
        )
    return {"models": listed}


def _get_bounded(url: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    """GET with the body read as a stream: at most MAX_MODELS_BYTES, within PREFLIGHT_SECONDS in all."""
    started = time.monotonic()
    body = bytearray()
    with httpx.stream("GET", url, headers=headers, timeout=10) as response:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_MODELS_BYTES:
                raise BadInput(
                    f"GET {url} answered more than {MAX_MODELS_BYTES // (1024 * 1024)} MiB; an OpenAI model list "
                    "is a few KiB: is this the right endpoint?"
                )
            if time.monotonic() - started > PREFLIGHT_SECONDS:
                raise BadInput(f"GET {url} was still answering after {PREFLIGHT_SECONDS:g} s; is the endpoint stuck?")
    return response, bytes(body)


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


def memory_of(record: Record) -> dict[str, Any] | None:
    """The engine's memory option as it means it: one number, four meanings across engines."""
    setup = record.engine_setup
    if setup is None or setup.memory_setting is None:
        return None
    return {"setting": setup.memory_setting, "value": setup.memory_value, "meaning": setup.memory_meaning}


def engine_key(record: Record, target: Target) -> str:
    """What one bench at a time means: the engine's endpoint as this host reaches it (its address resolved, so
    `localhost` and `127.0.0.1` are one engine, and a run benched by id or by --base-url too); a run on a remote
    host, reached through a forward whose local port differs per controller, by its run id."""
    if record.status != "external" and record.forward is not None:
        return f"run {record.run_id}"
    host, port, tls, _ = target.parts
    return endpoint_key(host, port, tls)


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
    if request.find_max_rate and not workload.slo:
        raise BadInput("--find-max-rate needs an SLO: give --slo ttft_ms=…,tpot_ms=… or an slo: in the workload.")
    if request.find_max_rate and workload.dataset_kind == "multi-turn":
        raise BadInput(
            "--find-max-rate searches arrival rates; multi-turn sessions run closed loop. Pick another workload."
        )


def run_bench(
    runs: Runs, request: BenchRequest, progress: SweepProgress, say: Callable[[str], None]
) -> tuple[dict[str, Any], Path]:
    assert request.workload is not None
    workload = request.workload
    check_request(request, workload)
    end = time.monotonic() + request.deadline
    target, record = resolve_target(runs, request)
    limit = check_batch_limits(record, workload, request.force)
    remote = request.host is not None and request.host.is_remote and record.host_entry == request.host.name
    model_id = ((record.resolved_profile or {}).get("model") or {}).get("id") or target.model
    counter = tokenizer_counter(request.tokenizer) if request.tokenizer else counter_for(str(model_id))
    workload = workload.with_counter(counter)
    make_prompts(workload, 1, salt=0)  # a dataset without one usable prompt is refused before anything is written
    if not remote:  # the client's own sockets: enough open files for the top level, or refused now
        check_open_files(max(workload.concurrency))
    server = preflight(target)
    bench_id = new_bench_id()
    with engine_lock(
        engine_key(record, target),
        f"bench {bench_id}",
        request.wait_for_engine,
        request.allow_shared_engine,
    ) as hold:
        if record.status == "external":
            record = record.changed(engine_version=probe_engine_version(engine_root(target), target.api_key))
            runs.save(record)
        return _run_held(
            runs, request, progress, say, workload, target, record, limit, remote, server, bench_id, end, hold
        )


def _run_held(
    runs: Runs,
    request: BenchRequest,
    progress: SweepProgress,
    say: Callable[[str], None],
    workload: Workload,
    target: Target,
    record: Record,
    limit: int | None,
    remote: bool,
    server: dict[str, Any],
    bench_id: str,
    end: float,
    hold: EngineHold,
) -> tuple[dict[str, Any], Path]:
    path = runs.dir(record.run_id) / "bench" / f"{bench_id}.json"
    result: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA,
        "bench_id": bench_id,
        "run_id": record.run_id,
        "status": "running",
        "writer": writer(),  # a later reader that finds this process gone reads `running` as interrupted
        "created_at": now(),
        "finished_at": None,
        "target": {
            "base_url": target.base_url,
            "model": target.model,
            "engine": record.engine,
            "profile": record.profile,
            "environment_label": record.environment_label,
            "image_digest": record.image.digest,
            "engine_version": record.engine_version,
            "accelerator": record.accelerator_kind,
            "record": record.record_path,
            "max_batch_size": limit,
            "models": server["models"],
            "thinking": target.thinking,
            "memory": memory_of(record),
        },
        "workload": workload_facts(workload) | workload.counter.facts(),
        "client": client_environment(),
        "levels": [],
        "warnings": [],
        "max_error_rate": request.max_error_rate,
    }
    if not hold.held:
        result["shared_engine"] = {"allowed": True, "holder": hold.holder}
        say(f"warning: the engine is shared with {hold.holder} (--allow-shared-engine): every level is marked")
    if workload.overrides:
        say(
            f"workload {workload.name} with {workload.describe_overrides()} (sha256 {workload.sha256[:12]}; "
            f"the file's is {(workload.file_sha256 or '')[:12]})"
        )
    say(f"lengths in {workload.counter.unit}: {workload.counter.source}")
    on_host = OnHost(request.host, bench_id) if remote and request.host is not None else None
    if on_host is not None:
        result["target"]["base_url"] = engine_address(record)  # where the client, on that host, sends
        result["target"]["controller_base_url"] = target.base_url
    requests_path = path.with_name(f"{bench_id}.requests.jsonl")
    telemetry_path = path.with_name(f"{bench_id}.telemetry.jsonl")
    result["requests_file"] = requests_path.name
    result["telemetry_file"] = telemetry_path.name
    result["repeat"] = request.repeat
    result["interval_method"] = (
        f"95 % percentile bootstrap over requests within a run ({RESAMPLES} resamples, seed {SEED}) for "
        "latencies; rates (throughput, goodput) have none from one run; with --repeat N > 1, every metric's is "
        "over the N per-run values"
    )
    plan = plan_for(
        record.engine,
        list(record.gpus.ids),
        None if record.status == "external" else record.host_entry,
        request.host.name if request.host else "local",
        target.base_url,
        request.telemetry,
        request.engines,
    )
    save_result(path, result)
    if plan.gpu_command is not None or plan.metrics_url is not None:
        # group-writable like the result; the sampler appends
        guarded(telemetry_path, "the telemetry file", lambda: write_run_file(telemetry_path, ""))
    sampler = Sampler(plan, telemetry_path, api_key=target.api_key).start()
    sweep = _Sweep(request, workload, target, limit, result, path, progress, say, end)
    sweep.requests_path, sweep.sampler, sweep.on_host, sweep.shared = requests_path, sampler, on_host, hold.holder
    lost = False
    try:
        if request.find_max_rate:
            sweep.search()
        else:
            sweep.run_all()
    except WriteFailed as exc:
        sampler.stop()
        lost = True
        _lost(result, path, requests_path, exc, sweep.current)
        raise
    except KeyboardInterrupt:
        if result["status"] == "running":  # between levels: nothing partial, but the sweep did not finish
            result.update(status="interrupted", finished_at=now())
        raise
    except Exception as exc:  # whatever stopped the sweep: the result says failed and why, never `running` for good
        if result["status"] == "running":
            why = str(exc) if isinstance(exc, LabctlError) else f"labctl failed: {type(exc).__name__}: {exc}"
            result.update(status="failed", finished_at=now(), failure=why)
        raise
    finally:
        sampler.stop()
        if on_host is not None and on_host.environment:
            result["client"] = {**on_host.describe(), "docker_host_id": record.docker_host_id}
        result["telemetry"] = sampler.description()
        if not telemetry_path.exists():
            result["telemetry_file"] = None
        if not lost:
            save_result(path, result)
    partial = [level for level in result["levels"] if level.get("partial")]
    result.update(status="partial" if partial else "complete", finished_at=now())
    result["warnings"] = sorted({w for level in result["levels"] for w in level["warnings"]})
    for name in ("gpu", "engine"):
        if name in result["telemetry"]["missing"]:
            say(f"telemetry: no {name} samples: {result['telemetry']['missing'][name]}")
    save_result(path, result)
    return result, path


class WriteFailed(LabctlError):
    """A file of the bench could not be written (a full disk, a quota, a file size limit): the client's fault,
    never the engine's."""

    def __init__(self, path: Path, what: str, exc: OSError) -> None:
        self.path, self.what, self.reason = path, what, exc.strerror or str(exc)
        super().__init__(
            f"could not write {path}: {self.reason}; {what} was not saved (a client fault, not the engine's)"
        )


def guarded(path: Path, what: str, write: Callable[[], None]) -> None:
    try:
        write()
    except OSError as exc:
        raise WriteFailed(path, what, exc) from None


def _lost(result: dict[str, Any], path: Path, requests_path: Path, exc: WriteFailed, level: str | None) -> None:
    """A write failed: the per-request file is removed (it is cut short), the result says failed and why, and
    the error says which file and what was lost."""
    try:
        requests_path.unlink()
        removed = True
    except OSError:
        removed = False
    where = f"level {level}" if level else "the bench"
    reason = (
        f"could not write {exc.path}: {exc.reason}; {exc.what} of {where} was lost (a client fault, not the engine's)"
    )
    result.update(status="failed", finished_at=now(), failure=reason, requests_file=None)
    try:
        save_result(path, result)
        saved = f"the result {path} is marked failed with that reason"
    except WriteFailed:
        saved = f"the result {path} could not be saved either (a later command shows it as interrupted)"
    removal = f"the cut-short per-request file {requests_path.name} was removed; " if removed else ""
    exc.args = (f"{reason}; {removal}{saved}. Free some space and run the bench again.",)


def _finish_run(
    outcome: LevelOutcome,
    workload: Workload,
    limit: int | None,
    index: int,
    repeat: int,
    requests_path: Path,
    sampler: Sampler,
    windows: list[Window],
) -> dict[str, Any]:
    """One run of a level: its requests appended to the per-request file, its summary with intervals
    over its requests, and the telemetry of its measured window."""
    guarded(
        requests_path,
        "the measurement (per-request lines and summary)",
        lambda: append_requests(requests_path, index, repeat, outcome.concurrency, outcome.results),
    )
    run = _level(outcome, workload, limit)
    run |= request_intervals(outcome.results, outcome.duration_s, workload.slo)
    run["level"], run["repeat_index"] = index, repeat
    if outcome.started is not None:
        window = (outcome.started, outcome.started + outcome.duration_s)
        windows.append(window)
        run["telemetry"] = _telemetry(sampler, [window])
        peak = peak_in_flight(sampler.engine.samples, [window])
        if peak is not None and peak > outcome.concurrency + IN_FLIGHT_SLACK:
            run["engine_busier"] = {"peak_in_flight": peak, "client_concurrency": outcome.concurrency}
            run["warnings"].append(
                f"{BUSIER_WARNING}: the engine had up to {peak:g} requests in flight while this client sent at "
                f"most {outcome.concurrency}: another client shared it, and these figures are not this load's"
            )
    return run


def _telemetry(sampler: Sampler, windows: list[Window]) -> dict[str, Any]:
    return {
        "gpu": summarise_gpus(sampler.gpu.samples, windows),
        "engine": summarise_engine(sampler.engine.samples, sampler.kinds(), windows),
    }


def workload_facts(workload: Workload) -> dict[str, Any]:
    facts: dict[str, Any] = {"name": workload.name, "sha256": workload.sha256, "spec": workload.spec}
    if workload.overrides:
        facts["overrides"] = [{"flag": flag, "value": value} for flag, value in workload.overrides]
        facts["file_sha256"] = workload.file_sha256
    return facts


class _Sweep:
    """Runs the levels one after another, saving the result after each, and says what it is doing."""

    def __init__(
        self,
        request: BenchRequest,
        workload: Workload,
        target: Target,
        limit: int | None,
        result: dict[str, Any],
        path: Path,
        progress: SweepProgress,
        say: Callable[[str], None],
        end: float,
    ) -> None:
        self.request, self.workload, self.target, self.limit = request, workload, target, limit
        self.result, self.path, self.progress, self.say, self.end = result, path, progress, say, end
        self.requests_path: Path = path.with_name(path.stem + ".requests.jsonl")
        self.sampler: Sampler | None = None
        self.on_host: OnHost | None = None  # a run on a remote host: its client runs there
        self.shared: str | None = None  # who else held the engine (--allow-shared-engine)
        self.current: str | None = None  # the level being measured, for what a failed write lost

    def run_once(
        self, workload: Workload, concurrency: int, index: int, repeat: int, tick: Progress, partial: LevelProgress
    ) -> LevelOutcome:
        """One run of a level, here or on the run's host; TimeoutError past the deadline."""
        left = max(0.0, self.end - time.monotonic())
        timeout = self.request.request_timeout
        if self.on_host is None:
            level_run = run_level(self.target, workload, concurrency, index, timeout, tick, partial)
            return asyncio.run(asyncio.wait_for(level_run, left))
        on_host_target = Target(
            str(self.result["target"]["base_url"]), self.target.model, self.target.api_key, self.target.thinking
        )
        prompts = level_prompts(workload, concurrency, index)
        job = LevelJob(on_host_target, workload, concurrency, index, repeat, prompts, timeout, left)
        return self.on_host.run_level(job, tick, partial)

    def finish_run(
        self, outcome: LevelOutcome, workload: Workload, index: int, repeat: int, windows: list[Window]
    ) -> dict[str, Any]:
        assert self.sampler is not None
        run = _finish_run(outcome, workload, self.limit, index, repeat, self.requests_path, self.sampler, windows)
        if self.shared is not None:
            run["shared_engine"] = True
            run["warnings"].append(f"{SHARED_WARNING}: {self.shared} measured the engine too (--allow-shared-engine)")
        return run

    def run_all(self) -> None:
        planned = plan_levels(self.workload)
        self.say(plan_line(planned))
        clock = SweepClock(planned)
        for index, level in enumerate(planned):
            self.measure(index, level, clock, len(planned))
            clock.finish_level()
            if index + 1 < len(planned):
                left = len(planned) - index - 1
                self.say(f"sweep ETA {SweepClock.clock(clock.eta(0))} for {left} more level(s), from the pace so far")

    def search(self) -> None:
        spec = self.workload.spec
        cap = max(spec["concurrency"])
        rates = [r for r in self.workload.rates() if r]
        start = min(rates) if rates else 1.0
        template = PlannedLevel(cap, start, self.workload.requests_for(cap), self.workload.warmup_for(cap))
        self.say(plan_line([template] * capacity.MAX_STEPS, search=True))
        self.say(f"search rule: {capacity.RULE}; SLO {spec['slo']}")
        trials: list[capacity.Trial] = []
        index = 0
        try:
            while (rate := capacity.next_rate(trials, start)) is not None:
                level = PlannedLevel(cap, rate, template.requests, template.warmup)
                summary = self.measure(index, level, SweepClock([level]), None)
                passed = capacity.level_passes(summary)
                summary["meets_slo"] = passed
                trials.append(capacity.Trial(rate, passed))
                self.say(f"  rate {rate:g}/s {'meets' if passed else 'misses'} the SLO")
                index += 1
        except (KeyboardInterrupt, LabctlError):
            if trials:  # what the finished levels showed, marked as a search that did not end
                found = capacity.conclusion(trials, spec["slo"]) | {"converged": False, "interrupted": True}
                save_result(self.path, self.result | {"max_rate_meeting_slo": found})
            raise
        self.result["max_rate_meeting_slo"] = capacity.conclusion(trials, spec["slo"])
        self.say("max_rate_meeting_slo: " + self.result["max_rate_meeting_slo"]["note"])

    def measure(self, index: int, planned: PlannedLevel, clock: SweepClock, count: int | None) -> dict[str, Any]:
        concurrency, workload, request = planned.concurrency, self.workload.at_rate(planned.rate), self.request
        result, path = self.result, self.path
        where = f"level {index + 1}" + (f"/{count}" if count else "") + f" {planned.name}"
        self.current = planned.name

        def tick(phase: str, done: int, total: int) -> None:
            in_level = done + (planned.warmup if phase.startswith("measure") else 0)
            self.progress(f"{where} {phase.split(' ')[0]}", done, total, clock.eta(in_level))

        runs: list[dict[str, Any]] = []
        windows: list[Window] = []
        for repeat in range(request.repeat):
            partial = LevelProgress()
            try:
                outcome = self.run_once(workload, concurrency, index, repeat, tick, partial)
            except (TimeoutError, KeyboardInterrupt) as exc:
                outcome = outcome_of(concurrency, partial, planned.rate, interrupted=True)
                runs.append(self.finish_run(outcome, workload, index, repeat, windows))
                result["levels"].append(runs[0] if len(runs) == 1 else combine_repeats(runs))
                if isinstance(exc, KeyboardInterrupt):
                    result.update(status="interrupted", finished_at=now())
                    save_result(path, result)
                    self.say(f"interrupted: partial result saved to {path}")
                    raise
                result.update(status="timed_out", finished_at=now())
                save_result(path, result)
                raise LabctlError(
                    f"the bench passed its deadline of {request.deadline:g} s (--deadline) at {planned.name}; "
                    f"the partial result is saved, marked timed_out: {path}"
                ) from None
            run = self.finish_run(outcome, workload, index, repeat, windows)
            runs.append(run)
            own = client_failures(outcome.results)
            if own:  # the client's own limits (open files, memory): not the engine's failures, not a number
                result["levels"].append(run)
                result.update(status="failed", finished_at=now(), failure=own)
                save_result(path, result)
                raise LabctlError(f"{own} at {planned.name}: the level measures the client, not the engine. {path}")
            if run["requests"] and not run["completed"]:
                result["levels"].append(run)
                result.update(status="failed", finished_at=now())
                save_result(path, result)
                raise LabctlError(every_request_failed(run["failures"], f"requests at {planned.name}", path))
        level = runs[0] if len(runs) == 1 else combine_repeats(runs)
        if len(runs) > 1 and self.sampler is not None:
            level["telemetry"] = _telemetry(self.sampler, windows)
        mark_partial(level, request.max_error_rate)
        result["levels"].append(level)
        self.say(f"{where} done: {level_line(level)}")
        for warning in level["warnings"]:
            self.say(f"warning ({planned.name}): {warning}")
        save_result(path, result | {"status": "running"})
        return level


def mark_partial(level: dict[str, Any], max_error_rate: float) -> None:
    """More than `max_error_rate` of the level's requests failed: its numbers describe the survivors only."""
    sent, failed = level.get("requests") or 0, level.get("failed") or 0
    if sent and failed / sent > max_error_rate:
        level["partial"] = True
        level["warnings"] = [
            *level["warnings"],
            f"{PARTIAL_WARNING}: {failed}/{sent} requests failed ({failed / sent:.0%}, above --max-error-rate "
            f"{max_error_rate:.0%}); the figures describe the requests that succeeded only",
        ]


def level_line(level: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        value = level.get(key)
        return "-" if value is None else f"{value:.1f} ms"

    goodput = level.get("goodput")
    return (
        f"{level['completed']}/{level['requests']} ok, TTFT p50 {ms('median_ttft_ms')}, TPOT p50 "
        f"{ms('median_tpot_ms')}, {level.get('output_throughput') or 0:.0f} out tok/s, "
        f"{level.get('request_throughput') or 0:.2f} req/s"
        + ("" if goodput is None else f", goodput {goodput:.2f} req/s")
    )


def every_request_failed(failures: dict[str, int], where: str, path: Path) -> str:
    """The one line for an endpoint that answered nothing: its commonest reason, and where the result is."""
    reason = max(failures, key=lambda r: failures[r]) if failures else "no reason given"
    return (
        f"every request failed: {reason[:200]} ({sum(failures.values())} {where}). The result is saved with "
        f"status failed, not a score: {path}"
    )


def _level(outcome: Any, workload: Workload, limit: int | None) -> dict[str, Any]:
    return _mark_over_limit(outcome.summary(workload.slo), limit)


def _mark_over_limit(level: dict[str, Any], limit: int | None) -> dict[str, Any]:
    level = {**level, "warnings": list(level["warnings"])}
    if limit is not None and level["concurrency"] > limit:
        level["over_max_batch_size"] = True
        level["warnings"].append(
            f"concurrency {level['concurrency']} is above the engine's built max_batch_size {limit} (--allow-over-batch-limit)"
        )
    return level


def save_result(path: Path, result: dict[str, Any]) -> None:
    try:
        write_run_file(path, json.dumps(clean(result), indent=1) + "\n")
    except OSError as exc:
        raise WriteFailed(path, "the result", exc) from None


def settle(result: dict[str, Any]) -> dict[str, Any]:
    """A result still `running` whose writer is gone (a SIGKILLed bench) is interrupted, said so on reading;
    the file is left as it is (it may belong to another user)."""
    if result.get("status") == "running" and writer_gone(result.get("writer")):
        who = result["writer"]
        result["status"] = "interrupted"
        result["interrupted_reason"] = (
            f"its writer (pid {str(who.get('process', '?')).split(':')[0]} on {who.get('host')}) is gone: the bench "
            "was killed before it could say so"
        )
    return result


def list_results(runs: Runs, run_id: str, skipped: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    return [settle(result.data) for result in load_results(runs, run_id, skipped)]  # each checked by its typed loader


def find_result(runs: Runs, bench_id: str) -> tuple[dict[str, Any], Path]:
    result, path = find_typed_result(runs, bench_id)
    return settle(result.data), path
