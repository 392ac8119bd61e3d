"""up pulls a pinned image by digest with progress and records prep["image_pull"] (seconds, bytes, cached);
a second up finds it cached; a disk without room for the image's layers is refused before anything is
pulled. The image is this test's own (the harness image plus a layer of random bytes, pushed to the real
registry at 127.0.0.1:5000), so nothing another test uses is removed."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import labctl, record, write_profile
from helpers.registry_images import build_own_image, remove_own_image
from helpers.support import run_labctl

pytestmark = pytest.mark.docker

RANDOM_BYTES = 8 * 2**20  # incompressible: the pulled layer is about this size


@pytest.fixture
def own_image(tmp_path: Path, docker_engine: None) -> Iterator[str]:
    """127.0.0.1:5000/hc/pull-<random>:v1, pushed, then removed from this daemon so `up` must pull it."""
    reference, image_id = build_own_image(tmp_path / "image", RANDOM_BYTES)
    subprocess.run(["docker", "rmi", reference], check=True, capture_output=True)
    yield reference
    remove_own_image(reference, image_id)


def image_present(reference: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", reference], capture_output=True).returncode == 0


def pinned_profile(lab: Path, home: Path, image: str) -> str:
    write_profile(lab, "pull", free_port(), image=image)
    pinned = labctl(lab, home, "pin", "harness", "--profile", "pull", "--json")
    assert pinned.code == 0, pinned.stderr
    return str(json.loads(pinned.stdout)["digest"])


def test_up_pulls_by_digest_with_progress_and_records_it(lab: Path, home: Path, own_image: str) -> None:
    digest = pinned_profile(lab, home, own_image)
    repository = own_image.rsplit(":", 1)[0]
    assert not image_present(f"{repository}@{digest}")  # pin pulled nothing
    first = run_labctl("up", "harness", "--profile", "pull", "--json", lab=lab, env={"LABCTL_HOME": str(home)})
    assert first.code == 0, first.stderr
    assert re.search(
        rf"pulling {re.escape(repository)}@{digest} by digest \(1\d\d\.\d MiB compressed, [\d.]+ GiB free at /",
        first.stderr,
    )
    assert re.search(
        rf"pulled {re.escape(repository)}@{digest}: 8\.\d MiB in [\d.]+ s \([\d.]+ [MG]iB/s\)", first.stderr
    )
    run_id = json.loads(first.stdout)["run_id"]
    pull = record(home, run_id)["prep"]["image_pull"]
    assert pull["cached"] is False and pull["seconds"] > 0
    assert RANDOM_BYTES <= pull["bytes"] < RANDOM_BYTES + 2**20  # the new layer; the harness layers were present
    assert "already present" in pull["detail"]
    assert record(home, run_id)["image"]["digest"] == digest and image_present(f"{repository}@{digest}")
    assert labctl(lab, home, "down", run_id).code == 0

    second = run_labctl("up", "harness", "--profile", "pull", "--json", lab=lab, env={"LABCTL_HOME": str(home)})
    assert second.code == 0, second.stderr
    cached = record(home, json.loads(second.stdout)["run_id"])["prep"]["image_pull"]
    assert cached == {"seconds": 0.0, "bytes": 0, "cached": True, "detail": "already present on the Docker host"}
    assert "pulling" not in second.stderr
    assert labctl(lab, home, "down", json.loads(second.stdout)["run_id"]).code == 0


def test_a_disk_without_room_is_refused_before_the_pull(lab: Path, home: Path, own_image: str) -> None:
    digest = pinned_profile(lab, home, own_image)
    repository = own_image.rsplit(":", 1)[0]
    root = subprocess.run(["docker", "info", "-f", "{{.DockerRootDir}}"], capture_output=True, text=True).stdout.strip()
    stats = os.statvfs(root)
    reserve_gib = stats.f_blocks * stats.f_frsize / 2**30 + 1  # more than the whole disk: never room
    result = run_labctl(
        "up",
        "harness",
        "--profile",
        "pull",
        lab=lab,
        env={"LABCTL_HOME": str(home), "LABCTL_DISK_RESERVE_GIB": f"{reserve_gib:.0f}"},
    )
    assert result.code == 2
    assert result.stderr.startswith(f"Error: not enough disk space for pulling {repository}@{digest}: need 0.1")
    assert "GiB kept free (LABCTL_DISK_RESERVE_GIB), " in result.stderr and f" GiB free at {root}." in result.stderr
    assert result.stderr.splitlines()[-1].endswith("Nothing was started.")
    assert not image_present(f"{repository}@{digest}")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_terminal_sees_the_pull_move(lab: Path, home: Path, own_image: str) -> None:
    """On a terminal (stderr is a pty here) the pull is one live line: GiB done/total of the layers still
    missing, rate and ETA."""
    digest = pinned_profile(lab, home, own_image)
    repository = own_image.rsplit(":", 1)[0]
    main, child = pty.openpty()
    env = {**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "labctl", "up", "harness", "--profile", "pull", "--json"],
        stdout=subprocess.PIPE,
        stderr=child,
        env=env,
        cwd=lab,
        timeout=120,
    )
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert proc.returncode == 0, seen.decode(errors="replace")
    lines = seen.decode(errors="replace").split("\r\x1b[K")
    moving = [line for line in lines if line.startswith(f"pulling {repository}@{digest}: ")]
    assert moving, seen.decode(errors="replace")[-2000:]
    missing_layer = r": [\d.]+ MiB/8\.0 MiB, [\d.]+ [MG]iB/s"  # the total counts only the layer this host lacks
    assert any(re.search(missing_layer, line) for line in moving)
    labctl(lab, home, "down", json.loads(proc.stdout)["run_id"])
