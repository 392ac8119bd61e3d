"""What this host's NVIDIA GPUs are and who holds them (nvidia-smi), and whether Docker can give
them to a container. On a host without GPUs every answer says so plainly."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Gpu:
    index: str
    name: str
    uuid: str
    driver: str
    memory_used_mib: str
    memory_total_mib: str = ""
    memory_free_mib: str = ""

    @property
    def unified_memory(self) -> bool:
        """GB10 (DGX Spark) shares the host's memory and reports it as N/A."""
        return "N/A" in self.memory_total_mib

    @property
    def simulated(self) -> bool:
        """The test lab's nvidia-smi stand-in names every GPU "Simulated …": never a real-gpu result."""
        return self.name.startswith("Simulated ")

    def free_gib(self) -> float | None:
        text = self.memory_free_mib.replace("MiB", "").strip()
        return int(text) / 1024 if text.isdigit() else None


# The command that answers nvidia-smi queries on the host labctl drives (see host/remote/hosts.py); None: the
# local `nvidia-smi` on PATH.
_COMMAND: list[str] | None = None


def use_command(argv: list[str] | None) -> None:
    global _COMMAND
    _COMMAND = argv


def nvidia_smi() -> list[str] | None:
    if _COMMAND is not None:
        return list(_COMMAND)
    exe = shutil.which("nvidia-smi")
    return [exe] if exe else None


def list_gpus(command: list[str] | None = None) -> list[Gpu]:
    exe = command or nvidia_smi()
    if exe is None:
        return []
    query = "--query-gpu=index,name,uuid,driver_version,memory.used,memory.total,memory.free"
    try:
        proc = subprocess.run([*exe, query, "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):  # a dead host, ssh refusing, a hung driver: no GPU seen
        return []
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 7:
            gpus.append(Gpu(*parts))
    return gpus


def foreign_processes() -> dict[str, list[str]]:
    """GPU uuid -> 'pid name (MiB)' for every compute process holding memory."""
    exe = nvidia_smi()
    if exe is None:
        return {}
    proc = subprocess.run(
        [*exe, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    held: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            held.setdefault(parts[0], []).append(f"pid {parts[1]} {parts[2]} ({parts[3]})")
    return held


def cdi_specs() -> list[Path]:
    found: list[Path] = []
    for folder in (Path("/etc/cdi"), Path("/var/run/cdi")):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if "nvidia" in p.name]
    return found


def cuda_version() -> str | None:
    """The highest CUDA version the driver supports, from nvidia-smi's own header ("CUDA Version: 13.0")."""
    exe = nvidia_smi()
    if exe is None:
        return None
    proc = subprocess.run(exe, capture_output=True, text=True, timeout=20)
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", proc.stdout) if proc.returncode == 0 else None
    return match.group(1) if match else None


def host_memory_available_gib() -> float | None:
    """MemAvailable from /proc/meminfo: what a unified-memory GPU can have."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        return None
    return None
