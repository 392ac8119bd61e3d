"""labctl gc on a real Docker Engine: it lists (and with --yes removes) only what this home itself pulled,
built or fetched (its ledger, .state/acquired.jsonl) and nothing needs any more, says the bytes, and never
touches what a live run uses or a profile names.

Images come from real `up`/`down` runs of the harness engine on an image of this test's own, pushed to the
local registry and removed locally so that `up` pulls it. GPU engines cannot start here, so the model-cache
and engine-folder case reads records and ledger lines of stopped (and one running) vLLM/TensorRT-LLM runs
written into the test's home, over a real Hugging Face cache layout on disk."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.harness_proc import free_port
from helpers.lifecycle_helpers import IMAGE, labctl, up, write_profile
from helpers.registry_images import build_own_image, remove_own_image

from labctl.run.records.acquired import Acquisition, Action, Kind, Ledger
from labctl.run.records.record import ComposeInfo, EngineBuild, Record, Timings
from labctl.run.records.store import Runs

pytestmark = pytest.mark.docker

PAYLOAD = 4 * 2**20


@pytest.fixture(autouse=True)
def own_homes_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's list of homes, for this test alone (other tests' homes come and go on this machine)."""
    monkeypatch.setenv("LABCTL_HOMES_FILE", str(tmp_path / "homes"))


@pytest.fixture
def own_image(tmp_path: Path, docker_engine: None) -> Iterator[tuple[str, str]]:
    """An image of this test's own, in the registry only: the `up` that needs it pulls it."""
    reference, image_id = build_own_image(tmp_path / "image", PAYLOAD, name="gc")
    subprocess.run(["docker", "rmi", reference], check=True, capture_output=True)
    yield reference, image_id
    remove_own_image(reference, image_id)


def present(reference: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", reference], capture_output=True).returncode == 0


def gc_json(lab: Path, home: Path, *args: str) -> dict:
    result = labctl(lab, home, "gc", "--json", *args)
    assert result.code == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_gc_removes_an_image_only_once_no_run_or_profile_needs_it(
    lab: Path, home: Path, own_image: tuple[str, str]
) -> None:
    reference, image_id = own_image
    base = subprocess.run(  # by id: other tests on this daemon untag and re-tag harness:dev at will
        ["docker", "image", "inspect", "-f", "{{.Id}}", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    write_profile(lab, "gc", free_port(), image=reference)
    started = up(lab, home, "gc")
    assert started.code == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    profile = lab / "engines" / "harness" / "profiles" / "gc.yaml"
    profile.unlink()  # no profile names the image now, but the run is still up
    assert gc_json(lab, home)["items"] == []
    assert labctl(lab, home, "down", run_id).code == 0

    listed = labctl(lab, home, "gc")
    assert listed.code == 0, listed.stderr
    assert f"image  {reference}" in listed.stdout and run_id in listed.stdout
    assert "1 item(s), 4.0 MiB: nothing removed; remove them with labctl gc --yes" in listed.stdout
    assert present(image_id)
    items = gc_json(lab, home)["items"]
    assert [(i["kind"], i["where"], i["last_run"]) for i in items] == [("image", image_id, run_id)]
    assert PAYLOAD <= items[0]["bytes"] < PAYLOAD + 2**20  # its own layer; the harness layers stay shared

    removed = labctl(lab, home, "gc", "--yes")
    assert removed.code == 0, removed.stderr
    assert f"removed 1 of 1 item(s): 4.0 MiB ({items[0]['bytes']} bytes) freed" in removed.stdout
    assert not present(image_id) and present(base)  # the harness image it was built on stays
    assert gc_json(lab, home)["items"] == []


def test_a_run_from_another_home_keeps_the_image(
    lab: Path, home: Path, tmp_path: Path, own_image: tuple[str, str]
) -> None:
    reference, image_id = own_image
    write_profile(lab, "gc", free_port(), image=reference)
    mine = up(lab, home, "gc")
    assert mine.code == 0, mine.stderr
    assert labctl(lab, home, "down", json.loads(mine.stdout)["run_id"]).code == 0
    other = tmp_path / "other-home"
    other.mkdir()
    theirs = up(lab, other, "gc")  # someone else's run of the same image, still up
    assert theirs.code == 0, theirs.stderr
    try:
        (lab / "engines" / "harness" / "profiles" / "gc.yaml").unlink()
        assert gc_json(lab, home, "--yes")["items"] == [] and present(image_id)
    finally:
        assert labctl(lab, other, "down", json.loads(theirs.stdout)["run_id"]).code == 0
    assert gc_json(lab, home, "--yes")["items"] == [] and present(image_id)  # their record still uses it
    shutil.rmtree(other / "runs")
    assert [i["where"] for i in gc_json(lab, home)["items"]] == [image_id]


def test_a_profile_naming_the_image_keeps_it(lab: Path, home: Path, own_image: tuple[str, str]) -> None:
    reference, image_id = own_image
    write_profile(lab, "gc", free_port(), image=reference)
    started = up(lab, home, "gc")
    assert started.code == 0, started.stderr
    assert labctl(lab, home, "down", json.loads(started.stdout)["run_id"]).code == 0
    assert gc_json(lab, home, "--yes")["items"] == [] and present(image_id)


def hf_cache(cache: Path) -> tuple[Path, Path, Path]:
    """models--hc-org--tiny with two snapshots: `old` has a blob of its own and one shared with `new`."""
    model = cache / "hub" / "models--hc-org--tiny"
    old, new = "a" * 40, "b" * 40
    (model / "blobs").mkdir(parents=True)
    (model / "blobs" / "shared").write_bytes(b"s" * 1000)
    (model / "blobs" / "weights-old").write_bytes(b"w" * 5000)
    for commit, weights in ((old, "weights-old"), (new, None)):
        snap = model / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / "config.json").symlink_to("../../blobs/shared")
        if weights:
            (snap / "model.safetensors").symlink_to(f"../../blobs/{weights}")
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(old)
    return model, model / "snapshots" / old, model / "snapshots" / new


def past_run(runs: Runs, run_id: str, status: str, cache: Path, revision: str, engine: Path | None) -> None:
    runs.save(
        Record(
            run_id=run_id,
            status=status,
            engine="trtllm",
            profile="tiny",
            served_model_name="tiny",
            resolved_profile={"model": {"id": "hc-org/tiny", "revision": revision}},
            compose=ComposeInfo(
                project=f"labctl-{run_id}",
                render_options={"cache_dir": str(cache), "engine_store": str(engine.parent.parent) if engine else None},
            ),
            timings=Timings(engine_build_s=EngineBuild(False, str(engine), 1.0) if engine else None),
        )
    )


def fetched(snapshot: Path, run_id: str | None = None, host: str = "local") -> Acquisition:
    return Acquisition(
        Kind.MODEL, Action.FETCHED, host, folder=str(snapshot), name=f"hc-org/tiny@{snapshot.name}", run_id=run_id
    )


def test_gc_model_snapshots_and_engine_folders(lab: Path, home: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hf"
    model, old, new = hf_cache(cache)
    engine = tmp_path / "engines" / "0123456789abcdef" / "tiny"
    engine.mkdir(parents=True)
    (engine / "config.json").write_text("{}")
    (engine / "rank0.engine").write_bytes(b"e" * 7000)
    runs = Runs(home)
    past_run(runs, "20261203-120000-aaaaaa", "stopped", cache, "main", engine)  # main -> the old snapshot
    past_run(runs, "20261203-120100-bbbbbb", "running", cache, "b" * 40, None)  # a live run uses the new one

    precious = tmp_path / "precious" / "fedcba9876543210" / "tiny"  # a record naming folders labctl never made
    precious.mkdir(parents=True)
    runs.save(
        Record(
            run_id="20261203-115900-cccccc",
            status="stopped",
            engine="trtllm",
            profile="tiny",
            served_model_name="tiny",
            resolved_profile={"model": {"id": "hc-org/tiny", "revision": "../../../../precious"}},
            compose=ComposeInfo(render_options={"cache_dir": str(cache), "engine_store": str(engine.parent.parent)}),
            timings=Timings(engine_build_s=EngineBuild(False, str(precious), 1.0)),
        )
    )

    assert gc_json(lab, home)["items"] == []  # records alone: nothing this home's ledger says it made
    ledger = Ledger(home)
    for snapshot in (old, new):
        ledger.append(fetched(snapshot, "20261203-120000-aaaaaa"))
    ledger.append(Acquisition(Kind.ENGINE, Action.BUILT, "local", folder=str(engine.parent), name=engine.parent.name))
    ledger.append(Acquisition(Kind.ENGINE, Action.BUILT, "local", folder=str(precious.parent), name="forged"))
    listing = gc_json(lab, home)
    assert {(i["kind"], i["name"], i["where"], i["bytes"]) for i in listing["items"]} == {
        ("model", f"hc-org/tiny@{'a' * 40}", str(old), 5000),
        ("engine", "0123456789abcdef", str(engine.parent), 7002),
    }
    assert old.is_dir() and engine.is_dir()

    done = gc_json(lab, home, "--yes")
    assert done["bytes_freed"] == 12002 and all(i["removed"] for i in done["items"])
    assert not old.exists() and not (model / "blobs" / "weights-old").exists() and not engine.parent.exists()
    assert new.is_dir() and (new / "config.json").read_bytes() == b"s" * 1000  # the shared blob stays
    assert not (model / "refs" / "main").exists()  # it named the removed snapshot
    assert gc_json(lab, home)["items"] == []
    assert precious.is_dir()


def test_gc_here_leaves_what_runs_on_another_host_used(lab: Path, home: Path, tmp_path: Path) -> None:
    """A stopped run on a remote host named a cache path that also exists here: not this machine's to collect."""
    cache = tmp_path / "hf"
    _model, old, _new = hf_cache(cache)
    runs = Runs(home)
    past_run(runs, "20261203-120000-dddddd", "stopped", cache, "main", None)
    record = runs.load("20261203-120000-dddddd")
    runs.save(dataclasses.replace(record, host_entry="labb", docker_endpoint="ssh://labctl-remote@10.201.0.2"))
    Ledger(home).append(fetched(old, record.run_id, host="labb"))
    assert gc_json(lab, home)["items"] == []
    assert old.is_dir()
    runs.save(dataclasses.replace(record, host_entry="local"))  # the record alone makes nothing this machine's
    assert gc_json(lab, home)["items"] == []
    Ledger(home).append(fetched(old, record.run_id))  # fetched here: collected
    assert [i["where"] for i in gc_json(lab, home)["items"]] == [str(old)]
