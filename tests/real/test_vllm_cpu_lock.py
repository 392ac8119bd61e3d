"""A resident real vLLM (the CPU image) is locked: its own key guards only /v1/*, so labctl fronts it with its
authenticating proxy (Debian's nginx, `make auth-proxy-image`) and binds the engine to loopback behind it.
Measured from outside: no key or a wrong key is refused on /v1 and on the routes vLLM leaves open
(/invocations, /tokenize, /generative_scoring); the right key works; a rotation takes effect at the proxy;
`share` says what answers without a key. One deployment for the module: it pays the cold start once, and a
rotation restarts nothing (the engine keeps a key of its own behind the proxy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import containers_of, labctl, record, remove_runs
from helpers.loopback_hub import LoopbackHub, repo_from_folder
from helpers.support import IN_CI, REPO, docker_available

from labctl.run.resident.lockdown import AUTH_PROXY_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.real_engine]

IMAGE = os.environ.get("LABCTL_VLLM_CPU_IMAGE", "labctl/vllm-cpu:0.32.0")
MODELS = Path(os.environ.get("LABCTL_TINY_MODELS", REPO / "build" / "tiny-models"))
REPO_ID = "labctl/tiny-qwen3"
# About 40 s on 2 idle cores; over 300 s seen while several other engines shared them.
READY_WITHIN_S = 600
CHAT = {"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _need(image: str, hint: str) -> None:
    if (
        docker_available()
        and subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
    ):
        return
    reason = f"the image {image} is missing (or no Docker Engine answers)"
    if IN_CI:
        pytest.fail(f"CI=true and {reason}: CI must build it ({hint})", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}; run `{hint}` to test a resident real vLLM")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict]]:
    _need(IMAGE, "make vllm-cpu-image")
    _need(AUTH_PROXY_IMAGE, "make auth-proxy-image")
    if not (MODELS / "tiny-qwen3" / "config.json").is_file():
        pytest.skip(f"SKIPPED LOUDLY: no tiny models in {MODELS}; run `make tiny-models`")
    root = tmp_path_factory.mktemp("locked")
    lab, home = root / "lab", root / "home"
    shutil.copytree(REPO / "engines", lab / "engines", ignore=shutil.ignore_patterns("Dockerfile"))
    shutil.copytree(REPO / "templates", lab / "templates")
    (lab / "compose").mkdir()
    home.mkdir()
    hub_repo = repo_from_folder(REPO_ID, MODELS / "tiny-qwen3")
    profile = {
        "description": "tiny Qwen3 on the vLLM CPU image, resident",
        "image": IMAGE,
        "unpinned": True,
        "engine_version": "0.32.0",
        "model": {
            "id": REPO_ID,
            "revision": hub_repo.commit,
            "family": "qwen3",
            "quantization": "bf16",
            "thinking": "off",
        },
        "served_model_name": "tiny-qwen3",
        "max_model_len": 512,
        "max_num_seqs": 4,
        "port": free_port(),
        "cpu": {"cores": "0-1", "memory_gib": 6, "kv_cache_gib": 1},
    }
    (lab / "engines" / "vllm-cpu" / "profiles").mkdir(exist_ok=True)
    (lab / "engines" / "vllm-cpu" / "profiles" / "locked.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    env = {"LABCTL_HOME": str(home)}
    with LoopbackHub({REPO_ID: hub_repo}) as hub:
        env["HF_ENDPOINT"] = hub.endpoint
        argv = ["up", "vllm-cpu", "--profile", "locked", "--allow-unpinned", "--resident", "--json"]
        argv += ["--cache-dir", str(root / "cache"), "--timeout", str(READY_WITHIN_S)]
        from helpers.support import run_labctl

        started = run_labctl(*argv, lab=lab, env=env, timeout=READY_WITHIN_S + 120)
    try:
        assert started.code == 0, started.stderr
        yield lab, home, json.loads(started.stdout)
    finally:
        remove_runs(home)


def shared_key(lab: Path, home: Path, run_id: str) -> dict:
    shared = labctl(lab, home, "share", run_id, "--json")
    assert shared.code == 0, shared.stderr
    return json.loads(shared.stdout)


def statuses(base: str, key: str | None) -> dict[str, int]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        return {
            "/v1/models": client.get("/v1/models").status_code,
            "/v1/chat/completions": client.post("/v1/chat/completions", json=CHAT).status_code,
            "/invocations": client.post("/invocations", json=CHAT).status_code,
            "/tokenize": client.post("/tokenize", json={"model": "tiny-qwen3", "prompt": "hi"}).status_code,
            "/metrics": client.get("/metrics").status_code,
        }


def test_no_key_or_a_wrong_key_is_refused_everywhere_but_readiness(deployment: tuple[Path, Path, dict]) -> None:
    lab, home, info = deployment
    base = info["base_url"].removesuffix("/v1")
    assert set(statuses(base, None).values()) == {401}
    assert set(statuses(base, "sk-labctl-wrong-key-0123456789").values()) == {401}
    assert httpx.get(base + "/health", timeout=10).status_code == 200  # readiness stays open, and says so
    key = shared_key(lab, home, info["run_id"])["api_key"]
    assert set(statuses(base, key).values()) == {200}
    client = openai.OpenAI(base_url=info["base_url"], api_key=key, max_retries=0)
    assert client.chat.completions.create(**CHAT).usage.completion_tokens > 0  # type: ignore[union-attr, call-overload]


def test_the_record_and_share_say_what_is_open(deployment: tuple[Path, Path, dict]) -> None:
    lab, home, info = deployment
    rec = record(home, info["run_id"])["resident"]
    assert rec["proxy"] == AUTH_PROXY_IMAGE and rec["open_paths"] == ["/health"] and rec["open_model_paths"] == []
    shared = shared_key(lab, home, info["run_id"])
    assert shared["open_without_key"] == ["/health"] and shared["proxy"] == AUTH_PROXY_IMAGE
    text = labctl(lab, home, "share", info["run_id"]).stdout
    assert "open without a key: /health (readiness)" in text
    # The engine itself listens on loopback only, at the port the record names; the proxy holds the run's port.
    serve = [c for c in containers_of(info["run_id"]) if "serve" in _service(c)]
    assert serve and rec["proxy_engine_port"] != record(home, info["run_id"])["endpoint"]["port"]
    key = shared["api_key"]
    engine = f"http://127.0.0.1:{rec['proxy_engine_port']}"  # the engine's own key guards its /v1 on loopback
    assert httpx.get(engine + "/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 401
    for container in containers_of(info["run_id"]):
        inspect = subprocess.run(["docker", "inspect", container], capture_output=True, text=True).stdout
        logs = subprocess.run(["docker", "logs", container], capture_output=True, text=True)
        assert key not in inspect + logs.stdout + logs.stderr
    assert key not in (home / "runs" / info["run_id"] / "compose.yaml").read_text()


def test_rotation_takes_effect_at_the_proxy(deployment: tuple[Path, Path, dict]) -> None:
    lab, home, info = deployment
    base = info["base_url"].removesuffix("/v1")
    old = shared_key(lab, home, info["run_id"])["api_key"]
    serve = next(c for c in containers_of(info["run_id"]) if _service(c) == "serve")
    started = subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", serve], capture_output=True, text=True)
    rotated = labctl(lab, home, "rotate-key", info["run_id"])
    assert rotated.code == 0, rotated.stderr
    again = subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", serve], capture_output=True, text=True)
    assert again.stdout == started.stdout  # no cold start: only the proxy reloaded its keys
    new = shared_key(lab, home, info["run_id"])["api_key"]
    assert new != old
    assert set(statuses(base, old).values()) == {401}
    assert set(statuses(base, new).values()) == {200}
    assert record(home, info["run_id"])["resident"]["open_paths"] == ["/health"]


def _service(container: str) -> str:
    fmt = '{{index .Config.Labels "com.docker.compose.service"}}'
    return subprocess.run(["docker", "inspect", "-f", fmt, container], capture_output=True, text=True).stdout.strip()
