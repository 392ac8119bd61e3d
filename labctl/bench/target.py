"""Where a bench sends: a labctl run or any OpenAI-compatible URL, resolved to a Target, checked to answer
and serve the model before any load is sent, and the key that says which engine one bench at a time means."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx

from labctl.bench.bench_request import BenchRequest
from labctl.bench.client import Target
from labctl.errors import BadInput
from labctl.host.engine.info import unauthorized
from labctl.host.gpus.lock import endpoint_key
from labctl.run.records.record import Endpoint, Record, new_record
from labctl.run.records.store import (
    Runs,
    new_run_id,
)
from labctl.run.resident.keys import KeyStore

# GET /models: an honest list is a few KiB even with hundreds of models (a 240 MB answer took 4.4 GB).
MAX_MODELS_BYTES = 8 * 1024 * 1024

PREFLIGHT_SECONDS = 30.0


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
