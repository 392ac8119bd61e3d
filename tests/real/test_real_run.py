"""A real vLLM on CPU under labctl, one server for the module: `up` of the shipped tiny-qwen3 profile (its
model fetched from the loopback Hub at the pinned commit), bench with the model's own tokenizer, telemetry
from the engine's real /metrics into the report, eval with thinking off, SIGTERM during up and during bench,
then export, down and reproduce."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import containers_of
from helpers.real_engine import TINY_MODELS, RealLab, image_id, metric, real_lab, wait_for

from labctl.host.hub.loopback import repo_from_folder

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

PROFILE = "tiny-qwen3"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLab]:
    lab = real_lab(tmp_path_factory.mktemp("real-run"))
    yield lab
    lab.down_all()


@pytest.fixture(scope="module")
def served(real: RealLab) -> dict[str, str]:
    return real.up(PROFILE)


def base_of(info: dict[str, str]) -> str:
    return info["base_url"].removesuffix("/v1")


def pinned_revision(real: RealLab, profile: str = PROFILE) -> str:
    data = yaml.safe_load((real.lab / "engines" / "vllm-cpu" / "profiles" / f"{profile}.yaml").read_text())
    return str(data["model"]["revision"])


def test_the_profiles_pin_the_commit_the_loopback_hub_derives_from_the_models_bytes(real: RealLab) -> None:
    for name in ("tiny-qwen3", "tiny-qwen3-moe"):
        assert repo_from_folder(f"labctl/{name}", TINY_MODELS / name).commit == pinned_revision(real, name)


def test_up_fetches_the_pinned_commit_and_records_a_real_engine_on_cpu(real: RealLab, served: dict[str, str]) -> None:
    record = real.record(served["run_id"])
    commit = pinned_revision(real)
    assert served["accelerator"] == record["accelerator"] == "cpu"
    assert record["environment_label"] == "harness-check" and record["gpus"]["ids"] == []
    assert record["engine_setup"]["model_commit"] == commit
    # what the engine ran with, read from its own vllm:cache_config_info labels (not from the command)
    settings = record["settings"]
    assert settings["prefix_caching"]["source"] == settings["kv_cache_dtype"]["source"] == "engine"
    assert settings["prefix_caching"]["value"] == "on"  # vLLM's default, as the engine states it
    assert settings["max_batch"] == {"value": "32", "source": "command", "where": "--max-num-seqs", "raw": "32"}
    assert record["prep"]["model_fetch"]["cached"] is False and record["prep"]["model_fetch"]["bytes"] > 1_000_000
    snapshot = real.cache / "hub" / "models--labctl--tiny-qwen3" / "snapshots" / commit
    assert (snapshot / "model.safetensors").is_file() and (snapshot / "tokenizer.json").is_file()
    # A local image (never pushed): no registry digest, and its image id is what identifies it.
    assert record["image"]["digest"] is None and record["image"]["image_id"] == image_id()
    models = httpx.get(f"{served['base_url']}/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny-qwen3"]
    assert httpx.get(f"{base_of(served)}/version", timeout=10).json() == {"version": "0.32.0"}
    compose = yaml.safe_load((real.home / "runs" / served["run_id"] / "compose.yaml").read_text())["services"]["serve"]
    assert "deploy" not in compose  # no GPU request
    assert (compose["cpuset"], compose["cpus"], compose["mem_limit"]) == ("0-1", "2", "6g")
    assert {"VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=0-1"} <= set(compose["environment"])
    [container] = containers_of(served["run_id"])
    limits = subprocess.run(
        ["docker", "inspect", "-f", "{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}}", container],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert limits == [str(2 * 10**9), str(6 * 1024**3)]


def chat(base: str, thinking: bool) -> dict:
    body = {
        "model": "tiny-qwen3",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 8,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    response = httpx.post(f"{base}/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict = response.json()
    return result


def test_chat_honours_enable_thinking_and_metrics_count_the_tokens(served: dict[str, str]) -> None:
    before = metric(base_of(served), "vllm:generation_tokens_total")
    plain = chat(served["base_url"], thinking=False)
    assert plain["choices"][0]["message"]["content"] and not plain["choices"][0]["message"].get("reasoning")
    assert plain["usage"]["completion_tokens"] == 8
    thinking = chat(served["base_url"], thinking=True)
    assert thinking["choices"][0]["message"]["reasoning"]
    assert thinking["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8
    assert metric(base_of(served), "vllm:generation_tokens_total") == before + 16


def test_bench_lengths_are_the_models_tokens_and_telemetry_is_mapped(
    real: RealLab, served: dict[str, str], tmp_path: Path
) -> None:
    done = real.labctl(
        "bench", "run", served["run_id"], "--workload", "shared-prefix", "--concurrency", "4", "--requests", "32"
    )
    assert done.code == 0, done.stderr
    [result_file] = (real.home / "runs" / served["run_id"] / "bench").glob("b*.json")
    result = json.loads(result_file.read_text())
    lines = [json.loads(line) for line in (result_file.parent / result["requests_file"]).read_text().splitlines()[1:]]
    assert len(lines) == 32 and all(r["ok"] and r["usage_reported"] for r in lines)
    # Prompts were cut to length with the model's own tokenizer (from the cache `up` fetched into): the engine's
    # count exceeds the planned length by the chat template's fixed tokens only, the same for every request.
    overhead = {r["prompt_tokens"] - r["input_len"] for r in lines}
    assert len(overhead) == 1 and 0 < overhead.pop() < 32, overhead
    assert {r["output_tokens"] for r in lines} == {128}
    engine = result["telemetry"]["engine"]
    assert engine["samples"] > 0 and engine["failures"] == 0
    mapping = engine["mapping"]
    for name in ("running", "waiting", "kv_cache_usage_fraction", "prefix_cache_hit_rate", "generation_tokens"):
        assert mapping[name].startswith("vllm:"), mapping
    level = result["levels"][0]["telemetry"]["engine"]
    # a sample a second (slower when the machine is busy) over a level of 8 rounds of 128 tokens
    assert level["samples"] >= 2, level
    lines = (result_file.parent / result["telemetry_file"]).read_text().splitlines()
    sampled = [d["values"] for d in map(json.loads, lines) if "values" in d]
    assert max(v.get("running", 0) for v in sampled) >= 1, sampled  # the engine's own gauge, while it ran
    assert 0 <= level["kv_cache_usage_fraction"]["max"] < 1
    assert level["prefix_cache_hit_rate"]["mean"] > 0  # four shared prefixes: the cache is hit
    report = real.labctl("report", result["bench_id"], "-o", str(tmp_path / "report"))
    assert report.code == 0, report.stderr
    page = (tmp_path / "report" / "report.md").read_text()
    assert "engine metrics:" in page and "samples" in page, page[:2000]
    assert "prefix-cache hits" in page and "KV cache" in page and "tok/s" in page
    assert (tmp_path / "report" / "telemetry.png").is_file()


def test_eval_with_thinking_off_scores_the_content(real: RealLab, served: dict[str, str]) -> None:
    done = real.labctl("eval", "run", served["run_id"], "--suite", "short-answer", "--json")
    assert done.code == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["target"]["thinking"] == "off" and result["status"] == "complete"
    assert result["cases"] and all("error" not in c for c in result["cases"])
    assert all(c["reasoning_chars"] == 0 and not c["cut_off_while_reasoning"] for c in result["cases"])


def test_sigterm_during_bench_leaves_an_interrupted_result(real: RealLab, served: dict[str, str]) -> None:
    proc = real.popen(
        "bench", "run", served["run_id"], "--workload", "chat-sweep", "--concurrency", "2", "--requests", "400",
        env={"PYTHONFAULTHANDLER": "1"},  # a bench that hangs is made to print every thread's stack (SIGABRT)
    )  # fmt: skip
    assert proc.stderr is not None
    line = ""
    while " measure: " not in line:
        line = proc.stderr.readline()
        assert line, "the bench ended before it measured"
    said: list[str] = []
    # the pipes are drained from here on: a bench blocked on a full pipe would never see its SIGTERM through
    drain = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    time.sleep(1)  # requests in flight on the real engine
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(120)  # the other tiers load this machine: the engine and the client answer slowly
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler writes where each thread is, then the process ends
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        drain.join(5)
        pytest.fail(f"bench still ran 120 s after SIGTERM; it said: {''.join(said)[-6000:]}")
    assert code == 143, "".join(said)[-3000:]
    results = [json.loads(p.read_text()) for p in (real.home / "runs" / served["run_id"] / "bench").glob("b*.json")]
    assert sorted(r["status"] for r in results) == ["complete", "interrupted"]
    assert httpx.get(f"{base_of(served)}/health", timeout=10).status_code == 200  # the engine is unharmed


def test_sigterm_during_up_leaves_nothing_running(real: RealLab) -> None:
    proc = real.popen("up", "vllm-cpu", "--profile", "tiny-qwen3-moe", "--allow-unpinned", "--port", str(free_port()))
    runs = real.home / "runs"
    started: list[str] = []

    def engine_started() -> bool:
        for run_dir in runs.iterdir():
            record = json.loads((run_dir / "record.json").read_text()) if (run_dir / "record.json").is_file() else {}
            if record.get("profile") == "tiny-qwen3-moe" and containers_of(run_dir.name):
                started.append(run_dir.name)
                return True
        return False

    wait_for(engine_started, 120, "the tiny-qwen3-moe container")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(120) == 143
    record = real.record(started[0])
    assert record["status"] == "aborted", record["status"]
    assert containers_of(started[0]) == []


def test_export_down_and_reproduce_by_the_local_image_id(real: RealLab, served: dict[str, str], tmp_path: Path) -> None:
    exported = tmp_path / "run.json"
    assert real.labctl("export", served["run_id"], "-o", str(exported)).code == 0
    down = real.labctl("down", served["run_id"])
    assert down.code == 0, down.stderr
    assert containers_of(served["run_id"]) == [] and real.record(served["run_id"])["status"] == "stopped"
    again = real.labctl("reproduce", str(exported), "--json", timeout=420)
    assert again.code == 0, again.stderr
    info = json.loads(again.stdout.strip().splitlines()[-1])
    record = real.record(info["run_id"])
    assert record["reproduction"]["compose_sha256_matches"] is True
    assert record["image"]["image_id"] == image_id() and record["accelerator"] == "cpu"
    assert record["prep"]["model_fetch"]["cached"] is True  # the snapshot the first up fetched
    assert httpx.get(f"{info['base_url']}/models", timeout=10).status_code == 200
    assert real.labctl("down", info["run_id"]).code == 0
    assert containers_of(info["run_id"]) == []


def test_a_missing_local_image_names_the_command_that_builds_it(real: RealLab) -> None:
    real.add_profile("absent-image", image="labctl/vllm-cpu:0.32.0-absent")
    done = real.labctl("up", "vllm-cpu", "--profile", "absent-image", "--allow-unpinned", "--port", str(free_port()))
    assert done.code == 2, done.stderr
    assert "Run `make vllm-cpu-image` first. Nothing was started." in done.stderr
    assert "Traceback" not in done.stderr
