"""A one-shot container of labctl's own image on a host, with host networking, fed a job on stdin and
read line by line (the bench client next to a remote engine). Started through the host's own Docker
endpoint — the same ssh:// transport as everything else — and removed when it ends or labctl is stopped."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator

from labctl.errors import LabctlError


def run_job(endpoint: str, image: str, name: str, module: str, job: bytes, timeout: float) -> Iterator[str]:
    """Yield the container's stdout lines. The job goes through stdin, never argv (it may hold a key)."""
    argv = [
        "docker",
        "-H",
        endpoint,
        "run",
        "--rm",
        "-i",
        "--name",
        name,
        "--label",
        "labctl.bench_client=true",
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
        proc.stdin.write(job)
        proc.stdin.close()
        for line in proc.stdout:
            yield line.decode("utf-8", "replace").rstrip("\n")
        code = proc.wait()
        reader.join(5)
        if code != 0:
            tail = b"".join(errors).decode("utf-8", "replace").strip().splitlines()[-3:]
            raise LabctlError(
                f"the bench client container on {endpoint} exited {code}: {' '.join(tail) or 'no output'} "
                f"(command: {' '.join(argv)})"
            )
    finally:
        timer.cancel()
        if proc.poll() is None:  # Ctrl-C, a timeout, an error while reading: the container goes too
            _remove(endpoint, name)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)


def _remove(endpoint: str, name: str) -> None:
    subprocess.run(["docker", "-H", endpoint, "rm", "-f", name], capture_output=True, timeout=60, check=False)
