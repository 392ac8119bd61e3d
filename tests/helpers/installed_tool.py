"""labctl installed as a user installs it (tests/cli/test_installed_tool.py): the sdist and the wheel built from it
(`python -m build`, as `make dist` does) from a copy of this checkout, the wheel installed by pipx into a home of
its own outside it, as the README says. Building it is minutes of pip work that waits on nothing, so
it starts in a thread as soon as collection finds the module's tests (tests/conftest.py) and the module runs
last in its tier: the build overlaps the tier's other tests instead of adding to them."""

from __future__ import annotations

import os
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
    "LICENSE",
    "CHANGELOG.md",
    "labctl",
    "engines",
    "templates",
    "workloads",
    "suites",
    "studies",
)


@dataclass(frozen=True)
class Built:
    root: Path  # the folder holding source/, dist/ and pipx's home
    venv: Path  # the venv pipx made for the distribution
    command: Path  # the `labctl` pipx put on the user's PATH
    wheel: Path


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
    """Built from a copy of the sources (the build writes into its source folder: never into this checkout)."""
    source, dist = root / "source", root / "dist"
    source.mkdir()
    for name in SOURCE:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--quiet", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    (wheel,) = dist.glob("llm_labctl-*.whl")
    pipx_env = {
        **os.environ,
        "PIPX_HOME": str(root / "pipx"),
        "PIPX_BIN_DIR": str(root / "bin"),
        "PIPX_MAN_DIR": str(root / "man"),
    }
    done = subprocess.run(
        # --no-compile: byte-compiling every installed module (scipy, matplotlib) was most of the install on a
        # loaded 2-core machine; Python compiles what labctl imports when it first runs.
        [sys.executable, "-m", "pipx", "install", "--pip-args=--no-compile --disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        cwd=root,
        env=pipx_env,
        timeout=1200,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    return Built(root, root / "pipx" / "venvs" / "llm-labctl", root / "bin" / "labctl", wheel)


def remove() -> None:
    """The build's folder, at the session's end (a build still running is waited for first)."""
    if _build is not None:
        _build.exception(timeout=1800)  # waits; a failed build was reported by the fixture that waited for it
    if _pool is not None:
        _pool.shutdown(wait=True)
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)
