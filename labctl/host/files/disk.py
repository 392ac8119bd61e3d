"""Disk space before something big lands on a disk: refuse with the numbers instead of filling the disk
halfway through a pull and failing there (and every other user of the host with it)."""

from __future__ import annotations

import math
import os

from labctl.errors import BadInput

RESERVE_VARIABLE = "LABCTL_DISK_RESERVE_GIB"  # space a shared host keeps free for everyone else
GIB = 2**30


def free_bytes(path: str) -> int | None:
    """Free bytes for an unprivileged writer at `path`, or None when the path is not on this machine."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize


def reserve_bytes() -> int:
    text = os.environ.get(RESERVE_VARIABLE, "").strip()
    if not text:
        return 0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 1_000_000:
        raise BadInput(f"{RESERVE_VARIABLE}={text[:40]!r}: give a number of GiB from 0 to 1000000 (e.g. 20).")
    return int(value * GIB)


def check_room(need: int, path: str, what: str) -> int | None:
    """Refuse (exit 2, nothing started) when `need` bytes plus the reserve do not fit at `path`; returns the
    free bytes found, or None when `path` cannot be measured from here."""
    free = free_bytes(path)
    if free is None:
        return None
    reserve = reserve_bytes()
    if need + reserve > free:
        kept = f" + {reserve / GIB:.2f} GiB kept free ({RESERVE_VARIABLE})" if reserve else ""
        raise BadInput(
            f"not enough disk space for {what}: need {need / GIB:.2f} GiB{kept}, {free / GIB:.2f} GiB free at {path}. "
            "Free some (labctl gc lists what no run needs) and try again. Nothing was started."
        )
    return free


def size_text(count: float) -> str:
    """Bytes for a person: GiB from one GiB up, MiB below (0.01 GiB says little about an 8 MiB layer)."""
    return f"{count / GIB:.2f} GiB" if count >= GIB else f"{count / 2**20:.1f} MiB"
