"""The real vLLM CPU engine (`make vllm-cpu-image`) serving the tiny Qwen3 on loopback, for the real-engine
tests: one `vllm serve` per test module. Without the image it skips loudly; under CI=true it fails."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from helpers.harness_proc import free_port
from helpers.support import IN_CI, REPO, docker_available

IMAGE = os.environ.get("LABCTL_VLLM_CPU_IMAGE", "labctl/vllm-cpu:0.32.0")
MODEL = "tiny-qwen3"
MAX_MODEL_LEN = 2048
READY_WITHIN_S = 600  # about 37 s on 2 idle cores; over 240 s seen in CI while the other tiers shared them


def need_image() -> None:
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


def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's build/tiny-models (`make tiny-models`), else made afresh for the session."""
    need_image()
    built = REPO / "build" / "tiny-models"
    if (built / "SHA256SUMS").is_file():
        return built
    out = tmp_path_factory.mktemp("tiny") / "models"
    env = {**os.environ, "LABCTL_TINY_MODELS": str(out), "LABCTL_TINY_LOGS": str(out.parent)}
    done = subprocess.run(["bash", str(REPO / "scripts/tiny-models.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@contextmanager
def vllm_cpu_server(models: Path, args: list[str], env: dict[str, str] | None = None) -> Iterator[str]:
    """`vllm serve` of the tiny dense model; `env` is passed by name (`-e NAME`), never in argv."""
    name, port = f"labctl-test-vllm-cpu-{uuid.uuid4().hex[:8]}", free_port()
    argv = ["docker", "run", "-d", "--name", name, "--network", "host", "--shm-size", "1g"]
    argv += ["-e", "VLLM_CPU_KVCACHE_SPACE=1", "-e", "VLLM_CPU_OMP_THREADS_BIND=0-1"]
    for variable in env or {}:
        argv += ["-e", variable]
    argv += ["-v", f"{models}:/models:ro", IMAGE, f"/models/{MODEL}", "--served-model-name", MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN)]
    subprocess.run(argv + args, check=True, capture_output=True, env={**os.environ, **(env or {})})
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
