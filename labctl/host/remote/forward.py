"""Reaching an engine on a remote host's loopback from the controller: an `ssh -N -L` process that labctl
starts, over the same account and address Docker's ssh:// transport uses. Engines keep binding to the
host's loopback; only this process opens them to the controller, and only on the controller's loopback.

A run's forward outlives the `labctl up` that opened it (so its base URL answers until `labctl down`); it
is named by `pid:start time`, so closing it can never hit a later process that reused the pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labctl.catalog.hosts_file import HostEntry
from labctl.errors import LabctlError
from labctl.host.identity import process_alive, process_token

OPEN_TIMEOUT_S = 20.0
CLOSE_GRACE_S = 3.0


@dataclass(frozen=True)
class Forward:
    local_port: int = 0
    remote: str = ""  # host:port on the remote host, as the engine binds it
    process: str = ""  # the ssh process, pid:start time

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def alive(self) -> bool:
        return process_alive(self.process) and _is_ssh(self.process)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def open_forward(entry: HostEntry, host: str, port: int, log: Path, local_port: int | None = None) -> Forward:
    """Start `ssh -N -L 127.0.0.1:LOCAL:HOST:PORT` in its own session and wait until it listens. Tries
    `local_port` first (a run keeps its base URL when its forward is reopened), else a free port."""
    remote_host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    log.parent.mkdir(parents=True, exist_ok=True)
    problem = ""
    for attempt in range(4):
        chosen = local_port if local_port and attempt == 0 else free_port()
        argv = [
            *entry.ssh_argv()[:1],
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "ServerAliveInterval=15",
            "-L",
            f"127.0.0.1:{chosen}:{remote_host}:{port}",
            *entry.ssh_argv()[1:],
        ]
        with log.open("ab") as sink:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True
            )
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if _listens(chosen):
                return Forward(chosen, f"{remote_host}:{port}", process_token(proc.pid))
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            problem = f"no listener after {OPEN_TIMEOUT_S:g} s"
            break
        problem = _last_line(log)
        if "forward" not in problem.lower() and "address already in use" not in problem.lower():
            break  # not a port race: ssh itself failed (host down, key refused)
    raise LabctlError(
        f"cannot open an SSH forward to {entry.name} ({entry.docker}) for port {port}: {problem or 'ssh exited'} "
        f"(ssh log {log}). Check `{' '.join(entry.ssh_argv())} true`."
    )


def close_forward(forward: Forward | None) -> bool:
    """Stop a forward labctl opened (by its pid:start time token); False when it was already gone."""
    if forward is None or not forward.alive:
        return False
    pid = int(forward.process.split(":", 1)[0])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    if not _gone_within(forward.process, CLOSE_GRACE_S):
        # ssh can sit in a write to a stalled peer with SIGTERM pending: a forward must not outlive its run.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _gone_within(forward.process, CLOSE_GRACE_S)
    return True


def _gone_within(token: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process_alive(token):
            return True
        time.sleep(0.05)
    return False


@contextmanager
def temporary_forward(entry: HostEntry, host: str, port: int, log: Path) -> Iterator[Forward]:
    """A forward for one command (a status probe of another controller's run): closed after."""
    forward = open_forward(entry, host, port, log)
    try:
        yield forward
    finally:
        close_forward(forward)


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _is_ssh(token: str) -> bool:
    try:
        words = Path(f"/proc/{token.split(':', 1)[0]}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(words) and Path(words[0].decode(errors="replace")).name == "ssh" and b"-L" in words


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""
