"""An engine's options file (engine.yaml `options_file`): checked strictly at load, rendered as data into a
Compose config mounted in the serve container, named on the command line with its origin traced."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.lab_copy import copy_folder, copy_lab
from helpers.support import REPO

from labctl.catalog.engines import load_engine
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.compose.contract_check import check_profile
from labctl.compose.docker_run import docker_run_commands
from labctl.compose.render import RenderOptions, render_compose, serve_command
from labctl.errors import BadInput
from labctl.run.records.diff import options_files

ENGINE = Path("engines/trtllm/engine.yaml")
SHIPPED = """options_file:
  flag: --extra_llm_api_options
  target: /labctl/extra_llm_api_options.yaml
  content:
    return_perf_metrics: true
"""
OPTIONS = RenderOptions(cache_dir="/srv/hf-cache", engine_store="/srv/trt-engines")


@pytest.fixture
def trt_lab(tmp_path: Path) -> Path:
    """Only what a TensorRT-LLM profile needs: its engine folder and the templates."""
    root = copy_lab(tmp_path / "lab", ("templates",))
    copy_folder("engines/trtllm", root / "engines" / "trtllm")
    (root / "compose").mkdir()
    return root


def _with_options(lab: Path, block: str) -> None:
    path = lab / ENGINE
    text = path.read_text()
    assert SHIPPED in text, "test setup: the shipped options_file block changed"
    path.write_text(text.replace(SHIPPED, block))


@pytest.mark.parametrize("profile", ["qwen3-32b", "qwen3-32b-engine"])
def test_both_backends_name_the_file_and_mount_it(profile: str) -> None:
    lab = Lab(REPO)
    loaded = load_profile(lab, "trtllm", profile)
    argv = serve_command(loaded, None).argv
    at = [w.text for w in argv].index("--extra_llm_api_options")
    assert (argv[at].origin, argv[at + 1].origin) == ("options_file.flag", "options_file.target")
    assert argv[at + 1].text == "/labctl/extra_llm_api_options.yaml"
    compose = yaml.safe_load(render_compose(lab, loaded, OPTIONS))
    assert compose["services"]["serve"]["configs"] == [
        {"source": "engine_options", "target": "/labctl/extra_llm_api_options.yaml"}
    ]
    assert yaml.safe_load(compose["configs"]["engine_options"]["content"]) == {"return_perf_metrics": True}
    assert "configs" not in compose["services"].get("build", {})  # trtllm-build takes no such file


def test_engines_without_one_render_no_configs() -> None:
    lab = Lab(REPO)
    compose = yaml.safe_load(render_compose(lab, load_profile(lab, "vllm", "qwen3-32b"), OPTIONS))
    assert "configs" not in compose and "configs" not in compose["services"]["serve"]


@pytest.mark.parametrize(
    ("block", "field", "says"),
    [
        (SHIPPED.replace("/labctl/extra_llm_api_options.yaml", "/etc/passwd"), "options_file.target", "/labctl/"),
        (SHIPPED.replace("/labctl/extra_llm_api_options.yaml", "/labctl/../x.yaml"), "options_file.target", ""),
        (SHIPPED.replace("--extra_llm_api_options", "extra"), "options_file.flag", "--extra_llm_api_options"),
        (SHIPPED.replace("return_perf_metrics: true", "return perf: true"), "options_file.content", "plain"),
        (SHIPPED.replace("return_perf_metrics: true", "a: .inf"), "options_file.content", "plain"),
        (SHIPPED.replace("return_perf_metrics: true", "a: 1.0e+400"), "options_file.content", "plain"),
        (SHIPPED.replace("return_perf_metrics: true", "a: " + "[" * 12 + "1" + "]" * 12), "options_file.content", ""),
        (SHIPPED.replace("return_perf_metrics: true", "a: " + "x" * 20000), "options_file.content", "bytes"),
        (SHIPPED.replace("  content:\n    return_perf_metrics: true\n", "  content: {}\n"), "options_file.content", ""),
        (SHIPPED.replace("  content:\n    return_perf_metrics: true\n", ""), "options_file", "content"),
        (SHIPPED + "  mode: 777\n", "options_file.mode", "unknown field"),
    ],
)
def test_a_bad_options_file_is_refused_with_its_line(trt_lab: Path, block: str, field: str, says: str) -> None:
    _with_options(trt_lab, block)
    with pytest.raises(BadInput) as info:
        load_engine(Lab(trt_lab), "trtllm")
    message = str(info.value)
    assert message.startswith("engines/trtllm/engine.yaml:") and f": {field}" in message and says in message
    assert "\n" not in message


def test_values_stay_data(trt_lab: Path) -> None:
    nasty = '"$HOME ${HF_TOKEN} {{ x }} {% if %}\\n- services: {}"'
    _with_options(
        trt_lab, SHIPPED.replace("return_perf_metrics: true", f"return_perf_metrics: true\n    note: {nasty}")
    )
    lab = Lab(trt_lab)
    text = render_compose(lab, load_profile(lab, "trtllm", "qwen3-32b"), OPTIONS)
    compose = yaml.safe_load(text)
    assert set(compose) == {"services", "configs"} and set(compose["configs"]) == {"engine_options"}
    content = compose["configs"]["engine_options"]["content"].replace("$$", "$")  # Compose's own unescaping
    assert yaml.safe_load(content)["note"] == "$HOME ${HF_TOKEN} {{ x }} {% if %}\n- services: {}"


@pytest.mark.process
@pytest.mark.compose
def test_compose_takes_the_text_as_written(trt_lab: Path, tmp_path: Path, compose_binary: None) -> None:
    _with_options(trt_lab, SHIPPED.replace("return_perf_metrics: true", "return_perf_metrics: true\n    note: $HOME"))
    lab = Lab(trt_lab)
    path = tmp_path / "compose.yaml"
    path.write_text(render_compose(lab, load_profile(lab, "trtllm", "qwen3-32b"), OPTIONS))
    proc = subprocess.run(
        ["docker", "compose", "-f", str(path), "config", "--format", "json"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    content = yaml.safe_load(proc.stdout)["configs"]["engine_options"]["content"]
    # `config` prints a compose file, so `$` comes back escaped; interpolated, it would be a folder's name
    assert yaml.safe_load(content.replace("$$", "$")) == {"note": "$HOME", "return_perf_metrics": True}


def test_a_flag_the_engine_does_not_take_is_refused_where_it_is_written(trt_lab: Path) -> None:
    _with_options(trt_lab, SHIPPED.replace("--extra_llm_api_options", "--extra_options"))
    verdict = check_profile(load_profile(Lab(trt_lab), "trtllm", "qwen3-32b"))
    line = 1 + (trt_lab / ENGINE).read_text().splitlines().index("  flag: --extra_options")
    assert any(f"engines/trtllm/engine.yaml:{line} (options_file.flag)" in f for f in verdict.findings), verdict


@pytest.mark.process
def test_the_docker_run_equivalent_writes_the_file_and_mounts_it(tmp_path: Path) -> None:
    lab = Lab(REPO)
    profile = load_profile(lab, "trtllm", "qwen3-32b-engine")
    lines = docker_run_commands(render_compose(lab, profile, OPTIONS), profile.image_text, "labctl-r1")
    write, build, serve = lines
    assert write.endswith(" > labctl-r1-extra_llm_api_options.yaml") and "docker run" in build
    subprocess.run(["sh", "-c", write], cwd=tmp_path, check=True)
    text = (tmp_path / "labctl-r1-extra_llm_api_options.yaml").read_text()
    assert text == profile.engine.options_file.text  # type: ignore[union-attr]
    mount = "type=bind,source=./labctl-r1-extra_llm_api_options.yaml,target=/labctl/extra_llm_api_options.yaml"
    assert f"--mount {mount},readonly" in serve and f"{mount}" not in build


def test_labctl_diff_shows_the_options_file() -> None:
    lab = Lab(REPO)
    for profile, shown in [
        ("trtllm", "/labctl/extra_llm_api_options.yaml: return_perf_metrics: true"),
        ("vllm", "-"),
    ]:
        compose = yaml.safe_load(render_compose(lab, load_profile(lab, profile, "qwen3-32b"), OPTIONS))
        assert options_files(compose) == shown
