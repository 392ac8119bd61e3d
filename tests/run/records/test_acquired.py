"""The acquisitions ledger (HOME/.state/acquired.jsonl): appended one whole line at a time, group-writable
like the rest of a home, and read back line by line, a bad line reported without hiding the others.
And gc's checks on what a ledger line may name: only a Hugging Face snapshot folder or an engine build's key
folder, whatever a forged line says."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from labctl.host.homes import known_homes, note_home
from labctl.run.models.gc import _given, is_engine_build, is_snapshot, normal
from labctl.run.records.acquired import Acquisition, Action, Kind, Ledger

IMAGE = "sha256:" + "ab" * 32


def image_line(action: Action = Action.PULLED, run_id: str = "20261204-120000-aaaaaa") -> Acquisition:
    return Acquisition(Kind.IMAGE, action, host="local", image_id=IMAGE, references=("r/x:v1",), run_id=run_id)


def test_lines_come_back_as_written_and_the_file_is_group_writable(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.append(image_line())
    ledger.append(Acquisition(Kind.MODEL, Action.FETCHED, host="local", folder="/c/hub/m/snapshots/x", name="o/m@x"))
    entries, problems = ledger.read()
    assert problems == []
    assert [(e.kind, e.action, e.image_id or e.folder) for e in entries] == [
        (Kind.IMAGE, Action.PULLED, IMAGE),
        (Kind.MODEL, Action.FETCHED, "/c/hub/m/snapshots/x"),
    ]
    assert entries[0].references == ("r/x:v1",) and entries[0].by and entries[0].at
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o660  # the home's group appends; others see nothing
    assert stat.S_IMODE(ledger.path.parent.stat().st_mode) & 0o007 == 0


def test_a_bad_line_is_reported_on_its_own_and_the_rest_still_read(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.append(image_line())
    with ledger.path.open("a") as handle:
        handle.write('{"kind": "image", "action": "pulled", "image_id": "../../etc"}\n')  # not an image id
        handle.write('{"kind": "model", "action": "stolen", "folder": "/x"}\n')  # no such action
        handle.write('{"kind": "engine", "action": "built"}\n')  # no folder
        handle.write("[1, 2\n")  # truncated
        handle.write(json.dumps({"kind": "image", "action": "pulled", "image_id": IMAGE, "references": "r"}) + "\n")
    ledger.append(image_line(run_id="20261204-130000-bbbbbb"))
    entries, problems = ledger.read()
    assert [e.run_id for e in entries] == ["20261204-120000-aaaaaa", "20261204-130000-bbbbbb"]
    assert [p.split(": not readable")[0].rsplit(" ", 1)[-1] for p in problems] == ["2", "3", "4", "5", "6"]
    assert all(str(ledger.path) in p for p in problems)


def test_concurrent_appends_never_mix_lines(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)

    def write(n: int) -> None:
        for i in range(50):
            ledger.append(image_line(run_id=f"20261204-1{n}0000-{i:06x}"))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries, problems = ledger.read()
    assert problems == [] and len(entries) == 200


def test_a_ledger_that_is_not_a_file_is_one_problem(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    ledger.path.parent.mkdir(parents=True)
    os.mkfifo(ledger.path)
    entries, problems = ledger.read()
    assert entries == [] and len(problems) == 1 and str(ledger.path) in problems[0]


def test_a_ledger_that_links_to_another_homes_is_not_read(tmp_path: Path) -> None:
    theirs = Ledger(tmp_path / "theirs")
    theirs.append(image_line())
    mine = Ledger(tmp_path / "mine")
    mine.path.parent.mkdir(parents=True)
    mine.path.symlink_to(theirs.path)
    entries, problems = mine.read()
    assert entries == [] and len(problems) == 1 and "a symbolic link" in problems[0]
    with pytest.raises(OSError):
        mine.append(image_line())  # nor written through
    assert len(theirs.read()[0]) == 1


def hf_snapshot(cache: Path) -> Path:
    model = cache / "hub" / "models--org--tiny"
    (model / "blobs").mkdir(parents=True)
    snapshot = model / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    return snapshot


def test_a_ledger_line_names_a_snapshot_only_in_the_cache_layout(tmp_path: Path) -> None:
    snapshot = hf_snapshot(tmp_path / "hf")
    assert is_snapshot(snapshot)
    precious = tmp_path / "precious"
    precious.mkdir()
    (tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / ("d" * 40)).symlink_to(precious)
    for forged in (
        Path("/etc"),
        tmp_path,
        precious,
        snapshot.parent,  # every snapshot at once
        snapshot.parent / ("d" * 40),  # a link out of the cache
        snapshot / ".." / ".." / ".." / ".." / "precious",
        Path("hf") / snapshot.relative_to(tmp_path / "hf"),  # relative
    ):
        assert not is_snapshot(forged), forged


def test_a_ledger_line_names_an_engine_folder_only_when_a_build_made_it(tmp_path: Path) -> None:
    key = tmp_path / "engines" / "0123456789abcdef"
    (key / "tiny").mkdir(parents=True)
    assert not is_engine_build(key)  # no engine in it
    (key / "tiny" / "config.json").write_text("{}")
    assert is_engine_build(key)
    plain = tmp_path / "fedcba9876543210"
    plain.mkdir()
    (plain / "notes").mkdir()
    (plain / "notes" / "config.json").symlink_to(key / "tiny" / "config.json")
    for forged in (Path("/"), tmp_path, key / "tiny", plain, tmp_path / "engines" / "link"):
        assert not is_engine_build(forged), forged
    (tmp_path / "engines" / "abcdefabcdefabcd").symlink_to(key)
    assert not is_engine_build(tmp_path / "engines" / "abcdefabcdefabcd")


def test_a_name_is_this_homes_only_if_it_gave_it() -> None:
    names = {"127.0.0.1:5000/hc/x:v1"}
    assert _given("127.0.0.1:5000/hc/x:v1", names)
    assert _given("127.0.0.1:5000/hc/x@sha256:" + "1" * 64, names)  # Docker's digest name from the pull
    assert not _given("127.0.0.1:5000/hc/x:v2", names)  # someone tagged it too
    assert not _given("labctl/base:bookworm", names)
    assert normal("docker.io/library/python:3.12-slim") == "python:3.12-slim"
    assert normal("docker.io/org/name:1") == "org/name:1"


def test_homes_are_noted_once_and_gone_ones_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = tmp_path / "homes"
    monkeypatch.setenv("LABCTL_HOMES_FILE", str(listing))
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for home in (first, second, first):
        note_home(home)
    assert listing.read_text().splitlines() == [str(first), str(second)]
    assert stat.S_IMODE(listing.stat().st_mode) == 0o666  # every labctl user on the host adds to it
    second.rmdir()
    with listing.open("a") as handle:
        handle.write("relative/home\n\n")
    assert known_homes() == [first]
