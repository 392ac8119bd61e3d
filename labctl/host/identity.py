"""Who runs labctl and on which machine, from the operating system (never from environment variables,
which anyone can set: `USER=alice labctl down …` must not pass as alice)."""

from __future__ import annotations

import os
import pwd
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
    if not token or ":" not in token:
        return False
    pid_text, _, started = token.partition(":")
    return pid_text.isdigit() and _start_time(int(pid_text)) == started


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19] if ")" in stat else ""


def writer() -> dict[str, str]:
    """Who writes a file that says `running`: this process (pid and start time) on this host."""
    return {"process": process_token(), "host": host_name(), "user": current_user()}


def writer_gone(who: object) -> bool:
    """True only when the writer ran on this host and that process is gone (or a zombie): a SIGKILLed bench.
    A writer on another host, or a file that names none, cannot be judged here."""
    if not isinstance(who, dict) or who.get("host") != host_name() or not isinstance(who.get("process"), str):
        return False
    token = who["process"]
    if not process_alive(token):
        return True
    try:
        stat = Path(f"/proc/{token.split(':', 1)[0]}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
