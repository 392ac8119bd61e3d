"""Who and which process: a process token names one process for its whole life, and a zombie is gone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from labctl.host.identity import process_alive, process_token, writer_gone


def test_a_running_process_is_alive_and_a_reused_pid_is_not() -> None:
    token = process_token()
    assert process_alive(token)
    pid, _, started = token.partition(":")
    assert not process_alive(f"{pid}:{int(started) + 1}")  # the same pid, started at another time
    for bad in ("", "abc", f"{pid}", ":", "-1:5", "x:1"):
        assert not process_alive(bad)


@pytest.mark.process
def test_a_killed_child_not_yet_reaped_is_not_alive() -> None:
    """A SIGKILLed `up` stays a zombie until its parent reaps it: its run must not stay `starting` meanwhile."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        token = process_token(child.pid)
        assert process_alive(token)
        os.kill(child.pid, 9)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _is_zombie(child.pid):
            time.sleep(0.02)
        assert _is_zombie(child.pid), "the child should be a zombie until waited for"
        assert not process_alive(token)
        assert writer_gone({"process": token, "host": os.uname().nodename, "user": "x"})
    finally:
        child.wait()
    assert not process_alive(token)


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[-1].split()[0] == "Z"
