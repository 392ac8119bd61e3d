"""`bench --client-workers N`: a level's streams over N client processes on one clock. Against the harness
engine, which notes when it wrote each first token (same machine clock, joined by X-Request-Id): every request
comes back once, from N processes, each received within a second of the engine writing it, on one clock; an open loop's
sends follow one schedule; the result says how many processes measured; a killed bench leaves no worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.harness_proc import harness
from helpers.support import LABCTL

pytestmark = pytest.mark.process


def bench(lab: Path, home: Path, base: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LABCTL, "bench", "run", "--base-url", f"{base}/v1", "--model", "m", "--workload", "chat-sweep"]
        + ["--input-len", "8", "--output-len", "8", "--no-telemetry", "--json", *more],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
    )


def request_lines(home: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    path = home / "runs" / result["run_id"] / "bench" / result["requests_file"]
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_three_workers_measure_one_level_on_one_clock(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "20", "--tpot-ms", "5", model="m") as (base, _):
        ran = bench(lab, tmp_path / "h", base, "--concurrency", "6", "--requests", "36", "--client-workers", "3")
        assert ran.returncode == 0, ran.stderr
        written = httpx.get(f"{base}/harness/first-tokens", timeout=10).json()
    result = json.loads(ran.stdout)
    [level] = result["levels"]
    assert level["completed"] == level["requests"] == 36 and level["client_workers"] == 3
    assert result["client"]["workers"] == 3 and "3 worker processes" in result["client"]["client"]
    assert level["total_output_tokens"] == 36 * 8  # the usage counts, merged exactly
    lines = request_lines(tmp_path / "h", result)
    ids = [line["request_id"] for line in lines]
    assert len(ids) == len(set(ids)) == 36
    assert len({i.split("-")[1] for i in ids}) == 3  # labctl-<pid>-<n>: three processes sent them
    # The engine's write and the client's receipt on one clock: within a second, where another clock (or a worker
    # timing from its own start) would be off by far more. The harness notes its time just after the write, so a
    # harness preempted there (a loaded machine) notes it after the client already read it: a lag below 0 is its.
    lags = sorted(line["sent"] + line["ttft_ms"] / 1000 - written[line["request_id"]] for line in lines)
    assert lags[0] >= -0.5 and lags[-1] < 2.0, (lags[:3], lags[-3:])
    assert "3 worker processes" in bench_show(lab, tmp_path / "h", result["bench_id"])


def bench_show(lab: Path, home: Path, bench_id: str) -> str:
    shown = subprocess.run(
        [*LABCTL, "bench", "show", bench_id],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_an_open_loop_over_workers_keeps_one_schedule(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "5", "--tpot-ms", "2", model="m") as (base, _):
        ran = bench(
            lab, tmp_path / "h", base, "--concurrency", "8", "--requests", "40", "--request-rate", "40",
            "--client-workers", "2",
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    [level] = result["levels"]
    lines = request_lines(tmp_path / "h", result)
    due = sorted(line["scheduled"] for line in lines)
    assert len(due) == 40 and len(set(due)) == 40  # one schedule dealt out, no arrival twice
    # one schedule at the level's rate: a schedule per worker would have sent at twice it (a loaded machine may
    # send slower, which the fell-behind flag says; never faster)
    assert level["achieved_rate"] <= 1.5 * level["scheduled_rate"] and 20 <= level["scheduled_rate"] <= 60


def test_too_many_workers_are_refused_before_anything_is_sent(lab: Path, tmp_path: Path) -> None:
    ran = bench(lab, tmp_path / "h", "http://127.0.0.1:9", "--client-workers", "0")
    assert ran.returncode == 2 and "--client-workers 0: give a whole number from 1 to 64" in ran.stderr
    assert not (tmp_path / "h" / "runs").exists() or not list((tmp_path / "h" / "runs").rglob("*.json"))


def workers_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"labctl.bench.bench_job" in cmdline:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_killed_bench_leaves_no_worker_sending(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "5", "--tpot-ms", "50", model="m") as (base, _):
        proc = subprocess.Popen(
            [*LABCTL, "bench", "run", "--base-url", f"{base}/v1", "--model", "m", "--workload", "chat-sweep"]
            + ["--input-len", "8", "--output-len", "64", "--concurrency", "4", "--requests", "400"]
            + ["--no-telemetry", "--client-workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(tmp_path / "h")},
        )
        try:
            deadline = time.monotonic() + 60
            while len(workers := workers_of(proc.pid)) < 2:
                assert time.monotonic() < deadline and proc.poll() is None, "the bench started no workers"
                time.sleep(0.1)
            time.sleep(1.5)  # measuring
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 15
            while any(alive(pid) for pid in workers):
                assert time.monotonic() < deadline, f"workers {workers} outlived their killed bench"
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
