"""The host lock is shared by every labctl user on the host: whoever creates it, the next user (a
member of the docker group) can take it; a lock they cannot open is one clear line, not a traceback.

The second user is real: `useradd` makes `labtest2`, and labctl's own lock code runs as that user
under Debian's /usr/bin/python3 (the venv's interpreter lives under /root, unreadable to others)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.support import REPO, ensure_second_user

from labctl.errors import LabctlError
from labctl.host.gpus.lock import host_lock

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

USER = "labtest2"
SYSTEM_PYTHON = "/usr/bin/python3"
TAKE_LOCK = """
import sys
sys.path.insert(0, sys.argv[1])
from labctl.errors import LabctlError
from labctl.host.gpus.lock import host_lock
try:
    with host_lock(timeout=5):
        print("locked")
except LabctlError as exc:
    print(f"Error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A fresh world-writable sticky folder, like /tmp, that the second user can reach."""
    folder = Path(tempfile.mkdtemp(prefix="labctl-lock-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def second_user() -> str:
    ensure_second_user(USER)
    return USER


def as_user(user: str, lock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("runuser") or "runuser", "-u", user, "--", SYSTEM_PYTHON, "-I", "-c", TAKE_LOCK, str(REPO)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"LABCTL_LOCK_FILE": str(lock), "PATH": "/usr/bin:/bin"},
    )


def _create_as_root(lock: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_LOCK_FILE", str(lock))
    old = os.umask(0o077)  # the strictest usual umask: the mode must not depend on it
    try:
        with host_lock(timeout=1):
            pass
    finally:
        os.umask(old)


def test_the_lock_is_created_for_everyone_whatever_the_umask(shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = shared_dir / "gpus.lock"
    _create_as_root(lock, monkeypatch)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o666


def test_a_second_user_takes_the_lock_the_first_created(
    shared_dir: Path, second_user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = shared_dir / "gpus.lock"
    _create_as_root(lock, monkeypatch)
    result = as_user(second_user, lock)
    assert (result.returncode, result.stdout, result.stderr) == (0, "locked\n", "")


def test_a_lock_the_user_cannot_open_is_one_clear_line(
    shared_dir: Path, second_user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = shared_dir / "gpus.lock"
    lock.write_text("")
    lock.chmod(0o600)  # made by an older labctl, or by hand
    result = as_user(second_user, lock)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and f"chmod 666 {lock}" in result.stderr, result.stderr
    assert "LABCTL_LOCK_FILE" in result.stderr


@pytest.mark.parametrize("kind", ["symlink", "directory"])
def test_a_lock_path_that_is_not_a_plain_file_is_refused(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    lock = shared_dir / "gpus.lock"
    victim = shared_dir / "victim"
    victim.write_text("someone's file")
    victim.chmod(0o600)
    if kind == "symlink":
        lock.symlink_to(victim)
    else:
        lock.mkdir()
    monkeypatch.setenv("LABCTL_LOCK_FILE", str(lock))
    with pytest.raises(LabctlError, match="not a plain file"), host_lock(timeout=1):
        pass
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_the_default_lock_lives_where_every_user_can_write() -> None:
    from labctl.host.gpus.lock import DEFAULT_LOCK

    folder = Path(DEFAULT_LOCK).parent
    assert folder.stat().st_mode & 0o1777 == 0o1777  # world-writable and sticky, like /tmp
