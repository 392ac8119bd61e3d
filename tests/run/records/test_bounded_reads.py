"""What labctl reads back from a home (records, bench and evaluation results, compose files, saved logs)
is read bounded, like any file from someone else: an oversize or corrupt one is one clear line, and in a
listing it is reported and skipped, never fatal for the others. The files are real (an oversize one is
sparse, so the test writes almost nothing); the CLI runs as a subprocess."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.support import run_labctl

from labctl.errors import BadInput
from labctl.run.records.record import Endpoint, ImageInfo, Record
from labctl.run.records.store import (
    MAX_LOG_BYTES,
    MAX_RECORD_BYTES,
    MAX_RESULT_BYTES,
    Runs,
    read_json_folder,
    read_tail,
)

GOOD = "20261203-015815-a1b2c3"
BIG = "20261203-015816-d4e5f6"

pytestmark = pytest.mark.process  # starts processes: the unit tier starts none


def good_record(run_id: str = GOOD) -> Record:
    return Record(
        run_id=run_id,
        status="stopped",
        engine="harness",
        profile="smoke",
        served_model_name="harness-smoke",
        owner="alice",
        endpoint=Endpoint("http://127.0.0.1:18000/v1", "127.0.0.1", 18000),
        image=ImageInfo(reference="127.0.0.1:5000/labctl/harness:dev"),
    )


def oversize(path: Path, limit: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.write(b'{"a": "')
        handle.truncate(limit + 1)  # sparse: a huge file, almost nothing written


@pytest.fixture
def home(tmp_path: Path) -> Path:
    runs = Runs(tmp_path / "home")
    runs.save(good_record())
    return runs.home


def labctl(home: Path, *args: str) -> tuple[int, str, str]:
    result = run_labctl(*args, env={"LABCTL_HOME": str(home)})
    return result.code, result.stdout, result.stderr


def test_an_oversize_record_is_one_clear_line_and_skipped_by_runs(home: Path) -> None:
    oversize(home / "runs" / BIG / "record.json", MAX_RECORD_BYTES)
    with pytest.raises(BadInput, match=r"larger than 1024 KiB, the most labctl reads from such a file"):
        Runs(home).load(BIG)
    assert Runs(home).try_load(BIG) is None
    code, out, err = labctl(home, "runs")
    assert code == 1 and GOOD in out and BIG not in out  # a skipped entry: said, gone past, exit 1
    assert err.startswith(f"skipped run {BIG}: run record {home}/runs/{BIG}/record.json: larger than 1024 KiB")
    code, out, err = labctl(home, "show", BIG)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "larger than 1024 KiB" in err


@pytest.mark.parametrize(
    ("content", "reason"),
    [("{ not json", "not readable JSON"), ("[" * 100_000, "nested too deeply"), ('["a list"]', "not a JSON object")],
)
def test_a_corrupt_record_is_reported_and_skipped(home: Path, content: str, reason: str) -> None:
    path = home / "runs" / BIG / "record.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    code, out, err = labctl(home, "runs", "--json")
    assert code == 1 and [r["run"] for r in json.loads(out)] == [GOOD], out
    assert err.startswith(f"skipped run {BIG}: ") and reason in err and "Traceback" not in err


@pytest.mark.parametrize(("kind", "prefix", "folder"), [("bench", "b", "bench"), ("eval", "e", "eval")])
def test_oversize_and_corrupt_results_are_skipped_in_lists_and_refused_when_named(
    home: Path, kind: str, prefix: str, folder: str
) -> None:
    results = home / "runs" / GOOD / folder
    oversize(results / f"{prefix}{BIG}.json", MAX_RESULT_BYTES)
    (results / f"{prefix}20261203-015817-000000.json").write_text("{ broken")
    code, out, err = labctl(home, kind, "list", GOOD, "--json")
    assert (code, json.loads(out)) == (1, [])
    assert err.count("\n") == 2 and "larger than 65536 KiB" in err and "not readable JSON" in err
    named = labctl(
        home,
        kind,
        "show" if kind == "bench" else "diff",
        f"{prefix}{BIG}",
        *([] if kind == "bench" else [f"{prefix}{BIG}"]),
    )
    assert named[0] == 2 and named[2].count("\n") == 1 and "larger than 65536 KiB" in named[2], named


def test_read_json_folder_keeps_the_readable_ones(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"id": "a"}')
    oversize(tmp_path / "b.json", MAX_RESULT_BYTES)
    (tmp_path / "c.json").write_text('{"id": "c"}')
    skipped: list[str] = []
    assert read_json_folder(tmp_path, "bench result", skipped.append) == [{"id": "a"}, {"id": "c"}]
    assert len(skipped) == 1 and "b.json" in skipped[0]


def test_a_saved_log_is_read_from_its_end_bounded(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as handle:
        handle.truncate(MAX_LOG_BYTES + 10)
        handle.seek(0, os.SEEK_END)
        handle.write(b"the last line\n")
    text = read_tail(log, MAX_LOG_BYTES)
    assert text.startswith(f"[labctl: the first 24 bytes of {log} are not shown]\n")
    assert text.endswith("the last line\n") and len(text.encode()) < MAX_LOG_BYTES + 200
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadInput, match="not a regular file"):
        read_tail(tmp_path / "fifo", MAX_LOG_BYTES)


def test_a_home_that_is_a_file_is_one_clear_line(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "home"
    not_a_folder.write_text("a file")
    code, out, err = labctl(not_a_folder, "runs")
    assert (code, out) == (2, "")
    assert (
        err
        == f"Error: --home {not_a_folder}: not a folder. Give a folder (it is made if missing), or unset LABCTL_HOME.\n"
    )
