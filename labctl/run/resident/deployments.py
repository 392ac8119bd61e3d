"""Operating resident deployments: sharing access, rotating keys, and noticing restarts and health
failures (each becomes an event in the run's events log)."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

import httpx

from labctl.catalog.hosts_file import HostEntry
from labctl.errors import BadInput, LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.identity import process_alive
from labctl.run.records.record import Observed, Record, now
from labctl.run.records.store import ENDED, Runs
from labctl.run.resident import remote_watch, watch
from labctl.run.resident.keys import KeyStore
from labctl.run.resident.lockdown import describe_engine_port, describe_open
from labctl.run.resident.resident_plan import flag_key_note, is_loopback

# Counters an engine's /metrics exposes for requests served and tokens generated.
REQUEST_METRICS = (
    "harness_requests_success_total",
    "vllm:request_success_total",
    "sglang:num_requests_total",
    "trtllm_request_success_total",
    "atlas_requests_total",
)
TOKEN_METRICS = (
    "harness_generation_tokens_total",
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
    "trtllm_generation_tokens_total",
    "atlas_generation_tokens_total",
)


def share(runs: Runs, run_id: str) -> dict[str, Any]:
    record = runs.load(run_id)
    resident = record.resident
    if not resident:
        raise BadInput(
            f"run {run_id} is not a resident deployment: nothing to share (its base URL is {record.base_url})."
        )
    if resident.rotating_since:  # which key the engine takes is settled first: never share a key it rejects
        raise LabctlError(
            f"run {run_id}: a key rotation by {resident.rotating_by} is under way (since {resident.rotating_since}); "
            "share it once it is done."
            if process_alive(resident.rotating_process)
            else f"run {run_id}: a key rotation was interrupted; `labctl status` finishes or undoes it, then share."
        )
    keys = KeyStore(runs.home).read(run_id) if resident.keys else []
    url, forward = colleague_reach(record)
    return {
        "base_url": url,
        "model": record.served_model_name,
        "api_key": keys[0] if keys else None,
        "api_keys": keys,
        "key_visibility": flag_key_note(record.engine) if resident.auth == "flag" and keys else None,
        "host": record.host_entry,
        "ssh_forward": shlex.join(forward) if forward else None,
        "open_without_key": list(resident.open_paths) if resident.open_paths is not None else None,
        "open": describe_open(resident.open_paths, resident.open_model_paths, record.probe) if resident.keys else None,
        "proxy": resident.proxy or None,
        "status": record.status,
        "warning": None if record.status == "running" else f"run {run_id} is {record.status}: {record.reason or ''}",
        "engine_port": describe_engine_port(resident, record.host_entry),
        "engine_port_open_without_key": list(resident.engine_port_open) if resident.proxy else None,
    }


def colleague_reach(record: Record) -> tuple[str, list[str] | None]:
    """The base URL a colleague uses, and the SSH forward they open first when the engine binds its remote
    host's loopback (the controller's own forward is no use to them: it listens on this machine only)."""
    host = HostEntry(record.host_entry, record.docker_endpoint)
    bind, port = record.endpoint.host or "127.0.0.1", record.endpoint.port
    if not host.is_remote or port is None:
        return record.base_url, None
    if is_loopback(bind):
        return f"http://127.0.0.1:{port}/v1", host.forward_argv(bind, port, port)
    address = host.address if bind in ("0.0.0.0", "::") else bind
    return f"http://{f'[{address}]' if ':' in address else address}:{port}/v1", None


def snippets(info: dict[str, Any]) -> str:
    key = info["api_key"] or "none"
    python = (
        f'from openai import OpenAI\n\nclient = OpenAI(base_url="{info["base_url"]}", api_key="{key}")\n'
        f'reply = client.chat.completions.create(model="{info["model"]}",\n'
        f'    messages=[{{"role": "user", "content": "Hello!"}}])\nprint(reply.choices[0].message.content)\n'
    )
    body = json.dumps({"model": info["model"], "messages": [{"role": "user", "content": "Hello!"}]})
    curl = (
        f"curl {shlex.quote(info['base_url'] + '/chat/completions')} \\\n  -H 'Content-Type: application/json' \\\n"
        + (f"  -H {shlex.quote('Authorization: Bearer ' + key)} \\\n" if info["api_key"] else "")
        + f"  -d {shlex.quote(body)}\n"
    )
    return f"# OpenAI Python SDK\n{python}\n# curl\n{curl}"


def engine_counters(base: str, metrics_path: str | None) -> dict[str, float | None]:
    if not metrics_path:
        return {"requests": None, "tokens": None}
    try:
        text = httpx.get(base + metrics_path, timeout=2).text
    except httpx.HTTPError:
        return {"requests": None, "tokens": None}
    return {"requests": _sum(text, REQUEST_METRICS), "tokens": _sum(text, TOKEN_METRICS)}


def _sum(text: str, names: tuple[str, ...]) -> float | None:
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return total if seen else None


def observe(runs: Runs, run: dict[str, Any]) -> None:
    """Turn what `status` sees into events: a health result that changed. (Restarts are recorded from
    Docker's own events: by the run's watcher, else replayed by `status`; see run/watch.py.)"""
    run_id = run["run_id"]
    record, _ = runs.read(run_id)
    if record is None:
        return  # no record here, or one that cannot be read (status says so on its own line)
    seen = record.observed or Observed()
    now_seen = Observed(
        restarts=max(run["restarts"], seen.restarts), health=run["health"], at=now(), at_monotonic=time.monotonic()
    )
    if run["health"] != seen.health:
        runs.event(run_id, "health failure" if run["health"] != "healthy" else "health recovered", health=run["health"])
    if (now_seen.restarts, now_seen.health) != (seen.restarts, seen.health):
        runs.update(run_id, observed=now_seen)


def describe_resident(runs: Runs, record: Record) -> list[tuple[str, str]]:
    """`labctl show` rows for a resident run: its watcher and the restarts recorded (replayed first from
    Docker's events when the run is still up, so that `show` alone is enough)."""
    if record.resident is None:
        return []
    if record.status not in ENDED and dk.labctl_containers(run_id=record.run_id):
        if record.docker_endpoint.startswith("ssh://") and record.resident.watcher:
            remote_watch.collect(runs, record)  # first: what its watcher saw is recorded as the watcher's
        watch.replay(runs, record)
    watcher = record.resident.watcher or f"none ({record.resident.watcher_note or 'started before watchers'})"
    local = record.docker_endpoint == "local" and record.status not in ENDED
    if record.resident.watcher and local and not dk.watchers(record.run_id):  # named, gone: never shown as running
        watcher += " (not running: `labctl status` starts it again)"
    rows = [("watcher", watcher), ("restarts", watch.recorded_restarts(runs, record.run_id).describe())]
    resident = record.resident
    if resident.proxy:
        rows.append(
            ("proxy", f"{resident.proxy} in front; the engine listens on 127.0.0.1:{resident.proxy_engine_port}")
        )
    if resident.keys:
        rows.append(("open", describe_open(resident.open_paths, resident.open_model_paths, record.probe)))
    engine_port = describe_engine_port(resident, record.host_entry)
    if engine_port:
        rows.append(("engine port", engine_port))
    return rows
