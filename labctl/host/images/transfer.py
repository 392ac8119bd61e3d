"""Moving an image from one Docker Engine to another over Docker's own transport: `docker save` on the source
piped into `docker load` on the target (for a host behind an ssh:// endpoint, through the same SSH account
Docker uses). Nothing is written to disk on the way; the bytes are counted for progress and the record."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from labctl.errors import LabctlError
from labctl.host.docker import daemon as dk

CHUNK = 1 << 20
_LOADED_ID = re.compile(r"Loaded image ID: (sha256:[0-9a-f]{64})\s*\Z")
_LOADED_REF = re.compile(r"Loaded image: (\S{1,512})\s*\Z")


@dataclass(frozen=True)
class Copied:
    bytes: int
    seconds: float
    loaded: tuple[str, ...]  # what `docker load` says it loaded: image ids and references


def copy_image(
    source: str, target: str, reference: str, report: Callable[[int, float], None], timeout: float = 3600.0
) -> Copied:
    """Stream `docker -H SOURCE save REFERENCE` into `docker -H TARGET load`; `report(bytes, seconds)` after
    each MiB. Either side failing stops both."""
    start = time.monotonic()
    # The CLI on both sides: one's stdout streams into the other's stdin, never to a file in between.
    save = subprocess.Popen(
        [*dk.cli_argv_for(source), "save", reference],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    load = subprocess.Popen(
        [*dk.cli_argv_for(target), "load", "--quiet"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert save.stdout is not None and load.stdin is not None
    # Their other outputs are drained as they come, so that a full pipe can never stall the copy.
    said = {
        name: _drain(stream) for name, stream in (("save", save.stderr), ("out", load.stdout), ("load", load.stderr))
    }
    sent = 0
    try:
        while chunk := save.stdout.read(CHUNK):
            load.stdin.write(chunk)
            sent += len(chunk)
            report(sent, time.monotonic() - start)
            if time.monotonic() - start > timeout:
                raise LabctlError(f"copying {reference} took longer than {timeout:g} s; stopped.")
        load.stdin.close()
        save.wait(timeout=60)
        load.wait(timeout=max(60.0, timeout - (time.monotonic() - start)))
    except BrokenPipeError:
        pass  # the target stopped reading: its exit code and stderr say why
    finally:
        for proc in (save, load):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    text = {name: _joined(parts) for name, parts in said.items()}
    if save.returncode != 0:
        raise LabctlError(f"docker save {reference} on {source} failed: {_tail(text['save'])}")
    if load.returncode != 0:
        raise LabctlError(f"docker load on {target} failed: {_tail(text['load'])}")
    lines = text["out"].splitlines()
    loaded = tuple(m.group(1) for line in lines for m in [_LOADED_ID.match(line) or _LOADED_REF.match(line)] if m)
    return Copied(sent, round(time.monotonic() - start, 3), loaded)


def _drain(stream: IO[bytes] | None) -> tuple[threading.Thread, list[bytes]]:
    parts: list[bytes] = []

    def read() -> None:
        if stream is not None:
            while chunk := stream.read(65536):
                if sum(map(len, parts)) < 1 << 20:  # a chatty error keeps its first MiB
                    parts.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, parts


def _joined(drained: tuple[threading.Thread, list[bytes]]) -> str:
    thread, parts = drained
    thread.join(timeout=10)
    return b"".join(parts).decode(errors="replace")


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines[-2:])[:300] or "no output"
