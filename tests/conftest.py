"""Shared fixtures: a copy of the lab in a temp dir, the real CLI as a subprocess, and the rule for
tests that need Docker: skip loudly locally, fail under CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LABCTL = [sys.executable, "-m", "labctl"]
IN_CI = os.environ.get("CI") == "true"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


def run_labctl(*args: str, lab: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120) -> Result:
    full_env = {**os.environ, **(env or {})}
    if lab is not None:
        full_env["LABCTL_LAB"] = str(lab)
    proc = subprocess.run([*LABCTL, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=lab or REPO)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A private copy of the repository's lab (engines/, templates/) to break on purpose."""
    root = tmp_path / "lab"
    shutil.copytree(REPO / "engines", root / "engines", ignore=shutil.ignore_patterns("Dockerfile"))
    shutil.copytree(REPO / "templates", root / "templates")
    (root / "compose").mkdir()
    for folder in ("workloads", "suites"):
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, root / folder)
    return root


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must provision it (make docker-lab)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make docker-lab` to test against a real Docker Engine")


def compose_available() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True
    ).returncode == 0


def docker_available() -> bool:
    return shutil.which("docker") is not None and subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture
def compose_binary() -> None:
    if not compose_available():
        _missing("the Docker CLI with the Compose v2 plugin is not installed")


@pytest.fixture
def docker_engine() -> None:
    if not docker_available():
        _missing("no Docker Engine answers `docker info`")
    if not compose_available():
        _missing("the Compose v2 plugin is not installed")


@pytest.fixture
def home(tmp_path: Path, docker_engine: None) -> Iterator[Path]:
    """LABCTL_HOME for tests that start containers; every container its runs left is removed after."""
    from lifecycle_helpers import remove_runs

    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_runs(folder)
