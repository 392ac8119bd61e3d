"""Fixtures: a copy of the lab in a temp dir, Docker and Compose presence (skip loudly locally, fail under
CI=true), and a LABCTL_HOME whose containers are removed after each test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# Tiers: unit (in-process), process (local processes), docker (the main Docker daemon), lab (the simulated
# GPU lab and labb). Under pytest-xdist (`--dist loadgroup`) the docker tier runs on one worker and the lab
# tier on another, each one test at a time: their tests read host-wide state (claims, `status`, the lock),
# while the two share no daemon. Process tests go module by module, unit tests one by one, over every worker.
TIERS = ("lab", "docker", "process", "unit")


def tier_of(keywords: Any) -> str:
    return next((tier for tier in TIERS if tier in keywords), "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()) and "docker" not in item.keywords:
            item.add_marker(pytest.mark.docker)  # through the `home` fixture: it starts containers
        tier = tier_of(item.keywords)
        if tier == "unit":
            item.add_marker(pytest.mark.unit)
        elif tier in ("docker", "lab"):
            item.add_marker(pytest.mark.xdist_group(tier))
        else:  # a process module's expensive fixtures (module scope) are then made once, on one worker
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


_SPANS: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each tier's wall span and test time, from every report (under xdist the controller sees them all)."""
    span = _SPANS.setdefault(tier_of(report.keywords), [float("inf"), 0.0, 0.0, 0])
    span[0] = min(span[0], report.start)
    span[1] = max(span[1], report.stop)
    span[2] += report.duration
    span[3] += report.when == "call"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SPANS:
        return
    terminalreporter.section("time per tier")
    for tier in TIERS:
        if tier in _SPANS:
            start, stop, total, count = _SPANS[tier]
            terminalreporter.write_line(
                f"{tier:8} {int(count):4d} tests  first start to last end {stop - start:7.1f} s  (test time {total:7.1f} s)"
            )
