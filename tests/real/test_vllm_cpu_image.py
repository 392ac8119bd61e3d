"""The vLLM CPU image (`make vllm-cpu-image`) serves the tiny models made inside it: a real engine on loopback.

Marked real_engine: not yet part of `make test` (the image is built by hand until the real-engine tier is
wired). Without the image it skips loudly; under CI=true it fails."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port
from helpers.support import IN_CI, REPO, docker_available

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

IMAGE = os.environ.get("LABCTL_VLLM_CPU_IMAGE", "labctl/vllm-cpu:0.32.0")
READY_WITHIN_S = 240  # about 37 s on 2 idle cores; other tests share them


def _need_image() -> None:
    reason = None
    if not docker_available():
        reason = "no Docker Engine answers `docker info`"
    elif subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        reason = f"the image {IMAGE} is missing"
    if reason is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must build it (make vllm-cpu-image)", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `make vllm-cpu-image` to test the real vLLM CPU engine")


def make_models(out: Path) -> Path:
    env = {**os.environ, "LABCTL_TINY_MODELS": str(out), "LABCTL_TINY_LOGS": str(out.parent)}
    done = subprocess.run(["bash", str(REPO / "scripts/tiny-models.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _need_image()
    return make_models(tmp_path_factory.mktemp("tiny") / "models")


@pytest.fixture(scope="module")
def server(models: Path) -> Iterator[str]:
    """One `vllm serve` of the tiny dense model for the module: each test pays no cold start."""
    name, port = f"labctl-test-vllm-cpu-{uuid.uuid4().hex[:8]}", free_port()
    argv = ["docker", "run", "-d", "--name", name, "--network", "host", "--shm-size", "1g"]
    argv += ["-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", "VLLM_CPU_OMP_THREADS_BIND=0-1"]
    argv += ["-v", f"{models}:/models:ro", IMAGE, "/models/tiny-qwen3", "--served-model-name", "tiny-qwen3"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--max-model-len", "2048"]
    argv += ["--reasoning-parser", "qwen3"]
    subprocess.run(argv, check=True, capture_output=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(name, base)
        yield base
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _wait_ready(name: str, base: str) -> None:
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", name], capture_output=True, text=True)
        if state.stdout.strip() != "true":
            break
        time.sleep(1)
    logs = subprocess.run(["docker", "logs", "--tail", "30", name], capture_output=True, text=True)
    pytest.fail(f"vllm serve in {name} was not ready: {logs.stdout[-3000:]}{logs.stderr[-3000:]}", pytrace=False)


def chat(base: str, thinking: bool) -> dict[str, object]:
    body = {
        "model": "tiny-qwen3",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 8,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()
    return result


def test_the_tiny_models_are_byte_identical_on_every_rebuild(models: Path, tmp_path: Path) -> None:
    again = make_models(tmp_path / "again")
    sums = (models / "SHA256SUMS").read_text()
    assert sums == (again / "SHA256SUMS").read_text()
    files = {line.split()[1] for line in sums.splitlines()}
    for model in ("tiny-qwen3", "tiny-qwen3-moe"):
        assert {f"./{model}/{f}" for f in ("config.json", "model.safetensors", "tokenizer.json")} <= files
        assert 1e6 < (models / model / "model.safetensors").stat().st_size < 2e7


def test_serves_the_tiny_model(server: str) -> None:
    models = httpx.get(f"{server}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny-qwen3"]
    assert httpx.get(f"{server}/version", timeout=10).json() == {"version": "0.32.0"}


def test_chat_honours_enable_thinking(server: str) -> None:
    plain = chat(server, thinking=False)
    message, usage = plain["choices"][0]["message"], plain["usage"]  # type: ignore[index]
    assert message["content"] and not message.get("reasoning")
    assert usage["completion_tokens"] == 8
    thinking = chat(server, thinking=True)
    message, usage = thinking["choices"][0]["message"], thinking["usage"]  # type: ignore[index]
    assert message["reasoning"] and usage["completion_tokens_details"]["reasoning_tokens"] == 8


def test_metrics_count_the_generated_tokens(server: str) -> None:
    def generated() -> float:
        text = httpx.get(f"{server}/metrics", timeout=10).text
        lines = [line for line in text.splitlines() if line.startswith("vllm:generation_tokens_total{")]
        assert len(lines) == 1, text[:2000]
        return float(lines[0].rsplit(" ", 1)[1])

    before = generated()
    chat(server, thinking=False)
    assert generated() == before + 8
