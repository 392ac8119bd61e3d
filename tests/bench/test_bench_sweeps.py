"""Rate sweeps, the capacity search and long work, against the harness engine (a local process):
the plan and progress a user reads in a log, the overrides named and recorded, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers.harness_proc import harness
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

TTFT_MS, TPOT_MS, OUTPUT = 20, 10, 8


def bench(lab: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_labctl("bench", "run", *args, lab=lab, env={"LABCTL_HOME": str(home)})  # type: ignore[return-value]


def test_a_rate_list_sweeps_with_a_plan_progress_and_a_line_per_level(lab: Path, tmp_path: Path) -> None:
    (lab / "workloads" / "rates.yaml").write_text(
        "description: rate sweep\ndataset: {kind: random, input_len: 8, output_len: 4}\nrequests: 12\n"
        "concurrency: [2]\nrequest_rate: [6, 24]\nwarmup_per_concurrency: 1\n"
    )
    with harness("--ttft-ms", "5", "--tpot-ms", "2", model="truth") as (base, _):
        result = bench(lab, tmp_path / "h", "--base-url", f"{base}/v1", "--model", "truth", "--workload", "rates")
    assert result.code == 0, result.stderr
    log = result.stderr.splitlines()  # not a terminal: plain lines, no bar
    plan = next(line for line in log if line.startswith("plan: "))
    assert log.index(plan) < min(i for i, line in enumerate(log) if "sweep ETA" in line)  # before any request
    assert plan.startswith("plan: 2 level(s) c=2 rate=6/s, c=2 rate=24/s; 24 measured + 4 warm-up requests")
    assert "estimated ≥ 2s" in plan  # 12/6 + 12/24 s of arrivals alone
    progress = [line for line in log if "sweep ETA" in line]
    assert any(line.startswith("level 1/2 c=2 rate=6/s measure: 12/12 requests") for line in progress)
    done = [line for line in log if " done: " in line]
    assert [line.split(" done:")[0] for line in done] == ["level 1/2 c=2 rate=6/s", "level 2/2 c=2 rate=24/s"]
    assert all("12/12 ok, TTFT p50" in line for line in done)
    assert any(
        line.startswith("sweep ETA ") and line.endswith("for 1 more level(s), from the pace so far") for line in log
    )
    assert log.index(done[0]) < log.index(next(line for line in progress if line.startswith("level 2/2")))
    assert "RATE" in result.stdout.splitlines()[1]


def test_find_max_rate_reports_the_rate_and_its_evidence(lab: Path, tmp_path: Path) -> None:
    # one sequence at a time, each at least TTFT + (OUTPUT-1)·TPOT: no rate above this can be served
    capacity = 1000 / (TTFT_MS + (OUTPUT - 1) * TPOT_MS)
    args = ("--workload", "latency-probe", "--requests", "20", "--input-len", "8", "--output-len", str(OUTPUT))
    args += ("--concurrency", "4", "--request-rate", "2", "--find-max-rate")
    with harness("--ttft-ms", str(TTFT_MS), "--tpot-ms", str(TPOT_MS), "--max-num-seqs", "1", model="truth") as (
        base,
        _,
    ):
        target = ("--base-url", f"{base}/v1", "--model", "truth")
        refused = bench(lab, tmp_path / "h", *target, *args)
        assert refused.code == 2 and "--find-max-rate needs an SLO" in refused.stderr
        result = bench(lab, tmp_path / "h", *target, *args, "--slo", "ttft_ms=150", "--json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    found = doc["max_rate_meeting_slo"]
    assert found["bracketed"] and found["slo"] == {"ttft_ms": 150.0} and "bisection" in found["rule"]
    assert found["rate"] < capacity and found["rate"] < found["first_failing_rate"]
    assert [e["rate"] for e in found["evidence"]] == [level["target_rate"] for level in doc["levels"]]
    assert [e["meets_slo"] for e in found["evidence"]] == [level["meets_slo"] for level in doc["levels"]]
    first, second = found["evidence"][:2]
    # doubling from a rate that meets the SLO, halving from one that misses it (a loaded machine can miss at 2)
    assert first["rate"] == 2 and second["rate"] == (4 if first["meets_slo"] else 1)
    best = next(level for level in doc["levels"] if level["target_rate"] == found["rate"])
    assert best["meets_slo"] and best["good_requests"] >= 0.9 * best["requests"]
    assert "search rule: exponential bracketing" in result.stderr
    assert f"max_rate_meeting_slo: meets the SLO at {found['rate']:g} req/s" in result.stderr


def test_overrides_are_named_and_recorded(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "2", "--tpot-ms", "1", model="truth") as (base, _):
        result = bench(
            lab,
            tmp_path / "h",
            "--base-url",
            f"{base}/v1",
            "--model",
            "truth",
            "--workload",
            "latency-probe",
            "--requests",
            "3",
            "--output-len",
            "4",
        )
    assert result.code == 0, result.stderr
    assert "workload latency-probe with --requests 3 --output-len 4 (sha256 " in result.stderr
    assert "overrides: --requests 3 --output-len 4 (the file's sha256: " in result.stdout
    stored = json.loads(next((tmp_path / "h").glob("runs/*/bench/*.json")).read_text())
    assert stored["workload"]["overrides"] == [{"flag": "--requests", "value": 3}, {"flag": "--output-len", "value": 4}]
    assert stored["workload"]["file_sha256"] != stored["workload"]["sha256"]


def test_sigterm_saves_the_partial_result(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "h"
    with harness("--ttft-ms", "10", "--tpot-ms", "50", model="truth") as (base, _):
        proc = subprocess.Popen(
            [*LABCTL, "bench", "run", "--base-url", f"{base}/v1", "--model", "truth", "--workload", "latency-probe"]
            + ["--requests", "100", "--output-len", "20"],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        seen = []
        while not any(" measure: " in line for line in seen[-1:]):  # the plain progress says it is measuring
            line = proc.stderr.readline()
            assert line, "".join(seen)
            seen.append(line)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143  # SIGTERM: 128 + 15
        assert "interrupted: partial result saved to" in proc.communicate()[1]
    doc = json.loads(next(home.glob("runs/*/bench/*.json")).read_text())
    assert doc["status"] == "interrupted" and doc["levels"][0]["interrupted"] is True
    assert 0 < doc["levels"][0]["completed"] < 100


def test_version_and_shell_completion(lab: Path) -> None:
    from labctl import __version__

    version = run_labctl("--version", lab=lab)
    assert version.code == 0 and version.stdout == f"labctl {__version__}\n"
    completed = run_labctl(
        lab=lab, env={"_LABCTL_COMPLETE": "complete_bash", "COMP_WORDS": "labctl bench run --find", "COMP_CWORD": "3"}
    )
    assert completed.code == 0 and completed.stdout.split() == ["--find-max-rate"]


def test_a_terminal_gets_a_bar_on_stderr_and_stdout_keeps_the_json(lab: Path, tmp_path: Path) -> None:
    import pty
    import threading

    master, slave = pty.openpty()
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    with harness("--ttft-ms", "2", "--tpot-ms", "5", model="truth") as (base, _):
        proc = subprocess.run(
            [*LABCTL, "bench", "run", "--base-url", f"{base}/v1", "--model", "truth", "--workload", "latency-probe"]
            + ["--requests", "10", "--output-len", "10", "--input-len", "8", "--json"],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(tmp_path / "h"), "COLUMNS": "120"},
            stdout=subprocess.PIPE,
            stderr=slave,
            timeout=120,
        )
    os.close(slave)
    reader.join(5)
    os.close(master)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["status"] == "complete"  # nothing but the result on stdout
    screen = seen.decode("utf-8", "replace")
    assert "sweep ETA" in screen and "━" in screen  # rich's bar, with the whole sweep's ETA
