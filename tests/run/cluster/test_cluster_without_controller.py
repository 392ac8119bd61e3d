"""A cluster whose controller cannot be reached (its login host refuses SSH): the global --host names it like
a command's own --host, and a submission that failed is recorded `failed` with Slurm's error, never left
`starting` or `submitted` forever."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from helpers.support import run_labctl

pytestmark = pytest.mark.process

HOSTS = (
    "clusters:\n  lab-a:\n    login: ssh://me@127.0.0.1:1\n    partition: gpu\n    time: 20\n"
    "    nodes:\n      n1: {docker: ssh://me@127.0.0.1:1, socket: /var/run/docker.sock}\n"
)


def test_a_failed_submission_is_recorded_failed_and_the_global_host_names_the_cluster(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    env = {"LABCTL_HOSTS": str(tmp_path / "hosts.yaml"), "LABCTL_HOME": str(tmp_path / "home")}
    up = run_labctl("--host", "lab-a", "up", "harness", "--profile", "smoke", "--allow-unpinned", env=env)
    assert up.code == 1 and "Traceback" not in up.stderr and "sbatch" in up.stderr, up.stderr
    [run] = [p.name for p in (tmp_path / "home" / "runs").iterdir()]
    record = json.loads((tmp_path / "home" / "runs" / run / "record.json").read_text())
    assert record["status"] == "failed" and record["reason"].startswith("submission failed: cluster lab-a: sbatch")
    assert record["slurm"]["state"] == "NOT_SUBMITTED"
    shown = run_labctl("--host", "lab-a", "status", env=env)  # the global option, as `status --host lab-a`
    assert "unknown host" not in shown.stderr and "not_submitted: sbatch failed" in shown.stdout, shown
    assert shown.stdout == run_labctl("status", "--host", "lab-a", env=env).stdout
    everything = run_labctl("status", "--json", env=env)
    assert run not in everything.stdout  # an ended submission is no live run


def test_a_cluster_that_does_not_answer_is_said_at_once_and_no_job_is_recorded_ended(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    env = {"LABCTL_HOSTS": str(tmp_path / "hosts.yaml"), "LABCTL_HOME": str(tmp_path / "home")}
    run_labctl("--host", "lab-a", "up", "harness", "--profile", "smoke", "--allow-unpinned", env=env)
    [folder] = list((tmp_path / "home" / "runs").iterdir())
    record = json.loads((folder / "record.json").read_text())  # as if its job had been seen running
    record["status"], record["reason"], record["stopped_at"] = "running", None, None
    record["slurm"].update(job_id="42", state="RUNNING", reason="", node="n1", state_source="squeue")
    (folder / "record.json").write_text(json.dumps(record))
    for argv in (("status",), ("status", "--host", "lab-a"), ("--host", "lab-a", "status", "--json")):
        started = time.monotonic()
        shown = run_labctl(*argv, env=env)
        assert time.monotonic() - started < 20, "one unanswered question per cluster, not one per command"
        assert shown.code == 1 and "cluster lab-a: unreachable, every job shown as last recorded" in shown.stderr, shown
        after = json.loads((folder / "record.json").read_text())
        assert after["status"] == "running" and after["slurm"]["state"] == "RUNNING", after["slurm"]


@pytest.mark.parametrize(
    "flags",
    [["--owner", "bob"], ["--replace"], ["--cache-dir", "/tmp"], ["--allow-unfit", "--allow-uncontracted"]],
)
def test_an_up_option_a_cluster_does_not_take_is_refused_not_dropped(tmp_path: Path, flags: list[str]) -> None:
    (tmp_path / "hosts.yaml").write_text(HOSTS)
    env = {"LABCTL_HOSTS": str(tmp_path / "hosts.yaml"), "LABCTL_HOME": str(tmp_path / "home")}
    up = run_labctl("up", "harness", "--profile", "smoke", "--allow-unpinned", "--host", "lab-a", *flags, env=env)
    assert up.code == 2 and len(up.stderr.strip().splitlines()) == 1, up.stderr
    assert "on a Slurm cluster" in up.stderr and flags[0] in up.stderr and "not supported yet" in up.stderr
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())
