"""The edge of labctl's authenticating proxy: a free loopback port for the engine behind it, and the proxy's
own reload (it re-reads the key file; the keys never pass through an argv)."""

from __future__ import annotations

import socket
import subprocess

from labctl.host.docker import daemon as dk

RELOAD_TIMEOUT_S = 30.0


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reload_keys(container: str) -> str | None:
    """Have the proxy in `container` re-read its key file and reload nginx; None when done, else the problem."""
    argv = [*dk.cli_argv(), "exec", container, "labctl-auth-proxy", "reload"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RELOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no answer within {RELOAD_TIMEOUT_S:g} s"
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
