"""Rendering: golden files for every shipped profile, determinism, and Compose's own acceptance."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from helpers.support import REPO

from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile, with_overrides
from labctl.compose.render import RenderOptions, render_compose

GOLDEN = REPO / "tests" / "golden"
LAB = Lab(REPO)
OPTIONS = RenderOptions(cache_dir="/srv/hf-cache", engine_store="/srv/trt-engines")
SHIPPED = [(e, p) for e in list_engine_names(LAB) for p in list_profile_names(LAB, e)]


def test_every_required_profile_ships() -> None:
    required = {
        ("sglang", "qwen3-32b"),
        ("vllm", "qwen3-32b"),
        ("trtllm", "qwen3-32b"),
        ("trtllm", "qwen3-32b-engine"),
        ("vllm", "qwen2.5-7b"),
        ("sglang", "qwen2.5-7b"),
        ("atlas", "qwen3.6-35b-a3b-fp8"),
        ("harness", "smoke"),
    }
    assert required <= set(SHIPPED)


@pytest.mark.parametrize(("engine", "profile"), SHIPPED)
def test_golden(engine: str, profile: str) -> None:
    text = render_compose(LAB, load_profile(LAB, engine, profile), OPTIONS)
    golden = GOLDEN / f"{engine}-{profile}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.is_file(), f"no golden file {golden.name}: run UPDATE_GOLDEN=1 pytest tests/compose/test_render.py"
    assert text == golden.read_text(), f"{golden.name} changed: review, then UPDATE_GOLDEN=1 to accept"


RENDER_ALL = """
import hashlib, sys
from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.compose.canonical import canonical_compose
from labctl.compose.render import RenderOptions, render_compose
lab = Lab(__import__("pathlib").Path(sys.argv[1]))
options = RenderOptions(cache_dir="/srv/hf-cache", engine_store="/srv/trt-engines")
for e in list_engine_names(lab):
    for p in list_profile_names(lab, e):
        profile = load_profile(lab, e, p)
        text = render_compose(lab, profile, options) + canonical_compose(lab, profile.engine, p, profile.spec, None, False)
        print(e, p, hashlib.sha256(text.encode()).hexdigest())
"""


@pytest.mark.process
def test_render_and_hash_are_identical_across_processes_and_hash_seeds() -> None:
    """Set and dict order differ between interpreters with other hash seeds: the output must not."""
    outputs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", RENDER_ALL, str(REPO)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == len(SHIPPED)


def test_header_and_labels() -> None:
    profile = load_profile(LAB, "sglang", "qwen3-32b")
    text = render_compose(LAB, profile, OPTIONS)
    assert text.startswith("# Rendered by labctl 0.1.0 from engines/sglang/profiles/qwen3-32b.yaml\n")
    assert f"# profile sha256: {profile.sha256}\n" in text
    service = yaml.safe_load(text)["services"]["serve"]
    assert service["labels"]["labctl.engine"] == "sglang"
    assert service["labels"]["labctl.profile"] == "qwen3-32b"
    assert service["labels"]["labctl.profile_sha256"] == profile.sha256
    assert service["labels"]["labctl.gpus"] == "0,1"
    assert service["network_mode"] == "host"
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert device == {"driver": "nvidia", "device_ids": ["0", "1"], "capabilities": ["gpu"]}
    # a name, never a value; and the Hub offline: labctl fetched the model before the start
    assert service["environment"] == ["HF_TOKEN", "HF_HUB_OFFLINE=1"]
    assert service["ipc"] == "host" and "shm_size" not in service  # no shm_size beside ipc: host
    assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
    command = service["command"]
    assert command[command.index("--tp-size") + 1] == "2"  # the full name: --tp parses only as an abbreviation
    assert command[command.index("--default-chat-template-kwargs") + 1] == '{"enable_thinking": false}'


def test_gpu_count_and_ports_mode() -> None:
    profile = load_profile(LAB, "atlas", "qwen3.6-35b-a3b-fp8")
    service = yaml.safe_load(render_compose(LAB, profile, OPTIONS))["services"]["serve"]
    assert service["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1
    spec = dict(profile.spec, network="ports")
    ported = type(profile)(engine=profile.engine, name=profile.name, spec=spec, source=None)
    service = yaml.safe_load(render_compose(LAB, ported, OPTIONS))["services"]["serve"]
    assert "network_mode" not in service
    assert service["ports"] == ["127.0.0.1:8888:8888"]
    assert service["command"][service["command"].index("--bind") + 1] == "0.0.0.0"


def test_overrides_change_placement_not_identity() -> None:
    profile = load_profile(LAB, "vllm", "qwen3-32b")
    moved = with_overrides(profile, gpus=["3", "2"], port=8100)
    assert moved.sha256 == profile.sha256
    service = yaml.safe_load(render_compose(LAB, moved, OPTIONS))["services"]["serve"]
    assert service["labels"]["labctl.gpus"] == "3,2"
    assert service["command"][0] == "Qwen/Qwen3-32B"  # vllm serve MODEL: positional
    assert service["command"][service["command"].index("--port") + 1] == "8100"


def test_trtllm_build_then_serve() -> None:
    profile = load_profile(LAB, "trtllm", "qwen3-32b-engine")
    services = yaml.safe_load(render_compose(LAB, profile, OPTIONS))["services"]
    assert services["serve"]["depends_on"] == {"build": {"condition": "service_completed_successfully"}}
    build_args = services["build"]["command"]
    engine_dir = build_args[3]
    assert engine_dir.startswith("/engines/") and engine_dir.endswith("/qwen3-32b")  # listed under its folder name
    serve = services["serve"]["command"]
    assert serve[0] == engine_dir
    assert services["serve"]["labels"]["labctl.build.max_batch_size"] == "64"
    assert build_args[6:] == ["64", "30720", "32768", "8192"]
    # the build limits are the runtime limits
    limits = {flag: serve[serve.index(flag) + 1] for flag in ("--max_batch_size", "--max_num_tokens", "--max_seq_len")}
    assert limits == {"--max_batch_size": "64", "--max_num_tokens": "8192", "--max_seq_len": "32768"}
    assert 'rm -rf "$$3"' in services["build"]["entrypoint"][2]  # the converted checkpoint goes after a build
    # the engine directory is keyed by what fixes the engine: change a limit, get another directory
    spec = dict(profile.spec, build=dict(profile.spec["build"], max_batch_size=128))
    other = type(profile)(engine=profile.engine, name=profile.name, spec=spec, source=None)
    assert yaml.safe_load(render_compose(LAB, other, OPTIONS))["services"]["build"]["command"][3] != engine_dir


def test_resident_deployments_rotate_their_logs() -> None:
    profile = load_profile(LAB, "harness", "smoke")
    resident = yaml.safe_load(render_compose(LAB, profile, RenderOptions(cache_dir="/c", restart="unless-stopped")))
    logging = resident["services"]["serve"]["logging"]
    assert logging == {"driver": "json-file", "options": {"max-size": "50m", "max-file": "5"}}
    plain = yaml.safe_load(render_compose(LAB, profile, RenderOptions(cache_dir="/c")))
    assert "logging" not in plain["services"]["serve"]
