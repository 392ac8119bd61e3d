"""A full disk fails a write, and the OSError of a write names no file: the error labctl prints must name the
file it could not write (the run's events, the home's ledger, a bench's per-request records)."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from labctl.bench.client import RequestResult
from labctl.bench.request_file import append_requests
from labctl.errors import describe_error
from labctl.run.records.store import Runs


class _FullDisk(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_an_event_the_disk_has_no_room_for_names_the_events_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = Runs(tmp_path / "home")
    runs.make_dir("20261207-000000-abcdef")
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: _FullDisk())
    with pytest.raises(OSError) as caught:
        runs.event("20261207-000000-abcdef", "up")
    said = describe_error(caught.value)
    assert said == f"No space left on device: {runs.dir('20261207-000000-abcdef') / 'events.jsonl'}"


def test_request_records_the_disk_has_no_room_for_name_their_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"format": 1}\n')
    monkeypatch.setattr(Path, "open", lambda *a, **k: _FullDisk())
    result = RequestResult(ok=True, sent=1.0, first_token=1.1, chunk_times=[1.1, 1.2], output_tokens=2, prompt_tokens=2)
    with pytest.raises(OSError) as caught:
        append_requests(path, 1, 0, 1, [result])
    assert describe_error(caught.value) == f"No space left on device: {path}"
