"""Fixtures: a copy of the lab in a temp dir, Docker and Compose presence (skip loudly locally, fail under
CI=true), and a LABCTL_HOME whose containers are removed after each test."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import installed_tool
from helpers.lab_copy import copy_folder, copy_lab
from helpers.support import _missing, compose_available, docker_available
from hypothesis import settings

# Under CI the property tests draw the same examples every run: a red CI names a case anyone can replay.
# Elsewhere they explore anew each time.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

# Every labctl the tests start gives a host 30 s to answer (status: 90 s for its runs), not 10: the tiers share
# two cores, and labb's listing over SSH took over 30 s there. A test of the deadline itself sets its own.
os.environ.setdefault("LABCTL_HOST_TIMEOUT_S", "30")


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A private copy of the repository's lab (engines/, templates/) to break on purpose."""
    root = tmp_path / "lab"
    copy_folder("engines", root / "engines", skip=("Dockerfile",))
    copy_lab(root, ("templates", "workloads", "suites"))
    (root / "compose").mkdir()
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
# GPU lab and labb; those on labb alone also marked labb), slurm (the Slurm test cluster of make slurm-lab).
# `make test` (scripts/test_tiers.py) runs them side by side: unit and process spread over workers; docker, the
# simulated hosts' lab tests and labb's each one test at a time, since their tests read host-wide state (claims,
# `status`, the host lock) but no two of them share a daemon. Tests marked exclusive run last, alone.
TIERS = ("slurm", "lab", "docker", "process", "unit")


def tier_of(keywords: Any) -> str:
    return next((tier for tier in TIERS if tier in keywords), "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The installed-tool module runs last in its tier: its wheel and venv build in a thread meanwhile.
    items.sort(key=lambda item: item.nodeid.startswith(installed_tool.MODULE))
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()) and "docker" not in item.keywords:
            item.add_marker(pytest.mark.docker)  # through the `home` fixture: it starts containers
        if tier_of(item.keywords) == "unit":
            item.add_marker(pytest.mark.unit)


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = any(item.nodeid.startswith(installed_tool.MODULE) for item in session.items)
    if wanted and not session.config.option.collectonly:
        installed_tool.start_build()


def pytest_sessionfinish() -> None:
    installed_tool.remove()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test phase's duration, for scripts/test_tiers.py's list of the slowest (LABCTL_TEST_TIMES)."""
    times = os.environ.get("LABCTL_TEST_TIMES")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under xdist the controller sees every worker's reports too: write each phase once
    if times and report.duration >= 0.5:
        with open(times, "a", encoding="utf-8") as out:
            out.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "duration": report.duration}) + "\n")


class _NotInAUnitTest(Exception):
    """A unit test started a process or slept: it belongs in the process tier (mark it `process`)."""


@pytest.fixture(autouse=True)
def _unit_tests_stay_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit tier (`make test-fast`) runs in seconds because its tests start no process and never sleep:
    a test that does is refused here, with the tier it belongs to."""
    if "unit" not in request.node.keywords:
        return

    def refuse(what: str) -> Any:
        def refused(*_args: Any, **_kwargs: Any) -> Any:
            raise _NotInAUnitTest(f"a unit test {what}: mark it `process` (pytestmark = pytest.mark.process)")

        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("forked"))
    real_sleep, refused_sleep = time.sleep, refuse("slept")
    monkeypatch.setattr(time, "sleep", lambda seconds: real_sleep(0) if seconds <= 0 else refused_sleep())
