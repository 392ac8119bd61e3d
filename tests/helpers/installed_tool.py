"""labctl installed as a user installs it (tests/cli/test_installed_tool.py): a wheel built from a copy of this
checkout, installed into a fresh venv outside it. Building it is minutes of pip work that waits on nothing, so
it starts in a thread as soon as collection finds the module's tests (tests/conftest.py) and the module runs
last in its tier: the build overlaps the tier's other tests instead of adding to them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from helpers.support import REPO

MODULE = "tests/cli/test_installed_tool.py"
SOURCE = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "labctl",
    "engines",
    "templates",
    "workloads",
    "suites",
    "studies",
)


@dataclass(frozen=True)
class Built:
    root: Path  # the folder holding source/, dist/ and venv/
    venv: Path


_pool: ThreadPoolExecutor | None = None
_build: Future[Built] | None = None
_root: Path | None = None


def start_build() -> None:
    """Begin the build in a thread (once); `built()` waits for it."""
    global _pool, _build, _root
    if _build is None:
        _root = Path(tempfile.mkdtemp(prefix="labctl-installed-"))
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="installed-tool")
        _build = _pool.submit(_build_venv, _root)


def built() -> Built:
    start_build()
    assert _build is not None
    return _build.result(timeout=1800)


def _build_venv(root: Path) -> Built:
    """Built from a copy of the sources (pip builds in the source folder: never in this checkout's build/)."""
    source, dist, venv = root / "source", root / "dist", root / "venv"
    source.mkdir()
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    quiet = ["-q", "--disable-pip-version-check"]
    for argv in (
        [sys.executable, "-m", "pip", "wheel", *quiet, "--no-deps", "-w", str(dist), str(source)],
        [sys.executable, "-m", "venv", str(venv)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, cwd=root, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = dist.glob("labctl-*.whl")
    done = subprocess.run(
        # --no-compile: byte-compiling every installed module (scipy, matplotlib) was most of the build on a
        # loaded 2-core machine; Python compiles what labctl imports when it first runs.
        [str(venv / "bin" / "pip"), "install", *quiet, "--no-compile", str(wheel)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Built(root, venv)


def remove() -> None:
    """The build's folder, at the session's end (a build still running is waited for first)."""
    if _build is not None:
        _build.exception(timeout=1800)  # waits; a failed build was reported by the fixture that waited for it
    if _pool is not None:
        _pool.shutdown(wait=True)
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)
