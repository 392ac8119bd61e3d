"""The kinds of backend are found by folder: Docker hosts take every name and record no other kind claims, a
Slurm cluster's name and its records are Slurm's, and a folder added beside them (here one that lives only
in the tests) is a kind too, with no other change. A cluster record written before the backends step loads
into the one record, its job in the `slurm` part."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import labctl.run.backends as backends
from labctl.run.backends.docker.docker_host import DockerHost
from labctl.run.backends.kinds import backend_for, backend_of_run, claimed, claimed_run, kinds
from labctl.run.backends.slurm.job_record import job_of, run_status
from labctl.run.backends.slurm.slurm_cluster import SlurmCluster, status_row
from labctl.run.records.store import Runs

HERE = Path(__file__).parent
EXTRA = HERE / "extra"  # a folder of kinds that only the tests know
OLD_RECORD = HERE / "data" / "cluster-record-2026-12-06.json"  # as labctl wrote it before the backends step


@pytest.fixture()
def lab_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hosts = {
        "hosts": {"box": {"docker": "ssh://me@box"}},
        "clusters": {"lab-a": {"slurm_conf": "/etc/slurm/slurm.conf", "nodes": {"n1": {"docker": "ssh://me@n1"}}}},
    }
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    monkeypatch.setenv("LABCTL_HOSTS", str(tmp_path / "no-user-hosts.yaml"))
    return tmp_path


@pytest.fixture()
def extra_kinds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(backends, "__path__", [*backends.__path__, str(EXTRA)])
    yield
    sys.modules.pop(f"{backends.__name__}.local_process", None)


def test_docker_and_slurm_are_found_by_folder() -> None:
    assert [kind.name for kind in kinds()] == ["slurm", "docker"]  # the fallback last


def test_a_name_is_a_clusters_or_a_docker_hosts(lab_root: Path) -> None:
    cluster = backend_for(lab_root, "lab-a")
    assert isinstance(cluster, SlurmCluster) and cluster.name == "lab-a" and cluster.queues
    host = backend_for(lab_root, "box")
    assert isinstance(host, DockerHost) and host.host.docker == "ssh://me@box" and not host.queues
    assert claimed(lab_root, "box") is None and claimed(lab_root, None) is None


def test_a_folder_beside_them_is_a_third_kind(lab_root: Path, extra_kinds: None) -> None:
    assert [kind.name for kind in kinds()] == ["local_process", "slurm", "docker"]
    found = backend_for(lab_root, "process-1")
    assert type(found).__module__ == "labctl.run.backends.local_process" and found.name == "process-1"
    assert isinstance(backend_for(lab_root, "lab-a"), SlurmCluster)  # the others are as they were


def test_a_cluster_record_written_before_loads_into_the_one_record(tmp_path: Path, lab_root: Path) -> None:
    data = json.loads(OLD_RECORD.read_text())
    run_id = data["run_id"]
    runs = Runs(tmp_path / "home")
    runs.make_dir(run_id)
    shutil.copy(OLD_RECORD, runs.record_path(run_id))
    record = runs.load(run_id)
    job = job_of(record)
    assert (job.cluster, job.job_id, job.node, job.gpu_indexes) == ("lcslurm", "5", "n1", (2, 3))
    assert job.ended and run_status(record) == "stopped" and record.status == "stopped"
    assert record.to_json() == data  # read and written back unchanged: the shape on disk is the same
    assert status_row(record) == (run_id, "harness/smoke", "5", "cancelled", "n1", "2,3", "0:0", "-")
    data["slurm"]["cluster"] = "lab-a"
    runs.record_path(run_id).write_text(json.dumps(data))
    assert isinstance(backend_of_run(lab_root, runs.load(run_id)), SlurmCluster)
    on_a_host = runs.load(run_id).changed(slurm=None, host_entry="box")
    assert claimed_run(lab_root, on_a_host) is None and isinstance(backend_of_run(lab_root, on_a_host), DockerHost)
