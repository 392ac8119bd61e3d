"""Where a bench client runs: the machine, its CPU and labctl's version (stored with every result)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from labctl import __version__
from labctl.host.identity import host_name


def client_environment(workers: int = 1) -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "labctl_version": __version__,
        "python": sys.version.split()[0],
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "client": "labctl lean asyncio HTTP/1.1 + SSE "
        + ("(one process)" if workers == 1 else f"({workers} worker processes, one monotonic clock)"),
        "workers": workers,
        "host": host_name(),
    }
