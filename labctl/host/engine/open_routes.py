"""Which routes of an engine answer a request that carries no key, measured at its endpoint: a GET, or a POST
whose body is not JSON (so that a route left open answers 400 or 422 without acting on anything)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from labctl.catalog.http_contracts import Route

REFUSED = frozenset({401, 403})
ABSENT = frozenset({404, 405})
NOT_JSON = b"{labctl: not json"
SENT = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})  # a WEBSOCKET route is tried with its opening GET


@dataclass(frozen=True)
class OpenRoute:
    path: str
    status: int
    runs_model: bool


def probe_open_routes(base: str, routes: Sequence[Route], timeout: float = 10.0) -> list[OpenRoute]:
    """The routes that answered without a key (neither refused nor absent). A path with a parameter is tried
    with a made-up value; a route that does not answer at all is not counted as open."""
    found = []
    with httpx.Client(timeout=timeout) as client:
        for route in routes:
            path = route.path.replace("{", "labctl-").replace("}", "")
            method = route.methods[0] if "GET" not in route.methods and route.methods[0] in SENT else "GET"
            try:
                if method == "GET":
                    status = client.get(base + path).status_code
                else:
                    content = NOT_JSON if method in ("POST", "PUT", "PATCH") else None
                    headers = {"Content-Type": "application/json"}
                    status = client.request(method, base + path, content=content, headers=headers).status_code
            except httpx.HTTPError:
                continue
            if status not in REFUSED and status not in ABSENT:
                found.append(OpenRoute(route.path, status, route.runs_model))
    return found
