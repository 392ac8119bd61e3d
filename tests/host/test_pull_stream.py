"""Counting a pull's bytes from the Docker Engine's progress messages, as Docker 20.10 sends them: layers
already present cost nothing, a layer that finishes without progress messages counts its manifest size."""

from __future__ import annotations

from labctl.host.images.pull_stream import PullProgress, _count
from labctl.run.images.pull import pull_line

STREAM = [
    {"status": "Pulling from hc/pull", "id": "v1"},
    {"status": "Already exists", "progressDetail": {}, "id": "aaaaaaaaaaaa"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "bbbbbbbbbbbb"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "cccccccccccc"},
    {"status": "Downloading", "progressDetail": {"current": 1000, "total": 5000}, "id": "bbbbbbbbbbbb"},
    {"status": "Downloading", "progressDetail": {"current": 4096, "total": 5000}, "id": "bbbbbbbbbbbb"},
    {"status": "Download complete", "progressDetail": {}, "id": "bbbbbbbbbbbb"},
    {"status": "Download complete", "progressDetail": {}, "id": "cccccccccccc"},  # too small to report progress
    {"status": "Extracting", "progressDetail": {"current": 9999, "total": 9999}, "id": "bbbbbbbbbbbb"},
    {"status": "Pull complete", "progressDetail": {}, "id": "bbbbbbbbbbbb"},
    {"status": "Digest: sha256:" + "d" * 64},
]


def test_bytes_count_only_what_was_downloaded() -> None:
    layers: dict[str, int] = {}
    totals: dict[str, int] = {}
    present: set[str] = set()
    known = {"aaaaaaaaaaaa": 7_000_000, "bbbbbbbbbbbb": 5000, "cccccccccccc": 300}
    for event in STREAM:
        _count(event, layers, totals, known, present)
    assert present == {"aaaaaaaaaaaa"}
    assert layers == {"bbbbbbbbbbbb": 5000, "cccccccccccc": 300}


def test_progress_lines() -> None:
    moving = PullProgress(done=3 * 2**20, total=12 * 2**20, seconds=1.5)
    assert pull_line("r@sha256:x", moving) == "pulling r@sha256:x: 3.0 MiB/12.0 MiB, 2.0 MiB/s, ETA 4 s"
    big = PullProgress(done=3 * 2**30, total=None, seconds=60)
    assert pull_line("r@sha256:x", big, finished=True) == "pulled r@sha256:x: 3.00 GiB in 60.0 s (51.2 MiB/s)"
