"""What an engine states about its own settings, read at its report route (vLLM's and TensorRT-LLM's Prometheus
text, SGLang's /server_info): the raw answer, for catalog/engine_settings.py to read. Never fails a caller."""

from __future__ import annotations

import httpx

MAX_REPORT_BYTES = 4 * 1024 * 1024  # vLLM's /metrics with every histogram is ~100 KiB
REPORT_TIMEOUT = 10.0


def read_report(base: str, route: str, api_key: str | None, timeout: float = REPORT_TIMEOUT) -> str | None:
    """The body of GET base+route (None: no 200 answer, or more than MAX_REPORT_BYTES)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.stream("GET", base + route, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                return None
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_REPORT_BYTES:
                    return None
    except httpx.HTTPError:
        return None
    return bytes(body).decode("utf-8", errors="replace")
