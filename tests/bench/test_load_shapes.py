"""Load shapes against the harness engine (a local process): a level bounded by a duration, a ramp-up on the closed
and the open loop, and the replay of a timestamped trace (Mooncake/AIPerf JSONL, Azure CSV) on the open-loop
sender. The times are read back from the per-request file, which every shape writes alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.harness_proc import harness
from helpers.support import Result, run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine

MOONCAKE = [  # (timestamp ms, input tokens, output tokens): bursts and gaps, as a production trace has them
    (0, 40, 6),
    (100, 12, 3),
    (150, 30, 8),
    (600, 8, 2),
    (650, 20, 5),
    (700, 16, 4),
    (1400, 50, 7),
    (1500, 10, 3),
]


def bench(lab: Path, home: Path, workload: str, base: str) -> Result:
    return run_labctl(
        *("bench", "run", "--base-url", f"{base}/v1", "--model", "m", "--workload", workload, "--json"),
        lab=lab,
        env={"LABCTL_HOME": str(home)},
    )


def requests_of(home: Path) -> list[dict[str, Any]]:
    [path] = list(home.glob("runs/*/bench/*.requests.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def workload(lab: Path, name: str, text: str) -> None:
    (lab / "workloads" / f"{name}.yaml").write_text(f"description: {name}\nwarmup_per_concurrency: 0\n{text}")


def test_a_duration_stops_the_sending_and_says_what_it_left(lab: Path, tmp_path: Path) -> None:
    workload(
        lab,
        "for-1s",
        "dataset: {kind: random, input_len: 8, output_len: 10}\nconcurrency: [2]\nrequests: 400\nduration_s: 1\n",
    )
    with harness("--ttft-ms", "5", "--tpot-ms", "10", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "for-1s", base)
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    # about 0.1 s a request on 2 streams: ~20 sent in the second, the rest left
    assert level["duration_limit_s"] == 1 and 0 < level["completed"] < 100
    assert level["unsent"] == 400 - level["requests"] and level["requests"] == level["completed"]
    sent = [r["sent"] for r in requests_of(tmp_path / "h")]
    assert max(sent) - min(sent) < 1.0  # nothing was sent after the duration (requests in flight finished)
    assert not any("before its duration" in w for w in level["warnings"])


def test_a_duration_longer_than_the_requests_last_is_said(lab: Path, tmp_path: Path) -> None:
    workload(
        lab,
        "too-few",
        "dataset: {kind: random, input_len: 8, output_len: 2}\nconcurrency: [2]\nrequests: 4\nduration_s: 60\n",
    )
    with harness("--ttft-ms", "1", "--tpot-ms", "1", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "too-few", base)
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["completed"] == 4 and level["unsent"] == 0 and level["duration_s"] < 30  # it did not wait out 60 s
    assert any("sent all its 4 requests before its duration of 60 s" in w for w in level["warnings"])


def test_a_closed_loop_ramp_starts_its_streams_one_by_one(lab: Path, tmp_path: Path) -> None:
    workload(
        lab,
        "ramped",
        "dataset: {kind: random, input_len: 8, output_len: 10}\nconcurrency: [4]\nrequests: 16\nramp_up_s: 1.2\n",
    )
    with harness("--ttft-ms", "5", "--tpot-ms", "50", model="m") as (base, _):  # ~0.5 s a request
        result = bench(lab, tmp_path / "h", "ramped", base)
    assert result.code == 0, result.stderr
    sent = sorted(r["sent"] for r in requests_of(tmp_path / "h"))
    since = [t - sent[0] for t in sent]
    # without the ramp all four streams send at once; with it, stream i starts 0.3 s * i in
    assert sum(1 for t in since if t < 0.25) == 1
    assert sum(1 for t in since if t < 0.55) <= 3  # streams 0, 1 and perhaps stream 0's second request


def test_an_open_loop_ramp_raises_the_rate_to_its_target(lab: Path, tmp_path: Path) -> None:
    workload(
        lab,
        "rising",
        "dataset: {kind: random, input_len: 8, output_len: 2}\nconcurrency: [64]\nrequests: 120\n"
        "request_rate: 40\nramp_up_s: 2\n",
    )
    with harness("--ttft-ms", "1", "--tpot-ms", "1", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "rising", base)
    assert result.code == 0, result.stderr
    due = sorted(r["scheduled"] for r in requests_of(tmp_path / "h"))
    offsets = [t - due[0] for t in due]
    first, second = sum(1 for t in offsets if t < 1), sum(1 for t in offsets if 1 <= t < 2)
    # the rate rises from 2/s to 40/s over 2 s: ~10 due in the first second, ~30 in the second
    assert first < second and first < 20 and second > 18, (first, second)
    assert sum(1 for t in offsets if t >= 2) > 40  # then the target rate: ~80 left at 40/s


def test_a_mooncake_trace_is_replayed_at_its_timestamps_with_its_lengths(lab: Path, tmp_path: Path) -> None:
    data = lab / "workloads" / "data"
    data.mkdir(exist_ok=True)
    lines = [
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": [1]}) for t, i, o in MOONCAKE
    ]
    (data / "trace.jsonl").write_text("\n".join(lines) + "\n")
    workload(
        lab, "replay", "dataset: {kind: trace, path: data/trace.jsonl, speedup: 2}\nconcurrency: [8]\nrequests: 8\n"
    )
    with harness("--ttft-ms", "2", "--tpot-ms", "2", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "replay", base)
    assert result.code == 0, result.stderr
    level = json.loads(result.stdout)["levels"][0]
    assert level["completed"] == 8 and level["total_output_tokens"] == sum(o for _, _, o in MOONCAKE)
    got = sorted(requests_of(tmp_path / "h"), key=lambda r: r["scheduled"])
    start = got[0]["scheduled"]
    for (t, _, out), request in zip(MOONCAKE, got, strict=True):
        assert request["scheduled"] - start == pytest.approx(t / 2000, abs=1e-6)  # twice the trace's speed
        assert request["output_tokens"] == out
        assert 0 <= request["sent"] - request["scheduled"] < 0.1  # sent at its time, not bunched up
    assert level["send_lag_p99_ms"] is not None and 0 <= level["send_lag_p99_ms"] < 100
    assert level["send_lag_max_ms"] >= level["send_lag_p99_ms"]


def test_an_azure_trace_csv_is_replayed(lab: Path, tmp_path: Path) -> None:
    data = lab / "workloads" / "data"
    data.mkdir(exist_ok=True)
    (data / "azure.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,30,4\n2023-11-16 18:15:46.9805900,12,2\n2023-11-16 18:15:47.1805900,20,3\n"
    )
    workload(lab, "azure", "dataset: {kind: trace, path: data/azure.csv}\nconcurrency: [4]\nrequests: 3\n")
    with harness("--ttft-ms", "2", "--tpot-ms", "2", model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "azure", base)
    assert result.code == 0, result.stderr
    got = sorted(requests_of(tmp_path / "h"), key=lambda r: r["scheduled"])
    assert [r["output_tokens"] for r in got] == [4, 2, 3]
    assert [round(r["scheduled"] - got[0]["scheduled"], 3) for r in got] == [0.0, 0.3, 0.5]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("dataset: {kind: trace, path: data/t.jsonl}\nrequests: 2\nrequest_rate: 4\n", "drop request_rate"),
        ("dataset: {kind: trace, path: data/t.jsonl}\nrequests: 2\nramp_up_s: 3\n", "ramp_up_s"),
        ("dataset: {kind: trace, path: data/t.jsonl}\n", "a trace needs requests"),
        ("dataset: {kind: trace, path: data/t.jsonl}\nrequests: 5\n", "holds 2 arrivals"),
        ("dataset: {kind: random, input_len: 4, output_len: 2, speedup: 2}\n", "speedup belongs to trace"),
        ("dataset: {kind: random, input_len: 4, output_len: 2}\nduration_s: 0.5\n", "duration_s"),
    ],
)
def test_a_wrong_shape_is_refused_before_anything_is_sent(lab: Path, tmp_path: Path, text: str, words: str) -> None:
    data = lab / "workloads" / "data"
    data.mkdir(exist_ok=True)
    (data / "t.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n' * 2)
    workload(lab, "wrong", text + "concurrency: [2]\n")
    with harness(model="m") as (base, _):
        result = bench(lab, tmp_path / "h", "wrong", base)
    assert result.code == 2, result.stdout
    assert words in result.stderr and "Traceback" not in result.stderr
    assert not list((tmp_path / "h").glob("runs/*/bench/*.requests.jsonl"))


def test_validate_reads_the_trace_and_counts_its_arrivals(lab: Path, tmp_path: Path) -> None:
    data = lab / "workloads" / "data"
    data.mkdir(exist_ok=True)
    (data / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n{"timestamp": "soon"}\n')
    workload(lab, "bad", "dataset: {kind: trace, path: data/bad.jsonl}\nrequests: 2\nconcurrency: [2]\n")
    home = {"LABCTL_HOME": str(tmp_path / "h")}
    checked = run_labctl("validate", lab=lab, env=home)
    assert checked.code == 2 and "bad.jsonl" in checked.stderr and "line 2" in checked.stderr, checked.stderr
    assert "Traceback" not in checked.stderr
    (data / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n')
    checked = run_labctl("validate", lab=lab, env=home)
    assert checked.code == 2 and "asks for 2 requests but its trace holds 1 arrivals" in checked.stderr
    (data / "bad.jsonl").write_text('{"timestamp": 0, "input_length": 4, "output_length": 2}\n' * 2)
    assert run_labctl("validate", lab=lab, env=home).code == 0
