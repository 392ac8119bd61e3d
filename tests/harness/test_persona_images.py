"""Engine personas in Docker (`make harness-image` builds and pushes them): each persona image started
with exactly the entrypoint and argv `labctl render` produces for the shipped profiles, on the main
daemon with host networking and a free port in 18600–18699.

What cannot exist here is the GPU: the main daemon has no NVIDIA device driver, so these tests set
NVIDIA_VISIBLE_DEVICES themselves (`-e`), as Docker's device request would. Without Docker or the
persona images these skip loudly locally and fail under CI=true.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from helpers.support import REPO, _missing, docker_available, run_labctl

from labctl.catalog.engine_metrics import parse_prometheus
from labctl.catalog.engines import lab_telemetry
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile, with_overrides
from labctl.compose.render import RenderOptions, render_compose

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]

REGISTRY = "127.0.0.1:5000/labctl"
LAB = Lab(REPO)
PLAIN = [
    ("vllm", "qwen2.5-7b"),
    ("vllm", "qwen3-32b"),
    ("vllm", "qwen3.6-35b-a3b-fp8"),
    ("sglang", "qwen2.5-7b"),
    ("sglang", "qwen3-32b"),
    ("sglang", "qwen3.6-35b-a3b-fp8"),
    ("trtllm", "qwen3-32b"),
    ("atlas", "qwen3.6-35b-a3b-fp8"),
]
METRICS = {
    "vllm": ["vllm:request_success_total", "vllm:generation_tokens_total", "vllm:kv_cache_usage_perc"],
    "sglang": ["sglang:num_requests_total", "sglang:generation_tokens_total", "sglang:token_usage"],
    "trtllm": ["trtllm_request_success_total", "trtllm_generation_tokens_total"],
    "atlas": ["atlas_requests_total", "atlas_generation_tokens_total"],
}
KEY = "persona-key-" + uuid.uuid4().hex[:8]


def free_port() -> int:
    for port in range(18600, 18700):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.fail("no free port in 18600-18699")


def persona_image(engine: str, profile_name: str) -> str:
    version = load_profile(LAB, engine, profile_name).spec["engine_version"]
    return f"{REGISTRY}/persona-{engine}:{version}"


@pytest.fixture(scope="module")
def personas() -> None:
    if not docker_available():
        _missing("no Docker Engine answers `docker info`")
    for engine, profile_name in PLAIN:
        image = persona_image(engine, profile_name)
        present = subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0
        if not present and subprocess.run(["docker", "pull", "-q", image], capture_output=True).returncode != 0:
            _missing(f"the persona image {image} is not built: run `make harness-image`")


@dataclass
class Containers:
    names: list[str] = field(default_factory=list)

    def run(
        self,
        image: str,
        words: list[str],
        env: dict[str, str] | None = None,
        volumes: list[str] = (),  # type: ignore[assignment]
        detach: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        name = f"persona-{uuid.uuid4().hex[:10]}"
        self.names.append(name)
        args = ["docker", "run", "--name", name, "--network", "host", "--entrypoint", words[0]]
        for key, value in {"NVIDIA_VISIBLE_DEVICES": "0,1", "LABCTL_PERSONA_LOAD_S": "1.5", **(env or {})}.items():
            args += ["-e", f"{key}={value}"]
        for volume in volumes:
            args += ["-v", volume]
        args += ["-d"] if detach else []
        return subprocess.run([*args, image, *words[1:]], capture_output=True, text=True, timeout=60)

    def logs(self) -> str:
        name = self.names[-1]
        done = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
        return done.stdout + done.stderr


@pytest.fixture
def containers(personas: None) -> Iterator[Containers]:
    started = Containers()
    yield started
    for name in started.names:  # only the containers this test started
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def compose_words(text: str, service: str = "serve") -> list[str]:
    """The service's entrypoint + command from compose text, with Compose's `$$` escapes undone."""
    spec = yaml.safe_load(text)["services"][service]
    return [w.replace("$$", "$") for w in [*(spec.get("entrypoint") or []), *spec["command"]]]


def rendered(engine: str, profile_name: str, port: int) -> list[str]:
    done = run_labctl("render", engine, "--profile", profile_name, "--stdout", "--port", str(port))
    assert done.code == 0, done.stderr
    return compose_words(done.stdout)


def config_mounts(text: str, folder: Path, service: str = "serve") -> list[str]:
    """The files Compose would mount from the file's `configs:` (an engine's options file), as `-v` values:
    each content written under `folder`, mounted read-only where the service reads it."""
    doc = yaml.safe_load(text)
    mounts = []
    for item in doc["services"][service].get("configs") or []:
        path = folder / item["source"]
        path.write_text(doc["configs"][item["source"]]["content"].replace("$$", "$"))
        mounts.append(f"{path}:{item['target']}:ro")
    return mounts


def rendered_with_mounts(engine: str, profile_name: str, port: int, folder: Path) -> tuple[list[str], list[str]]:
    done = run_labctl("render", engine, "--profile", profile_name, "--stdout", "--port", str(port))
    assert done.code == 0, done.stderr
    return compose_words(done.stdout), config_mounts(done.stdout, folder)


def rendered_with_key(engine: str, profile_name: str, port: int, secrets: Path) -> list[str]:
    """The resident form: the key read from the mounted secret file by the engine's own mechanism."""
    profile = with_overrides(load_profile(LAB, engine, profile_name), port=port)
    return compose_words(render_compose(LAB, profile, RenderOptions(secrets_dir=str(secrets))))


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port: int, containers: Containers, seconds: float = 30) -> float:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(port):
            return time.monotonic()
        time.sleep(0.05)
    pytest.fail(f"the persona never opened port {port}:\n{containers.logs()}")


def wait_health(base: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{base}/health never answered 200")


def served_name(engine: str, profile_name: str) -> str:
    spec = load_profile(LAB, engine, profile_name).spec
    return str(spec["model"]["id"] if engine == "trtllm" else spec["served_model_name"])


def chat(base: str, model: str, key: str | None = None, **extra: Any) -> Any:
    client = openai.OpenAI(base_url=base + "/v1", api_key=key or "unused", max_retries=0, timeout=30)
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=24, **extra
    )


@pytest.mark.parametrize(("engine", "profile_name"), PLAIN)
def test_serves_the_rendered_command_line(
    engine: str, profile_name: str, containers: Containers, tmp_path: Path
) -> None:
    port = free_port()
    words, mounts = rendered_with_mounts(engine, profile_name, port, tmp_path)
    # SGLang's warm-up lasts 5 s here, not its 1 s default: under load the checks below could miss a 1 s one.
    warmup = {"LABCTL_PERSONA_WARMUP_S": "5"} if engine == "sglang" else None
    started = containers.run(persona_image(engine, profile_name), words, warmup, volumes=mounts)
    assert started.returncode == 0, started.stderr
    assert not port_open(port), "the port must stay closed while the model loads"
    opened = wait_port(port, containers)
    base = f"http://127.0.0.1:{port}"
    if engine == "sglang":  # /v1/models answers during warm-up, /health is 503 until it ends
        assert httpx.get(base + "/v1/models", timeout=5).status_code == 200
        assert httpx.get(base + "/health", timeout=5).status_code == 503
    wait_health(base)
    if engine == "sglang":
        assert time.monotonic() - opened > 1.0
    models = httpx.get(base + "/v1/models", timeout=5).json()
    assert [m["id"] for m in models["data"]] == [served_name(engine, profile_name)]
    answer = chat(base, served_name(engine, profile_name))
    assert answer.choices[0].message.content
    values = parse_prometheus(httpx.get(base + lab_telemetry(LAB).path_of(engine), timeout=5).text)
    assert set(METRICS[engine]) <= set(values)
    assert values[METRICS[engine][0]].total >= 1  # the request counter labctl reads counted the completion
    if engine in ("vllm", "trtllm"):
        assert httpx.get(base + "/version", timeout=5).json() == {"version": persona_version(engine)}
    if engine == "atlas":
        health = httpx.get(base + "/health", timeout=5).json()
        assert health == {"status": "ready", "model": served_name(engine, profile_name)}
        assert httpx.get(base + "/health/live", timeout=5).status_code == 200


def persona_version(engine: str) -> str:
    return {"vllm": "0.34.0", "trtllm": "1.2.1"}[engine]


def test_sglang_health_takes_over_a_second_and_server_info(containers: Containers) -> None:
    port = free_port()
    words = rendered("sglang", "qwen3-32b", port)
    containers.run(persona_image("sglang", "qwen3-32b"), words, {"LABCTL_PERSONA_WARMUP_S": "2"})
    wait_port(port, containers)
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(base + "/health", timeout=5).status_code == 503
    assert httpx.get(base + "/ready", timeout=5).status_code == 503
    wait_health(base)
    tic = time.monotonic()
    assert httpx.get(base + "/health", timeout=5).status_code == 200
    assert time.monotonic() - tic > 1.0
    with pytest.raises(httpx.ReadTimeout):  # a 1 s probe timeout reads a healthy SGLang as down
        httpx.get(base + "/health", timeout=1)
    assert httpx.get(base + "/ready", timeout=5).status_code == 200
    info = httpx.get(base + "/get_server_info", timeout=5).json()
    assert (info["version"], info["tp_size"], info["served_model_name"]) == ("0.5.23", 2, "qwen3-32b")


@pytest.mark.parametrize(
    ("engine", "profile_name", "open_paths", "guarded_paths"),
    [
        ("vllm", "qwen3-32b", ["/health", "/metrics", "/version"], ["/v1/models"]),
        ("sglang", "qwen3-32b", ["/metrics"], ["/v1/models", "/get_server_info"]),
        ("atlas", "qwen3.6-35b-a3b-fp8", ["/health", "/health/live", "/metrics"], ["/v1/models"]),
    ],
)
def test_key_guards_what_the_engine_guards(
    engine: str,
    profile_name: str,
    open_paths: list[str],
    guarded_paths: list[str],
    containers: Containers,
    tmp_path: Path,
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "api_key").write_text(KEY + "\n")
    port = free_port()
    words = rendered_with_key(engine, profile_name, port, secrets)
    started = containers.run(persona_image(engine, profile_name), words, volumes=[f"{secrets}:/run/labctl:ro"])
    assert started.returncode == 0, started.stderr
    wait_port(port, containers)
    base = f"http://127.0.0.1:{port}"
    wait_health(base)
    for path in open_paths:
        assert httpx.get(base + path, timeout=5).status_code == 200, path
    for path in guarded_paths:
        assert httpx.get(base + path, timeout=5).status_code == 401, path
        assert httpx.get(base + path, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 401
        assert httpx.get(base + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=5).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        chat(base, served_name(engine, profile_name))
    assert chat(base, served_name(engine, profile_name), KEY).choices[0].message.content


def test_reasoning_when_a_request_turns_thinking_on(containers: Containers) -> None:
    port = free_port()
    containers.run(persona_image("vllm", "qwen3-32b"), rendered("vllm", "qwen3-32b", port))
    wait_port(port, containers)
    base = f"http://127.0.0.1:{port}"
    off = chat(base, "qwen3-32b")  # the profile's server default turns thinking off
    assert not (off.choices[0].message.model_extra or {}).get("reasoning")  # vLLM's field since 0.11
    on = chat(base, "qwen3-32b", extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert on.choices[0].message.model_extra["reasoning"]
    assert on.choices[0].message.content


def test_refusals_exit_like_the_engine(containers: Containers) -> None:
    port = free_port()
    atlas = rendered("atlas", "qwen3.6-35b-a3b-fp8", port) + ["--revision", "main"]
    done = containers.run(persona_image("atlas", "qwen3.6-35b-a3b-fp8"), atlas, detach=False)
    assert done.returncode == 2
    assert "error: unexpected argument '--revision' found" in done.stderr
    vllm = rendered("vllm", "qwen3-32b", port)  # --tensor-parallel-size 2
    done = containers.run(persona_image("vllm", "qwen3-32b"), vllm, {"NVIDIA_VISIBLE_DEVICES": "0"}, detach=False)
    assert done.returncode == 1 and "World size (2) is larger than the number of available GPUs (1)" in done.stderr
    done = containers.run(persona_image("vllm", "qwen3-32b"), vllm, {"NVIDIA_VISIBLE_DEVICES": ""}, detach=False)
    assert done.returncode == 1 and "NVIDIA_VISIBLE_DEVICES is unset" in done.stderr


def seed_hf_cache(root: Path, repo: str) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = root / "hub" / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    config = {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 64, "torch_dtype": "bfloat16"}
    (snapshot / "config.json").write_text(json.dumps(config))


def test_trtllm_build_then_serve_the_engine(containers: Containers, tmp_path: Path) -> None:
    cache, store = tmp_path / "hf", tmp_path / "engines"
    store.mkdir()
    port = free_port()
    done = run_labctl(
        "render", "trtllm", "--profile", "qwen3-32b-engine", "--stdout", "--port", str(port), "--cache-dir", str(cache)
    )
    assert done.code == 0, done.stderr
    image = persona_image("trtllm", "qwen3-32b-engine")
    volumes = [f"{cache}:/root/.cache/huggingface", f"{store}:/engines"]
    build = compose_words(done.stdout, "build")
    cache.mkdir()
    missing = containers.run(image, build, volumes=volumes, detach=False)
    assert missing.returncode != 0 and "LocalEntryNotFoundError" in missing.stderr  # the stand-in never downloads
    seed_hf_cache(cache, "Qwen/Qwen3-32B")
    built = containers.run(image, build, volumes=volumes, detach=False)
    assert built.returncode == 0, built.stderr
    engine_dir = store / Path(compose_words(done.stdout)[1]).relative_to("/engines")
    config = json.loads((engine_dir / "config.json").read_text())
    assert config["build_config"] == {
        "max_batch_size": 64,
        "max_input_len": 30720,
        "max_seq_len": 32768,
        "max_num_tokens": 8192,
    }
    assert config["mapping"]["tp_size"] == 2
    again = containers.run(image, build, volumes=volumes, detach=False)
    assert "engine already built" in again.stdout
    serve = compose_words(done.stdout)
    volumes += config_mounts(done.stdout, tmp_path)
    too_big = [*serve[: serve.index("--max_batch_size") + 1], "128", *serve[serve.index("--max_batch_size") + 2 :]]
    refused = containers.run(image, too_big, volumes=volumes, detach=False)
    assert refused.returncode == 1
    assert "max_batch_size [128] is greater than build_config.max_batch_size [64]" in refused.stderr
    containers.run(image, serve, volumes=volumes)
    wait_port(port, containers)
    base = f"http://127.0.0.1:{port}"
    wait_health(base)
    assert [m["id"] for m in httpx.get(base + "/v1/models", timeout=5).json()["data"]] == ["qwen3-32b"]
    assert chat(base, "qwen3-32b").choices[0].message.content
