"""Shared-lab safety, tried the way a hostile colleague or an impatient operator would: a crafted export,
a forged identity, keys that cannot be read, `up` stopped by SIGTERM or SIGKILL at random moments, a
corrupt record. Each test fails on the code before these fixes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import containers_of, labctl, record, up, write_profile
from helpers.support import REPO

from labctl.catalog.lab import Lab
from labctl.compose.render import RenderOptions, render_compose
from labctl.errors import BadInput
from labctl.run.records.export import Export, recorded_profile

INJECTED = "smoke\nservices:\n  evil:\n    image: alpine\n    privileged: true\n    volumes: ['/:/host']\n#"


def test_a_crafted_profile_name_in_an_export_is_refused() -> None:
    setup = {"engine": "harness", "profile": INJECTED, "resolved_profile": {}}
    export = Export({"setup": setup, "host": {"port": 1, "bind": "127.0.0.1"}}, source="alice.yaml")
    with pytest.raises(BadInput, match="profile name"):
        recorded_profile(Lab(REPO), export)


def test_a_name_in_the_compose_comments_cannot_become_yaml() -> None:
    from labctl.catalog.profiles import load_profile

    profile = load_profile(Lab(REPO), "harness", "smoke")
    forged = type(profile)(engine=profile.engine, name=INJECTED, spec=profile.spec, source=None)
    doc = yaml.safe_load(render_compose(Lab(REPO), forged, RenderOptions(cache_dir="/c")))
    assert list(doc) == ["services"] and list(doc["services"]) == ["serve"]


@pytest.mark.docker
def test_the_crafted_export_attack_end_to_end(lab: Path, home: Path, tmp_path: Path) -> None:
    """The attack as reported: a real export whose profile name carries YAML, with its compose section and both
    hashes recomputed by labctl's own functions. `reproduce` refuses it with nothing started; `diff` does not
    call it identical to the original."""
    from labctl.catalog.profiles import load_profile
    from labctl.compose.canonical import canonical_compose, sha256_text
    from labctl.run.records.export import content_hash, dump_export, recorded_run_labels

    write_profile(lab, "rep", free_port())
    started = up(lab, home, "rep")
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    original = tmp_path / "original.yaml"
    assert labctl(lab, home, "export", run_id, "-o", str(original)).code == 0
    assert labctl(lab, home, "down", run_id).code == 0

    doc = yaml.safe_load(original.read_text())
    profile = load_profile(Lab(lab), "harness", "rep")
    forged = type(profile)(engine=profile.engine, name=INJECTED, spec=profile.spec, source=None)
    options = RenderOptions(cache_dir=doc["host"]["cache_dir"], labels=recorded_run_labels(doc["host"]["run_labels"]))
    doc["setup"]["profile"] = INJECTED
    doc["compose"] = render_compose(Lab(lab), forged, options)
    digest = doc["setup"]["image"]["digest"]
    doc["setup"]["compose_sha256"] = sha256_text(
        canonical_compose(Lab(lab), profile.engine, INJECTED, doc["setup"]["resolved_profile"], digest, False)
    )
    doc["content_sha256"] = content_hash(doc)
    crafted = tmp_path / "crafted.yaml"
    crafted.write_text(dump_export(doc))

    before = sorted(p.name for p in (home / "runs").iterdir())
    result = labctl(lab, home, "reproduce", str(crafted), "--port", str(free_port()))
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert "profile name" in result.stderr
    assert sorted(p.name for p in (home / "runs").iterdir()) == before  # nothing recorded, nothing started
    evil = subprocess.run(["docker", "ps", "-aq", "--filter", "ancestor=alpine"], capture_output=True, text=True)
    assert all(run_id not in name for name in evil.stdout.split())
    assert not containers_of(run_id)
    assert labctl(lab, home, "diff", str(original), str(crafted)).code != 0


@pytest.mark.docker
def test_identity_comes_from_the_os_not_the_environment(lab: Path, home: Path) -> None:
    port = free_port()
    write_profile(lab, "res", port)
    started = up(lab, home, "res", "--resident", "--owner", "alice")
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    forged = subprocess.run(
        [sys.executable, "-m", "labctl", "down", run_id],
        capture_output=True,
        text=True,
        cwd=lab,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home), "USER": "alice", "LOGNAME": "alice"},
    )
    assert forged.returncode == 2 and "alice's resident deployment" in forged.stderr
    rotated = labctl(lab, home, "rotate-key", run_id)
    assert rotated.code == 2 and "rotating the keys of it needs --force" in rotated.stderr
    assert labctl(lab, home, "down", run_id, "--force", "--reason", "test over").code == 0


@pytest.mark.docker
def test_an_engine_never_starts_without_its_key(lab: Path, home: Path, tmp_path: Path) -> None:
    """The key wrapper, run in the harness image with an empty secrets folder: it refuses, exit 78."""
    port = free_port()
    write_profile(lab, "res", port)
    result = labctl(lab, home, "render", "harness", "--profile", "res", "--stdout")
    assert result.code == 0, result.stderr
    from labctl.catalog.profiles import load_profile

    profile = load_profile(Lab(lab), "harness", "res")
    empty = tmp_path / "secrets"
    empty.mkdir()
    text = render_compose(Lab(lab), profile, RenderOptions(cache_dir="/c", secrets_dir=str(empty)))
    serve = yaml.safe_load(text)["services"]["serve"]
    entrypoint = [w.replace("$$", "$") for w in serve["entrypoint"]]
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-v",
            f"{empty}:/run/labctl-secrets:ro",
            "--entrypoint",
            entrypoint[0],
            serve["image"],
            *entrypoint[1:],
            *serve["command"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 78 and "refusing to serve without keys" in proc.stderr


def slow_profile(lab: Path) -> str:
    write_profile(lab, "slow", free_port(), extra=["--cold-start", "1.5"])
    return "slow"


def start_up(lab: Path, home: Path, profile: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "labctl", "up", "harness", "--profile", profile, "--allow-unpinned"],
        cwd=lab,
        env={**os.environ, "LABCTL_LAB": str(lab), "LABCTL_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_ids(home: Path) -> list[str]:
    """Runs with a record (a folder killed before its record was written holds only a compose file:
    nothing was started from it)."""
    runs = home / "runs"
    return sorted(p.parent.name for p in runs.glob("*/record.json")) if runs.is_dir() else []


@pytest.mark.docker
def test_sigterm_during_up_takes_it_down(lab: Path, home: Path) -> None:
    proc = start_up(lab, home, slow_profile(lab))
    deadline = time.monotonic() + 30
    while not any(containers_of(r) for r in run_ids(home)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143  # SIGTERM: 128 + 15
    (run_id,) = run_ids(home)
    assert record(home, run_id)["status"] == "aborted" and "SIGTERM" in record(home, run_id)["reason"]
    assert containers_of(run_id) == []


@pytest.mark.docker
def test_chaos_sigterm_and_sigkill_leave_nothing_unaccounted(lab: Path, home: Path) -> None:
    """`up` killed at 30 random moments; after one `labctl status`, no record says starting and no
    container is up that a running record does not account for."""
    rng = random.Random(20261203)
    profile = slow_profile(lab)
    for _ in range(30):
        proc = start_up(lab, home, profile)
        time.sleep(rng.uniform(0.0, 3.0))
        proc.send_signal(rng.choice([signal.SIGTERM, signal.SIGKILL]))
        proc.wait(timeout=60)
        status = labctl(lab, home, "status", "--json")
        assert status.code == 0, status.stderr
        for run_id in run_ids(home):
            state = record(home, run_id)["status"]
            assert state != "starting", run_id
            if state != "running":
                assert containers_of(run_id) == [], f"{run_id} is {state} but its containers remain"
        for run_id in [r for r in run_ids(home) if record(home, r)["status"] == "running"]:
            assert labctl(lab, home, "down", run_id).code == 0


@pytest.mark.process
def test_a_corrupt_record_is_skipped_not_fatal(lab: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    broken = home / "runs" / "20261203-000000-abcdef"
    broken.mkdir(parents=True)
    (broken / "record.json").write_text("{ this is not json")
    result = labctl(lab, home, "runs")
    assert result.code == 1 and "skipped run 20261203-000000-abcdef" in result.stderr  # said, gone past, exit 1
