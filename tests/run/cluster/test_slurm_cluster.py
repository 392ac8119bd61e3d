"""Runs on the Slurm test cluster (make slurm-lab): real munge, slurmctld, slurmdbd with MariaDB, two slurmd
nodes (n1 with 4 simulated GPUs; n2 with 2, in a network namespace), each with a Docker daemon of its own.
Slurm chooses nodes and GPUs; where a test needs a node full, it holds the GPUs with plain sbatch jobs of
its own (labctl itself never names a node)."""

from __future__ import annotations

import grp
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from helpers.harness_proc import free_port
from helpers.support import IN_CI, LABCTL, REPO, ensure_second_user, run_labctl

from labctl.catalog.clusters_file import ClusterEntry, load_clusters
from labctl.catalog.lab import Lab
from labctl.host.docker import daemon as dk
from labctl.host.slurm import commands as slurm
from labctl.run.backends.slurm import jobs as cr
from labctl.run.backends.slurm.job_record import cluster_run_ids
from labctl.run.records.record import Record
from labctl.run.records.store import Runs

pytestmark = pytest.mark.slurm
HOSTS = REPO / "build" / "slurm-lab" / "hosts.yaml"
USER = "labtest2"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"


@pytest.fixture(scope="module")
def cluster() -> ClusterEntry:
    if not HOSTS.is_file():
        reason = f"no Slurm test cluster ({HOSTS} is missing: run `make slurm-lab`)"
        if IN_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    return next(iter(load_clusters(REPO).values()))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slurm-home")


@pytest.fixture(scope="module")
def lab() -> Lab:
    return Lab(REPO)


@pytest.fixture()
def holds(cluster: ClusterEntry) -> Iterator[Callable[[str, int], str]]:
    """Plain sbatch jobs that keep GPUs of one node busy: how a test shapes where Slurm has room."""
    held: list[str] = []

    def hold(node: str, gpus: int) -> str:
        options = ["--no-requeue", f"--nodelist={node}", f"--gres=gpu:{gpus}", "--time=5", "--job-name=test-hold"]
        options.append("--output=/dev/null")  # no slurm-N.out in the working folder
        job = slurm.submit(cluster, options, "#!/bin/sh\nexec sleep 600\n")
        held.append(job)
        until(lambda: slurm.job_state(cluster, job).running, 30, f"hold {job} running")
        return job

    yield hold
    for job in held:
        slurm.cancel(cluster, job)


def until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.5)


def submit(lab: Lab, home: Path, cluster: ClusterEntry, port: int, gpus: int = 2, minutes: int = 5) -> Record:
    request = cr.JobRequest("harness", "smoke", gpus=gpus, port=port, minutes=minutes, allow_unpinned=True)
    return cr.submit_run(lab, home, cluster, request)


def ports() -> Iterator[int]:
    """Ports free on this machine now (within LABCTL_TEST_PORTS when set), never one handed out before: the
    engines bind them on the node Slurm chooses, after this test asked."""
    given: set[int] = set()
    while True:
        port = free_port()
        if port not in given:
            given.add(port)
            yield port


PORTS = ports()


def test_hosts_lists_the_cluster_with_its_gpus(cluster: ClusterEntry, home: Path) -> None:
    done = run_labctl("--home", str(home), "hosts", env={"LABCTL_HOSTS": str(HOSTS)})
    assert done.code == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith(cluster.name + " "))
    total = sum(n.gpus for n in slurm.nodes(cluster))
    assert f" {total} " in row and "n1 " in row and "n2 " in row, row


def test_disjoint_gpus_pending_resources_and_down(
    lab: Lab, home: Path, cluster: ClusterEntry, holds: Callable[[str, int], str]
) -> None:
    holds("n2", 2)  # only n1, the 4-GPU node, has room
    a, b = submit(lab, home, cluster, next(PORTS)), submit(lab, home, cluster, next(PORTS))
    a_run_id, b_run_id = a.run_id, b.run_id
    a, b = (cr.wait_running(home, cluster, run, lambda _t: None, 60).slurm for run in (a, b))
    assert a.node == b.node == "n1"
    assert len(a.gpu_indexes) == len(b.gpu_indexes) == 2 and not set(a.gpu_indexes) & set(b.gpu_indexes)
    assert len(set(a.gpu_uuids + b.gpu_uuids)) == 4 and all(u.startswith("GPU-") for u in a.gpu_uuids)

    said: list[str] = []
    c_run = submit(lab, home, cluster, next(PORTS))
    c = c_run.slurm
    until(lambda: slurm.job_state(cluster, c.job_id).reason == "Resources", 30, "third job pending: Resources")
    d_run = submit(lab, home, cluster, next(PORTS))
    d = d_run.slurm
    until(lambda: slurm.job_state(cluster, d.job_id).pending, 30, "fourth job pending")
    d = cr.take_down(home, cluster, d_run).slurm  # down while pending
    assert (d.state, d.node, cr.node_containers(cluster, "n1", d.job_id)) == ("CANCELLED", "", [])

    a = cr.take_down(home, cluster, cr.load(home, a_run_id)).slurm  # down while running: its containers go too
    assert a.state == "CANCELLED" and a.state_source == "sacct" and cr.node_containers(cluster, "n1", a.job_id) == []
    c = cr.wait_running(home, cluster, c_run, said.append, 60).slurm  # the pending one runs on the GPUs a gave back
    assert any("pending: Resources" in line for line in said) or c.events[0].startswith(c.submitted_at[:4])
    assert c.node == "n1" and sorted(c.gpu_indexes) == sorted(a.gpu_indexes) and c.queue_wait_s is not None
    for run_id in (b_run_id, c_run.run_id):
        cr.take_down(home, cluster, cr.load(home, run_id))
    assert cr.leftovers(cluster).ended == []


def test_time_limit_and_node_failure(
    lab: Lab, home: Path, cluster: ClusterEntry, holds: Callable[[str, int], str]
) -> None:
    holds("n1", 3)
    holds_n2 = holds("n2", 2)
    timed = submit(lab, home, cluster, next(PORTS), gpus=1, minutes=1)
    timed = cr.wait_running(home, cluster, timed, lambda _t: None, 60)
    assert timed.slurm.node == "n1"
    slurm.cancel(cluster, holds_n2)
    until(lambda: slurm.job_state(cluster, holds_n2).ended, 30, "n2 free again")

    failed_run = submit(lab, home, cluster, next(PORTS), gpus=1)
    failed_run = cr.wait_running(home, cluster, failed_run, lambda _t: None, 60)
    failed = failed_run.slurm
    assert failed.node == "n2"
    until(lambda: bool(cr.node_containers(cluster, "n2", failed.job_id)), 60, "the engine container on n2")
    slurmd = slurmd_pid(cluster, "n2")
    os.kill(slurmd, signal.SIGKILL)
    try:
        until(lambda: slurm.job_state(cluster, failed.job_id).ended, 60, "Slurm ends the job of a dead node")
        failed = cr.finish(home, cluster, failed_run).slurm
        assert failed.state == "NODE_FAIL", failed
        # The container is Docker's process, not the job's: it outlived the job, and gc finds it.
        assert ("n2", failed.job_id) in {(node, job) for node, _c, job in cr.leftovers(cluster).ended}
        cr.remove_leftovers(cluster)
        assert cr.node_containers(cluster, "n2", failed.job_id) == []
    finally:
        subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm-lab.sh"), "up"], check=True, capture_output=True, timeout=300
        )

    until(lambda: slurm.job_state(cluster, timed.slurm.job_id).ended, 150, "the time limit ends the job")
    timed_job = cr.finish(home, cluster, timed).slurm
    assert timed_job.state == "TIMEOUT", timed_job
    until(
        lambda: cr.node_containers(cluster, "n1", timed_job.job_id) == [],
        30,
        "nothing left running after the time limit",
    )


def slurmd_pid(cluster: ClusterEntry, node: str) -> int:
    config = slurm.run(cluster, ["scontrol", "show", "config"])
    line = next(line for line in config.splitlines() if line.startswith("SlurmdPidFile"))
    return int(Path(line.split("=", 1)[1].strip().replace("%n", node)).read_text().strip())


def test_up_waits_pending_then_runs_status_and_down(
    home: Path, cluster: ClusterEntry, holds: Callable[[str, int], str]
) -> None:
    """The CLI: `up --host CLUSTER` says `pending: Resources` while Slurm has no room, runs when a GPU frees,
    and reports the queue wait apart from cold start; status reads Slurm; down cancels."""
    env = {"LABCTL_HOSTS": str(HOSTS)}
    hold_n1 = holds("n1", 4)
    holds("n2", 2)
    port = next(PORTS)
    argv = [*LABCTL, "--home", str(home), "up", "harness", "--profile", "smoke", "--allow-unpinned"]
    argv += ["--host", cluster.name, "--gpus", "2", "--port", str(port), "--time", "3"]
    with subprocess.Popen(
        argv, env={**os.environ, **env}, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as up:
        assert up.stderr is not None
        seen = []
        for line in up.stderr:
            seen.append(line)
            if "pending: Resources" in line:
                break
        assert any("pending: Resources" in line for line in seen), seen
        slurm.cancel(cluster, hold_n1)
        stdout, stderr = up.communicate(timeout=120)
    assert up.returncode == 0, stderr
    assert "queue wait" in stdout and "(prep, not cold start)" in stdout and "on node n1" in stdout, stdout
    run_id = stdout.split(" run ", 1)[1].split()[0]
    run = cr.load(home, run_id)
    record = run.slurm
    assert record.queue_wait_s is not None and record.queue_wait_s > 0 and record.state == "RUNNING"
    check_the_normal_record(home, run_id, run, env)
    listed = run_labctl("--home", str(home), "status", "--host", cluster.name, env=env)
    assert f"{run_id}" in listed.stdout and "running" in listed.stdout, listed.stdout
    down = run_labctl("--home", str(home), "down", run_id, env=env)
    assert down.code == 0 and "CANCELLED" in down.stdout, down.stderr
    assert cr.node_containers(cluster, "n1", record.job_id) == []
    ended = json.loads((home / "runs" / run_id / "record.json").read_text())
    assert ended["status"] == "stopped" and ended["slurm"]["state"] == "CANCELLED" and ended["stopped_at"]
    assert ended["slurm"]["state_source"] in ("sacct", "scontrol")


def check_the_normal_record(home: Path, run_id: str, record: Record, env: dict[str, str]) -> None:
    """A cluster run's record is the normal one plus its `slurm` block: show, status, export, bench and eval
    read it as they read an SSH host's."""
    run = record.slurm
    data = json.loads((home / "runs" / run_id / "record.json").read_text())
    assert (data["status"], data["engine"], data["profile"]) == ("running", "harness", "smoke")
    assert data["environment_label"] == "harness-check" and data["accelerator"] == "simulated"
    assert data["slurm"]["gpu_indexes"] == list(run.gpu_indexes) and data["gpus"]["simulated"]
    assert data["gpus"]["note"] == "no GPU"  # the harness holds its granted GPUs unused: no GPU in its setup
    assert data["host_entry"] == f"{data['slurm']['cluster']}/n1" and data["slurm"]["node"] == "n1"
    assert data["slurm"]["gpu_uuids"] == list(run.gpu_uuids) and data["slurm"]["job_id"] == run.job_id
    assert data["prep"]["queue_wait"]["seconds"] == run.queue_wait_s and data["timings"]["cold_start_s"] is None
    assert not (home / "runs" / run_id / "slurm.json").exists()
    assert "--ttft-ms" in data["container"]["command_line"] and data["image"]["image_id"]  # what the node ran
    shown = run_labctl("--home", str(home), "show", run_id, env=env)
    assert shown.code == 0 and f" {run.job_id} on cluster " in shown.stdout, shown.stdout + shown.stderr
    assert "prep queue_wait" in shown.stdout, shown.stdout
    everywhere = run_labctl("--home", str(home), "status", "--json", env=env)  # every host, and the clusters
    listed = {r["run_id"]: r for r in json.loads(everywhere.stdout)}
    assert listed[run_id]["slurm"]["node"] == "n1" and listed[run_id]["host"] == data["host_entry"], everywhere
    exported = home / "export.yaml"
    done = run_labctl("--home", str(home), "export", run_id, "-o", str(exported), env=env)
    assert done.code == 0 and exported.is_file(), done.stderr
    bench = run_labctl(
        "--home", str(home), "bench", "run", run_id, "--workload", "latency-probe", "--requests", "2", "--json", env=env
    )
    assert bench.code == 0, bench.stderr[-2000:]
    assert json.loads(bench.stdout)["run_id"] == run_id
    graded = run_labctl("--home", str(home), "eval", "run", run_id, "--suite", "short-answer", "--json", env=env)
    assert graded.code == 0, graded.stderr[-2000:]
    assert json.loads(graded.stdout)["run_id"] == run_id


def test_a_second_unix_users_job(cluster: ClusterEntry, holds: Callable[[str, int], str]) -> None:
    """labtest2 (no root) submits through the same cluster; its job runs as labtest2 and reaches the node's
    Docker through the node's socket group."""
    ensure_second_user(USER)
    built = subprocess.run(["bash", str(REPO / "scripts" / "user-venv.sh")], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    python = built.stdout.strip() + "/bin/python"
    socket_group = grp.getgrgid(os.stat(cluster.node("n1").docker.removeprefix("unix://")).st_gid).gr_name
    subprocess.run(["usermod", "-aG", socket_group, USER], check=True)
    holds("n2", 2)  # the node reached over root's SSH setup is not this user's
    shared = Path(tempfile.mkdtemp(prefix="labctl-slurm-user-", dir="/tmp"))
    shared.chmod(0o1777)
    user_home = shared / "home"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "LABCTL_LAB": str(REPO),
        "LABCTL_HOME": str(user_home),
        "LABCTL_HOSTS": str(HOSTS),
    }
    user = [RUNUSER, "-u", USER, "--", python, "-m", "labctl"]
    up = subprocess.run(
        [
            *user,
            "up",
            "harness",
            "--profile",
            "smoke",
            "--allow-unpinned",
            "--host",
            cluster.name,
            "--gpus",
            "1",
            "--port",
            str(next(PORTS)),
            "--time",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=shared,
        timeout=180,
    )
    assert up.returncode == 0, up.stderr + up.stdout
    run_id = up.stdout.split(" run ", 1)[1].split()[0]
    record = cr.load(user_home, run_id).slurm
    assert slurm.run(cluster, ["squeue", "-h", "-j", record.job_id, "-o", "%u"]).strip() == USER
    down = subprocess.run([*user, "down", run_id], capture_output=True, text=True, env=env, cwd=shared, timeout=120)
    assert down.returncode == 0, down.stderr
    assert cr.node_containers(cluster, record.node, record.job_id) == []
    shutil.rmtree(shared, ignore_errors=True)


def test_a_resident_run_with_a_key(home: Path, cluster: ClusterEntry, holds: Callable[[str, int], str]) -> None:
    """The key reaches the node through the run's key volume after Slurm chose it: never in the job script
    (which Slurm stores), the exported environment, the compose file, the job's log or the record."""
    holds("n2", 2)
    env = {"LABCTL_HOSTS": str(HOSTS)}
    port = next(PORTS)
    up = run_labctl(
        "--home",
        str(home),
        "up",
        "harness",
        "--profile",
        "smoke",
        "--allow-unpinned",
        "--host",
        cluster.name,
        "--gpus",
        "1",
        "--port",
        str(port),
        "--time",
        "3",
        "--resident",
        "--keys",
        "1",
        env=env,
        timeout=180,
    )
    assert up.code == 0, up.stderr
    run_id = up.stdout.split(" run ", 1)[1].split()[0]
    record = cr.load(home, run_id).slurm
    key = (home / ".state" / "keys" / run_id / "api_key").read_text().split()[0]
    base = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).models.list()
    served = openai.OpenAI(base_url=base, api_key=key, max_retries=0).models.list()
    assert [m.id for m in served.data] == ["harness-smoke"]
    stored = slurm.run(cluster, ["scontrol", "write", "batch_script", record.job_id, "-"])
    written = [p.read_text() for p in (home / "runs" / run_id).iterdir() if p.is_file()]
    assert key not in stored and "LABCTL_HARNESS_API_KEY=sk" not in stored
    assert all(key not in text for text in written)
    down = run_labctl("--home", str(home), "down", run_id, env=env)
    assert down.code == 0, down.stderr
    volumes = dk.labelled_volumes(cluster.node(record.node).docker, f"labctl.keys_of={run_id}")
    assert volumes == [] and not (home / ".state" / "keys" / run_id).exists()


def _pending_up_killed(home: Path, cluster: ClusterEntry, port: int, env: dict[str, str]) -> str:
    """An `up` SIGKILLed while Slurm keeps its job pending (the nodes held): its run id."""
    argv = [*LABCTL, "--home", str(home), "up", "harness", "--profile", "smoke", "--allow-unpinned"]
    argv += ["--host", cluster.name, "--gpus", "1", "--port", str(port), "--time", "3"]
    with subprocess.Popen(
        argv, env={**os.environ, **env}, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as up:
        assert up.stderr is not None
        for line in up.stderr:
            if "pending: Resources" in line:
                break
        up.kill()
    [run_id] = [r for r in cluster_run_ids(Runs(home), cluster.name) if _starting(home, r)]
    return run_id


def _starting(home: Path, run_id: str) -> bool:
    return json.loads((home / "runs" / run_id / "record.json").read_text())["status"] == "starting"


def test_an_up_killed_while_its_job_is_pending_is_cancelled_or_adopted_by_the_next_status(
    cluster: ClusterEntry, holds: Callable[[str, int], str], tmp_path: Path
) -> None:
    """The rule a host's runs follow: a job whose `up` is gone is cancelled and recorded aborted while its engine
    does not answer; one that ran later and whose engine answers is adopted, node and endpoint read from Slurm."""
    home, env = tmp_path / "home", {"LABCTL_HOSTS": str(HOSTS)}
    hold_n1 = holds("n1", 4)
    holds("n2", 2)
    aborted = _pending_up_killed(home, cluster, next(PORTS), env)
    job = cr.load(home, aborted).slurm.job_id
    shown = run_labctl("--home", str(home), "status", "--host", cluster.name, env=env)
    assert shown.code == 0 and f"aborted {aborted}: its labctl up was gone" in shown.stderr, shown
    record = json.loads((home / "runs" / aborted / "record.json").read_text())
    assert record["status"] == "aborted" and record["slurm"]["state"] == "CANCELLED", record
    assert slurm.job_state(cluster, job).ended

    port = next(PORTS)
    adopted = _pending_up_killed(home, cluster, port, env)
    job = cr.load(home, adopted).slurm.job_id
    slurm.cancel(cluster, hold_n1)  # the job runs later, on n1, with nobody waiting for it
    until(lambda: slurm.job_state(cluster, job).running, 60, f"job {job} running")
    until(lambda: _answers(f"http://127.0.0.1:{port}/health"), 120, "the orphaned engine answers")
    shown = run_labctl("--home", str(home), "status", "--host", cluster.name, env=env)
    assert shown.code == 0 and f"adopted {adopted}: its labctl up was gone, job {job} on n1" in shown.stderr, shown
    record = json.loads((home / "runs" / adopted / "record.json").read_text())
    assert record["status"] == "running" and record["reason"].startswith("adopted"), record
    assert record["slurm"]["node"] == "n1" and record["slurm"]["gpu_indexes"] and record["endpoint"]["base_url"]
    models = openai.OpenAI(base_url=record["endpoint"]["base_url"], api_key="unused", max_retries=0).models.list()
    assert [m.id for m in models.data] == ["harness-smoke"]
    down = run_labctl("--home", str(home), "down", adopted, env=env)
    assert down.code == 0 and cr.node_containers(cluster, "n1", job) == [], down.stderr


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_resident_cluster_run_is_shared_and_rotate_key_is_refused_in_one_line(
    cluster: ClusterEntry, holds: Callable[[str, int], str], tmp_path: Path
) -> None:
    home, env = tmp_path / "home", {"LABCTL_HOSTS": str(HOSTS)}
    holds("n2", 2)
    port = next(PORTS)
    up = run_labctl(
        "--home", str(home), "up", "harness", "--profile", "smoke", "--allow-unpinned", "--host", cluster.name,
        "--gpus", "1", "--port", str(port), "--time", "3", "--resident", "--keys", "1", "--json", env=env, timeout=180,
    )  # fmt: skip
    assert up.code == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]
    try:
        record = json.loads((home / "runs" / run_id / "record.json").read_text())
        assert record["resident"]["keys"] == 1 and record["resident"]["key_fingerprints"], record["resident"]
        shared = run_labctl("--home", str(home), "share", run_id, "--json", env=env)
        assert shared.code == 0, shared.stderr
        access = json.loads(shared.stdout)
        served = openai.OpenAI(base_url=access["base_url"], api_key=access["api_key"], max_retries=0).models.list()
        assert [m.id for m in served.data] == ["harness-smoke"]
        rotate = run_labctl("--home", str(home), "rotate-key", run_id, env=env)
        assert rotate.code == 2 and len(rotate.stderr.strip().splitlines()) == 1, rotate.stderr
        assert "Slurm job" in rotate.stderr and "not supported there yet" in rotate.stderr
    finally:
        assert run_labctl("--home", str(home), "down", run_id, env=env).code == 0
