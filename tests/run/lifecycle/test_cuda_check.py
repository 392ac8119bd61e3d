"""The image's CUDA major against the driver's, read from nvidia-smi. The GPU is simulated: the
project's own nvidia-smi stand-in (scripts/sim/nvidia-smi) answers on PATH, as on the simulated lab."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput
from labctl.run.lifecycle.preflight import check_cuda

pytestmark = pytest.mark.process  # starts processes: the unit tier starts none

LAB = Lab(REPO)


@pytest.fixture
def driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(REPO / "scripts/sim/nvidia-smi")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    def set_driver(version: str, cuda: str) -> None:
        config = tmp_path / "gpus.json"
        gpu = {"name": "Simulated NVIDIA H100 80GB HBM3", "memory_total_mib": 81559, "memory_used_mib": 0}
        config.write_text(json.dumps({"driver_version": version, "cuda_version": cuda, "gpus": [gpu, gpu]}))
        monkeypatch.setenv("LABCTL_SIM_GPU_CONFIG", str(config))

    return set_driver


def test_a_driver_too_old_for_the_image_is_refused(driver) -> None:  # type: ignore[no-untyped-def]
    driver("570.124.06", "12.8")
    profile = load_profile(LAB, "vllm", "qwen3-32b")
    with pytest.raises(BadInput) as caught:
        check_cuda(profile)
    message = str(caught.value)
    assert "needs CUDA 13, but this host's driver supports CUDA 12.8" in message and "-cu129" in message


def test_a_new_enough_driver_passes_and_is_reported(driver) -> None:  # type: ignore[no-untyped-def]
    driver("580.95.05", "13.0")
    assert check_cuda(load_profile(LAB, "vllm", "qwen3-32b")) == "13.0"
