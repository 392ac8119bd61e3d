"""What this host's NVIDIA GPUs are and who holds them (nvidia-smi), and whether Docker can give
them to a container. On a host without GPUs every answer says so plainly."""

from __future__ import annotations

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


def nvidia_smi() -> str | None:
    return shutil.which("nvidia-smi")


def list_gpus() -> list[Gpu]:
    exe = nvidia_smi()
    if exe is None:
        return []
    proc = subprocess.run(
        [exe, "--query-gpu=index,name,uuid,driver_version,memory.used", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if proc.returncode != 0:
        return []
    gpus = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5:
            gpus.append(Gpu(*parts))
    return gpus


def foreign_processes() -> dict[str, list[str]]:
    """GPU uuid -> 'pid name (MiB)' for every compute process holding memory."""
    exe = nvidia_smi()
    if exe is None:
        return {}
    proc = subprocess.run(
        [exe, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader"],
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
