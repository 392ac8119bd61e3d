"""Every malformed engine or profile file: one clear message (file, field, line), exit 2, no
traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # local processes: the CLI, the harness engine, loopback servers

PROFILE = Path("engines/vllm/profiles/qwen3-32b.yaml")
# A fixed layout, so that the line numbers below stay what these tests assert whatever the shipped file says.
LAYOUT = """description: Qwen3-32B in BF16, the layout these tests edit.
image: vllm/vllm-openai:v0.34.0
unpinned: true
model:
  id: Qwen/Qwen3-32B
  revision: main
  family: qwen3
  quantization: bf16
  thinking: "off"
served_model_name: qwen3-32b
max_model_len: 32768
max_num_seqs: 256
gpu_memory_utilization: 0.9
gpus:
  device_ids: ["0"]
extra_args: ["--seed", "0"]
env: [HF_TOKEN]
engine_version: "0.34.0"
"""


@pytest.fixture(autouse=True)
def fixed_layout(lab: Path) -> None:
    (lab / PROFILE).write_text(LAYOUT)


def _edit(lab: Path, old: str, new: str, rel: Path = PROFILE) -> None:
    path = lab / rel
    text = path.read_text()
    assert old in text, f"test setup: {old!r} not in {rel}"
    path.write_text(text.replace(old, new, 1))


def _render_fails(lab: Path, expected: str, *args: str) -> None:
    result = run_labctl("render", "vllm", "--profile", "qwen3-32b", *args, lab=lab)
    assert result.code == 2, result
    assert result.stderr == f"Error: {expected}\n"
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert list((lab / "compose").iterdir()) == []  # nothing written


def test_unknown_engine(lab: Path) -> None:
    result = run_labctl("render", "nginx", "--profile", "x", lab=lab)
    assert (result.code, result.stderr) == (
        2,
        "Error: unknown engine 'nginx'. Engines in this lab: atlas, harness, sglang, trtllm, vllm, vllm-cpu.\n",
    )


def test_unknown_profile(lab: Path) -> None:
    result = run_labctl("render", "sglang", "--profile", "qwen9", lab=lab)
    assert (result.code, result.stderr) == (
        2,
        "Error: unknown profile 'qwen9' for engine sglang. Profiles: qwen2.5-7b, qwen3-32b, qwen3.6-35b-a3b-fp8.\n",
    )


@pytest.mark.parametrize("name", ["../vllm", "a/b", "..", ".hidden"])
def test_names_cannot_escape(lab: Path, name: str) -> None:
    result = run_labctl("render", "vllm", "--profile", name, lab=lab)
    assert result.code == 2
    assert result.stderr == (
        f"Error: profile name {name!r} is not allowed: use letters, digits, '.', '_' and '-' "
        "(no path separators, no '..', not starting with '.' or '-').\n"
    )


def test_yaml_syntax_error_names_line(lab: Path) -> None:
    _edit(lab, "max_num_seqs: 256", "max_num_seqs: [256")
    result = run_labctl("render", "vllm", "--profile", "qwen3-32b", lab=lab)
    assert result.code == 2 and "Traceback" not in result.stderr
    # the wording is the YAML parser's (libyaml or PyYAML); file, line and what to do are labctl's
    assert result.stderr.startswith("Error: engines/vllm/profiles/qwen3-32b.yaml:13: YAML syntax error: ")
    assert "',' or ']'" in result.stderr and result.stderr.endswith(". Fix the file and try again.\n")


def test_unknown_key_suggests(lab: Path) -> None:
    _edit(lab, "max_num_seqs: 256", "max_num_seq: 256")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:12: max_num_seq: unknown field. Did you mean "
        "'max_num_seqs'? Allowed here: build, cpu, cuda, description, engine_version, env, extra_args, gpu_memory_utilization, gpus, "
        "host, image, legacy, max_model_len, max_num_seqs, model, network, port, resources, served_model_name, unpinned.",
    )


def test_wrong_type(lab: Path) -> None:
    _edit(lab, "max_model_len: 32768", "max_model_len: lots")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:11: max_model_len: expected a whole number of tokens > 0, found 'lots'.",
    )


def test_port_range(lab: Path) -> None:
    _edit(lab, "max_num_seqs: 256", "max_num_seqs: 256\nport: 70000")
    _render_fails(
        lab, "engines/vllm/profiles/qwen3-32b.yaml:13: port: 70000 is not allowed: expected a TCP port 1-65535."
    )


def test_memory_fraction_range(lab: Path) -> None:
    _edit(lab, "gpu_memory_utilization: 0.9", "gpu_memory_utilization: 1.5")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:13: gpu_memory_utilization: 1.5 is not allowed: "
        "expected a fraction in (0, 1].",
    )


def test_unsupported_combination(lab: Path) -> None:
    _edit(lab, "quantization: bf16", "quantization: nvfp4")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:4: model: quantization 'nvfp4' is not in vllm's "
        "support matrix for qwen3 (supported: awq, bf16, fp8, gptq). Use a supported combination, "
        "or pass --allow-unsupported.",
    )


def test_allow_unsupported_is_labelled(lab: Path) -> None:
    _edit(lab, "quantization: bf16", "quantization: nvfp4")
    result = run_labctl("render", "vllm", "--profile", "qwen3-32b", "--stdout", "--allow-unsupported", lab=lab)
    assert result.code == 0, result
    assert '"labctl.allow_unsupported": "true"' in result.stdout
    assert "warning: quantization 'nvfp4' is not in vllm's support matrix" in result.stderr


def test_image_neither_pinned_nor_unpinned(lab: Path) -> None:
    _edit(lab, "unpinned: true", "unpinned: false")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:2: image: 'vllm/vllm-openai:v0.34.0' is not pinned "
        "by digest. Pin it (repo:tag@sha256:…, or `labctl pin ENGINE --profile NAME`), or say "
        "'unpinned: true' to use the tag as it is.",
    )


def test_malformed_digest(lab: Path) -> None:
    _edit(lab, "image: vllm/vllm-openai:v0.34.0\nunpinned: true", "image: vllm/vllm-openai:v0.34.0@sha256:abc")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:2: image: malformed digest 'sha256:abc': expected "
        "sha256: followed by 64 lower-case hex digits. Run `labctl pin` to fill it in from the registry.",
    )


def test_empty_file(lab: Path) -> None:
    (lab / PROFILE).write_text("\n")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml: the file is empty; it must be a YAML mapping of its fields "
        "(copy a shipped one to start).",
    )


def test_not_a_mapping(lab: Path) -> None:
    (lab / PROFILE).write_text("- a\n- b\n")
    _render_fails(
        lab, "engines/vllm/profiles/qwen3-32b.yaml: expected a YAML mapping of fields at the top level, found list."
    )


def test_duplicate_key(lab: Path) -> None:
    _edit(lab, "max_num_seqs: 256", "max_num_seqs: 256\nmax_num_seqs: 8")
    _render_fails(lab, "engines/vllm/profiles/qwen3-32b.yaml:13: max_num_seqs: duplicate key; keep one.")


def test_env_values_refused(lab: Path) -> None:
    _edit(lab, "env: [HF_TOKEN]", "env: [HF_TOKEN=hf_abc]")
    _render_fails(
        lab,
        "engines/vllm/profiles/qwen3-32b.yaml:17: env[0]: 'HF_TOKEN=hf_abc' is not allowed: "
        "expected a variable name such as HF_TOKEN.",
    )


def test_broken_engine_file(lab: Path) -> None:
    _edit(lab, "  port: 8000", "  port: eighty", rel=Path("engines/vllm/engine.yaml"))
    _render_fails(
        lab, "engines/vllm/engine.yaml:22: server.port: expected the engine's default port (1-65535), found 'eighty'."
    )


def test_unknown_placeholder_in_engine(lab: Path) -> None:
    _edit(lab, '["--port", "{port}"]', '["--port", "{prot}"]', rel=Path("engines/vllm/engine.yaml"))
    _render_fails(
        lab,
        "engines/vllm/engine.yaml:16: server.args[4][1]: unknown placeholder {prot}; known: api_key_file, "
        "build_max_batch_size, build_max_num_tokens, build_max_seq_len, engine_dir, gpu_memory_utilization, host, "
        "max_model_len, max_num_seqs, model, port, reasoning_parser, revision, served_model_name, "
        "tensor_parallel_size.",
    )


def test_bad_gpus_option(lab: Path) -> None:
    _render_fails(lab, "--gpus 'zero': expected GPU indexes separated by commas, e.g. --gpus 0,1.", "--gpus", "zero")


def test_validate_all_and_debug_traceback(lab: Path) -> None:
    assert run_labctl("validate", lab=lab).stdout.endswith("\nok: 12 profile(s) valid\n")
    _edit(lab, "max_model_len: 32768", "max_model_len: -1")
    result = run_labctl("validate", lab=lab)
    assert result.code == 2 and result.stderr.startswith(
        "Error: engines/vllm/profiles/qwen3-32b.yaml:11: max_model_len:"
    )
    debug = run_labctl("--debug", "validate", lab=lab)
    assert debug.code != 0 and "Traceback" in debug.stderr


def test_render_writes_and_prints_path(lab: Path) -> None:
    result = run_labctl("render", "harness", "--profile", "smoke", lab=lab)
    assert result.code == 0, result
    path = lab / "compose" / "harness-smoke.yaml"
    assert result.stdout == f"{path}\n"
    assert path.read_text() == run_labctl("render", "harness", "--profile", "smoke", "--stdout", lab=lab).stdout


def test_every_command_has_help_with_example() -> None:
    import typer.main

    from labctl.cli import app

    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert command.help and "Example:" in command.help, f"{name} has no help with an example"


@pytest.mark.parametrize("command", ["render", "up"])
def test_gpus_for_an_engine_that_uses_no_gpu_is_refused(lab: Path, tmp_path: Path, command: str) -> None:
    home = tmp_path / "home"
    result = run_labctl(
        command, "harness", "--profile", "smoke", "--gpus", "1", lab=lab, env={"LABCTL_HOME": str(home)}
    )
    assert (result.code, result.stdout) == (2, "")
    assert result.stderr == (
        "Error: --gpus 1: harness uses no GPU, so it cannot hold one (it would block those GPUs for everyone "
        "else). Drop --gpus.\n"
    )
    assert list((lab / "compose").iterdir()) == [] and not home.exists()  # nothing written or started


def test_a_gpus_field_in_a_gpu_free_engines_profile_is_refused(lab: Path) -> None:
    path = lab / "engines" / "harness" / "profiles" / "smoke.yaml"
    path.write_text(path.read_text() + 'gpus: {device_ids: ["1"]}\n')
    line = path.read_text().count("\n")
    result = run_labctl("validate", "harness", "--profile", "smoke", lab=lab)
    assert result.code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"Error: engines/harness/profiles/smoke.yaml:{line}: gpus: harness uses no GPU")
