"""export / reproduce / diff / show --docker-run against a real Docker Engine and the local registry."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from helpers.harness_proc import free_port, wait_healthy
from helpers.lab_copy import copy_folder, copy_lab
from helpers.lifecycle_helpers import labctl, record, remove_runs, up, write_profile
from helpers.registry_images import build_own_image, remove_own_image
from helpers.support import LABCTL, REPO, _missing, compose_available, docker_available, run_labctl

pytestmark = pytest.mark.docker


@dataclass(frozen=True)
class Made:
    run_id: str
    path: Path
    record: dict


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    """One run of the module's own image, exported and taken down, for every test here (each gets a copy of the
    export); the image is the module's, so the shared harness image stays: the other tiers run on it meanwhile."""
    if not docker_available() or not compose_available():
        _missing("no Docker Engine with the Compose v2 plugin answers")
    root = tmp_path_factory.mktemp("made-export")
    lab, home = root / "lab", root / "home"
    copy_folder("engines", lab / "engines", skip=("Dockerfile",))
    copy_lab(lab, ("templates", "workloads", "suites"))
    (lab / "compose").mkdir()
    home.mkdir()
    reference, image_id = build_own_image(root / "image", 1024, name="repro")
    try:
        write_profile(lab, "rep", free_port(), image=reference)
        info = json.loads(up(lab, home, "rep").stdout)
        path = root / "run.yaml"
        result = labctl(lab, home, "export", info["run_id"], "-o", str(path))
        assert result.code == 0, result.stderr
        assert labctl(lab, home, "down", info["run_id"]).code == 0
        yield Made(info["run_id"], path, record(home, info["run_id"]))
    finally:
        remove_runs(home)
        remove_own_image(reference, image_id)


@pytest.fixture
def exported(made: Made, tmp_path: Path) -> tuple[str, Path]:
    """The module's export, as this test's own file to change."""
    path = tmp_path / "run.yaml"
    shutil.copyfile(made.path, path)
    return made.run_id, path


def test_reproduce_elsewhere_pulls_by_digest(lab: Path, made: Made, exported: tuple[str, Path], tmp_path: Path) -> None:
    run_id, path = exported
    original = made.record
    doc = yaml.safe_load(path.read_text())
    assert doc["labctl_export"] == 1 and doc["content_sha256"] and doc["host"]["port"] == original["endpoint"]["port"]
    assert "HF_TOKEN=" not in path.read_text()
    subprocess.run(["docker", "rmi", "-f", original["image"]["reference"]], capture_output=True, check=True)
    other_home = tmp_path / "bob"
    other_dir = tmp_path / "somewhere"
    other_dir.mkdir()
    port = free_port()
    proc = subprocess.run(
        [*LABCTL, "reproduce", str(path), "--port", str(port), "--json"],
        capture_output=True,
        text=True,
        cwd=other_dir,
        env={**__import__("os").environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(other_home)},
    )
    try:
        assert proc.returncode == 0, proc.stderr
        assert "by digest" in proc.stderr
        info = json.loads(proc.stdout)
        assert info["health"] == "healthy" and info["reproduced_from"] == run_id
        new = json.loads((other_home / "runs" / info["run_id"] / "record.json").read_text())
        assert new["image"]["digest"] == original["image"]["digest"]
        assert new["setup"]["compose_sha256"] == original["setup"]["compose_sha256"]
        assert new["reproduced_from"] == run_id and new["reproduction"]["compose_sha256_matches"] is True
        assert new["endpoint"]["port"] == port
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        diff = run_labctl("diff", str(path), info["run_id"], lab=lab, env={"LABCTL_HOME": str(other_home)})
        assert diff.code == 0, diff.stdout + diff.stderr
        assert "setups are identical" in diff.stdout
    finally:
        remove_runs(other_home)


def _rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    from labctl.catalog.lab import Lab
    from labctl.compose.canonical import canonical_compose, sha256_text
    from labctl.run.records.export import content_hash, dump_export, load_export, recorded_profile

    export = load_export(path)
    change(export.doc)
    lab = Lab(REPO)
    profile = recorded_profile(lab, export)
    export.doc["setup"]["compose_sha256"] = sha256_text(
        canonical_compose(
            lab, profile.engine, profile.name, profile.spec, export.doc["setup"]["image"]["digest"], False
        )
    )
    export.doc["content_sha256"] = content_hash(export.doc)
    path.write_text(dump_export(export.doc))


def test_missing_digest_is_refused_with_nothing_started(lab: Path, home: Path, exported: tuple[str, Path]) -> None:
    _, path = exported
    _rewrite(path, lambda d: d["setup"]["image"].update(digest="sha256:" + "0" * 64))
    before = run_dirs(home)
    result = labctl(lab, home, "reproduce", str(path))
    assert result.code == 1
    assert "the recorded image digest cannot be had" in result.stderr and "Nothing was started." in result.stderr
    assert run_dirs(home) == before


def test_hand_edited_export_is_detected(lab: Path, home: Path, exported: tuple[str, Path]) -> None:
    _, path = exported
    text = path.read_text()
    path.write_text(text.replace("- --tpot-ms\n", "- --tpot-MS\n", 1).replace('"--tpot-ms"', '"--tpot-MS"', 1))
    result = labctl(lab, home, "reproduce", str(path))
    assert result.code == 2
    assert "content hash mismatch" in result.stderr
    assert "--- recorded compose.yaml\n+++ re-rendered from setup\n" in result.stderr  # the diff is shown
    assert "Nothing was started." in result.stderr


def test_diff_of_different_setups_exits_1(lab: Path, home: Path, made: Made, exported: tuple[str, Path]) -> None:
    _, path = exported
    write_profile(lab, "other", free_port(), extra=["--tpot-ms", "9"], image=made.record["image"]["reference"])
    info = json.loads(up(lab, home, "other").stdout)
    result = labctl(lab, home, "diff", str(path), info["run_id"])
    assert result.code == 1
    assert "setups differ in: engine args, compose hash" in result.stdout
    as_json = labctl(lab, home, "diff", str(path), info["run_id"], "--json")
    assert as_json.code == 1
    verdict = json.loads(as_json.stdout)
    assert verdict["identical"] is False and verdict["differing"] == ["engine args", "compose hash"]
    args_row = next(row for row in verdict["rows"] if row["field"] == "engine args")
    assert args_row["same"] is False and "--tpot-ms 9" in args_row["b"]


def test_show_docker_run_starts_an_answering_engine(lab: Path, home: Path) -> None:
    port = free_port()
    write_profile(lab, "dr", port)
    info = json.loads(up(lab, home, "dr").stdout)
    command = labctl(lab, home, "show", info["run_id"], "--docker-run").stdout.strip()
    assert "@sha256:" in command and "--network host" in command
    labctl(lab, home, "down", info["run_id"])
    command = command.replace(f"--name labctl-{info['run_id']}", "--name labctl-docker-run-test")
    try:
        subprocess.run(["bash", "-c", command], check=True, capture_output=True)
        wait_healthy(f"http://127.0.0.1:{port}", 20)
        assert (
            httpx.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": "harness-test", "prompt": "a", "max_tokens": 2},
            ).status_code
            == 200
        )
    finally:
        subprocess.run(["docker", "rm", "-f", "labctl-docker-run-test"], capture_output=True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("labctl_export: 1\nsetup: {engine: harness\n", "YAML syntax error"),
        ("- not a mapping\n", "expected a YAML mapping"),
        (
            "labctl_export: 99\nsetup: {}\n",
            "export schema version 99 is newer than this labctl reads (1). Upgrade labctl.",
        ),
        ("hello: world\n", "not a labctl export"),
        (
            "labctl_export: 1\nsetup: {engine: harness}\nhost: {}\n",
            "missing setup.profile: the export is truncated or invalid.",
        ),
    ],
)
def test_bad_export_files(lab: Path, tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = run_labctl("reproduce", str(path), lab=lab, env={"LABCTL_HOME": str(tmp_path / "h")})
    assert result.code == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_truncated_export_and_unknown_engine(lab: Path, home: Path, exported: tuple[str, Path], tmp_path: Path) -> None:
    _, path = exported
    text = path.read_text()
    cut = tmp_path / "cut.yaml"
    cut.write_text(text[: len(text) // 3])
    result = labctl(lab, home, "reproduce", str(cut))
    assert result.code == 2 and "Traceback" not in result.stderr
    alien = tmp_path / "alien.yaml"
    alien.write_text(text.replace("  engine: harness\n", "  engine: mystery\n", 1))
    result = labctl(lab, home, "reproduce", str(alien))
    assert result.code == 2 and "unknown engine 'mystery'" in result.stderr
    newer = tmp_path / "newer.yaml"
    newer.write_text(text.replace("  schema_version: 1\n", "  schema_version: 7\n", 1))
    result = labctl(lab, home, "reproduce", str(newer))
    assert result.code == 2 and "record schema version 7 is newer" in result.stderr


def _resign(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Edit an export the way a determined colleague would: change the setup and recompute its content hash."""
    from labctl.run.records.export import content_hash, dump_export, load_export

    export = load_export(path)
    change(export.doc)
    export.doc["content_sha256"] = content_hash(export.doc)
    path.write_text(dump_export(export.doc))


@pytest.mark.parametrize(
    ("words", "flag"),
    [
        (["--host", "0.0.0.0"], "--host"),
        (["--host=0.0.0.0"], "--host"),
        (["--po", "1"], "--port"),
        (["--model", "other"], "--model"),
        (["--api-key-file", "/dev/null"], "--api-key-file"),
    ],
)
def test_an_export_whose_extra_args_reset_a_rendered_flag_is_refused_by_reproduce_and_diff(
    lab: Path, home: Path, exported: tuple[str, Path], words: list[str], flag: str
) -> None:
    run_id, path = exported
    _resign(path, lambda d: d["setup"]["resolved_profile"]["extra_args"].extend(words))
    before = run_dirs(home)
    for command in (["reproduce", str(path)], ["diff", str(path), run_id]):
        result = labctl(lab, home, *command)
        assert result.code == 2, result
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"Error: {path}:") and ": setup.resolved_profile.extra_args[6]: " in line
        assert f"sets {flag}, which labctl renders (engines/harness/engine.yaml:" in line
    assert run_dirs(home) == before


@pytest.mark.parametrize(("field", "value"), [("revision", "../../x"), ("revision", "main/../../x"), ("id", "../x")])
def test_an_export_whose_model_names_are_paths_is_refused(
    lab: Path, home: Path, exported: tuple[str, Path], field: str, value: str
) -> None:
    run_id, path = exported
    _resign(path, lambda d: d["setup"]["resolved_profile"]["model"].update({field: value}))
    for command in (["reproduce", str(path)], ["diff", str(path), run_id]):
        result = labctl(lab, home, *command)
        assert result.code == 2, result
        assert f": setup.resolved_profile.model.{field}: {value!r} is not allowed" in result.stderr


def run_dirs(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir()) if (home / "runs").is_dir() else []
