"""Engine facts that are data live in the engine's folder, validated at load: the memory fit's rule and
default, and a GPU engine without them is refused by name, never skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from labctl.catalog.engines import lab_telemetry, load_engine
from labctl.catalog.fit import default_target, fit
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput


def _edit(lab: Path, engine: str, change: dict[str, object]) -> None:
    path = lab / "engines" / engine / "engine.yaml"
    spec = yaml.safe_load(path.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = spec
        for key in parents:
            node = node[key]
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def test_each_gpu_engine_states_its_memory_rule_and_default(lab: Path) -> None:
    for name in ("vllm", "sglang", "trtllm", "atlas"):
        engine = load_engine(Lab(lab), name)
        assert engine.memory_rule is not None and engine.memory_default is not None, name
    assert load_engine(Lab(lab), "sglang").memory_default == (
        0.835,
        "SGLang's server_args.py, which derives about 0.835 for an 80 GB GPU at TP1",
    )
    for name in ("harness", "vllm-cpu"):  # gpu.required: false, so no GPU memory to fit
        assert not load_engine(Lab(lab), name).needs_gpu


def test_the_lab_telemetry_comes_from_the_folders(lab: Path) -> None:
    telemetry = lab_telemetry(Lab(lab))
    assert telemetry.path_of("trtllm") == "/prometheus/metrics" and telemetry.path_of("external") == "/metrics"
    assert telemetry.names["sglang"]["waiting"][0].metric == "sglang:num_queue_reqs"
    assert "vllm-cpu" not in telemetry.names  # it states none: a scrape of it is known by vLLM's names


def test_a_gpu_engine_without_a_memory_rule_is_refused_by_file_and_field(lab: Path) -> None:
    _edit(lab, "vllm", {"memory_setting.fit": None})
    profile = load_profile(Lab(lab), "vllm", "qwen3-32b")
    with pytest.raises(BadInput, match=r"engines/vllm/engine\.yaml:\d+: memory_setting\.fit: missing: an engine"):
        fit(profile, default_target(profile))
    _edit(lab, "vllm", {"memory_setting": None})
    profile = load_profile(Lab(lab), "vllm", "qwen3-32b")
    with pytest.raises(BadInput, match=r"engines/vllm/engine\.yaml: memory_setting: missing"):
        fit(profile, default_target(profile))


def test_a_missing_default_is_refused_when_the_profile_sets_none(lab: Path) -> None:
    _edit(lab, "trtllm", {"memory_setting.default": None, "memory_setting.default_from": None})
    profile = load_profile(Lab(lab), "trtllm", "qwen3-32b-engine")
    assert profile.gpu_memory_utilization is None
    with pytest.raises(BadInput, match=r"memory_setting\.default: missing"):
        fit(profile, default_target(profile))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"memory_setting.fit.kv_space": "share_of_everything"}, r"memory_setting\.fit\.kv_space: .*not allowed"),
        ({"memory_setting.fit.reserve_gib": 1e9}, r"memory_setting\.fit\.reserve_gib: .*not allowed"),
        ({"memory_setting.default": 1.5}, r"memory_setting\.default: .*not allowed"),
        ({"memory_setting.default_from": None}, r"memory_setting: 'default' and 'default_from' go together"),
        ({"memory_setting.fit.reserve_why": "x" * 201}, r"memory_setting\.fit\.reserve_why: .*at most 200"),
        ({"memory_setting.fit.extra": 1}, r"memory_setting\.fit\.extra: unknown field"),
        ({"gpu.required": False}, r"memory_setting\.fit: an engine that needs no GPU has no GPU memory fit"),
        ({"telemetry.running": [{"metric": "bad name!", "kind": "gauge"}]}, r"telemetry\.running\[0\]\.metric: "),
        ({"telemetry.running": [{"metric": "a_b", "kind": "histogram"}]}, r"telemetry\.running\[0\]\.kind: "),
        (
            {"telemetry.running": [{"metric": f"a{i}", "kind": "gauge"} for i in range(5)]},
            r"telemetry\.running: .*at most 4",
        ),
        ({"telemetry.waiting": None}, r"telemetry: missing required field 'waiting'"),
        ({"telemetry.queue_depth": []}, r"telemetry\.queue_depth: unknown field"),
        ({"endpoints.metrics": None}, r"telemetry: metric names need a route that serves them"),
        (
            {"telemetry.kv_cache_usage_fraction": [{"metric": "vllm:kv_cache_usage_perc", "kind": "gauge"}]},
            r"telemetry\.kv_cache_usage_fraction\[0\]\.kind: kv_cache_usage_fraction is a share .*\(averaged over ranks",
        ),
        (
            {"telemetry.running": [{"metric": "a_b", "kind": "fraction"}]},
            r"telemetry\.running\[0\]\.kind: running is a count: .*\(summed over ranks",
        ),
    ],
)
def test_bad_memory_facts_are_refused_at_load(lab: Path, change: dict[str, object], message: str) -> None:
    _edit(lab, "vllm", change)
    with pytest.raises(BadInput, match=message):
        load_engine(Lab(lab), "vllm")


def test_contract_files_name_the_engine_as_its_folder_does(lab: Path) -> None:
    from labctl.catalog.contracts import load_contract

    for path in sorted((lab / "engines").glob("*/cli/*.yaml")):
        engine = load_engine(Lab(lab), path.parent.parent.name)
        assert engine.contract is not None
        speaker = engine.contract.speaker or engine.name
        assert load_contract(path).commands[engine.contract.serve].label.startswith(f"{speaker} "), path


def test_a_contract_speaker_is_bounded(lab: Path) -> None:
    from labctl.catalog.contracts import load_contract

    path = lab / "engines" / "vllm" / "cli" / "0.34.0.yaml"
    path.write_text(path.read_text().replace("speaker: vLLM", "speaker: '" + "v" * 41 + "'"))
    with pytest.raises(BadInput, match="speaker: how the engine's messages name it"):
        load_contract(path)
    _edit(lab, "vllm", {"contract.speaker": "vLLM\nhi"})
    with pytest.raises(BadInput, match=r"contract\.speaker: .*not allowed"):
        load_engine(Lab(lab), "vllm")
