"""The vLLM persona is held to a real vLLM: the same requests to both, with an API key, and their shapes
compared (tests/helpers/engine_surface.py): routes and status codes with and without the key, the route
table, the `vllm:` series names, the fields of answers and stream chunks (role chunk, tokens, the last
token's finish reason, the usage chunk with no choices, then [DONE]), where thinking goes, and the error
bodies for an unknown model, a prompt too long and bad parameters.

The persona pins vLLM 0.34.0; the real engine here is the CPU build of 0.32.0. What may differ is in
persona_allowlist.yaml, each with its reason; anything else fails, and so does an entry nothing matches.

The persona runs as a local process on a GPU that cannot exist here (NVIDIA_VISIBLE_DEVICES set by hand,
as Docker's device request would); the real engine runs in Docker on CPU."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from helpers.engine_surface import Surface, differences, read_surface
from helpers.harness_proc import free_port
from helpers.vllm_cpu import MAX_MODEL_LEN, MODEL, tiny_models, vllm_cpu_server

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

ALLOWLIST = Path(__file__).with_name("persona_allowlist.yaml")
KEY = "sk-persona-conformance"  # a throwaway key for two loopback servers, passed by environment
PERSONA_VERSION = "0.34.0"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    models = tiny_models(tmp_path_factory)
    with vllm_cpu_server(models, ["--reasoning-parser", "qwen3"], {"VLLM_API_KEY": KEY}) as base:
        yield base


@pytest.fixture(scope="module")
def persona() -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "labctl.harness", "--persona", "vllm", "--persona-version", PERSONA_VERSION, "--"]
    argv += ["serve", f"/models/{MODEL}", "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--max-model-len", str(MAX_MODEL_LEN), "--reasoning-parser", "qwen3"]
    env = {**os.environ, "VLLM_API_KEY": KEY, "NVIDIA_VISIBLE_DEVICES": "0", "LABCTL_PERSONA_LOAD_S": "0"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                output = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"the vLLM persona did not start: {output[-2000:]}", pytrace=False)
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def load_allowlist() -> list[dict[str, Any]]:
    entries = yaml.safe_load(ALLOWLIST.read_text(encoding="utf-8"))
    assert isinstance(entries, list)
    for entry in entries:
        assert set(entry) == {"key", "reason"}, entry
        assert isinstance(entry["reason"], str) and len(entry["reason"]) > 20, entry
    return entries


@pytest.fixture(scope="module")
def real_surface(real: str) -> Surface:
    return read_surface(real, MODEL, KEY, MAX_MODEL_LEN)


def test_the_persona_has_the_real_engines_shape(real_surface: Surface, persona: str) -> None:
    found = differences(real_surface, read_surface(persona, MODEL, KEY, MAX_MODEL_LEN))
    allowlist = load_allowlist()
    unexplained = {k: v for k, v in found.items() if not any(fnmatch.fnmatchcase(k, e["key"]) for e in allowlist)}
    stale = [e["key"] for e in allowlist if not any(fnmatch.fnmatchcase(k, e["key"]) for k in found)]
    lines = [f"{key}:\n  real:    {a}\n  persona: {b}" for key, (a, b) in unexplained.items()]
    assert not unexplained, "the persona differs from the real vLLM (fix it, or allowlist with a reason):\n" + (
        "\n".join(lines)
    )
    assert not stale, f"allowlist entries that no longer match a difference (remove them): {stale}"


def test_the_comparison_can_fail(real_surface: Surface) -> None:
    """The surface is not empty, and a persona that answered differently would show."""
    surface = real_surface
    assert len(surface["metric names"]) > 50
    assert surface["route GET /v1/models (no key)"] == 401 and surface["route GET /v1/models (key)"] == 200
    assert surface["route POST /invocations (no key)"] == 200  # vLLM's key guards only /v1/*
    assert surface["chat stream (no thinking): usage and end"][-1] == "[DONE]"
    assert not differences(surface, dict(surface))
    changed = dict(surface) | {"metric names": surface["metric names"][1:]}
    assert list(differences(surface, changed)) == ["metric names"]
