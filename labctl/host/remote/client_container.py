"""A one-shot container of labctl's own image on a host, with host networking, fed a job on stdin and
read line by line (the bench client next to a remote engine, a model fetch into that host's cache). Started
through the host's own Docker endpoint — the same ssh:// transport as everything else — and removed when it
ends or labctl is stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator

from labctl.catalog.hosts_file import LOCAL_HOST, HostEntry
from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk
from labctl.host.images.transfer import copy_image
from labctl.host.remote.hosts import endpoint_url

DEFAULT_CLIENT_IMAGE = "127.0.0.1:5000/labctl/harness:dev"


def client_image() -> str:
    """labctl's own image (the harness image carries the bench client); LABCTL_CLIENT_IMAGE names another."""
    return os.environ.get("LABCTL_CLIENT_IMAGE") or DEFAULT_CLIENT_IMAGE


def ensure_client_image(image: str, host: HostEntry) -> tuple[str, ...]:
    """The client image as its registry has it now, on the active host (a tag pulled there last week may hold
    an older client); a host that cannot reach the registry uses what it has, or gets this controller's copy
    over Docker's transport (save | load, the same image id checked on arrival). Returns its repo digests."""
    try:
        return tuple(dk.pull(image, quiet=True).repo_digests)
    except LabctlError as exc:
        pull_problem = exc
    found = dk.image_facts(image)
    if found is not None:
        return tuple(found.repo_digests)
    with dk.on_endpoint(endpoint_url(LOCAL_HOST)):
        here = dk.image_facts(image)
    if here is None or not host.is_remote:
        raise pull_problem
    copy_image(endpoint_url(LOCAL_HOST), host.docker, image, lambda _sent, _seconds: None)
    arrived = dk.image_facts(image)
    if arrived is None or arrived.image_id != here.image_id:
        raise LabctlError(f"copied {image} to {host.name}, but it arrived as another image; refusing to run it")
    return tuple(here.repo_digests)


def run_job(
    endpoint: str,
    image: str,
    name: str,
    module: str,
    job: bytes,
    timeout: float,
    label: str = "labctl.bench_client=true",
    mounts: tuple[str, ...] = (),
    user: str | None = None,
) -> Iterator[str]:
    """Yield the container's stdout lines. The job goes through stdin, never argv (it may hold a key).
    `mounts` are `-v` values (HOST_PATH:CONTAINER_PATH) on that host."""
    # The CLI, to feed the job on the container's stdin.
    argv = [
        *dk.cli_argv_for(endpoint),
        "run",
        "--rm",
        "-i",
        "--name",
        name,
        "--label",
        label,
        *(word for mount in mounts for word in ("-v", mount)),
        *(["--user", user] if user else []),
        "--network",
        "host",
        "--entrypoint",
        "python3",
        image,
        "-m",
        module,
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    errors: list[bytes] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
    reader.start()
    timer = threading.Timer(timeout, lambda: _remove(endpoint, name))
    timer.start()
    try:
        # One line, and stdin stays open: its end tells the client this controller is gone (host/remote/lifeline.py).
        proc.stdin.write(job.replace(b"\n", b" ") + b"\n")
        proc.stdin.flush()
        for line in proc.stdout:
            yield line.decode("utf-8", "replace").rstrip("\n")
        with contextlib.suppress(OSError):
            proc.stdin.close()
        code = proc.wait()
        reader.join(5)
        if code != 0:
            tail = b"".join(errors).decode("utf-8", "replace").strip().splitlines()[-3:]
            raise LabctlError(
                f"labctl's client container on {endpoint} exited {code}: {' '.join(tail) or 'no output'} "
                f"(command: {' '.join(argv)})"
            )
    finally:
        timer.cancel()
        if proc.poll() is None:  # Ctrl-C, a timeout, an error while reading: the container goes too
            _remove(endpoint, name)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)


def _remove(endpoint: str, name: str) -> None:
    # The CLI with a deadline: on a dead ssh:// host, python-on-whales would wait as long as ssh does.
    subprocess.run([*dk.cli_argv_for(endpoint), "rm", "-f", name], capture_output=True, timeout=60, check=False)
