"""CPU placement: a profile of an engine with a CPU backend says where it runs (cores, memory, KV cache); it is
rendered as limits and the engine's own variables, holds no GPU, and is recorded as a real engine on CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from labctl.catalog.engines import load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.compose.render import RenderOptions, render_compose
from labctl.errors import BadInput
from labctl.run.lifecycle.up import accelerator_of

REPO = Path(__file__).resolve().parents[2]


def tiny(lab: Path, **cpu: object) -> Path:
    """The lab copy's tiny-qwen3 profile with its cpu: block changed."""
    path = lab / "engines" / "vllm-cpu" / "profiles" / "tiny-qwen3.yaml"
    data = yaml.safe_load(path.read_text())
    data["cpu"] = {**data["cpu"], **cpu}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_cpu_profile_renders_limits_and_the_engines_cpu_variables_and_holds_no_gpu() -> None:
    profile = load_profile(Lab(REPO), "vllm-cpu", "tiny-qwen3")
    assert profile.cpu is not None and profile.cpu.core_count == 2 and profile.gpu_count == 0
    serve = yaml.safe_load(render_compose(Lab(REPO), profile, RenderOptions()))["services"]["serve"]
    assert (serve["cpuset"], serve["cpus"], serve["mem_limit"]) == ("0-1", "2", "6g")
    assert {"VLLM_CPU_KVCACHE_SPACE=1", "VLLM_CPU_OMP_THREADS_BIND=0-1"} <= set(serve["environment"])
    assert "deploy" not in serve and serve["labels"]["labctl.gpus"] == "none"
    assert serve["labels"]["labctl.environment_label"] == "harness-check"
    assert accelerator_of(profile, simulated=False) == accelerator_of(profile, simulated=True) == "cpu"
    harness = load_profile(Lab(REPO), "harness", "smoke")
    assert harness.cpu is None and accelerator_of(harness, simulated=False) == "simulated"


@pytest.mark.parametrize(
    ("cpu", "message"),
    [
        ({"cores": "all"}, "cores"),  # 0.32.0 crashes on `all`: cores are named
        ({"cores": "0-1\n"}, "cores"),
        ({"cores": "1-0"}, "backwards"),
        ({"memory_gib": 1, "kv_cache_gib": 1}, "cannot hold"),
        ({"kv_cache_gib": 0}, "kv_cache_gib"),
        ({"threads": 2}, "unknown field"),
    ],
)
def test_a_bad_cpu_block_is_refused_naming_the_field(lab: Path, cpu: dict[str, object], message: str) -> None:
    tiny(lab, **cpu)
    with pytest.raises(BadInput, match=message):
        load_profile(Lab(lab), "vllm-cpu", "tiny-qwen3")


def test_the_engines_cpu_variables_come_from_the_block_never_from_env(lab: Path) -> None:
    path = tiny(lab)
    path.write_text(path.read_text() + "env: [VLLM_CPU_OMP_THREADS_BIND]\n")
    message = "VLLM_CPU_OMP_THREADS_BIND comes from 'cpu:'"
    with pytest.raises(BadInput, match=message):
        load_profile(Lab(lab), "vllm-cpu", "tiny-qwen3")


def test_an_engine_on_cpu_needs_the_block_and_other_engines_refuse_it(lab: Path) -> None:
    path = tiny(lab)
    data = yaml.safe_load(path.read_text())
    del data["cpu"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput, match="runs on CPU: say where"):
        load_profile(Lab(lab), "vllm-cpu", "tiny-qwen3")
    smoke = lab / "engines" / "harness" / "profiles" / "smoke.yaml"
    smoke.write_text(smoke.read_text() + 'cpu: {cores: "0", memory_gib: 2, kv_cache_gib: 1}\n')
    with pytest.raises(BadInput, match="no CPU backend"):
        load_profile(Lab(lab), "harness", "smoke")


def test_an_engine_with_a_cpu_backend_is_never_real_gpu_nor_needs_gpus(lab: Path) -> None:
    path = lab / "engines" / "vllm-cpu" / "engine.yaml"
    text = path.read_text()
    path.write_text(text.replace("environment_label: harness-check", "environment_label: real-gpu"))
    with pytest.raises(BadInput, match="never real-gpu"):
        load_engine(Lab(lab), "vllm-cpu")
    path.write_text(re.sub(r"gpu:\n  required: false", "gpu:\n  required: true", text))
    with pytest.raises(BadInput, match="needs GPUs has no CPU backend"):
        load_engine(Lab(lab), "vllm-cpu")


def test_a_model_from_the_loopback_hub_says_so_and_nothing_else() -> None:
    profile = load_profile(Lab(REPO), "vllm-cpu", "tiny-qwen3")
    assert profile.model.from_loopback_hub
    assert not load_profile(Lab(REPO), "vllm", "qwen3-32b").model.from_loopback_hub
    assert "hub" not in load_profile(Lab(REPO), "vllm", "qwen3-32b").spec["model"]  # earlier profiles keep their hash
