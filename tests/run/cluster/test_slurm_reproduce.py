"""A run on the Slurm test cluster reproduced onto the plain SSH host labb, and a labb run reproduced onto
the cluster: the same setup by digest, each record naming where the original ran. The profile asks for CPUs
and memory, which become the job's --cpus-per-task and --mem."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.lifecycle_helpers import write_profile
from helpers.records import copy_lab
from helpers.support import REPO, Result, free_labb_port, labb_entry, remove_labb_runs, run_labctl

from labctl.catalog.clusters_file import load_clusters
from labctl.host.slurm import commands as slurm

pytestmark = [pytest.mark.slurm, pytest.mark.lab]  # labb: one test at a time
HOSTS = REPO / "build" / "slurm-lab" / "hosts.yaml"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    if not HOSTS.is_file():
        pytest.skip(f"SKIPPED LOUDLY: no Slurm test cluster ({HOSTS} is missing: run `make slurm-lab`)")
    folder = tmp_path / "home"
    folder.mkdir()
    yield folder
    remove_labb_runs(folder)


def test_reproduce_a_cluster_run_on_labb_and_a_labb_run_on_the_cluster(tmp_path: Path, home: Path) -> None:
    cluster = next(iter(load_clusters(REPO).values()))
    lab = copy_lab(tmp_path)
    (lab / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"labb": labb_entry()}}))
    write_profile(lab, "res", free_labb_port())
    profile = lab / "engines" / "harness" / "profiles" / "res.yaml"
    profile.write_text(profile.read_text() + "resources: {cpus: 2, memory_gib: 1}\n")
    env = {"LABCTL_HOME": str(home), "LABCTL_HOSTS": str(HOSTS), "LABCTL_LOCK_FILE": str(home / "gpus.lock")}

    def labctl(*args: str) -> Result:
        return run_labctl(*args, lab=lab, env=env, timeout=240)

    def record(run_id: str) -> dict[str, object]:
        data: dict[str, object] = json.loads((home / "runs" / run_id / "record.json").read_text())
        return data

    up = labctl("up", "harness", "--profile", "res", "--allow-unpinned", "--host", cluster.name, "--json")
    assert up.code == 0, up.stderr
    on_cluster = json.loads(up.stdout.strip().splitlines()[-1])
    job = on_cluster["slurm"]
    assert (job["cpus"], job["mem_mib"]) == (2, 1024)
    shown = slurm.run(cluster, ["scontrol", "show", "job", job["job_id"]])
    assert "NumCPUs=2 " in shown and "mem=1G" in shown, shown
    original = record(on_cluster["run_id"])
    assert str((original["image"] or {})["digest"]).startswith("sha256:")  # type: ignore[index]

    moved = labctl("reproduce", on_cluster["run_id"], "--host", "labb", "--port", str(free_labb_port()), "--json")
    assert moved.code == 0, moved.stderr
    on_labb = record(json.loads(moved.stdout.strip().splitlines()[-1])["run_id"])
    facts = on_labb["reproduction"]
    assert on_labb["host_entry"] == "labb" and on_labb["slurm"] is None and isinstance(facts, dict)
    assert facts["original_host_entry"] == original["host_entry"] and facts["compose_sha256_matches"], facts
    assert labctl("down", on_cluster["run_id"]).code == 0

    back = labctl("reproduce", str(on_labb["run_id"]), "--host", cluster.name, "--port", str(free_labb_port()))
    assert back.code == 0, back.stderr
    run_id = back.stdout.split(" as run ", 1)[1].split(":")[0]
    again = record(run_id)
    assert again["reproduced_from"] == on_labb["run_id"] and isinstance(again["slurm"], dict)
    assert again["reproduction"]["original_host_entry"] == "labb"  # type: ignore[index]
    assert again["reproduction"]["compose_sha256_matches"]  # type: ignore[index]
    assert again["image"]["digest"] == original["image"]["digest"]  # type: ignore[index]
    for run in (run_id, str(on_labb["run_id"])):
        assert labctl("down", run).code == 0
