"""An exclusive lock one command holds for its whole process tree: the processes it forks inherit the open
file, so the lock stays taken while any of them lives (a SIGKILLed parent's workers included), and goes with
the last of them. A second taker is refused at once, told who holds it."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from labctl.errors import Conflict
from labctl.host.identity import current_user, host_name, process_token


def take_process_lock(path: Path, what: str, since: str) -> int:
    """The lock file's descriptor, held until closed (or every process holding it ends); Conflict (exit 3)
    naming the holder when another command holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    except PermissionError:  # another user of a shared home made it: a read-only descriptor locks as well
        fd = os.open(path, os.O_RDONLY | flags)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise Conflict(f"{what} is already running: {holder}. Wait for it to finish, or stop that process.") from None
    text = json.dumps({"process": process_token(), "host": host_name(), "user": current_user(), "since": since})
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode() + b"\n", 0)
    except OSError:
        pass  # who holds it is a courtesy; the flock is the lock
    return fd


def _holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        pid = str(data["process"]).split(":")[0]
        said = f"pid {pid} on {data['host']} (user {data['user']}, since {data['since']})"[:300]
        return "".join(c if c.isprintable() else "?" for c in said)  # another process's text: inert
    except (OSError, ValueError, KeyError, TypeError):
        return "another labctl (it has not said who yet)"
