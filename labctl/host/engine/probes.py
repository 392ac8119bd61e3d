"""Readiness at the edge: poll an engine's own probe until it answers, then prove the OpenAI API works
(the served model is listed; one short chat completion succeeds)."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from labctl.errors import LabctlError

# Readiness polls fast first (most engines of the lab answer within a second or two of their port opening),
# then backs off to at most POLL_MAX seconds between probes. Not further: with 0.2 s, `make bench-up` measured
# 436 ms from the engine's readiness to `up` returning, over the lab's 300 ms; a probe costs the engine little.
POLL_FIRST, POLL_GROWTH, POLL_MAX = 0.02, 1.5, 0.05


class NotReady(Exception):
    pass


class ReadinessTimeout(LabctlError):
    pass


@dataclass
class Readiness:
    port_open: float | None = None  # monotonic time the engine first answered at all
    ready: float | None = None  # monotonic time the probe first said 200
    # Seconds from the last "not yet" to sending the probe that said 200: the engine became ready within
    # them, so labctl noticed at most this late (its polling granularity then, and any Docker check between).
    poll_gap: float = 0.0


def wait_until_ready(
    base: str,
    probe: str,
    timeout: float,
    watch: Callable[[], None],
    progress: Callable[[str], None] = lambda _: None,
    watch_every: float = 0.25,
    probe_timeout: float = 2.0,
) -> Readiness:
    """Poll until the probe answers 200. `watch` raises when the container died; it runs every
    `watch_every` seconds because asking Docker costs far more than asking the engine."""
    seen = Readiness()
    last_watch = 0.0
    not_ready_at: float | None = None  # when the last probe said "not yet"
    client = httpx.Client(timeout=httpx.Timeout(probe_timeout, connect=0.5))

    def attempt() -> None:
        nonlocal last_watch, not_ready_at
        now = time.monotonic()
        if now - last_watch >= watch_every:
            last_watch = now
            watch()
        sent = time.monotonic()
        try:
            response = client.get(base + probe)
        except httpx.TransportError as exc:
            not_ready_at = time.monotonic()
            progress("port closed")
            raise NotReady(type(exc).__name__) from None
        if seen.port_open is None:
            seen.port_open = time.monotonic()
        if response.status_code != 200:
            not_ready_at = time.monotonic()
            progress(f"{probe} answered {response.status_code}")
            raise NotReady(str(response.status_code))
        seen.ready = time.monotonic()
        seen.poll_gap = round(sent - not_ready_at, 3) if not_ready_at is not None else 0.0

    try:
        for trying in Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_exponential(multiplier=POLL_FIRST, exp_base=POLL_GROWTH, min=POLL_FIRST, max=POLL_MAX),
            retry=retry_if_exception_type(NotReady),
            reraise=True,
        ):
            with trying:
                attempt()
    except NotReady as exc:
        raise ReadinessTimeout(f"the engine was not ready after {timeout:g} s (last probe: {exc})") from None
    finally:
        client.close()
    return seen


@dataclass
class ApiCheck:
    models: dict[str, Any]
    version: Any
    completion_at: float
    completion: dict[str, Any]


def check_openai_api(
    base: str, model: str, api_key: str | None, version_path: str | None, timeout: float = 120
) -> ApiCheck:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout, headers=headers) as client:
        try:
            models = client.get(f"{base}/v1/models")
            if models.status_code == 401:
                raise LabctlError(
                    "GET /v1/models answered 401 to the API key labctl gave the engine: the engine holds another "
                    "key (check how the engine reads it, and that no VLLM_API_KEY-like variable overrides it)."
                    if api_key
                    else "GET /v1/models answered 401 though labctl gave the engine no key: something else sets one "
                    "(a VLLM_API_KEY-like variable in the profile's env, or an --api-key in extra_args)."
                )
            if models.status_code != 200:
                raise LabctlError(f"GET /v1/models answered {models.status_code}: {models.text[:200]}")
            listed = [m.get("id") for m in models.json().get("data", [])]
            if model not in listed:
                raise LabctlError(f"/v1/models lists {listed}, not the served model {model!r}: check served_model_name")
            chat = client.post(
                f"{base}/v1/chat/completions",
                json={
                    "model": model,
                    "messages": [{"role": "user", "content": "Say OK."}],
                    "max_tokens": 1,
                    "temperature": 0,
                },
            )
            if chat.status_code != 200:
                raise LabctlError(f"the first chat completion answered {chat.status_code}: {chat.text[:300]}")
            done = time.monotonic()
            version: Any = None
            if version_path:
                answer = client.get(base + version_path)
                if answer.status_code == 200:
                    try:
                        version = answer.json()
                    except ValueError:
                        version = answer.text[:500]
        except httpx.HTTPError as exc:
            raise LabctlError(f"the OpenAI API did not answer properly: {type(exc).__name__}: {exc}") from None
    return ApiCheck(models=models.json(), version=version, completion_at=done, completion=chat.json())


def status_without_key(base: str, timeout: float = 10.0) -> int | None:
    """The HTTP status of GET /v1/models with no key (None: no answer). A guarded engine says 401."""
    return status_with_key(base, None, timeout)


def status_with_key(base: str, key: str | None, timeout: float = 10.0) -> int | None:
    """The HTTP status of GET /v1/models with this key, or none (None: no answer)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.get(f"{base}/v1/models", headers=headers, timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def probe_now(base: str, probe: str, timeout: float = 2.0) -> str:
    """Health right now, as one word for a status table (the engine's own probe timeout: SGLang's /health
    sleeps 1 s before it answers)."""
    try:
        response = httpx.get(base + probe, timeout=timeout)
    except httpx.TransportError:
        return "down"
    return "healthy" if response.status_code == 200 else f"http-{response.status_code}"


def port_in_use(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False
