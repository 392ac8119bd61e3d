"""The Docker Engine API itself, over the daemon's unix socket, for the two answers the docker CLI does not give
in a form a program can read: a pull's byte-by-byte progress (host/images/pull_stream.py) and each image's unique size."""

from __future__ import annotations

import os

import httpx

DEFAULT_SOCKET = "/var/run/docker.sock"
MAX_DF_BYTES = 64 * 2**20


def daemon_socket() -> str | None:
    """The local daemon's socket path, or None when the daemon is reached another way (ssh://, tcp://)."""
    endpoint = os.environ.get("DOCKER_HOST", "")
    if not endpoint:
        return DEFAULT_SOCKET
    return endpoint.removeprefix("unix://") if endpoint.startswith("unix://") else None


def client(socket: str, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=socket), base_url="http://docker", timeout=timeout)


def unique_image_bytes() -> dict[str, int]:
    """Image id -> bytes only that image holds (its size minus layers shared with other images), which is
    what removing it frees; empty when the daemon's socket is not on this machine."""
    socket = daemon_socket()
    if socket is None:
        return {}
    try:
        with client(socket) as api:
            answer = api.get("/system/df")
    except httpx.HTTPError:
        return {}
    if answer.status_code != 200 or len(answer.content) > MAX_DF_BYTES:
        return {}
    images = answer.json().get("Images") or []
    sizes = {}
    for image in images:
        size, shared = image.get("Size"), image.get("SharedSize")
        if isinstance(image.get("Id"), str) and isinstance(size, int) and isinstance(shared, int):
            sizes[image["Id"]] = max(size - max(shared, 0), 0)
    return sizes


def containers() -> list[tuple[str, dict[str, str]]] | None:
    """(image id, labels) of every container, in one answer (listing then inspecting each container races
    with containers that go away in between); None when the daemon's socket is not on this machine."""
    socket = daemon_socket()
    if socket is None:
        return None
    with client(socket) as api:
        answer = api.get("/containers/json", params={"all": "1"})
    if answer.status_code != 200 or len(answer.content) > MAX_DF_BYTES:
        return None
    found = []
    for entry in answer.json():
        labels = entry.get("Labels") or {}
        if isinstance(entry.get("ImageID"), str) and isinstance(labels, dict):
            found.append((entry["ImageID"], {str(k): str(v) for k, v in labels.items()}))
    return found
