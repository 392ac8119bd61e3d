"""The lock a study run holds for its whole process tree, and a worker that ends with its parent: real
processes, SIGKILLed for real."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from labctl.errors import Conflict
from labctl.host.files.process_lock import take_process_lock

pytestmark = pytest.mark.process

# A parent that takes the lock, forks a worker (which keeps the lock's file open, and ends with its parent),
# prints both pids and waits to be killed.
TREE = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from labctl.host.files.process_lock import take_process_lock
    from labctl.host.identity import end_with_parent
    take_process_lock(Path(sys.argv[1]), "study t", "2026-12-07T00:00:00Z")
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        def stop(signum, frame):
            Path(sys.argv[2]).write_text("stopped by " + signal.Signals(signum).name)
            os._exit(0)
        signal.signal(signal.SIGTERM, stop)
        end_with_parent(parent)
        while True:
            time.sleep(0.05)
    print(parent, child, flush=True)
    time.sleep(600)
    """
)


def _tree(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE, str(tmp_path / "run.lock"), str(tmp_path / "said")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    parent, child = (int(word) for word in proc.stdout.readline().split())
    assert parent == proc.pid
    return proc, child


def test_a_second_taker_is_refused_naming_the_holder(tmp_path: Path) -> None:
    proc, child = _tree(tmp_path)
    try:
        with pytest.raises(Conflict) as refused:
            take_process_lock(tmp_path / "run.lock", "study t", "now")
        said = str(refused.value)
        assert f"study t is already running: pid {proc.pid} on " in said and "since 2026-12-07T00:00:00Z" in said
        assert refused.value.exit_code == 3
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_parents_worker_ends_and_only_then_is_the_lock_free(tmp_path: Path) -> None:
    proc, child = _tree(tmp_path)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while not (tmp_path / "said").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "said").read_text() == "stopped by SIGTERM"  # its parent's death was its stop signal
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    fd = take_process_lock(tmp_path / "run.lock", "study t", "now")  # the last holder is gone: free
    os.close(fd)


def test_the_lock_is_free_again_once_its_holder_closes_it(tmp_path: Path) -> None:
    fd = take_process_lock(tmp_path / "run.lock", "study t", "now")
    with pytest.raises(Conflict):
        take_process_lock(tmp_path / "run.lock", "study t", "now")  # another open file: flock refuses it too
    os.close(fd)
    os.close(take_process_lock(tmp_path / "run.lock", "study t", "now"))
