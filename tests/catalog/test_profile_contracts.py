"""Every shipped profile's command line is what its engine version accepts (its CLI contract), plain and
resident, on one and two GPUs; a known-bad command line is refused with the engine's own reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.lab_copy import copy_lab
from helpers.support import REPO

from labctl.catalog.engines import list_engine_names
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import list_profile_names, load_profile
from labctl.compose.contract_check import check_profile, validate_lab, with_gpus
from labctl.errors import BadInput

LAB = Lab(REPO)
SHIPPED = [(e, p) for e in list_engine_names(LAB) for p in list_profile_names(LAB, e)]


@pytest.mark.parametrize(("engine", "name"), SHIPPED)
@pytest.mark.parametrize("resident", [False, True])
@pytest.mark.parametrize("gpus", [1, 2])
def test_shipped_profiles_pass_their_contract(engine: str, name: str, resident: bool, gpus: int) -> None:
    profile = load_profile(LAB, engine, name)
    placed = with_gpus(profile, gpus) if profile.engine.needs_gpu else profile
    verdict = check_profile(placed, resident=resident)
    assert verdict.ok, verdict.findings
    assert (verdict.contract is None) == (engine == "harness")


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(copy_lab(tmp_path / "lab", ("engines", "templates")))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def refusal(lab: Lab, engine: str, name: str) -> str:
    with pytest.raises(BadInput) as caught:
        validate_lab(lab, engine, name, allow_unsupported=False, allow_uncontracted=False)
    return str(caught.value)


def test_vllm_0_11_refuses_model_as_an_option(lab: Lab) -> None:
    engines = lab.root / "engines"
    shutil.copy(REPO / "tests/fixtures/contracts/vllm-0.11.0.yaml", engines / "vllm/cli/0.11.0.yaml")
    edit(engines / "vllm/engine.yaml", '- ["{model}"]', '- ["--model", "{model}"]')
    for file in ("image: vllm/vllm-openai:v0.34.0", 'engine_version: "0.34.0"'):
        edit(engines / "vllm/profiles/qwen3-32b.yaml", file, file.replace("0.34.0", "0.11.0"))
    message = refusal(lab, "vllm", "qwen3-32b")
    assert "engines/vllm/engine.yaml:12 (server.args[0])" in message
    assert "vLLM 0.11.0 rejects --model" in message and "positional argument" in message


def test_atlas_refuses_revision(lab: Lab) -> None:
    edit(
        lab.root / "engines/atlas/engine.yaml",
        '- ["serve", "{model}"]',
        '- ["serve", "{model}"]\n    - ["--revision", "{revision}"]',
    )
    message = refusal(lab, "atlas", "qwen3.6-35b-a3b-fp8")
    assert "Atlas 00caf3af does not know the option --revision" in message and "engines/atlas/engine.yaml:" in message


def test_unknown_sglang_flag_names_the_profile_line(lab: Lab) -> None:
    path = lab.root / "engines/sglang/profiles/qwen3-32b.yaml"
    path.write_text(path.read_text() + 'extra_args: ["--max-model-len", "32768"]\n')
    message = refusal(lab, "sglang", "qwen3-32b")
    assert message.startswith("engines/sglang/profiles/qwen3-32b.yaml: engines/sglang/profiles/qwen3-32b.yaml:")
    assert "SGLang 0.5.23 does not know the option --max-model-len" in message


def test_unknown_trtllm_option_in_serve_and_in_the_build(lab: Lab) -> None:
    path = lab.root / "engines/trtllm/profiles/qwen3-32b.yaml"
    path.write_text(path.read_text() + 'extra_args: ["--served_model_name", "qwen3-32b"]\n')
    assert "TensorRT-LLM 1.2.1 does not know the option --served_model_name" in refusal(lab, "trtllm", "qwen3-32b")
    edit(lab.root / "engines/trtllm/engine.yaml", '--max_num_tokens "${10}"', '--max_num_tokens "${10}" --no_such 1')
    assert "(build.script): TensorRT-LLM 1.2.1 does not know the option --no_such" in refusal(
        lab, "trtllm", "qwen3-32b-engine"
    )


def test_sglang_abbreviation_is_a_warning(lab: Lab) -> None:
    edit(
        lab.root / "engines/sglang/engine.yaml",
        '"--tp-size", "{tensor_parallel_size}"',
        '"--tp", "{tensor_parallel_size}"',
    )
    lines = validate_lab(lab, "sglang", "qwen3-32b", allow_unsupported=False, allow_uncontracted=False)
    assert any("abbreviation of --tp-size" in line for line in lines)


def test_a_version_without_a_contract_is_refused_unless_allowed(lab: Lab) -> None:
    path = lab.root / "engines/sglang/profiles/qwen3-32b.yaml"
    edit(path, "image: lmsysorg/sglang:v0.5.23", "image: lmsysorg/sglang:v0.5.24")
    edit(path, 'engine_version: "0.5.23"', 'engine_version: "0.5.24"')
    assert "no CLI contract for sglang 0.5.24" in refusal(lab, "sglang", "qwen3-32b")
    lines = validate_lab(lab, "sglang", "qwen3-32b", allow_unsupported=False, allow_uncontracted=True)
    assert any("no CLI contract" in line for line in lines)


def test_engine_version_must_agree_with_the_tag(lab: Lab) -> None:
    edit(lab.root / "engines/vllm/profiles/qwen3-32b.yaml", 'engine_version: "0.34.0"', 'engine_version: "0.33.0"')
    assert "disagrees with the image tag (version 0.34.0)" in refusal(lab, "vllm", "qwen3-32b")


def test_atlas_cannot_pin_a_revision(lab: Lab) -> None:
    edit(lab.root / "engines/atlas/profiles/qwen3.6-35b-a3b-fp8.yaml", "revision: main", "revision: 0123abcd")
    assert "atlas cannot pin a model revision" in refusal(lab, "atlas", "qwen3.6-35b-a3b-fp8")
