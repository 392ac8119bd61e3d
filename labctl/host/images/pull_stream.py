"""Pulling an image with progress: the Docker Engine API's pull stream (`POST /images/create`) over the
daemon's unix socket (python-on-whales drives the docker CLI, whose pull output has no byte counts off a terminal), which reports each layer's bytes as they arrive. An ssh:// daemon has no socket here:
it is pulled through the docker CLI (python-on-whales), timed, without byte counts."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.docker import engine_api

MAX_LINE = 64 * 1024  # one progress message; anything longer is not Docker talking
_LOGIN = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied", re.IGNORECASE)


@dataclass(frozen=True)
class PullProgress:
    done: int  # compressed bytes received so far
    total: int | None  # compressed bytes of the layers, when known
    seconds: float

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta(self) -> float | None:
        if not self.total or self.rate <= 0 or self.done >= self.total:
            return None
        return (self.total - self.done) / self.rate


@dataclass(frozen=True)
class Pulled:
    seconds: float
    bytes: int | None  # compressed bytes downloaded (layers already present cost nothing); None: not measurable
    layers: int
    layers_present: int  # layers the daemon already had


def pull_image(
    repository: str, reference: str, layer_sizes: dict[str, int], report: Callable[[PullProgress], None]
) -> Pulled:
    """Pull repository@reference (a digest) or repository:reference (a tag), reporting progress. `layer_sizes`
    (layer digest -> compressed bytes, from the manifest) makes the total exclude layers already present."""
    socket = engine_api.daemon_socket()
    start = time.monotonic()
    if socket is None:
        return _cli_pull(repository, reference, start)
    try:
        return _api_pull(socket, repository, reference, layer_sizes, report, start)
    except NeedsLogin:
        return _cli_pull(repository, reference, start)


class NeedsLogin(Exception):
    """The registry wants credentials: the docker CLI has them (docker login), the bare API call does not."""


def named(repository: str, reference: str) -> str:
    return f"{repository}{'@' if reference.startswith('sha256:') else ':'}{reference}"


def _cli_pull(repository: str, reference: str, start: float) -> Pulled:
    dk.pull(named(repository, reference), quiet=True)
    return Pulled(round(time.monotonic() - start, 3), None, 0, 0)


def _api_pull(
    socket: str,
    repository: str,
    reference: str,
    layer_sizes: dict[str, int],
    report: Callable[[PullProgress], None],
    start: float,
) -> Pulled:
    # the stream names a layer by the first 12 hex digits of its digest
    known = {digest.removeprefix("sha256:")[:12]: size for digest, size in layer_sizes.items()}
    layers: dict[str, int] = {}  # layer id -> bytes received
    totals: dict[str, int] = {}  # layer id -> its size, as the daemon reports it
    present: set[str] = set()
    try:
        with (
            engine_api.client(socket) as client,
            client.stream("POST", "/images/create", params={"fromImage": repository, "tag": reference}) as response,
        ):
            if response.status_code != 200:
                body = response.read()
                if _LOGIN.search(_message(body)):
                    raise NeedsLogin
                raise LabctlError(f"pulling {named(repository, reference)} failed: {_message(body)}")
            for line in response.iter_lines():
                if len(line) > MAX_LINE:
                    raise LabctlError(f"pulling {repository}: the Docker daemon sent an oversized progress message")
                event = _event(line)
                if event.get("error") and _LOGIN.search(str(event["error"])):
                    raise NeedsLogin
                if event.get("error"):
                    raise LabctlError(f"pulling {named(repository, reference)} failed: {str(event['error'])[:300]}")
                _count(event, layers, totals, known, present)
                total = sum(size for short, size in known.items() if short not in present) if known else None
                report(PullProgress(sum(layers.values()), total, time.monotonic() - start))
    except httpx.HTTPError as exc:
        raise LabctlError(
            f"pulling {named(repository, reference)}: the Docker daemon at {socket} stopped answering ({exc})"
        ) from None
    return Pulled(round(time.monotonic() - start, 3), sum(layers.values()), len(layers) + len(present), len(present))


def _event(line: str) -> dict[str, object]:
    try:
        event = json.loads(line) if line.strip() else {}
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _count(
    event: dict[str, object], layers: dict[str, int], totals: dict[str, int], known: dict[str, int], present: set[str]
) -> None:
    layer, status = str(event.get("id") or ""), str(event.get("status") or "")
    if not layer:
        return
    if status == "Already exists":
        present.add(layer)
    elif status in ("Pulling fs layer", "Waiting"):
        layers.setdefault(layer, 0)
    elif status == "Downloading" and isinstance(event.get("progressDetail"), dict):
        detail: dict[str, object] = event["progressDetail"]  # type: ignore[assignment]
        current, size = detail.get("current"), detail.get("total")
        if isinstance(current, int) and current >= 0:
            layers[layer] = max(layers.get(layer, 0), current)
        if isinstance(size, int) and size > 0:
            totals[layer] = size
    elif status == "Download complete" and (layer in totals or layer in known):
        layers[layer] = totals.get(layer) or known[layer]


def _message(body: bytes) -> str:
    try:
        answer = json.loads(body[:MAX_LINE])
    except ValueError:
        return body[:300].decode("utf-8", "replace")
    return str(answer.get("message", answer))[:300] if isinstance(answer, dict) else str(answer)[:300]
