"""gc takes no file's word for what this home put on the host: not a run record's (a record says what a run
used, and is easily edited), not even its own ledger's when the image is in use. Hostile cases on a real
Docker Engine: edited records naming the shared base image, an image that was there before `up`, a stopped
container's image, another home's pull, forged ledger lines, and unreadable records under `--yes`."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import labctl, up, write_profile
from helpers.registry_images import build_own_image, remove_own_image
from helpers.support import REPO

from labctl.run.records.acquired import Acquisition, Action, Kind, Ledger
from labctl.run.records.record import ImageInfo, Record
from labctl.run.records.store import Runs

pytestmark = pytest.mark.docker

BASE = "labctl/base:bookworm"  # the shared base image `make docker-lab` makes: never any home's to remove


@pytest.fixture(autouse=True)
def own_homes_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABCTL_HOMES_FILE", str(tmp_path / "homes"))


@pytest.fixture
def image(tmp_path: Path, docker_engine: None) -> Iterator[tuple[str, str]]:
    """This test's own image, in the registry and (like most images on a shared host) on the daemon already."""
    reference, image_id = build_own_image(tmp_path / "image", 1024, name="gcl")
    yield reference, image_id
    remove_own_image(reference, image_id)


def drop_local(reference: str) -> None:
    """The next `up` must pull it."""
    subprocess.run(["docker", "rmi", reference], check=True, capture_output=True)


def present(reference: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", reference], capture_output=True).returncode == 0


def inspect(reference: str, template: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "-f", template, reference], capture_output=True, text=True, check=True
    ).stdout.strip()


def daemon_id() -> str:
    return subprocess.run(
        ["docker", "info", "-f", "{{.ID}}"], capture_output=True, text=True, check=True
    ).stdout.strip()


def gc_items(lab: Path, home: Path, *args: str, code: int = 0) -> list[dict]:
    result = labctl(lab, home, "gc", "--json", *args)
    assert result.code == code, result.stderr
    return list(json.loads(result.stdout)["items"])


def up_down(lab: Path, home: Path, profile: str) -> str:
    started = up(lab, home, profile)
    assert started.code == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run_id"])
    assert labctl(lab, home, "down", run_id).code == 0
    return run_id


def ledger_actions(home: Path) -> list[tuple[str, str]]:
    entries, problems = Ledger(home).read()
    assert problems == []
    return [(e.action.value, e.image_id) for e in entries if e.kind is Kind.IMAGE]


def test_records_edited_to_name_the_base_image_never_make_it_a_candidate(lab: Path, home: Path) -> None:
    """Before the ledger, one edited record per name of the base image made gc offer it."""
    if not present(BASE):
        pytest.skip(f"{BASE} is not on this daemon (make docker-lab)")
    base_id = inspect(BASE, "{{.Id}}")
    names = json.loads(inspect(BASE, "{{json .RepoTags}}")) + json.loads(inspect(BASE, "{{json .RepoDigests}}"))
    runs = Runs(home)
    for n, name in enumerate(names):
        runs.save(
            Record(
                run_id=f"20261204-12000{n}-abcdef",
                status="stopped",
                engine="harness",
                profile="edited",
                served_model_name="m",
                image=ImageInfo(reference=name, image_id=base_id, pulled=True),
            )
        )
    assert [i for i in gc_items(lab, home) if i["where"] == base_id] == []  # listed only: never risk the real one


def test_an_image_that_was_there_before_up_is_found_not_pulled_and_never_offered(
    lab: Path, home: Path, image: tuple[str, str]
) -> None:
    reference, image_id = image
    write_profile(lab, "found", free_port(), image=reference)
    run_id = up_down(lab, home, "found")
    (lab / "engines" / "harness" / "profiles" / "found.yaml").unlink()
    assert ledger_actions(home) == [("found", image_id)]
    assert gc_items(lab, home, "--yes") == [] and present(image_id)

    drop_local(reference)  # pulled by the next run: this home's from then on
    write_profile(lab, "found", free_port(), image=reference)
    second = up_down(lab, home, "found")
    (lab / "engines" / "harness" / "profiles" / "found.yaml").unlink()
    assert ledger_actions(home) == [("found", image_id), ("pulled", image_id)]
    assert [(i["where"], i["last_run"]) for i in gc_items(lab, home)] == [(image_id, second)]
    assert run_id < second


def test_an_image_a_stopped_container_uses_is_kept(lab: Path, home: Path, image: tuple[str, str]) -> None:
    reference, image_id = image
    drop_local(reference)
    write_profile(lab, "stopped", free_port(), image=reference)
    up_down(lab, home, "stopped")
    (lab / "engines" / "harness" / "profiles" / "stopped.yaml").unlink()
    name = f"gctest-{secrets.token_hex(4)}"
    subprocess.run(["docker", "create", "--name", name, image_id, "true"], check=True, capture_output=True)
    try:
        assert gc_items(lab, home, "--yes") == [] and present(image_id)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    assert [i["where"] for i in gc_items(lab, home)] == [image_id]


def test_an_image_built_on_a_candidate_keeps_it(lab: Path, home: Path, image: tuple[str, str], tmp_path: Path) -> None:
    reference, image_id = image
    drop_local(reference)
    write_profile(lab, "parent", free_port(), image=reference)
    up_down(lab, home, "parent")
    (lab / "engines" / "harness" / "profiles" / "parent.yaml").unlink()
    child = f"127.0.0.1:5000/hc/gcl-child-{secrets.token_hex(4)}:v1"
    (tmp_path / "child").mkdir()
    (tmp_path / "child" / "Dockerfile").write_text(f"FROM {reference}\nLABEL hc.child=1\n")
    subprocess.run(
        ["docker", "build", "-q", "-t", child, str(tmp_path / "child")],
        check=True,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    try:
        assert gc_items(lab, home, "--yes") == [] and present(image_id)
    finally:
        subprocess.run(["docker", "rmi", child], capture_output=True)
    assert [i["where"] for i in gc_items(lab, home)] == [image_id]


def test_an_image_another_home_pulled_is_never_offered_here(
    lab: Path, home: Path, image: tuple[str, str], tmp_path: Path
) -> None:
    """The other home pulled it; this home's run found it. Before the ledger, this home's record made it ours."""
    reference, image_id = image
    drop_local(reference)
    other = tmp_path / "other-home"
    other.mkdir()
    write_profile(lab, "shared", free_port(), image=reference)
    up_down(lab, other, "shared")
    up_down(lab, home, "shared")
    (lab / "engines" / "harness" / "profiles" / "shared.yaml").unlink()
    assert [a for a, _ in ledger_actions(other)] == ["pulled"] and [a for a, _ in ledger_actions(home)] == ["found"]
    assert gc_items(lab, home, "--yes") == [] and present(image_id)
    assert gc_items(lab, other, "--yes") == [] and present(image_id)  # this home's record still uses it
    shutil.rmtree(home / "runs")
    assert gc_items(lab, home) == []  # the ledger's `found` is never an acquisition
    assert [i["where"] for i in gc_items(lab, other)] == [image_id]


def test_forged_ledger_lines_remove_nothing_in_use_or_named_by_others(
    lab: Path, home: Path, image: tuple[str, str], tmp_path: Path
) -> None:
    reference, image_id = image
    drop_local(reference)
    other = tmp_path / "other-home"
    other.mkdir()
    write_profile(lab, "theirs", free_port(), image=reference)
    up_down(lab, other, "theirs")  # their pull
    (lab / "engines" / "harness" / "profiles" / "theirs.yaml").unlink()
    shutil.rmtree(other / "runs")  # no record of theirs protects it: only a container and a second name do
    daemon = daemon_id()
    ledger = Ledger(home)

    def forge(target: str, names: list[str]) -> None:
        ledger.append(Acquisition(Kind.IMAGE, Action.PULLED, "local", daemon, target, tuple(names), name=names[0]))

    name = f"gctest-{secrets.token_hex(4)}"
    subprocess.run(["docker", "create", "--name", name, image_id, "true"], check=True, capture_output=True)
    forge(image_id, [reference])
    try:
        assert gc_items(lab, home, "--yes") == [] and present(image_id)  # a stopped container uses it
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    second = reference.rsplit(":", 1)[0] + ":someone-elses"
    subprocess.run(["docker", "tag", image_id, second], check=True, capture_output=True)
    try:
        assert gc_items(lab, home, "--yes") == [] and present(second)  # it carries a name this home never gave it
    finally:
        subprocess.run(["docker", "rmi", second], capture_output=True)


def test_a_forged_ledger_line_naming_the_base_image_does_not_offer_it(lab: Path, home: Path) -> None:
    """The harness image is built on it (make docker-lab): an image another one is built on is never offered."""
    if not present(BASE):
        pytest.skip(f"{BASE} is not on this daemon (make docker-lab)")
    base_id = inspect(BASE, "{{.Id}}")
    names = json.loads(inspect(BASE, "{{json .RepoTags}}")) + json.loads(inspect(BASE, "{{json .RepoDigests}}"))
    all_ids = subprocess.run(["docker", "image", "ls", "-aq", "--no-trunc"], capture_output=True, text=True).stdout
    parents = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Parent}}", *set(all_ids.split())], capture_output=True, text=True
    ).stdout.split()
    if base_id not in parents:
        pytest.skip(f"no image on this daemon is built on {BASE} (the harness image was pulled, not built)")
    entry = Acquisition(Kind.IMAGE, Action.PULLED, "local", daemon_id(), base_id, tuple(names), name=names[0])
    Ledger(home).append(entry)
    assert [i for i in gc_items(lab, home) if i["where"] == base_id] == []  # listed only: never risk the real one


def test_gc_yes_with_an_unreadable_record_removes_nothing(lab: Path, home: Path, image: tuple[str, str]) -> None:
    reference, image_id = image
    drop_local(reference)
    write_profile(lab, "unreadable", free_port(), image=reference)
    run_id = up_down(lab, home, "unreadable")
    (lab / "engines" / "harness" / "profiles" / "unreadable.yaml").unlink()
    runs = Runs(home)
    record = runs.load(run_id)
    broken = dataclasses.replace(record, run_id="20261204-000000-badbad")
    path = runs.save(broken)
    path.write_text(path.read_text()[:200])  # truncated: it may name any image

    listed = labctl(lab, home, "gc")
    assert listed.code == 1
    assert f"skipped run 20261204-000000-badbad: run record {path}" in listed.stderr
    assert f"image  {reference}" in listed.stdout

    refused = labctl(lab, home, "gc", "--yes")
    assert refused.code == 1 and present(image_id)
    assert "removed nothing: 1 run record(s) of this home cannot be read" in refused.stderr
    assert "nothing removed (a run record cannot be read)" in refused.stdout
    assert [i["removed"] for i in gc_items(lab, home, "--yes", code=1)] == [False] and present(image_id)

    shutil.rmtree(path.parent)  # moved away: gc goes ahead
    assert [i["removed"] for i in gc_items(lab, home, "--yes")] == [True] and not present(image_id)


def test_an_unreadable_ledger_line_is_reported_and_the_rest_collected(
    lab: Path, home: Path, image: tuple[str, str]
) -> None:
    reference, image_id = image
    drop_local(reference)
    write_profile(lab, "ledger", free_port(), image=reference)
    up_down(lab, home, "ledger")
    (lab / "engines" / "harness" / "profiles" / "ledger.yaml").unlink()
    with Ledger(home).path.open("a") as handle:
        handle.write('{"kind": "image", "action": "pulled", "image_id": "sha256:nope"}\n')
    result = labctl(lab, home, "gc", "--yes")
    assert result.code == 1
    assert f"skipped acquisitions ledger {Ledger(home).path} line 2: not readable" in result.stderr
    assert "removed 1 of 1 item(s)" in result.stdout and not present(image_id)


def test_a_harness_build_that_makes_an_image_already_here_is_found_not_built(
    lab: Path, home: Path, tmp_path: Path
) -> None:
    """`up` builds a missing unpinned harness image; the legacy builder's cache can hand back the very image
    another name already has (the shared harness image): that is not this home's, and gc never offers it."""
    if not present(BASE):
        pytest.skip(f"{BASE} is not on this daemon (make docker-lab)")
    shutil.copyfile(REPO / "engines" / "harness" / "Dockerfile", lab / "engines" / "harness" / "Dockerfile")
    reference = f"127.0.0.1:{free_port()}/hc/gcl-build-{secrets.token_hex(4)}:v1"  # no registry there: not pushed
    write_profile(lab, "built", free_port(), image=reference)
    before = set(
        subprocess.run(["docker", "image", "ls", "-aq", "--no-trunc"], capture_output=True, text=True).stdout.split()
    )
    try:
        run_id = up_down(lab, home, "built")
        image_id = inspect(reference, "{{.Id}}")
        assert Runs(home).load(run_id).image.built  # up built it
        assert ledger_actions(home) == [("found" if image_id in before else "built", image_id)]
        (lab / "engines" / "harness" / "profiles" / "built.yaml").unlink()
        offered = [i["where"] for i in gc_items(lab, home)]
        assert offered == ([] if image_id in before else [image_id])
    finally:
        subprocess.run(["docker", "rmi", reference], capture_output=True)  # a name only: the image may be shared
