"""Fixtures: a copy of the lab in a temp dir, Docker and Compose presence (skip loudly locally, fail under
CI=true), and a LABCTL_HOME whose containers are removed after each test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.support import REPO, _missing, compose_available, docker_available


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
    from helpers.lifecycle_helpers import remove_runs

    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_runs(folder)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test is in one tier: docker, process, or (neither marked) unit: `make test-fast` runs `-m unit`."""
    for item in items:
        if item.get_closest_marker("docker") is None and item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.unit)
