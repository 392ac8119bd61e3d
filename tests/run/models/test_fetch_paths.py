"""Every path fetch builds from a name (the profile's model id and revision, the Hub's commit, file paths and
ETags) stays inside its cache folder, resolved with symlinks, before anything is written, even when the Hub
endpoint (a mirror, HF_ENDPOINT) answers for a hostile revision. Against the loopback Hub."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.loopback_hub import FIXTURES, HubRepo, loopback_hub, repo_from_folder
from helpers.support import LABCTL

from labctl.errors import BadInput, LabctlError
from labctl.host.hub import cache as hub_cache
from labctl.host.hub import revisions as hub

pytestmark = pytest.mark.process  # a loopback Hub server and the CLI as a subprocess

MODEL = "Qwen/Qwen3-32B"
HOSTILE = ["../../escape", "main/../../../escape"]


def hostile_repo() -> HubRepo:
    """The stand-in repository, whose Hub also answers for revisions that are paths (as a careless mirror might)."""
    repo = repo_from_folder(MODEL, FIXTURES / MODEL)
    for name in HOSTILE:
        repo.branches[name] = repo.commit
    return repo


def written(root: Path) -> list[Path]:
    return sorted(root.rglob("*")) if root.exists() else []


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> object:
    with loopback_hub({MODEL: hostile_repo()}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


@pytest.mark.parametrize("revision", HOSTILE)
def test_the_hub_is_not_even_asked_about_a_revision_that_is_a_path(
    tmp_path: Path, endpoint: object, revision: str
) -> None:
    with pytest.raises(BadInput, match="is not a Hub repo id and revision"):
        hub.plan_fetch(MODEL, revision, tmp_path / "hub", "model.revision")
    assert endpoint.served == []  # type: ignore[attr-defined]
    assert written(tmp_path) == []


@pytest.mark.parametrize("revision", HOSTILE)
def test_a_plan_whose_revision_is_a_path_writes_nothing(tmp_path: Path, endpoint: object, revision: str) -> None:
    plan = hub.plan_fetch(MODEL, "main", tmp_path / "cache" / "hub", "model.revision")
    hostile = hub_cache.FetchPlan(plan.repo_id, revision, plan.commit, plan.endpoint, plan.files)
    with pytest.raises(LabctlError, match="nothing was written"):
        hub_cache.download(hostile, tmp_path / "cache" / "hub", lambda _n: None, None)
    assert written(tmp_path) == []


@pytest.mark.parametrize("folder", ["refs", "snapshots", "blobs"])
def test_a_cache_folder_that_is_a_symlink_out_of_the_cache_is_refused_before_any_write(
    tmp_path: Path, endpoint: object, folder: str
) -> None:
    hub_dir = tmp_path / "cache" / "hub"
    repo_dir = hub_dir / ("models--" + MODEL.replace("/", "--"))
    repo_dir.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo_dir / folder).symlink_to(outside)
    plan = hub.plan_fetch(MODEL, "main", hub_dir, "model.revision")
    with pytest.raises(LabctlError, match="outside"):
        hub_cache.download(plan, hub_dir, lambda _n: None, None)
    assert written(outside) == []
    assert sorted(p.name for p in repo_dir.iterdir()) == [folder]


def test_a_hub_file_path_or_etag_that_is_a_path_is_refused(tmp_path: Path, endpoint: object) -> None:
    plan = hub.plan_fetch(MODEL, "main", tmp_path / "hub", "model.revision")
    first = plan.files[0]
    for bad in (
        hub_cache.HubFile("../../../escape", first.size, first.etag, False, url=first.url),
        hub_cache.HubFile(first.path, first.size, "../../../escape", False, url=first.url),
    ):
        hostile = hub_cache.FetchPlan(plan.repo_id, plan.revision, plan.commit, plan.endpoint, (bad,))
        with pytest.raises(LabctlError):
            hub_cache.download(hostile, tmp_path / "hub", lambda _n: None, None)
    assert written(tmp_path) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("revision", "../../escape"),
        ("revision", "main/../../../escape"),
        ("id", "../escape"),
        ("id", "/Qwen/Qwen3-32B"),
    ],
)
def test_labctl_fetch_refuses_a_profile_whose_model_names_are_paths(
    lab: Path, tmp_path: Path, endpoint: object, field: str, value: str
) -> None:
    path = lab / "engines" / "vllm" / "profiles" / "qwen3-32b.yaml"
    data = yaml.safe_load(path.read_text())
    data["model"][field] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_ENDPOINT": endpoint.endpoint, "LABCTL_LAB": str(lab)})  # type: ignore[attr-defined]
    cache = tmp_path / "hf"
    proc = subprocess.run(
        [*LABCTL, "fetch", "vllm", "--profile", "qwen3-32b", "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=lab,
    )
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("Error: engines/vllm/profiles/qwen3-32b.yaml:") and f": model.{field}: " in line
    assert endpoint.served == [] and written(cache) == []  # type: ignore[attr-defined]
