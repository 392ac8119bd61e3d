"""Honest statuses (issue 29, class 11): a level where too many requests failed is partial and the command
exits 1; the client's own limits (open files, a full disk) are never counted as the engine's; a killed
bench never stays `running`; bad workload input writes nothing; SIGTERM exits 143."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.harness_proc import free_port_in, harness
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.process  # the CLI and the harness engine as local processes; no Docker

FAST = ("--ttft-ms", "2", "--tpot-ms", "1")
BENCH = ("--workload", "latency-probe", "--output-len", "8", "--input-len", "16", "--no-telemetry")


@contextmanager
def engine(*args: str) -> Iterator[str]:
    with harness(*args, model="h", port=free_port_in(48000, 48999)) as (base, _):
        yield base + "/v1"


def _bench(lab: Path, home: Path, base: str, *args: str, timeout: float = 120) -> Any:
    env = {"LABCTL_HOME": str(home), "LABCTL_ENGINE_LOCK_DIR": str(home.parent)}
    return run_labctl(
        "bench", "run", "--base-url", base, "--model", "h", *BENCH, *args, lab=lab, env=env, timeout=timeout
    )


def _labctl(lab: Path, home: Path, *args: str) -> Any:
    return run_labctl(*args, lab=lab, env={"LABCTL_HOME": str(home)})


def _results(home: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(home.glob("runs/*/bench/b*[0-9a-f].json"))]


def test_an_engine_failing_60_percent_is_partial_exit_1_and_compare_says_so(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine(*FAST, "--error-rate", "0.6", "--seed", "1") as base:
        result = _bench(lab, home, base, "--concurrency", "2", "--requests", "30")
    assert result.code == 1, result
    assert result.stderr.splitlines()[-1].startswith("Error: the result is partial: more than 10% of the requests")
    [doc] = _results(home)
    [level] = doc["levels"]
    assert doc["status"] == "partial" and level["partial"] is True and level["failed"] > 3
    assert "partial" in _labctl(lab, home, "bench", "list", doc["run_id"]).stdout
    by_run = _labctl(lab, home, "compare", doc["run_id"], "b20990101-000000-abcdef")
    assert by_run.code == 2 and f"(partial: {doc['bench_id']};" in by_run.stderr, by_run
    shown = _labctl(lab, home, "report", doc["bench_id"], "-o", str(tmp_path / "r"))
    if shown.code == 0:  # with matplotlib: the one-result report names it partial, level and result
        text = (tmp_path / "r" / "report.md").read_text()
        assert "partial: more than 10%" in text and "partial (too many failed)" in text


def test_max_error_rate_sets_the_threshold_and_is_checked(lab: Path, tmp_path: Path) -> None:
    with engine(*FAST, "--error-rate", "0.6", "--seed", "1") as base:
        allowed = _bench(lab, tmp_path / "a", base, "--concurrency", "1", "--requests", "20", "--max-error-rate", "1")
        refused = _bench(lab, tmp_path / "b", base, "--max-error-rate", "1.5")
    assert allowed.code == 0 and _results(tmp_path / "a")[0]["status"] == "complete", allowed
    assert refused.code == 2 and "--max-error-rate 1.5" in refused.stderr and not (tmp_path / "b").exists()


def test_an_engine_that_dies_mid_bench_is_never_complete(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine(*FAST, "--crash-after", "25") as base:  # the warm-up is 3 requests at c=1: dies inside level 1
        result = _bench(lab, home, base, "--concurrency", "1,2", "--requests", "40")
    assert result.code == 1, result
    [doc] = _results(home)
    assert doc["status"] in ("partial", "failed") and doc["levels"][0].get("partial") is True
    assert "every request failed" in result.stderr or "partial" in result.stderr


def _nofile(limit: int) -> Any:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def test_a_low_open_files_limit_refuses_1000_streams_before_anything(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine(*FAST, "--max-num-seqs", "2000") as base:
        proc = subprocess.run(
            [*LABCTL, "bench", "run", "--base-url", base, "--model", "h", *BENCH, "--concurrency", "1000"],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
            cwd=lab,
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_nofile(256),
        )
    assert proc.returncode == 2, proc
    [line] = proc.stderr.strip().splitlines()
    assert "concurrency 1000 needs 1000 open connections" in line and "leaves room for" in line
    assert "ulimit -n" in line and "Nothing was sent" in line
    assert not home.exists()


def test_a_soft_open_files_limit_is_raised_to_the_hard_one(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine("--ttft-ms", "50", "--tpot-ms", "1", "--max-num-seqs", "2000") as base:
        proc = subprocess.run(
            [*LABCTL, "bench", "run", "--base-url", base, "--model", "h", *BENCH, "--concurrency", "600"],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
            cwd=lab,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096)),
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [doc] = _results(home)
    assert doc["status"] == "complete" and doc["levels"][0]["failed"] == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 96 KiB tmpfs: a home that fills up in the middle of a bench (root only; unmounted after)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_names_the_file_and_what_was_lost(lab: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    with engine(*FAST) as base:
        result = _bench(lab, home, base, "--concurrency", "8", "--requests", "300", "--output-len", "64")
    assert result.code == 1, result
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: could not write ") and ".requests.jsonl: No space left on device" in line
    assert "of level c=8 was lost" in line and "not the engine's" in line and "a file" not in line
    assert not list(home.glob("runs/*/bench/*.requests.jsonl"))  # the cut-short file is gone
    [doc] = _results(home)
    assert doc["status"] == "failed" and "No space left on device" in doc["failure"]
    assert doc["requests_file"] is None


def test_a_file_size_limit_is_a_write_failure_too(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine(*FAST) as base:
        proc = subprocess.run(
            [*LABCTL, "bench", "run", "--base-url", base, "--model", "h", *BENCH, "--concurrency", "4"],
            env={
                **os.environ,
                "LABCTL_LAB": str(lab),
                "LABCTL_HOME": str(home),
                "LABCTL_ENGINE_LOCK_DIR": str(tmp_path),
            },
            cwd=lab,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (6000, 6000)),
        )
    assert proc.returncode == 1, proc
    assert "could not write" in proc.stderr and "was lost" in proc.stderr and "Traceback" not in proc.stderr
    [doc] = _results(home)
    assert doc["status"] == "failed"


def _start(lab: Path, home: Path, base: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*LABCTL, "bench", "run", "--base-url", base, "--model", "h", *BENCH, *args],
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
        cwd=lab,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until_measuring(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    line = ""
    while " done: " not in line:  # one level finished and saved: the result says `running`
        line = proc.stderr.readline()
        assert line, "the bench ended before a level finished"


def test_a_sigkilled_bench_reads_as_interrupted_everywhere(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine("--ttft-ms", "5", "--tpot-ms", "20") as base:
        proc = _start(lab, home, base, "--concurrency", "1,2", "--requests", "6")
        _until_measuring(proc)
        proc.kill()
        proc.wait(10)  # reaped: a zombie would count as gone too, but the test's own child is reaped
    [doc] = _results(home)
    assert doc["status"] == "running"  # the file as the killed bench left it
    listed = _labctl(lab, home, "bench", "list", doc["run_id"])
    assert "interrupted" in listed.stdout and "running" not in listed.stdout, listed
    shown = _labctl(lab, home, "bench", "show", doc["bench_id"])
    assert f"({'interrupted'})" in shown.stdout and "is gone" in shown.stdout
    for line in shown.stdout.splitlines():  # only files that exist are named as files
        if line.startswith(("requests file: ", "telemetry file: ")) and "was not written" not in line:
            assert Path(line.split(": ", 1)[1]).is_file(), line
    if doc.get("requests_file"):
        (home / "runs" / doc["run_id"] / "bench" / doc["requests_file"]).unlink(missing_ok=True)
        again = _labctl(lab, home, "bench", "show", doc["bench_id"]).stdout
        assert f"requests file: none ({doc['requests_file']} was not written" in again, again
    as_json = json.loads(_labctl(lab, home, "bench", "show", doc["bench_id"], "--json").stdout)
    assert as_json["status"] == "interrupted"
    by_run = _labctl(lab, home, "compare", doc["run_id"], "b20990101-000000-abcdef")
    assert by_run.code == 2 and f"(interrupted: {doc['bench_id']};" in by_run.stderr, by_run


def test_a_live_running_result_is_not_compared(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine("--ttft-ms", "5", "--tpot-ms", "20") as base:
        # Level 1 (c=8) ends in seconds; level 2 (c=1) would take over half a minute: stopped long before its end.
        proc = _start(lab, home, base, "--concurrency", "8,1", "--requests", "200")
        _until_measuring(proc)
        [doc] = _results(home)
        compared = _labctl(lab, home, "compare", doc["bench_id"], "b20990101-000000-abcdef")
        listed = _labctl(lab, home, "bench", "list", doc["run_id"])
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert "running" in listed.stdout  # its writer lives: still running
    assert compared.code == 2 and "is still being measured" in compared.stderr, compared
    assert code == 143  # SIGTERM: 128 + 15 (SIGINT stays 130)
    [after] = _results(home)
    assert after["status"] == "interrupted"


def test_sigterm_exits_143(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with engine("--ttft-ms", "5", "--tpot-ms", "20") as base:
        proc = _start(lab, home, base, "--concurrency", "1", "--requests", "200")
        assert proc.stderr is not None
        while " measure: " not in proc.stderr.readline():
            pass
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
    assert time.monotonic() - started < 30
    [doc] = _results(home)
    assert doc["status"] == "interrupted"


@pytest.mark.parametrize("content", ["", '{"prompt": ""}\n{"prompt": "   "}\n'], ids=["empty", "blank-prompts"])
def test_a_dataset_without_a_usable_prompt_writes_nothing(lab: Path, tmp_path: Path, content: str) -> None:
    (lab / "workloads" / "data" / "none.jsonl").write_text(content)
    (lab / "workloads" / "none.yaml").write_text(
        "description: nothing to ask\ndataset:\n  kind: jsonl\n  path: data/none.jsonl\nrequests: 4\n"
        "concurrency: [1]\nmax_tokens: 8\nendpoint: chat\nstream: true\n"
    )
    home = tmp_path / "home"
    with engine(*FAST) as base:
        env = {"LABCTL_HOME": str(home)}
        result = run_labctl("bench", "run", "--base-url", base, "--model", "h", "--workload", "none", lab=lab, env=env)
    assert result.code == 2, result
    [line] = result.stderr.strip().splitlines()
    assert "none.jsonl: no usable prompt" in line
    assert not home.exists()  # no run record, no result
