"""`gc --cluster` when Slurm does not answer: no job can be proven ended, so every engine container of the
cluster's nodes is kept, said once each, and the command exits 1 (a node's Docker still answers: here it is this
machine's daemon, holding one container labelled as a job's)."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.lifecycle_helpers import IMAGE
from helpers.support import _missing, docker_available, run_labctl

from labctl.host.slurm.job_script import JOB_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.own_containers]

HOSTS = (
    "clusters:\n  lab-gc:\n    login: ssh://me@127.0.0.1:1\n    partition: gpu\n    time: 20\n"
    "    nodes:\n      n1: {docker: 'unix:///var/run/docker.sock'}\n"
)


@pytest.fixture
def job_container() -> Iterator[str]:
    if not docker_available():
        _missing("no Docker Engine answers")
    name = f"labctl-test-gc-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["docker", "create", "--name", name, "--label", f"{JOB_LABEL}=4242", IMAGE], capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    yield made.stdout.strip()
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def test_gc_keeps_every_container_whose_job_slurm_cannot_say_ended(tmp_path: Path, job_container: str) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    env = {"LABCTL_HOSTS": str(tmp_path / "hosts.yaml"), "LABCTL_HOME": str(tmp_path / "home")}
    for argv in (("gc", "--cluster", "lab-gc", "--yes"), ("gc", "--cluster", "lab-gc", "--yes", "--json")):
        done = run_labctl(*argv, env=env)
        assert done.code == 1 and "Traceback" not in done.stderr, done
        present = subprocess.run(["docker", "inspect", job_container], capture_output=True)
        assert present.returncode == 0, "a container whose job may still run was removed"
    said = run_labctl("gc", "--cluster", "lab-gc", env=env)
    assert f"kept container {job_container[:12]} on lab-gc/n1 (job 4242): Slurm did not answer" in said.stdout, said
    rows = json.loads(run_labctl("gc", "--cluster", "lab-gc", "--json", env=env).stdout)
    assert [(r["container"], r["removed"], bool(r["kept"])) for r in rows] == [(job_container, False, True)]
