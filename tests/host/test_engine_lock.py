"""The engine lock (one bench or eval per engine) is shared by every labctl user of the host, like the
host lock: a lock taken by root refuses a second real Unix user, naming root, and the other way round."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.support import REPO, ensure_second_user

from labctl.errors import Conflict
from labctl.host.gpus.lock import engine_lock

pytestmark = pytest.mark.process  # a second Unix user's process

USER = "labtest2"
KEY = "endpoint http://127.0.0.1:48999"
TAKE = """
import sys, time
sys.path.insert(0, sys.argv[1])
from labctl.errors import Conflict
from labctl.host.gpus.lock import engine_lock
try:
    with engine_lock(sys.argv[2], "bench b-second-user"):
        print("held", flush=True)
        time.sleep(float(sys.argv[3]))
except Conflict as exc:
    print(exc)
    sys.exit(exc.exit_code)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="labctl-engine-lock-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _as_user(folder: Path, hold: float) -> subprocess.Popen[str]:
    ensure_second_user(USER)
    return subprocess.Popen(
        [
            shutil.which("runuser") or "runuser",
            "-u",
            USER,
            "--",
            "/usr/bin/python3",
            "-I",
            "-c",
            TAKE,
            str(REPO),
            KEY,
            str(hold),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"LABCTL_ENGINE_LOCK_DIR": str(folder), "PATH": "/usr/bin:/bin"},
    )


def test_a_lock_root_holds_refuses_another_user_naming_root(shared_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_ENGINE_LOCK_DIR", str(shared_dir))
    old = os.umask(0o077)  # the strictest usual umask: the file must still be everyone's
    try:
        with engine_lock(KEY, "bench b-root") as hold:
            assert hold.held
            other = _as_user(shared_dir, 0)
            out, err = other.communicate(timeout=30)
    finally:
        os.umask(old)
    assert other.returncode == 3, (out, err)
    assert "already being measured by bench b-root (user root" in out
    [lock] = list(shared_dir.iterdir())
    assert lock.stat().st_mode & 0o777 == 0o666


def test_a_lock_another_user_holds_refuses_root_and_shared_goes_on(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABCTL_ENGINE_LOCK_DIR", str(shared_dir))
    other = _as_user(shared_dir, 5)
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        with pytest.raises(Conflict, match=f"bench b-second-user \\(user {USER}"), engine_lock(KEY, "bench b-root"):
            pass
        with engine_lock(KEY, "bench b-root", shared=True) as hold:  # --allow-shared-engine
            assert not hold.held and hold.holder is not None and USER in hold.holder
    finally:
        other.kill()
        other.wait()


def test_a_second_taker_in_one_process_is_refused_and_a_released_lock_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABCTL_ENGINE_LOCK_DIR", str(tmp_path))
    with (
        engine_lock(KEY, "one"),
        pytest.raises(Conflict, match="already being measured by one"),
        engine_lock(KEY, "two", wait=0.5),
    ):
        pass
    with engine_lock(KEY, "three") as hold:
        assert hold.held


def test_every_spelling_of_one_loopback_engine_is_one_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`localhost`, `127.0.0.1` and `[::1]` reach the same engine: a bench by one spelling refuses the others."""
    from labctl.host.gpus.lock import endpoint_key

    keys = {endpoint_key(host, 48999, False) for host in ("localhost", "127.0.0.1", "::1", "127.0.0.2")}
    assert keys == {"endpoint http://loopback:48999"}
    assert endpoint_key("localhost", 48998, False) != endpoint_key("localhost", 48999, False)
    assert endpoint_key("localhost", 48999, True) != endpoint_key("localhost", 48999, False)
    monkeypatch.setenv("LABCTL_ENGINE_LOCK_DIR", str(tmp_path))
    with (
        engine_lock(endpoint_key("localhost", 48999, False), "bench by name"),
        pytest.raises(Conflict, match="bench by name"),
        engine_lock(endpoint_key("127.0.0.1", 48999, False), "bench by address"),
    ):
        pass
