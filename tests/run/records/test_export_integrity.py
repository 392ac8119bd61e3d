"""Exports are verified before they are believed (issue 29, class 8) and written like every output labctl
rewrites (class 5): a run fabricated as `labctl up harness --profile smoke` records it (Docker is not
needed to export, diff or refuse), exported through the CLI, then edited the way a hostile colleague would."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.support import REPO, Result, run_labctl

from labctl.catalog.lab import Lab, find_lab
from labctl.catalog.profiles import load_profile
from labctl.compose.canonical import canonical_compose, sha256_text
from labctl.compose.labels import RunLabels
from labctl.compose.render import RenderOptions, render_compose
from labctl.run.records.export import content_hash, dump_export, load_export, recorded_profile
from labctl.run.records.record import ComposeInfo, Endpoint, ImageInfo, new_record
from labctl.run.records.store import Runs, new_run_id

pytestmark = pytest.mark.process  # the CLI as a subprocess

DIGEST = "sha256:" + "cd" * 32


def labctl(world: dict[str, Any], *args: str) -> Result:
    return run_labctl(*args, lab=world["lab"], env={"LABCTL_HOME": str(world["home"])})


def fabricated_run(lab: Path, home: Path, port: int) -> str:
    """A stopped run with its compose.yaml, rendered by labctl's own functions as `up` renders it."""
    profile = load_profile(find_lab(str(lab)), "harness", "smoke")
    spec = {**profile.spec, "port": port}
    profile = type(profile)(engine=profile.engine, name=profile.name, spec=spec, source=None)
    runs, run_id = Runs(home), new_run_id()
    cache = str(home / "cache")
    labels = RunLabels(run_id=run_id, owner="alice", created_at="2026-12-04T10:00:00Z", port=str(port))
    text = render_compose(Lab(lab), profile, RenderOptions(cache_dir=cache, labels=labels.run_labels()))
    canonical = canonical_compose(Lab(lab), profile.engine, profile.name, spec, DIGEST, False)
    record = new_record(
        run_id,
        "harness",
        "smoke",
        profile.served_model_name,
        Endpoint(base_url=f"http://127.0.0.1:{port}/v1", port=port),
        "alice",
        "harness-check",
        status="stopped",
        record_path=str(runs.record_path(run_id)),
        resolved_profile=spec,
        image=ImageInfo(reference=spec["image"], digest=DIGEST, pinned=True),
        compose=ComposeInfo(render_options={"cache_dir": cache}),
        run_labels=labels.run_labels(),
        setup={"compose_sha256": sha256_text(canonical)},
    )
    runs.save(record)
    (runs.dir(run_id) / "compose.yaml").write_text(text)
    return run_id


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("export-integrity")
    lab, home = root / "lab", root / "home"
    for folder in ("engines", "templates", "workloads", "suites"):
        shutil.copytree(REPO / folder, lab / folder)
    home.mkdir()
    world: dict[str, Any] = {"lab": lab, "home": home, "run": fabricated_run(lab, home, 47011)}
    world["twin"] = fabricated_run(lab, home, 47012)  # the same setup on another port: identical
    return world


@pytest.fixture
def exported(world: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "alice.yaml"
    done = labctl(world, "export", world["run"], "-o", str(path))
    assert done.code == 0, done.stderr
    return path


def resign(path: Path, change: Any, lab: Path) -> None:
    """What a determined colleague does: edit, then recompute both hashes with labctl's own functions."""
    export = load_export(path)
    change(export.doc)
    profile = recorded_profile(Lab(lab), export)
    canonical = canonical_compose(Lab(lab), profile.engine, profile.name, profile.spec, DIGEST, False)
    export.doc["setup"]["compose_sha256"] = sha256_text(canonical)
    export.doc["content_sha256"] = content_hash(export.doc)
    path.write_text(dump_export(export.doc))


def privileged(doc: dict[str, Any]) -> None:
    compose = yaml.safe_load(doc["compose"])
    compose["services"]["serve"]["privileged"] = True
    doc["compose"] = yaml.safe_dump(compose, sort_keys=False)


def root_mount(doc: dict[str, Any]) -> None:
    compose = yaml.safe_load(doc["compose"])
    compose["services"]["serve"].setdefault("volumes", []).append(
        {"type": "bind", "source": "/", "target": "/host", "read_only": False}
    )
    doc["compose"] = yaml.safe_dump(compose, sort_keys=False)


def root_as_key_mount(doc: dict[str, Any]) -> None:
    compose = yaml.safe_load(doc["compose"])
    compose["services"]["serve"].setdefault("volumes", []).append(
        {"type": "bind", "source": "/", "target": "/run/labctl", "read_only": True}
    )
    doc["compose"] = yaml.safe_dump(compose, sort_keys=False)


def root_group(doc: dict[str, Any]) -> None:
    compose = yaml.safe_load(doc["compose"])
    compose["services"]["serve"]["group_add"] = ["0"]
    doc["compose"] = yaml.safe_dump(compose, sort_keys=False)


def other_command(doc: dict[str, Any]) -> None:
    doc["compose"] = doc["compose"].replace('- "--port"', '- "--debug-shell"\n      - "--port"', 1)


def test_the_original_and_its_twin_diff_as_identical(world: dict[str, Any], exported: Path) -> None:
    same = labctl(world, "diff", str(exported), world["twin"])
    assert same.code == 0, same.stdout + same.stderr
    assert "setups are identical" in same.stdout


@pytest.mark.parametrize(
    "change",
    [privileged, root_mount, other_command, root_as_key_mount, root_group],
    ids=["privileged", "root-mount", "command", "root-as-key-mount", "root-group"],
)
def test_a_compose_text_edited_with_both_hashes_recomputed_no_longer_diffs_as_identical(
    world: dict[str, Any], exported: Path, change: Any
) -> None:
    before = exported.read_text()
    resign(exported, change, world["lab"])
    assert exported.read_text() != before
    result = labctl(world, "diff", str(exported), world["run"], "--json")
    assert result.code == 1, result.stdout + result.stderr
    assert "compose hash" in yaml.safe_load(result.stdout)["differing"]


@pytest.mark.parametrize("change", [privileged, root_mount], ids=["privileged", "root-mount"])
def test_reproduce_refuses_an_edited_compose_text_even_with_allow_render_drift(
    world: dict[str, Any], exported: Path, change: Any
) -> None:
    resign(exported, change, world["lab"])
    runs_before = sorted(p.name for p in (world["home"] / "runs").iterdir())
    result = labctl(world, "reproduce", str(exported), "--allow-render-drift", "--port", "47013", "--no-fetch")
    assert result.code == 2, result.stdout + result.stderr
    assert "its compose text is not what its own setup renders to" in result.stderr
    assert "does not excuse a broken or edited file" in result.stderr
    assert sorted(p.name for p in (world["home"] / "runs").iterdir()) == runs_before


def test_a_truncated_export_is_refused_by_reproduce_even_with_allow_render_drift(
    world: dict[str, Any], exported: Path
) -> None:
    """Cut inside the record section: it still parses, only its content hash says it is not whole."""
    text = exported.read_text()
    cut = text[: text.index("\nrecord:") + 1] + "record:\n  schema_version: 1\n"
    exported.write_text(cut)
    runs_before = sorted(p.name for p in (world["home"] / "runs").iterdir())
    result = labctl(world, "reproduce", str(exported), "--allow-render-drift", "--port", "47014", "--no-fetch")
    assert result.code == 2, result.stdout + result.stderr
    # Refused on whichever check sees it first: the record it carries no longer loads (the typed loader), or
    # the content hash; either way --allow-render-drift does not excuse it, and nothing starts.
    assert (
        "content hash mismatch" in result.stderr and "does not excuse" in result.stderr
    ) or "The export is truncated or was edited by hand" in result.stderr, result.stderr
    assert sorted(p.name for p in (world["home"] / "runs").iterdir()) == runs_before


def test_a_resident_runs_compose_text_is_its_setups_own(world: dict[str, Any], exported: Path) -> None:
    """What `up --resident --keys` renders (restart, log rotation, this run's key folder and its group, the key
    argument) is recognised as the setup's own: only the resident row differs, not the compose hash."""
    from labctl.run.records.export import recorded_run_labels

    export = load_export(exported)
    export.doc["record"]["resident"] = {"restart_policy": "unless-stopped", "auth": "key", "keys": 1}
    profile = recorded_profile(Lab(world["lab"]), export)
    options = RenderOptions(
        cache_dir=export.host["cache_dir"],
        labels=recorded_run_labels(export.host["run_labels"]),
        environment_label="harness-check",
        restart="unless-stopped",
        secrets_dir=f"/home/alice/keys/{export.run_id}",
        key_group=1001,
    )
    export.doc["compose"] = render_compose(Lab(world["lab"]), profile, options)
    export.doc["content_sha256"] = content_hash(export.doc)
    exported.write_text(dump_export(export.doc))
    result = labctl(world, "diff", str(exported), world["run"], "--json")
    assert yaml.safe_load(result.stdout)["differing"] == ["resident"], result.stdout + result.stderr


def test_diff_refuses_an_export_whose_content_hash_does_not_match(world: dict[str, Any], exported: Path) -> None:
    exported.write_text(exported.read_text().replace("owner: alice", "owner: mallory", 1))
    result = labctl(world, "diff", str(exported), world["run"])
    assert result.code == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert "content hash mismatch" in line


def test_diff_does_not_trust_the_stated_compose_hash(world: dict[str, Any], exported: Path) -> None:
    """A stated hash copied from the original onto another setup: the recomputed one differs."""
    export = load_export(exported)
    export.doc["setup"]["resolved_profile"]["extra_args"].extend(["--tpot-ms", "9"])
    export.doc["content_sha256"] = content_hash(export.doc)  # compose_sha256 left as the original's
    exported.write_text(dump_export(export.doc))
    result = labctl(world, "diff", str(exported), world["run"], "--json")
    assert result.code == 1
    assert "compose hash" in yaml.safe_load(result.stdout)["differing"]


def test_export_over_a_foreign_file_is_refused_and_changes_nothing(world: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "notes.yaml"
    target.write_text("my notes\n")
    refused = labctl(world, "export", world["run"], "-o", str(target))
    assert refused.code == 3, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--overwrite" in refused.stderr
    assert target.read_text() == "my notes\n"
    done = labctl(world, "export", world["run"], "-o", str(target), "--overwrite")
    assert done.code == 0 and load_export(target).run_id == world["run"]


def test_export_over_labctls_own_export_replaces_it(world: dict[str, Any], exported: Path) -> None:
    done = labctl(world, "export", world["twin"], "-o", str(exported))
    assert done.code == 0, done.stderr
    assert load_export(exported).run_id == world["twin"]


def test_export_into_a_missing_folder_creates_nothing(world: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "run.yaml"
    refused = labctl(world, "export", world["run"], "-o", str(target))
    assert refused.code == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "does not exist" in refused.stderr
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("given", ["", "/", ".", ".."])
def test_export_to_a_path_that_names_nothing_is_refused(world: dict[str, Any], given: str) -> None:
    refused = labctl(world, "export", world["run"], "-o", given)
    assert refused.code == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_export_over_a_folder_is_refused(world: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    refused = labctl(world, "export", world["run"], "-o", str(tmp_path / "dir"))
    assert refused.code == 3 and (tmp_path / "dir").is_dir()


@pytest.mark.parametrize("key", ["environment_label", "served_model_name"])
def test_an_export_with_control_characters_in_a_name_is_refused(
    world: dict[str, Any], exported: Path, key: str
) -> None:
    export = load_export(exported)
    export.doc["setup"][key] = "harness-check\x1b[2J\nFAKE"
    export.doc["content_sha256"] = content_hash(export.doc)
    exported.write_text(dump_export(export.doc))
    for command in (["diff", str(exported), world["run"]], ["reproduce", str(exported), "--no-fetch"]):
        refused = labctl(world, *command)
        assert refused.code == 2, refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert f"setup.{key}" in line and "control characters" in line and "\x1b" not in line
