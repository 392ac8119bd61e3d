"""labctl bench: resolve the target (a labctl run, or any OpenAI-compatible URL), check it answers, hold the
engine, run every level of the workload (bench/sweep.py), and store the result beside the run's record."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from labctl.bench import capacity
from labctl.bench.bench_request import (
    BenchRequest,
    SweepProgress,
    check_batch_limits,
    check_request,
    run_batch_cap,
)
from labctl.bench.client import Target
from labctl.bench.environment import client_environment
from labctl.bench.hub_dataset import hub_dataset_of
from labctl.bench.intervals import REQUEST_METHOD, repeat_method
from labctl.bench.prompt_slots import PromptSlots, check_enough, prompt_facts, slots_for
from labctl.bench.remote_client import OnHost, engine_address
from labctl.bench.result_store import RESULT_SCHEMA, WriteFailed, guarded, made, mark_lost, save_result
from labctl.bench.results import BenchResult
from labctl.bench.runner import (
    check_open_files,
)
from labctl.bench.sweep import Sweep
from labctl.bench.target import engine_key, engine_root, memory_of, preflight, resolve_target
from labctl.bench.tokens import counter_for, tokenizer_counter
from labctl.bench.workloads import Workload
from labctl.errors import LabctlError
from labctl.host.engine.info import probe_engine_version
from labctl.host.engine.sampler import Sampler, plan_for
from labctl.host.gpus.lock import EngineHold, engine_lock
from labctl.host.identity import writer
from labctl.run.records.record import Record, now
from labctl.run.records.store import (
    Runs,
    new_run_id,
    write_run_file,
)


def new_bench_id() -> str:
    return "b" + new_run_id()


def run_bench(
    runs: Runs, request: BenchRequest, progress: SweepProgress, say: Callable[[str], None]
) -> tuple[BenchResult, Path]:
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
    # a dataset without enough distinct prompts (or none usable) is refused before anything is sent or written
    search_steps = capacity.MAX_STEPS if request.find_max_rate else 0
    slots = slots_for(workload, request.repeat, request.prompt_start, search_steps)
    available = check_enough(workload, slots)
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
        held = Held(target, record, limit, remote, server, bench_id, end, hold, slots, available)
        return _run_held(runs, request, progress, say, workload, held)


@dataclass(frozen=True)
class Held:
    """What run_bench settled before it held the engine."""

    target: Target
    record: Record
    limit: int | None
    remote: bool
    server: dict[str, Any]
    bench_id: str
    end: float
    hold: EngineHold
    slots: PromptSlots
    available: int | None  # distinct prompts a dataset workload holds; None: synthetic, no end


def _run_held(
    runs: Runs,
    request: BenchRequest,
    progress: SweepProgress,
    say: Callable[[str], None],
    workload: Workload,
    held: Held,
) -> tuple[BenchResult, Path]:
    target, record, limit, remote, server = held.target, held.record, held.limit, held.remote, held.server
    bench_id, end, hold = held.bench_id, held.end, held.hold
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
            # what per-GPU figures divide by: the GPUs the engine held (none for a CPU engine or an endpoint)
            "gpus": len(record.gpus.ids)
            if record.gpus.ids and record.accelerator_kind in ("gpu", "simulated")
            else None,
            "gpu_hour_price": request.host.gpu_hour_price if request.host else None,  # cost per token
            "record": record.record_path,
            "max_batch_size": limit,
            "batch_cap": run_batch_cap(record, request.batch_caps).to_json(),
            "models": server["models"],
            "thinking": target.thinking,
            "memory": memory_of(record),
            # what the engine computed with, as its run's record says (the engine's report, else command + defaults)
            "settings": None if record.settings is None else {k: asdict(v) for k, v in record.settings.items()},
        },
        "workload": workload_facts(workload) | workload.counter.facts() | dataset_facts(workload, held),
        "client": client_environment(request.client_workers),
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
    result["interval_method"] = f"{REQUEST_METHOD} within a run, for latencies; rates (throughput, goodput) " + (
        f"have none from one run; across repeats, every metric's is a {repeat_method(request.repeat)}"
        if request.repeat > 1
        else "have none from one run (--repeat N > 1 gives every metric a Student-t interval over the N runs)"
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
    cap = run_batch_cap(record, request.batch_caps)
    over = cap.above(workload.concurrency)
    if over:
        say(f"warning: c={','.join(map(str, over))} above the engine's batch cap of {cap.text}: those levels queue")
    prompts = result["workload"]["prompts"]
    say(
        f"prompts: {prompts['sent']} to send, {prompts['distinct']} distinct"
        + (f" of the {prompts['available']} the dataset holds" if prompts["available"] is not None else "")
        + (" (repeat_prompts: true)" if prompts["repeat_prompts"] else "")
        + f"; seed {prompts['seed']}"
    )
    sweep = Sweep(request, workload, target, limit, result, path, progress, say, end, held.slots)
    sweep.cap = cap
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
        mark_lost(result, path, requests_path, exc, sweep.current)
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
    return made(result), path


def dataset_facts(workload: Workload, held: Held) -> dict[str, Any]:
    """The prompts' facts (seed, how many, how many distinct) and, for a Hub dataset, which commit was read."""
    facts: dict[str, Any] = {"prompts": prompt_facts(workload, held.slots, held.available)}
    hub = hub_dataset_of(workload.name, workload.hub_dataset)
    if hub is not None:
        path = hub.locate()
        facts["dataset"] = {"repo": hub.repo, "revision": hub.revision, "commit": hub.commit(), "file": hub.file}
        facts["dataset"]["bytes"] = path.stat().st_size
    return facts


def workload_facts(workload: Workload) -> dict[str, Any]:
    facts: dict[str, Any] = {"name": workload.name, "sha256": workload.sha256, "spec": workload.spec}
    if workload.overrides:
        facts["overrides"] = [{"flag": flag, "value": value} for flag, value in workload.overrides]
        facts["file_sha256"] = workload.file_sha256
    return facts
