"""The bench client as local child processes (`python -m MODULE`, the workers of a sharded level), beside the
one-shot client container: each gets its job on stdin (an API key travels there, never in argv), its lines are
read from all of them at once, and stopping closes their stdin (their lifeline) before it kills."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO

READ_BYTES = 1 << 16
STOP_GRACE_S = 5.0


class ClientProcess:
    """One child: its pipes, and a bounded tail of what it wrote on stderr (kept in a temporary file)."""

    def __init__(self, module: str, job: bytes) -> None:
        self.stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop_all
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.buffer = b""
        self.send(job)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def ended(self) -> str:
        """How it ended (after its stdout closed): the exit code and the tail of its stderr."""
        try:
            code: int | str = self.proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            code = "none yet"
        self.stderr.seek(0)
        tail = self.stderr.read()[-600:].decode(errors="replace").strip()
        return f"exit {code}" + (f": {tail}" if tail else "")


def lines(children: list[ClientProcess], wait_s: float) -> Iterator[tuple[ClientProcess, bytes | None]]:
    """Whole lines from any child as they come (None once a child's stdout closed); returns after `wait_s` of
    silence so that the caller can check its own deadline, and when every stdout closed."""
    selector = selectors.DefaultSelector()
    for child in children:
        assert child.proc.stdout is not None
        selector.register(child.proc.stdout, selectors.EVENT_READ, child)
    try:
        while selector.get_map():
            ready = selector.select(timeout=wait_s)
            if not ready:
                return
            for key, _ in ready:
                reading: ClientProcess = key.data
                data = os.read(key.fd, READ_BYTES)
                if not data:
                    selector.unregister(key.fileobj)
                    yield reading, None
                    continue
                parts = (reading.buffer + data).split(b"\n")
                reading.buffer = parts.pop()
                for part in parts:
                    yield reading, part
    finally:
        selector.close()


def stop_all(children: list[ClientProcess]) -> None:
    """Closing stdin stops a child still sending (its lifeline); one that does not stop is killed."""
    for child in children:
        if child.proc.stdin is not None and not child.proc.stdin.closed:
            with contextlib.suppress(OSError):
                child.proc.stdin.close()
    ends = time.monotonic() + STOP_GRACE_S
    for child in children:
        try:
            child.proc.wait(max(0.1, ends - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()
        if child.proc.stdout is not None:
            child.proc.stdout.close()
        child.stderr.close()
