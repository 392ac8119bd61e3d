"""A profile's resources (CPUs, memory) are optional, bounded, and leave older profiles' hashes alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.records import copy_lab

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput

SMOKE = Path("engines/harness/profiles/smoke.yaml")


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    return copy_lab(tmp_path)


def with_resources(lab: Path, resources: object) -> None:
    data = yaml.safe_load((lab / SMOKE).read_text())
    data["resources"] = resources
    (lab / SMOKE).write_text(yaml.safe_dump(data))


def test_resources_become_cpus_and_mib_and_change_the_hash(lab: Path) -> None:
    before = load_profile(Lab(lab), "harness", "smoke")
    assert (before.cpus, before.memory_mib) == (None, None)
    with_resources(lab, {"cpus": 4, "memory_gib": 1.5})
    after = load_profile(Lab(lab), "harness", "smoke")
    assert (after.cpus, after.memory_mib) == (4, 1536)
    assert after.sha256 != before.sha256


@pytest.mark.parametrize(
    ("resources", "words"),
    [({"cpus": 0}, "CPU cores, 1-1024"), ({"memory_gib": 0.1}, "0.5-16384"), ({"gpus": 1}, "unknown field")],
)
def test_bad_resources_are_refused_in_one_line(lab: Path, resources: object, words: str) -> None:
    with_resources(lab, resources)
    with pytest.raises(BadInput, match=words) as refused:
        load_profile(Lab(lab), "harness", "smoke")
    assert "resources" in str(refused.value) and "\n" not in str(refused.value).strip()


def test_a_cpu_placed_profile_asks_a_scheduler_for_its_cores_and_memory(lab: Path) -> None:
    profile = load_profile(Lab(lab), "vllm-cpu", "tiny-qwen3")
    placed = profile.cpu
    assert placed is not None
    assert (profile.cpus, profile.memory_mib) == (placed.core_count, placed.memory_gib * 1024)
