"""labctl bench against the harness engine (a local process, or a labctl run): metrics, storage,
bad input, interruption."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import harness
from helpers.support import LABCTL, run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

SMALL = ("--workload", "latency-probe", "--requests", "6", "--output-len", "8", "--input-len", "16")


def bench(lab: Path, home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_labctl("bench", *args, lab=lab, env={"LABCTL_HOME": str(home), **(env or {})})  # type: ignore[return-value]


def test_without_telemetry_the_per_request_file_is_still_written(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with harness("--ttft-ms", "5", "--tpot-ms", "1", model="truth") as (base, _):
        result = bench(lab, home, "--base-url", f"{base}/v1", "--model", "truth", *SMALL, "--no-telemetry", "--json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    folder = home / "runs" / doc["run_id"] / "bench"
    assert doc["telemetry_file"] is None and "--no-telemetry" in doc["telemetry"]["missing"]["engine"]
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{doc['bench_id']}.json", doc["requests_file"]])
    assert len((folder / doc["requests_file"]).read_text().splitlines()) == 1 + doc["levels"][0]["requests"]


def test_bench_external_url_json_and_storage(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with harness("--ttft-ms", "40", "--tpot-ms", "5", model="truth") as (base, _):
        result = bench(
            lab, home, "--base-url", f"{base}/v1", "--model", "truth", *SMALL, "--concurrency", "1,3", "--json"
        )
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "complete" and [lv["concurrency"] for lv in doc["levels"]] == [1, 3]
    for level in doc["levels"]:
        for key in (
            "concurrency",
            "median_ttft_ms",
            "p99_ttft_ms",
            "median_tpot_ms",
            "median_itl_ms",
            "output_throughput",
            "request_throughput",
            "total_token_throughput",
            "median_e2el_ms",
            "p99_itl_ms",
            "max_itl_ms",
            "completed",
            "failed",
        ):
            assert key in level, key
        assert level["completed"] == 6 and level["failed"] == 0
        # the role-only chunk arrives at once: counting it would put TTFT near 0
        assert level["median_ttft_ms"] >= 40 and level["median_e2el_ms"] >= 74, level
        assert level["total_output_tokens"] == 6 * 8 and not level["usage_fallback"]
    # The harness writes on an absolute schedule (first token at 40 ms, then every 5 ms), so a late first
    # token shortens the gaps after it: TPOT is pinned by its definition over the stored requests, not by
    # a timing margin a loaded host may miss. Each request's whole stream still pins the schedule.
    lines = [json.loads(raw) for raw in (home / "runs" / doc["run_id"] / "bench" / doc["requests_file"]).open()][1:]
    for index, level in enumerate(doc["levels"]):
        mine = [line for line in lines if line["level"] == index]
        assert len(mine) == 6 and all(len(line["itl_ms"]) == 7 for line in mine)
        assert all(line["ttft_ms"] >= 40 and line["ttft_ms"] + sum(line["itl_ms"]) >= 74 for line in mine), mine
        tpot = statistics.median(sum(line["itl_ms"]) / 7 for line in mine)
        assert level["median_tpot_ms"] == pytest.approx(tpot, rel=1e-9), (level, tpot)
    assert doc["workload"]["sha256"] and doc["client"]["cpu_count"] and doc["target"]["environment_label"] == "external"
    stored = home / "runs" / doc["run_id"] / "bench" / f"{doc['bench_id']}.json"
    assert json.loads(stored.read_text())["bench_id"] == doc["bench_id"]
    listed = bench(lab, home, "--list", doc["run_id"])
    assert doc["bench_id"] in listed.stdout
    shown = bench(lab, home, "--show", doc["bench_id"])
    assert "TTFT p50" in shown.stdout and shown.code == 0


def test_failures_are_counted_with_reasons(lab: Path, tmp_path: Path) -> None:
    with harness("--ttft-ms", "1", "--tpot-ms", "1", "--drop-stream-rate", "0.5", "--seed", "3", model="truth") as (
        base,
        _,
    ):
        result = bench(
            lab,
            tmp_path / "h",
            "--base-url",
            f"{base}/v1",
            "--model",
            "truth",
            *SMALL,
            "--requests",
            "20",
            "--json",
            "--max-error-rate",
            "1",  # about half fail: not partial only because this test allows it
        )
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["failed"] > 0 and level["completed"] + level["failed"] == 20
    assert any(reason.startswith("stream dropped after") for reason in level["failures"])
    assert "request(s) failed" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--base-url", "http://127.0.0.1:9/v1", "--model", "x"), "does not answer"),
        (("--base-url", "ftp://x/v1", "--model", "x"), "is not an http(s) URL"),
        (
            ("--requests", "0", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"),
            "--requests 0: give a number of requests > 0.",
        ),
        (("--concurrency", "1,a", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"), "expected whole numbers"),
        (("--repeat", "0", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"), "--repeat 0: give a whole number"),
        (("--repeat", "101", "--base-url", "http://127.0.0.1:9/v1", "--model", "x"), "from 1 to 100"),
    ],
)
def test_bad_targets_and_overrides(lab: Path, tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = bench(lab, tmp_path / "h", "--workload", "latency-probe", *args)
    assert result.code == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_wrong_model_and_missing_key(lab: Path, tmp_path: Path) -> None:
    with harness(model="truth") as (base, _):
        result = bench(lab, tmp_path / "h", "--base-url", f"{base}/v1", "--model", "nope", *SMALL)
        assert result.code == 2 and "model 'nope' is not served at" in result.stderr and "truth" in result.stderr
    with harness(model="truth", env={**os.environ, "LABCTL_HARNESS_API_KEY": "sk-0123456789abcdef"}) as (base, _):
        result = bench(lab, tmp_path / "h", "--base-url", f"{base}/v1", "--model", "truth", *SMALL)
        assert result.code == 2 and "--api-key-env NAME" in result.stderr
        ok = bench(
            lab,
            tmp_path / "h",
            "--base-url",
            f"{base}/v1",
            "--model",
            "truth",
            *SMALL,
            "--api-key-env",
            "MY_KEY",
            env={"MY_KEY": "sk-0123456789abcdef"},
        )
        assert ok.code == 0, ok.stderr
        assert "sk-0123456789abcdef" not in ok.stdout + ok.stderr


def test_bad_workload_files(lab: Path, tmp_path: Path) -> None:
    folder = lab / "workloads"
    (folder / "typo.yaml").write_text(
        "description: x\ndataset: {kind: random, input_len: 8, output_len: 8}\nconcurency: [1]\n"
    )
    result = bench(lab, tmp_path / "h", "--workload", "typo", "--base-url", "http://127.0.0.1:9/v1", "--model", "x")
    assert result.code == 2
    assert "workloads/typo.yaml:3: concurency: unknown field. Did you mean 'concurrency'?" in result.stderr
    (folder / "neg.yaml").write_text(
        "description: x\ndataset: {kind: random, input_len: -5, output_len: 8}\nconcurrency: [1]\n"
    )
    result = bench(lab, tmp_path / "h", "--workload", "neg", "--base-url", "http://127.0.0.1:9/v1", "--model", "x")
    assert result.code == 2 and "dataset.input_len: -5 is not allowed" in result.stderr
    (folder / "data.jsonl").write_text('{"prompt": "ok"}\nnot json\n')
    (folder / "jsonl.yaml").write_text(
        "description: x\ndataset: {kind: jsonl, path: data.jsonl}\nconcurrency: [1]\nmax_tokens: 4\n"
    )
    with harness(model="truth") as (base, _):
        result = bench(lab, tmp_path / "h", "--workload", "jsonl", "--base-url", f"{base}/v1", "--model", "truth")
    assert result.code == 2 and "data.jsonl:2: not JSON" in result.stderr


def test_ctrl_c_saves_a_partial_result(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "h"
    with harness("--ttft-ms", "10", "--tpot-ms", "50", model="truth") as (base, _):
        proc = subprocess.Popen(
            [
                *LABCTL,
                "bench",
                "--base-url",
                f"{base}/v1",
                "--model",
                "truth",
                "--workload",
                "latency-probe",
                "--requests",
                "100",
                "--output-len",
                "20",
            ],
            env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        served = 0.0
        deadline = time.monotonic() + 120
        while served < 6 and time.monotonic() < deadline:  # 3 warm-up requests, then a few measured ones
            time.sleep(0.2)
            text = httpx.get(f"{base}/metrics", timeout=10).text
            served = sum(
                float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith("harness_requests_total{")
            )
        assert served >= 6 and proc.poll() is None, "the bench did not get going, or ended"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    results = list(home.glob("runs/*/bench/*.json"))
    assert len(results) == 1
    doc = json.loads(results[0].read_text())
    assert doc["status"] == "interrupted" and doc["levels"][0]["interrupted"] is True
    assert 0 < doc["levels"][0]["completed"] < 100


def test_tensorrt_batch_limit_refused_unless_forced(lab: Path, tmp_path: Path) -> None:
    """A TensorRT-LLM engine cannot run here (no GPU): its run record is written by hand, pointing at a
    harness engine that stands in for it. Only the GPU is simulated; the limit logic is labctl's own."""
    home = tmp_path / "h"
    with harness(model="qwen3-32b") as (base, _):
        run_id = "20261203-000000-abcdef"
        record = {
            "schema_version": 1,
            "run_id": run_id,
            "status": "running",
            "engine": "trtllm",
            "profile": "qwen3-32b-engine",
            "environment_label": "real-gpu",
            "served_model_name": "qwen3-32b",
            "endpoint": {"base_url": f"{base}/v1"},
            "image": {"digest": None},
            "resolved_profile": {"build": {"max_batch_size": 2}},
            "record_path": "",
        }
        (home / "runs" / run_id).mkdir(parents=True)
        (home / "runs" / run_id / "record.json").write_text(json.dumps(record))
        refused = bench(lab, home, run_id, *SMALL, "--concurrency", "1,4")
        assert refused.code == 2 and "built with max_batch_size 2; concurrency 4 would queue" in refused.stderr
        forced = bench(lab, home, run_id, *SMALL, "--concurrency", "1,4", "--allow-over-batch-limit", "--json")
        assert forced.code == 0, forced.stderr
        levels = json.loads(forced.stdout)["levels"]
        assert "over_max_batch_size" not in levels[0] and levels[1]["over_max_batch_size"] is True


def test_levels_above_any_engines_batch_cap_are_said_and_the_cap_recorded(lab: Path, tmp_path: Path) -> None:
    """A vLLM run whose command line caps it at 2 sequences (written by hand, a harness engine behind it: no GPU
    here): the level of 4 streams runs, and the bench says, the level and the result keep, that 2 queue."""
    home = tmp_path / "h"
    with harness(model="m") as (base, _):
        run_id = "20261203-000000-abcdef"
        record = {
            "schema_version": 1,
            "run_id": run_id,
            "status": "running",
            "engine": "vllm",
            "profile": "p",
            "environment_label": "real-gpu",
            "served_model_name": "m",
            "endpoint": {"base_url": f"{base}/v1"},
            "image": {"digest": None},
            "container": {"command_line": ["vllm", "serve", "org/m", "--max-num-seqs", "2"]},
            "record_path": "",
        }
        (home / "runs" / run_id).mkdir(parents=True)
        (home / "runs" / run_id / "record.json").write_text(json.dumps(record))
        ran = bench(lab, home, run_id, *SMALL, "--concurrency", "1,4")
        assert ran.code == 0, ran.stderr
    said = "c=4 ran against a cap of 2: 2 requests queue (--max-num-seqs 2, set on the run's command line)"
    assert "c=4 above the engine's batch cap of 2 (--max-num-seqs 2" in ran.stdout + ran.stderr
    assert said in ran.stdout + ran.stderr
    doc = json.loads(next(home.glob("runs/*/bench/*.json")).read_text())
    assert doc["target"]["batch_cap"] == {
        "value": 2,
        "setting": "--max-num-seqs 2",
        "source": "set on the run's command line",
        "flag": "--max-num-seqs",
    }
    assert [said in level["warnings"] for level in doc["levels"]] == [False, True]
    shown = bench(lab, home, "show", doc["bench_id"])
    assert shown.code == 0, shown.stderr
    assert "batch cap: 2 (--max-num-seqs 2, set on the run's command line) (! above it: requests queue)" in shown.stdout
    assert [line.split()[:2] for line in shown.stdout.splitlines() if line.startswith(("1 ", "4 "))] == [
        ["1", "-"],
        ["4", "!"],
    ]


def test_open_loop_arrivals(lab: Path, tmp_path: Path) -> None:
    (lab / "workloads" / "poisson.yaml").write_text(
        "description: open loop\ndataset: {kind: random, input_len: 8, output_len: 4}\nrequests: 30\n"
        "concurrency: [4]\nrequest_rate: 15\nburstiness: 1.0\nwarmup_per_concurrency: 0\n"
    )
    with harness("--ttft-ms", "5", "--tpot-ms", "2", model="truth") as (base, _):
        result = bench(
            lab, tmp_path / "h", "--base-url", f"{base}/v1", "--model", "truth", "--workload", "poisson", "--json"
        )
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["completed"] == 30 and level["target_rate"] == 15
    # 30 gamma(1) gaps at 15/s take about 2 s: the loop paced them instead of sending all at once
    assert 0.8 < level["duration_s"] < 5 and level["achieved_rate"] < 40
    assert level["mean_queue_ms"] >= 0
