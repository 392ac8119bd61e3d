"""One bench per engine at a time (issue 29, class 7): a second bench or eval on the same engine is refused
naming the holder (exit 3), waits when asked, or runs beside it with --allow-shared-engine, recorded; an
engine that held more requests than this client sent marks the level, and compare shows it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port_in, harness
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.process  # the CLI and the harness engine as local processes; no Docker

SLOW = ("--ttft-ms", "30", "--tpot-ms", "30")  # a bench of a few seconds: long enough to overlap
BENCH = ("--workload", "latency-probe", "--output-len", "8", "--input-len", "16", "--concurrency", "2")
# The first bench must still hold the engine when the second command has started, even on a loaded CI host
# where starting the CLI alone takes seconds: 200 requests two at a time are about 25 s of holding.
HOLDING = (*BENCH, "--requests", "200")


def _env(home: Path, locks: Path) -> dict[str, str]:
    return {"LABCTL_HOME": str(home), "LABCTL_ENGINE_LOCK_DIR": str(locks)}


@contextmanager
def engine(*args: str) -> Iterator[str]:
    with harness(*SLOW, *args, model="h", port=free_port_in(48000, 48999)) as (base, _):
        yield base + "/v1"


def _background(lab: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*LABCTL, *args],
        env={**os.environ, **env, "LABCTL_LAB": str(lab)},
        cwd=lab,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc


def _wait_for_result(home: Path, seconds: float = 20) -> None:
    """Until the first bench holds its lock and wrote its result (it writes it once it holds the lock)."""
    deadline = time.monotonic() + seconds
    while not list(home.glob("runs/*/bench/*.json")):
        assert time.monotonic() < deadline, "the first bench wrote no result"
        time.sleep(0.05)


def _results(home: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted(home.glob("runs/*/bench/b*[0-9a-f].json"))]


def test_a_second_bench_on_one_endpoint_is_refused_naming_the_holder(lab: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    with engine() as base:
        first = _background(lab, env, "bench", "run", "--base-url", base, "--model", "h", *HOLDING)
        _wait_for_result(tmp_path / "home")
        runs_before = sorted((tmp_path / "home" / "runs").iterdir())
        second = run_labctl("bench", "run", "--base-url", base, "--model", "h", *BENCH, lab=lab, env=env)
        first.communicate(timeout=180)
    assert second.code == 3, second
    [line] = second.stderr.strip().splitlines()
    [held] = _results(tmp_path / "home")
    assert line.startswith("Error: endpoint http://loopback:") and f"bench {held['bench_id']}" in line, line
    assert "--allow-shared-engine" in line and "pid" in line
    assert sorted((tmp_path / "home" / "runs").iterdir()) == runs_before  # the refused one wrote nothing
    assert first.returncode == 0 and held["status"] == "complete"


def test_an_eval_during_a_bench_is_refused(lab: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    with engine() as base:
        first = _background(lab, env, "bench", "run", "--base-url", base, "--model", "h", *HOLDING)
        _wait_for_result(tmp_path / "home")
        evaluated = run_labctl(
            "eval", "run", "--base-url", base, "--model", "h", "--suite", "short-answer", lab=lab, env=env
        )
        first.communicate(timeout=180)
    assert evaluated.code == 3, evaluated
    assert "is already being measured by bench b" in evaluated.stderr, evaluated.stderr
    assert not list((tmp_path / "home").glob("runs/*/eval/*.json"))


@pytest.mark.parametrize("wait", ["nan", "-1", "inf"])
def test_a_wait_that_is_not_a_bounded_time_is_refused(lab: Path, tmp_path: Path, wait: str) -> None:
    env = _env(tmp_path / "home", tmp_path)
    base = "http://127.0.0.1:48999/v1"
    for command in (("bench", "run", *BENCH), ("eval", "run", "--suite", "short-answer")):
        refused = run_labctl(*command, "--base-url", base, "--model", "h", "--wait-for-engine", wait, lab=lab, env=env)
        assert refused.code == 2 and "--wait-for-engine" in refused.stderr, refused
    assert not (tmp_path / "home").exists()


def test_waiting_for_the_engine_runs_the_second_bench_after_the_first(lab: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    with engine() as base:
        first = _background(lab, env, "bench", "run", "--base-url", base, "--model", "h", *BENCH, "--requests", "16")
        _wait_for_result(tmp_path / "home")
        waited = run_labctl(
            "bench",
            "run",
            "--base-url",
            base,
            "--model",
            "h",
            *BENCH,
            "--requests",
            "4",
            "--wait-for-engine",
            "60",
            lab=lab,
            env=env,
        )
        first.communicate(timeout=180)
    assert first.returncode == 0 and waited.code == 0, waited
    a, b = _results(tmp_path / "home")
    assert a["status"] == b["status"] == "complete"
    assert not a.get("shared_engine") and not b.get("shared_engine")
    assert b["created_at"] >= a["finished_at"]  # it started only once the first had finished


def test_allow_shared_engine_runs_beside_and_compare_shows_the_caveat(lab: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    with engine() as base:
        first = _background(lab, env, "bench", "run", "--base-url", base, "--model", "h", *HOLDING)
        _wait_for_result(tmp_path / "home")
        shared = run_labctl(
            "bench",
            "run",
            "--base-url",
            base,
            "--model",
            "h",
            *BENCH,
            "--requests",
            "20",
            "--allow-shared-engine",
            lab=lab,
            env=env,
        )
        first.communicate(timeout=180)
    assert shared.code == 0, shared
    assert "shared with bench b" in shared.stderr
    a, b = _results(tmp_path / "home")
    assert b["shared_engine"]["allowed"] is True and str(a["bench_id"]) in b["shared_engine"]["holder"]
    assert all(level["shared_engine"] for level in b["levels"])  # type: ignore[attr-defined]
    compared = run_labctl("compare", str(a["bench_id"]), str(b["bench_id"]), "--allow-mismatch", lab=lab, env=env)
    assert compared.code == 0, compared
    assert "engine shared" in compared.stdout and "--allow-shared-engine" in compared.stdout, compared.stdout


def _flood(url: str, stop: threading.Event) -> None:
    """Another client, not labctl: streams on the engine while the bench runs."""
    body = {"model": "h", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            with client.stream("POST", url + "/chat/completions", json=body) as response:
                for _ in response.iter_bytes():
                    pass


def test_telemetry_showing_more_in_flight_than_sent_marks_the_level(lab: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "home", tmp_path / "locks")
    (tmp_path / "locks").mkdir()
    stop = threading.Event()
    with engine() as base:
        floods = [threading.Thread(target=_flood, args=(base, stop)) for _ in range(4)]
        for thread in floods:
            thread.start()
        try:
            time.sleep(0.5)
            bench = run_labctl(
                "bench", "run", "--base-url", base, "--model", "h", *BENCH, "--requests", "30", lab=lab, env=env
            )
        finally:
            stop.set()
            for thread in floods:
                thread.join(30)
    assert bench.code == 0, bench
    [result] = _results(tmp_path / "home")
    [level] = result["levels"]  # type: ignore[misc]
    assert level["engine_busier"]["client_concurrency"] == 2 and level["engine_busier"]["peak_in_flight"] >= 5
    assert any(w.startswith("ENGINE BUSIER THAN THIS CLIENT") for w in level["warnings"])
    shown = run_labctl("bench", "show", str(result["bench_id"]), lab=lab, env=env)
    assert "ENGINE BUSIER THAN THIS CLIENT" in shown.stdout
    reported = run_labctl("compare", str(result["bench_id"]), str(result["bench_id"]), lab=lab, env=env)
    assert "engine shared" in reported.stdout or "given twice" in reported.stderr
    one = run_labctl("report", str(result["bench_id"]), "-o", str(tmp_path / "report"), lab=lab, env=env)
    if one.code == 0:  # matplotlib present: the one-result report lists the caveat
        assert "ENGINE BUSIER THAN THIS CLIENT" in (tmp_path / "report" / "report.md").read_text()
