"""The harness engine as a container started with `docker compose` from the rendered `harness smoke`
file, spoken to with the openai SDK; and profile values reaching a real container verbatim."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import openai
import pytest
import yaml
from helpers.harness_proc import free_port, wait_healthy
from helpers.support import REPO

from labctl.catalog.lab import Lab
from labctl.catalog.profiles import (
    Profile,
    check_profile_spec,
    load_profile,
    with_overrides,
)
from labctl.catalog.sourcefile import SourceFile
from labctl.compose.render import RenderOptions, render_compose

pytestmark = pytest.mark.docker
LAB = Lab(REPO)


def compose(path: Path, project: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "compose", "-p", project, "-f", str(path), *args], capture_output=True, text=True)


def test_smoke_container_with_openai_sdk(tmp_path: Path, docker_engine: None) -> None:
    port = free_port()
    profile = with_overrides(load_profile(LAB, "harness", "smoke"), port=port)
    path = tmp_path / "compose.yaml"
    path.write_text(render_compose(LAB, profile, RenderOptions()))
    project = f"labctl-test-{uuid.uuid4().hex[:8]}"
    up = compose(path, project, "up", "-d")
    assert up.returncode == 0, up.stderr
    try:
        wait_healthy(f"http://127.0.0.1:{port}", 20)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        reply = client.chat.completions.create(
            model="harness-smoke", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert reply.usage.completion_tokens == len(reply.choices[0].message.content.split())
        text = "".join(
            c.choices[0].text
            for c in client.completions.create(
                model="harness-smoke", prompt="a b", max_tokens=6, stream=True, extra_body={"ignore_eos": True}
            )
            if c.choices
        )
        assert len(text.split()) == 6
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    finally:
        compose(path, project, "down", "-t", "2")


def test_values_reach_the_container_verbatim(tmp_path: Path, docker_engine: None) -> None:
    """Compose must not interpolate `$` or reinterpret quotes: the container sees the profile's bytes."""
    value = "a ${HOME} $PATH \"q\" 's' {{ x }} # c: d\nline2"
    base = load_profile(LAB, "harness", "smoke")
    data = yaml.safe_load(base.source.path.read_text())  # type: ignore[union-attr]
    data["extra_args"] = [value]
    spec = check_profile_spec(base.engine, SourceFile(Path("p"), data), data)
    profile = Profile(engine=base.engine, name="p", spec=spec, source=None)
    doc = yaml.safe_load(render_compose(LAB, profile, RenderOptions()))
    service = doc["services"]["serve"]
    # swap the server for a program that prints its last argument, keeping the rendered command
    service["entrypoint"] = ["python3", "-c", "import sys; sys.stdout.write(sys.argv[-1])"]
    path = tmp_path / "echo.yaml"
    path.write_text(yaml.safe_dump(doc))
    project = f"labctl-test-{uuid.uuid4().hex[:8]}"
    try:
        run = compose(path, project, "run", "--rm", "-T", "serve")
        assert run.returncode == 0, run.stderr
        assert run.stdout == value
    finally:
        compose(path, project, "down")
