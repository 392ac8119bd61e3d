"""Slurm's machine-readable output parsed, the job's sbatch options and script, and clusters in the hosts
file: pure, no Slurm needed (the slurm tier runs the same against the real daemons)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from labctl.catalog.clusters_file import ClusterEntry, load_clusters
from labctl.catalog.hosts_file import HostEntry
from labctl.errors import BadInput
from labctl.host.slurm.job_script import BatchJob, cluster_compose, job_script, refuse_end_marker, sbatch_options
from labctl.host.slurm.parse import (
    expand_indexes,
    granted_gpus,
    parse_job_id,
    parse_nodes,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
)

NODES = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1 Gres=gpu:4 GresDrain=N/A GresUsed=gpu:2 State=MIXED Partitions=gpu\n"
    "NodeName=n2 Gres=gpu:h100:2 GresUsed=gpu:h100:0(IDX:N/A) State=IDLE+DRAIN Partitions=gpu,debug\n"
)


def test_nodes_give_gpus_and_free_gpus() -> None:
    n1, n2 = parse_nodes(NODES)
    assert (n1.name, n1.gpus, n1.gpus_used, n1.gpus_free) == ("n1", 4, 2, 2)
    assert (n2.gpus, n2.partitions, n2.unavailable, n2.gpus_free) == (2, ("gpu", "debug"), True, 0)


def test_job_states_from_each_command() -> None:
    queued = parse_squeue("12|PENDING|Resources||5:00\n")
    assert queued is not None and queued.pending and queued.reason == "Resources" and queued.source == "squeue"
    ended = parse_sacct("12|CANCELLED by 0|0:15|n1|00:00:09|None\n")
    assert ended is not None and (ended.state, ended.exit_code, ended.node, ended.reason) == (
        "CANCELLED",
        "0:15",
        "n1",
        "",
    )
    assert ended.ended
    shown = parse_scontrol_job("JobId=12 JobName=x JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 NodeList=n2")
    assert shown is not None and (shown.state, shown.reason, shown.node, shown.source) == (
        "TIMEOUT",
        "TimeLimit",
        "n2",
        "scontrol",
    )
    assert parse_squeue("") is None and parse_sacct("") is None and parse_scontrol_job("") is None


def test_granted_gpus_and_job_ids() -> None:
    assert granted_gpus("JobId=3 Nodes=n1 CPU_IDs=0 Mem=512 GRES=gpu:2(IDX:2-3)") == (2, 3)
    assert expand_indexes("0-1,3") == (0, 1, 3)
    assert parse_job_id("42;lab\n") == "42"
    with pytest.raises(ValueError):
        parse_job_id("sbatch: error: something")


def test_sbatch_options_never_export_the_environment() -> None:
    job = BatchJob(
        run_id="r1", engine="harness", profile="smoke", gpus=2, minutes=3, cpus=4, mem_mib=2048, output="/tmp/job.log"
    )
    options = sbatch_options(job, ClusterEntry("lab-a", partition="gpu", account="lab", qos="normal"))
    assert "--no-requeue" in options and "--gres=gpu:2" in options and "--time=3" in options
    assert "--export=PATH,HOME" in options and "--mem=2048M" in options and "--cpus-per-task=4" in options
    assert any(o.startswith("--comment=labctl run r1 ") for o in options)


def test_compose_leaves_gpus_to_slurm_and_the_script_renders_nothing() -> None:
    rendered = (
        'services:\n  serve:\n    image: x\n    command: ["--price", "$$5"]\n    labels:\n      labctl.run_id: r1\n'
    )
    text = cluster_compose(rendered, 2)
    serve = yaml.safe_load(text)["services"]["serve"]
    assert serve["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == [
        "${LABCTL_GPU_0}",
        "${LABCTL_GPU_1}",
    ]
    assert serve["labels"]["labctl.slurm.job"] == "${LABCTL_SLURM_JOB}" and serve["command"][1] == "$$5"
    nodes = {
        "n1": HostEntry("c/n1", "unix:///run/n1.sock"),
        "n2": HostEntry("c/n2", "ssh://u@10.0.0.2", socket="/run/d.sock"),
    }
    script = job_script("r1", "labctl-r1", text, nodes, "/usr/bin/docker")
    assert "n1) DOCKER_HOST=unix:///run/n1.sock" in script and "n2) DOCKER_HOST=unix:///run/d.sock" in script
    assert "SLURM_JOB_GPUS" in script and "trap stop TERM" in script and text.rstrip() in script


def test_a_value_holding_the_end_marker_is_one_line_not_a_traceback() -> None:
    rendered = 'services:\n  serve:\n    image: x\n    command: ["--x", "a\\nLABCTL_COMPOSE_EOF\\ntouch /tmp/p"]\n'
    text = cluster_compose(rendered, 1)
    with pytest.raises(BadInput) as refused:
        job_script("r1", "labctl-r1", text, {"n1": HostEntry("c/n1", "unix:///run/n1.sock")}, "/usr/bin/docker")
    assert "holds LABCTL_COMPOSE_EOF" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(BadInput):
        refuse_end_marker("command: [LABCTL_COMPOSE_EOF]")
    refuse_end_marker("command: [LABCTL_COMPOSE]")  # anything else passes


def test_a_cluster_in_the_hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        "clusters:\n  lab-a:\n    login: ssh://me@login1\n    partition: gpu\n    time: 20\n"
        "    nodes:\n      n1: {docker: ssh://me@n1, socket: /var/run/docker.sock}\n"
    )
    monkeypatch.setenv("LABCTL_HOSTS", str(hosts))
    cluster = load_clusters(tmp_path, test_labs=False)["lab-a"]
    assert (cluster.partition, cluster.time_minutes, cluster.node("n1").docker) == ("gpu", 20, "ssh://me@n1")
    assert cluster.command_argv(["sinfo"])[-2:] == ["env", "sinfo"] and cluster.command_argv(["sinfo"])[0] == "ssh"
    with pytest.raises(BadInput, match="not in|does not describe"):
        cluster.node("n9")
    hosts.write_text("clusters:\n  lab-a:\n    slurm_conf: /etc/slurm/slurm.conf\n    login: ssh://me@x\n")
    with pytest.raises(BadInput, match="not both"):
        load_clusters(tmp_path, test_labs=False)
    hosts.write_text("clusters:\n  lab-a:\n    partition: 'gpu; rm -rf /'\n")
    with pytest.raises(BadInput):
        load_clusters(tmp_path, test_labs=False)
