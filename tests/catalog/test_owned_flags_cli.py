"""validate, render and up refuse a profile whose extra_args re-set a rendered flag: one line naming the file,
the line and the flag, exit 2, nothing rendered, recorded or started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.support import run_labctl

pytestmark = pytest.mark.process  # the CLI as a subprocess


def hostile(lab: Path, engine: str, name: str, words: list[str]) -> None:
    path = lab / "engines" / engine / "profiles" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["extra_args"] = [*(data.get("extra_args") or []), *words]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.parametrize(
    ("engine", "name", "words"),
    [
        ("vllm", "qwen3-32b", ["--host", "0.0.0.0"]),
        ("sglang", "qwen3-32b", ["--host=0.0.0.0"]),
        ("trtllm", "qwen3-32b", ["--port", "1"]),
        ("atlas", "qwen3.6-35b-a3b-fp8", ["--host", "0.0.0.0"]),
        ("harness", "smoke", ["--ho", "0.0.0.0"]),
    ],
)
def test_validate_and_render_refuse(lab: Path, engine: str, name: str, words: list[str]) -> None:
    hostile(lab, engine, name, words)
    for command in (["validate", engine, "--profile", name], ["render", engine, "--profile", name]):
        result = run_labctl(*command, lab=lab)
        assert result.code == 2, result
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"Error: engines/{engine}/profiles/{name}.yaml:")
        assert ": extra_args[" in line and "which labctl renders" in line
    assert list((lab / "compose").iterdir()) == []


def test_up_refuses_before_anything_is_recorded_or_started(lab: Path, tmp_path: Path) -> None:
    hostile(lab, "harness", "smoke", ["--host=0.0.0.0"])
    home = tmp_path / "home"
    home.mkdir()
    result = run_labctl(
        "up", "harness", "--profile", "smoke", "--allow-unpinned", lab=lab, env={"LABCTL_HOME": str(home)}
    )
    assert result.code == 2, result
    (line,) = result.stderr.splitlines()
    assert "extra_args[" in line and "'--host=0.0.0.0' sets --host, which labctl renders" in line
    assert list(home.iterdir()) == []
