"""Model ids and revisions are Hub names, never paths: checked at load in profiles and exports, with the
file, line and field, before anything is fetched, rendered or started."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.lab_copy import copy_lab

from labctl.catalog.hub_names import is_repo_id, is_revision
from labctl.catalog.lab import Lab
from labctl.catalog.profiles import load_profile
from labctl.errors import BadInput


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    return Lab(copy_lab(tmp_path / "lab", ("engines", "templates")))


def refusal(lab: Lab, field: str, value: str) -> str:
    path = lab.profile_path("vllm", "qwen3-32b")
    data = yaml.safe_load(path.read_text())
    data["model"][field] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(BadInput) as caught:
        load_profile(lab, "vllm", "qwen3-32b")
    return str(caught.value)


@pytest.mark.parametrize(
    "revision",
    [
        "../../x",
        "main/../../x",
        "..",
        "../main",
        "/etc/passwd",
        "main/",
        "a//b",
        ".hidden",
        "-rf",
        "refs/pr/..",
        "main.lock",
        "x" * 129,
        "",
        "main\n",
        "ma in",
        "tag\\..\\x",
        "réf",
    ],
)
def test_a_revision_that_is_no_hub_ref_is_refused_with_file_line_and_field(lab: Lab, revision: str) -> None:
    message = refusal(lab, "revision", revision)
    assert message.startswith("engines/vllm/profiles/qwen3-32b.yaml:")
    assert ": model.revision: " in message and "a 40-hex commit, or a branch or tag name" in message
    assert "\n" not in message.replace(repr(revision), "")


@pytest.mark.parametrize(
    "model_id",
    [
        "../Qwen3-32B",
        "Qwen/..",
        "Qwen/../x",
        "/Qwen/Qwen3-32B",
        "Qwen/Qwen3-32B/",
        "Qwen//x",
        "Qwen/x/y",
        "Qwen",
        "Qwen/.x",
        "Qwen/x-",
        "Qwen/a--b",
        "Qwen/x.git",
        "Qwen/" + "x" * 97,
        "Qwen/x y",
        "Qwen/ü",
        "",
    ],
)
def test_a_model_id_that_is_no_hub_repo_id_is_refused(lab: Lab, model_id: str) -> None:
    message = refusal(lab, "id", model_id)
    assert message.startswith("engines/vllm/profiles/qwen3-32b.yaml:") and ": model.id: " in message
    assert "a Hub repo id like Qwen/Qwen3-32B" in message


@pytest.mark.parametrize(
    "revision", ["main", "v1.0", "refs/pr/1", "release/v2", "9216db5781bf21249d130ec9da846c4624c16137", "v1+cu12", "_x"]
)
def test_hub_refs_and_commits_load(revision: str) -> None:
    assert is_revision(revision)


@pytest.mark.parametrize(
    "model_id", ["Qwen/Qwen3-32B", "Qwen/Qwen3.6-35B-A3B-FP8", "labctl/harness-synthetic", "hc-org/tiny", "a_b/c_d"]
)
def test_hub_repo_ids_load(model_id: str) -> None:
    assert is_repo_id(model_id)
