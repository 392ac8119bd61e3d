"""A host-wide lock so that two `labctl up` at the same moment cannot both take one GPU.

Every labctl user on the host (the members of the docker group) shares one lock file, so it lives in
/tmp (world-writable and sticky) and is created mode 0666 whatever the creator's umask. An existing
lock is opened without O_CREAT: with fs.protected_regular=1 (systemd's default), O_CREAT on another
user's file in a sticky folder is refused even when its mode allows writing."""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from labctl.errors import LabctlError

DEFAULT_LOCK = "/tmp/labctl-gpus.lock"
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


def open_lock(path: Path) -> int:
    """A file descriptor on the shared lock file, creating it (mode 0666) when it does not exist."""
    try:
        for _ in range(3):
            try:
                fd = os.open(path, _OPEN)
            except FileNotFoundError:
                try:
                    fd = os.open(path, _OPEN | os.O_CREAT | os.O_EXCL, 0o666)
                except FileExistsError:
                    continue  # another labctl created it a moment ago: open theirs
                os.fchmod(fd, 0o666)  # the umask narrowed the mode os.open was given
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(0, "a FIFO, device or socket")
            return fd
        raise OSError(0, "it keeps appearing and vanishing")
    except PermissionError:
        raise LabctlError(_unshared(path)) from None
    except OSError as exc:  # ELOOP (a symlink), EISDIR, or the checks above
        raise LabctlError(
            f"the host lock {path} is not a plain file ({exc.strerror or exc}): remove it, or set "
            "LABCTL_LOCK_FILE to a plain file every labctl user on this host can write."
        ) from None


def _unshared(path: Path) -> str:
    try:
        info = path.stat()
        owner = f"uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}"
    except OSError:
        owner = "its folder is not writable"
    return (
        f"cannot open the host lock {path} ({owner}): every labctl user on this host must be able to write it. "
        f"Ask its owner or root to run `chmod 666 {path}`, or set LABCTL_LOCK_FILE to a shared writable file."
    )


@contextmanager
def host_lock(timeout: float = 120.0) -> Iterator[None]:
    path = Path(os.environ.get("LABCTL_LOCK_FILE", DEFAULT_LOCK))
    fd = open_lock(path)
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
    # Read-only is enough for flock, so another member of a shared home's group can lock a run it cannot write.
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o664)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
