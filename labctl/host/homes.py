"""The labctl homes that ran something on this machine, one path a line, in a file every labctl user on the
host shares (next to the host lock, same sharing rules): how `gc` in one home finds the records of the
others once their containers are gone, and keeps what those records use.

Noting a home is best effort: a missing or unwritable list never stops an `up`. It only ever grows by
distinct lines, and a home that no longer exists is passed over when read."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from labctl.errors import LabctlError
from labctl.host.gpus.lock import open_lock

DEFAULT_HOMES_FILE = "/tmp/labctl-homes"
MAX_HOMES_BYTES = 4 * 1024 * 1024


def homes_file() -> Path:
    return Path(os.environ.get("LABCTL_HOMES_FILE", DEFAULT_HOMES_FILE))


def note_home(home: Path) -> None:
    line = str(home.resolve())
    if "\n" in line:
        return
    try:
        fd = open_lock(homes_file())
    except LabctlError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size > MAX_HOMES_BYTES:
            return
        known = os.pread(fd, size, 0).decode("utf-8", "replace").splitlines()
        if line not in known:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, (line + "\n").encode())
    except OSError:
        return
    finally:
        os.close(fd)


def known_homes() -> list[Path]:
    """The homes listed that still exist as folders (read once, bounded)."""
    path = homes_file()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        data = os.read(fd, MAX_HOMES_BYTES)
    except OSError:
        return []
    finally:
        os.close(fd)
    found = []
    for text in dict.fromkeys(data.decode("utf-8", "replace").splitlines()):
        folder = Path(text)
        try:
            there = folder.is_absolute() and folder.is_dir()
        except PermissionError:
            there = True  # inside another user's private folder: listed all the same, its reader says it cannot enter
        if there:
            found.append(folder)
    return found
