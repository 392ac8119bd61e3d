"""A host-wide lock so that two `labctl up` at the same moment cannot both take one GPU.

Every labctl user on the host (the members of the docker group) shares one lock file, so it lives in
/tmp (world-writable and sticky) and is created mode 0666 whatever the creator's umask. An existing
lock is opened without O_CREAT: with fs.protected_regular=1 (systemd's default), O_CREAT on another
user's file in a sticky folder is refused even when its mode allows writing."""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import Conflict, LabctlError
from labctl.host.identity import current_user, host_name

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


ENGINE_LOCK_DIR = "/tmp"


@dataclass(frozen=True)
class EngineHold:
    """What an engine lock gave: held (this process has it) or shared (another holds it, --allow-shared-engine)."""

    held: bool
    holder: str | None  # who else held it, in words, when not held


def endpoint_key(host: str, port: int, tls: bool) -> str:
    """One name for one engine however its address is spelt: the name resolved, every loopback address one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = sorted({str(info[4][0]) for info in infos})
    except (OSError, UnicodeError):
        addresses = [host]
    loopback = all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses if _is_ip(a))
    name = "loopback" if addresses and loopback and all(_is_ip(a) for a in addresses) else ",".join(addresses)
    return f"endpoint {'https' if tls else 'http'}://{name}:{port}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


@contextmanager
def engine_lock(key: str, about: str, wait: float = 0.0, shared: bool = False) -> Iterator[EngineHold]:
    """One bench or eval per engine at a time, across every Unix user of the host.

    The lock is a file per engine (`labctl-engine-<hash>.lock` in /tmp, or LABCTL_ENGINE_LOCK_DIR), mode
    0666 like the host lock; its content says who holds it (user, host, pid, what). A second taker waits up
    to `wait` seconds, then is refused (Conflict, exit 3) naming the holder; with `shared` it goes on
    beside the holder, and the caller records that."""
    folder = Path(os.environ.get("LABCTL_ENGINE_LOCK_DIR", ENGINE_LOCK_DIR))
    path = folder / f"labctl-engine-{hashlib.sha256(key.encode()).hexdigest()[:16]}.lock"
    fd = open_lock(path)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                holder = _holder(fd)
                if shared:
                    yield EngineHold(False, holder)
                    return
                raise Conflict(
                    f"{key} is already being measured by {holder}"
                    + (f" (waited {wait:g} s)" if wait > 0 else "")
                    + ": wait for it (--wait-for-engine SECONDS), or pass --allow-shared-engine to measure beside "
                    "it (recorded as a caveat: both sets of numbers are then shared)."
                ) from None
        text = json.dumps({"who": about, "user": current_user(), "host": host_name(), "pid": os.getpid()})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, text.encode() + b"\n", 0)
        except OSError:
            pass  # the name of the holder is a courtesy; the flock is the lock
        yield EngineHold(True, None)
    finally:
        os.close(fd)  # closing releases the lock


def _holder(fd: int) -> str:
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        said = f"{data['who']} (user {data['user']} on {data['host']}, pid {data['pid']})"[:300]
        return "".join(c if c.isprintable() else "?" for c in said)  # another user's text: inert
    except (OSError, ValueError, KeyError, TypeError):
        return "another labctl (it has not said who yet)"
