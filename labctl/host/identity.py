"""Who runs labctl and on which machine, from the operating system (never from environment variables,
which anyone can set: `USER=alice labctl down …` must not pass as alice)."""

from __future__ import annotations

import ctypes
import os
import pwd
import signal
import socket
from pathlib import Path


def current_user() -> str:
    """The name of the effective uid, from the password database; the uid itself if it has no entry."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def host_name() -> str:
    return socket.gethostname()


def process_token(pid: int | None = None) -> str:
    """`pid:start time` of a process (this one by default): unlike a bare pid, never matches a later process."""
    pid = pid or os.getpid()
    return f"{pid}:{_start_time(pid)}"


def process_alive(token: str | None) -> bool:
    """The process a token names still runs: same pid, same start time, and not a zombie (a killed `up`
    its parent has not reaped yet has stopped for good, whatever /proc still lists)."""
    if not token or ":" not in token:
        return False
    pid_text, _, started = token.partition(":")
    if not pid_text.isdigit():
        return False
    fields = _stat_fields(int(pid_text))
    return len(fields) > 19 and fields[19] == started and fields[0] not in ("Z", "X")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state first, start time at index 19."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return []
    return stat.rsplit(")", 1)[-1].split() if ")" in stat else []


def _start_time(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def writer() -> dict[str, str]:
    """Who writes a file that says `running`: this process (pid and start time) on this host."""
    return {"process": process_token(), "host": host_name(), "user": current_user()}


def writer_gone(who: object) -> bool:
    """True only when the writer ran on this host and that process is gone (a zombie is gone): a SIGKILLed bench.
    A writer on another host, or a file that names none, cannot be judged here."""
    if not isinstance(who, dict) or who.get("host") != host_name() or not isinstance(who.get("process"), str):
        return False
    return not process_alive(who["process"])


PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> None:
    """This (forked) process gets `signum` when its parent dies, as if told to stop; a parent already gone by
    now (it died between the fork and this call) sends it here at once. Linux only; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signum)
