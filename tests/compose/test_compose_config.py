"""Compose's own acceptance of every rendered file (needs the Compose v2 binary, no daemon)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.support import REPO

from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.compose.render import RenderOptions, render_compose

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

LAB = Lab(REPO)
OPTIONS = RenderOptions(cache_dir="/srv/hf-cache", engine_store="/srv/trt-engines")
SHIPPED = [(e, p) for e in list_engine_names(LAB) for p in list_profile_names(LAB, e)]


@pytest.mark.compose
@pytest.mark.parametrize(("engine", "profile"), SHIPPED)
def test_compose_accepts_rendered_file(engine: str, profile: str, tmp_path: Path, compose_binary: None) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text(render_compose(LAB, load_profile(LAB, engine, profile), OPTIONS))
    proc = subprocess.run(["docker", "compose", "-f", str(path), "config", "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
