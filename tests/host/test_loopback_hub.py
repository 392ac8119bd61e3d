"""The loopback Hub in the library: a repository's commit is a function of its files' bytes, the lab's tiny
models are served as labctl/NAME, and `labctl hub serve` answers the Hub API on 127.0.0.1 with those commits."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from helpers.harness_proc import free_port
from helpers.support import LABCTL, REPO

from labctl.errors import BadInput
from labctl.host.hub.loopback import repo_from_folder
from labctl.host.hub.tiny_models import ensure_models, tiny_repos


def model(folder: Path, weights: bytes = b"\x00\x01" * 64) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen3"}\n')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_the_commit_is_a_function_of_the_bytes(tmp_path: Path) -> None:
    first = repo_from_folder("labctl/tiny", model(tmp_path / "a"))
    again = repo_from_folder("labctl/tiny", model(tmp_path / "b"))
    other = repo_from_folder("labctl/tiny", model(tmp_path / "c", b"\x00\x02" * 64))
    assert first.commit == again.commit != other.commit
    assert first.resolve("main") == first.commit and first.resolve("0" * 40) is None


def test_the_tiny_models_are_repositories_of_labctl(tmp_path: Path) -> None:
    model(tmp_path / "models" / "tiny-a")
    (tmp_path / "models" / "SHA256SUMS").write_text("")
    assert list(tiny_repos(tmp_path / "models")) == ["labctl/tiny-a"]
    assert tiny_repos(tmp_path / "absent") == {}


def test_missing_models_in_a_lab_without_the_maker_say_how_to_make_them(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="make tiny-models"):
        ensure_models(tmp_path, tmp_path / "models", lambda _line: None)


@pytest.mark.process
def test_hub_serve_answers_the_hub_api_with_the_commits_it_prints(tmp_path: Path) -> None:
    model(tmp_path / "models" / "tiny-a")
    commit = repo_from_folder("labctl/tiny-a", tmp_path / "models" / "tiny-a").commit
    port = free_port()
    env = {**os.environ, "LABCTL_TINY_MODELS": str(tmp_path / "models"), "LABCTL_LAB": str(REPO)}
    proc = subprocess.Popen(
        [*LABCTL, "hub", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert f"at http://127.0.0.1:{port}" in proc.stdout.readline()
        assert f"labctl/tiny-a  commit {commit}" in proc.stdout.readline()
        info = httpx.get(f"http://127.0.0.1:{port}/api/models/labctl/tiny-a/revision/main", timeout=10).json()
        assert info["sha"] == commit and {s["rfilename"] for s in info["siblings"]} == {
            "config.json",
            "model.safetensors",
        }
        taken = subprocess.run(  # the port is this server's: a second one says so, in one line
            [*LABCTL, "hub", "serve", "--port", str(port)], env=env, capture_output=True, text=True, timeout=60
        )
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr, taken.stderr
        assert "Traceback" not in taken.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(20)
