"""The disk-space refusal on a real small filesystem: a 1 MiB tmpfs this test mounts and removes (root only;
elsewhere it is skipped loudly)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labctl.errors import BadInput
from labctl.host.files.disk import check_room, free_bytes

pytestmark = pytest.mark.process  # starts processes: the unit tier starts none


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "hC-small-disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "hC-tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"SKIPPED LOUDLY: cannot mount a tmpfs here ({made.stderr.decode().strip()}); needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_pull_that_does_not_fit_is_refused_with_the_numbers(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LABCTL_DISK_RESERVE_GIB", raising=False)
    free = free_bytes(str(small_disk))
    assert free is not None and 0 < free <= 2**20
    with pytest.raises(BadInput) as refused:
        check_room(3 * 2**30, str(small_disk), "pulling r/x@sha256:abc")
    assert str(refused.value) == (
        f"not enough disk space for pulling r/x@sha256:abc: need 3.00 GiB, 0.00 GiB free at {small_disk}. "
        "Free some (labctl gc lists what no run needs) and try again. Nothing was started."
    )
    assert check_room(free // 2, str(small_disk), "a small pull") == free


def test_the_reserve_counts_and_is_checked(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_DISK_RESERVE_GIB", "1")
    with pytest.raises(BadInput, match=r"need 0\.00 GiB \+ 1\.00 GiB kept free \(LABCTL_DISK_RESERVE_GIB\)"):
        check_room(1, str(small_disk), "a small pull")
    for bad in ("nan", "-1", "lots", "1e9"):
        monkeypatch.setenv("LABCTL_DISK_RESERVE_GIB", bad)
        with pytest.raises(BadInput, match="give a number of GiB from 0 to 1000000"):
            check_room(1, str(small_disk), "a small pull")


def test_a_path_not_on_this_machine_is_not_measured() -> None:
    assert check_room(2**40, "/nonexistent/hC/docker-root", "a pull") is None
