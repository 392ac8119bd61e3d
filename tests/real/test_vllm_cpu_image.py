"""The tiny models (`make tiny-models`, made inside the vLLM CPU image) are byte-identical on every rebuild, so
the commits the loopback Hub derives from their bytes, which the shipped profiles pin, never move."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers.real_engine import TINY_MODELS, need_image
from helpers.support import REPO

from labctl.host.hub.loopback import repo_from_folder

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]


def make_models(out: Path) -> Path:
    env = {**os.environ, "LABCTL_TINY_MODELS": str(out), "LABCTL_TINY_LOGS": str(out.parent)}
    done = subprocess.run(["bash", str(REPO / "scripts/tiny-models.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_tiny_models_are_byte_identical_on_every_rebuild(tmp_path: Path) -> None:
    need_image()
    again = make_models(tmp_path / "again")
    sums = (TINY_MODELS / "SHA256SUMS").read_text()
    assert sums == (again / "SHA256SUMS").read_text()
    files = {line.split()[1] for line in sums.splitlines()}
    for model in ("tiny-qwen3", "tiny-qwen3-moe"):
        assert {f"./{model}/{f}" for f in ("config.json", "model.safetensors", "tokenizer.json")} <= files
        assert 1e6 < (again / model / "model.safetensors").stat().st_size < 2e7
        first = repo_from_folder(f"labctl/{model}", TINY_MODELS / model)
        assert repo_from_folder(f"labctl/{model}", again / model).commit == first.commit
