"""TensorRT-LLM on its PyTorch backend in the H100 study; the engine-build profile stays, marked legacy, and
says so wherever it is used."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.support import REPO, run_labctl

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput
from labctl.study.cells import expand_cells
from labctl.study.spec import load_study


@pytest.mark.unit
def test_the_h100_study_runs_tensorrt_llm_on_its_pytorch_backend() -> None:
    study = load_study(REPO / "studies" / "h100-qwen3-32b.yaml")
    [cell] = [c for c in expand_cells(Lab(REPO), study, ["local"]) if c.entry.engine == "trtllm"]
    assert cell.profile.name == "qwen3-32b" and cell.profile.legacy is None
    assert "build" not in cell.profile.spec or cell.profile.spec["build"] is None


@pytest.mark.process  # the CLI as a subprocess
def test_the_engine_build_profile_is_legacy_and_says_why() -> None:
    legacy = load_profile(Lab(REPO), "trtllm", "qwen3-32b-engine").legacy
    assert legacy is not None and "1.3.0rc20" in legacy and "qwen3-32b" in legacy
    listed = run_labctl("profiles", "trtllm", lab=REPO)
    assert listed.code == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if "qwen3-32b-engine" in line]
    assert "LEGACY" in row
    assert all("LEGACY" not in line for line in listed.stdout.splitlines() if " qwen3-32b " in line)


@pytest.mark.unit
def test_a_legacy_note_is_one_line_of_text(tmp_path: Path) -> None:
    lab = tmp_path / "lab"
    shutil.copytree(REPO / "engines" / "trtllm", lab / "engines" / "trtllm")
    path = lab / "engines" / "trtllm" / "profiles" / "qwen3-32b.yaml"
    path.write_text(path.read_text().replace("unpinned: true\n", 'unpinned: true\nlegacy: "a\\nb"\n', 1))
    with pytest.raises(BadInput, match="legacy"):
        load_profile(Lab(lab), "trtllm", "qwen3-32b")
