"""A record written by a process killed between writing and renaming is the old record, whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from labctl.host.files.atomic import write_atomically

# The child is SIGKILLed at the worst moment: the new bytes are written and flushed, the rename not done.
CHILD = """
import os, signal, sys
from pathlib import Path
import labctl.host.files.atomic as files
real_replace = os.replace
def killed_before_rename(src, dst):
    assert Path(src).read_text() == sys.argv[2] * 100_000  # the new text is all there, in the temporary file
    os.kill(os.getpid(), signal.SIGKILL)
files.os.replace = killed_before_rename
files.write_atomically(Path(sys.argv[1]), sys.argv[2] * 100_000)
"""


@pytest.mark.process
def test_kill_between_write_and_rename_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    old = '{"status": "starting"}\n'
    target.write_text(old)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(target), "new-bytes "], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert target.read_text() == old


def test_a_failed_write_leaves_neither_half_a_file_nor_a_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    target.write_text("old")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_atomically(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_a_write_replaces_whole_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "key"
    write_atomically(target, "secret\n", mode=0o600)
    assert target.read_text() == "secret\n" and (target.stat().st_mode & 0o777) == 0o600
