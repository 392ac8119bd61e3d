"""A host-wide lock so that two `labctl up` at the same moment cannot both take one GPU."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labctl.errors import LabctlError

DEFAULT_LOCK = "/tmp/labctl-gpus.lock"


@contextmanager
def host_lock(timeout: float = 120.0) -> Iterator[None]:
    path = Path(os.environ.get("LABCTL_LOCK_FILE", DEFAULT_LOCK))
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabctlError(
                        f"another labctl held {path} for {timeout:.0f} s; try again, or see who: fuser {path}"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on one file (a run's record): read-modify-write under it loses no update."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
